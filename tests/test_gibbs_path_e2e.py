"""The learning-rate path of the templates with a user's loss file, and NUTS moves.

Tolerances as in ``tests/test_gibbs_path.py``: the DKW bound on a CDF read from
the particles' effective sample size, ``Z_TOL`` standard errors for ``log Z``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from stanflow import arviz_compat
from stanflow.gibbs import grid, location_program
from stanflow.gibbs.path import (
    LearningRatePath,
    PathSampler,
    calibrate_path,
    cdf,
    gibbs_path,
    reweight,
)
from stanflow.gibbs.templates import LOSS_SIGNATURE
from stanflow.losses import get_loss, loss_function
from stanflow.models import CompileError

DELTA = 1e-3
Z_TOL = 4.0
LOG_COSH = "real loss(real y, real f, vector loss_params) {\n  return log(cosh(y - f));\n}\n"

pytestmark = pytest.mark.e2e


def dkw(ess, comparisons):
    return np.sqrt(math.log(2 * comparisons / DELTA) / (2 * np.asarray(ess)))


def test_a_users_loss_file_needs_no_python(cmdstan, tmp_path):
    """log-cosh given only as a Stan file: the path against the exact grid
    posterior of the same loss written in NumPy for the check."""
    file = tmp_path / "log_cosh.stanfunctions"
    file.write_text(LOG_COSH)
    y = np.random.default_rng(5).standard_t(3, 80)
    idata = gibbs_path(location_program(y, loss=file, bounds=(-5, 5)), omega_max=2.0,
                       sampler=PathSampler(n_particles=1000), seed=1)
    path = arviz_compat.group(idata, "path")
    assert path.attrs["loss"] == str(file)
    theta = np.linspace(-5, 5, 4001)
    sums = grid.loss_sums(theta, y, lambda y_, f: np.log(np.cosh(y_ - f)))
    omegas, ess = path["omega"].values[1:], path["ess"].values[1:]
    for omega, tol in zip(omegas, dkw(ess, len(omegas)), strict=True):
        exact = grid.posterior(theta, sums, float(omega))
        read = reweight(path, float(omega))
        assert np.max(np.abs(cdf(read, theta)[0] - grid.cdf(exact))) < tol
        assert abs(read.log_z - float(exact.log_z)) < Z_TOL * read.log_z_se + 1e-3


def test_a_shipped_loss_by_file_or_by_name_gives_one_path(cmdstan):
    """The check loss by its file's path and by its name: the same program, so the
    same schedule, particles and log Z from the same seed."""
    y = np.random.default_rng(2).normal(size=60)
    kwargs = {"omega_max": 1.0, "sampler": PathSampler(n_particles=500), "seed": 3}
    by_file = location_program(y, loss=get_loss("check").stan_file, loss_params=[0.3],
                               bounds=(-4, 4))
    by_name = location_program(y, loss="check", loss_params={"tau": 0.3}, bounds=(-4, 4))
    stan = gibbs_path(by_file, **kwargs)["path"]
    named = gibbs_path(by_name, **kwargs)["path"]
    np.testing.assert_allclose(stan["omega"], named["omega"], rtol=1e-10)
    np.testing.assert_allclose(stan["log_z"], named["log_z"], rtol=1e-10)
    np.testing.assert_allclose(stan["theta"], named["theta"], rtol=1e-10)
    # The losses the path weights, read from the program at its particles, are
    # NumPy's check loss.
    theta = named["theta"].values.reshape(-1, 1)
    numpy = loss_function("check", {"tau": 0.3})(y[None, :], theta)
    u = by_file.unconstrain(theta)
    np.testing.assert_allclose(by_file.losses(u), numpy, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(by_name.total_loss(u), numpy.sum(axis=1), rtol=1e-10)


def test_calibration_rules_from_a_loss_file(cmdstan, tmp_path):
    """Plug-in and Holmes-Walker from the file (in process) marked on its path."""
    file = tmp_path / "log_cosh.stanfunctions"
    file.write_text(LOG_COSH)
    y = np.random.default_rng(6).standard_t(3, 80)
    idata = calibrate_path(location_program(y, loss=file, bounds=(-5, 5)), B=50,
                           sampler=PathSampler(n_particles=1000, n_moves=3), seed=2)
    c = idata.calibration
    assert list(c["rule"].values) == ["gpc_path", "plugin", "holmes_walker"]
    u = y - float(c["estimate"][0])
    omega = np.mean(1 / np.cosh(u) ** 2) / np.var(np.tanh(u))  # H / J
    assert float(c["rule_omega"].sel(rule="plugin")) == pytest.approx(omega, rel=1e-5)
    assert idata["path"]["omega"].values[-1] >= c["rule_omega"].max()


def test_a_loss_file_with_the_wrong_signature_is_a_clear_error(cmdstan, tmp_path):
    file = tmp_path / "two_arguments.stanfunctions"
    file.write_text("real loss(real y, real f) {\n  return abs(y - f);\n}\n")
    with pytest.raises(CompileError, match=r"did not compile with loss file .* must define") as info:
        location_program(np.ones(5), loss=file, bounds=(0, 2))
    assert LOSS_SIGNATURE in str(info.value) and str(file) in str(info.value)


def test_nuts_moves_follow_the_grid(cmdstan):
    """NUTS moves through the Gibbs template (run layer), 100 particles."""
    y = np.random.default_rng(3).gamma(2.0, 1.0, 100)
    path = LearningRatePath(location_program(y, bounds=(0, 8)),
                            sampler=PathSampler(n_particles=100, n_moves=2, moves="nuts"),
                            seed=1).extend(1.0).to_dataset()
    assert path.attrs["moves"] == "nuts"
    assert np.all(path["acceptance"].values[1:] > 0.5)
    theta = np.linspace(0, 8, 2001)
    sums = grid.loss_sums(theta, y, lambda y_, f: np.abs(y_ - f))
    omegas, ess = path["omega"].values[1:], path["ess"].values[1:]
    for omega, tol in zip(omegas, dkw(ess, len(omegas)), strict=True):
        exact = grid.posterior(theta, sums, float(omega))
        read = reweight(path, float(omega))
        assert np.max(np.abs(cdf(read, theta)[0] - grid.cdf(exact))) < tol
