"""The shipped templates as loss programs give the numbers the template code gave.

The reference (tests/reference/gibbs_templates.json) was made by
tests/reference/make_gibbs_template_reference.py at commit 31eb842, before the
templates became loss programs served by the code that serves every user's
program. Deterministic calibrations must be equal to rounding; NUTS runs with
the same seed draw the same numbers (the templates' target is computed in the
same order, the weights multiplying by 1); the resample design of Stan GPC now
passes bootstrap counts as weights instead of duplicated rows, so its draws
differ by Monte Carlo noise only. The ``calibrate_path`` entry was remade when
GPC's root error began to read the count's slope beyond its noise: two more
coverage evaluations (``omega_path``), which extend the path in another
order, so the rules' means moved by Monte Carlo noise (0.2%); the rates are
the reference's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from stanflow import arviz_compat
from stanflow.gibbs import (
    GridBackend,
    PathSampler,
    StanBackend,
    calibrate_gpc,
    calibrate_holmes_walker,
    calibrate_path,
    calibrate_plugin,
    gibbs_path,
    linear_program,
    location_program,
    posterior,
)

pytestmark = pytest.mark.e2e

REFERENCE_DIR = Path(__file__).parent / "reference"
sys.path.insert(0, str(REFERENCE_DIR))
from gibbs_template_data import CAUCHY, linear_data, location_data  # noqa: E402

REFERENCE = json.loads((REFERENCE_DIR / "gibbs_templates.json").read_text())
LOCATION_LOSSES = {"absolute": None, "check": {"tau": 0.3}, "huber": {"delta": 0.7},
                   "squared": None}


def calibration(result) -> dict:
    return arviz_compat.group(result, "calibration")


def assert_calibration_equal(found, reference: dict, keys=("omega", "estimate", "sensitivity",
                                                            "variability")) -> None:
    for key in keys:
        np.testing.assert_allclose(np.asarray(found[key].values), np.asarray(reference[key]),
                                   rtol=1e-12, atol=1e-14, err_msg=key)


@pytest.mark.parametrize("name", list(LOCATION_LOSSES))
def test_location_plugin_and_holmes_walker(cmdstan, name):
    program = location_program(location_data(), loss=name, loss_params=LOCATION_LOSSES[name])
    assert_calibration_equal(calibration(calibrate_plugin(program)),
                             REFERENCE["plugin"][f"location/{name}"])
    assert_calibration_equal(calibration(calibrate_holmes_walker(program)),
                             REFERENCE["holmes_walker"][f"location/{name}"])


def test_a_loss_file_plugin(cmdstan, tmp_path):
    loss = tmp_path / "cauchy.stanfunctions"
    loss.write_text(CAUCHY)
    program = location_program(location_data(), loss=loss, loss_params=[0.8])
    assert_calibration_equal(calibration(calibrate_plugin(program)),
                             REFERENCE["plugin"]["location/cauchy-file"])


@pytest.mark.parametrize("tau", [0.5, 0.9])
def test_linear_plugin_and_holmes_walker(cmdstan, tau):
    y, X = linear_data()
    program = linear_program(y, X, loss="check", loss_params={"tau": tau})
    assert_calibration_equal(calibration(calibrate_plugin(program)),
                             REFERENCE["plugin"][f"linear/check-{tau}"])
    assert_calibration_equal(calibration(calibrate_holmes_walker(program)),
                             REFERENCE["holmes_walker"][f"linear/check-{tau}"])


def test_gpc_grid_and_stan_reweight(cmdstan):
    program = location_program(location_data()[:60], bounds=(0, 8))
    grid = calibration(calibrate_gpc(program, backend=GridBackend(401), B=100, seed=3))
    assert_calibration_equal(grid, REFERENCE["gpc_grid"], ("omega", "omega_path", "coverage_path"))
    stan = calibration(calibrate_gpc(
        program, backend=StanBackend(draws=500, warmup=300, proposal_draws=4000), B=40,
        seed=4, max_steps=4))
    assert_calibration_equal(stan, REFERENCE["gpc_stan_reweight"],
                             ("omega", "omega_path", "coverage_path", "ess_min"))


def test_gpc_stan_resample_within_monte_carlo_noise(cmdstan):
    program = location_program(location_data()[:60], bounds=(0, 8))
    found = calibration(calibrate_gpc(
        program, backend=StanBackend(design="resample", draws=500, warmup=300), B=30, seed=5,
        max_steps=3))
    reference = REFERENCE["gpc_stan_resample"]
    # One resample of 30 on the other side of its interval's end moves the coverage by 1/30.
    np.testing.assert_allclose(found["coverage_path"].values, reference["coverage_path"],
                               atol=2 / 30 + 1e-12)
    np.testing.assert_allclose(found["omega_path"].values, reference["omega_path"], atol=0.1)


def test_paths(cmdstan):
    y = location_data()
    path = arviz_compat.group(
        gibbs_path(location_program(y, bounds=(0, 8)), omega_max=2.0,
                   sampler=PathSampler(n_particles=1000), seed=6),
        "path")
    reference = REFERENCE["path_location"]
    np.testing.assert_allclose(path["omega"].values, reference["omega"], rtol=1e-12)
    np.testing.assert_allclose(path["log_z"].values, reference["log_z"], rtol=1e-10)
    np.testing.assert_allclose(path["theta"].values.mean(axis=(1, 2)), reference["mean_theta"],
                               rtol=1e-10)
    yl, X = linear_data()
    program = linear_program(yl, X, loss="check", loss_params={"tau": 0.9}, prior="normal",
                             prior_params={"mean": 0.0, "sd": 10.0})
    path = arviz_compat.group(
        gibbs_path(program, omega_max=1.0, sampler=PathSampler(n_particles=1000), seed=7), "path")
    reference = REFERENCE["path_linear"]
    np.testing.assert_allclose(path["log_z"].values, reference["log_z"], rtol=1e-10)
    np.testing.assert_allclose(path["theta"].values.mean(axis=1), reference["mean_beta"],
                               rtol=1e-10)


def test_calibrate_path(cmdstan):
    sampler = PathSampler(n_particles=2000, n_moves=3)
    found = calibration(calibrate_path(location_program(location_data()[:80], bounds=(0, 8)),
                                       B=100, sampler=sampler, seed=8))
    reference = REFERENCE["calibrate_path"]
    assert found["rule"].values.tolist() == reference["rule"]
    np.testing.assert_allclose(found["rule_omega"].values, reference["rule_omega"], rtol=1e-12)
    np.testing.assert_allclose(found["rule_mean"].values, reference["rule_mean"], rtol=1e-10)
    np.testing.assert_allclose(found["omega_path"].values, reference["omega_path"], rtol=1e-12)


def test_nuts_draws(cmdstan):
    y = location_data()
    fit = posterior(location_program(y[:50], bounds=(0, 8)), omega=0.7, chains=2,
                    iter_sampling=500, seed=9)
    np.testing.assert_array_equal(fit.posterior["theta"].values,
                                  REFERENCE["posterior_location"]["theta"])
    yl, X = linear_data()
    program = linear_program(yl, X, loss="check", loss_params={"tau": 0.5}, prior="normal",
                             prior_params={"mean": 0.0, "sd": 10.0})
    fit = posterior(program, omega=1.0, chains=1, iter_sampling=300, seed=10)
    np.testing.assert_allclose(fit.posterior["beta"].values.mean(axis=(0, 1)),
                               REFERENCE["posterior_linear"]["beta_mean"], rtol=1e-12)
