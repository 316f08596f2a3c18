"""q-path SMC on targets given as Stan programs, evaluated in process.

The Pima logistic target in Stan (stan/qpaths/logistic_regression.stan) equals
the NumPy target, and SMC gives the same log Z with either; a target written
as a new Stan file, with a constrained parameter, gives its known log Z by SMC
and by AIS.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from stanflow.models import program_path
from stanflow.qpaths.annealing import ais, smc
from stanflow.qpaths.logistic import load_uci
from stanflow.qpaths.stan_density import StanLogDensity, stan_log_density

pytestmark = pytest.mark.e2e

needs_data = pytest.mark.skipif(
    not os.environ.get("STANFLOW_DATA_DIR"), reason="STANFLOW_DATA_DIR is not set"
)


@pytest.fixture(scope="module")
def pima():
    return load_uci("pima")


@pytest.fixture(scope="module")
def pima_stan(cmdstan, pima):
    return stan_log_density(program_path("qpaths/logistic_regression"), pima.stan_data())


@needs_data
def test_the_stan_target_equals_the_numpy_target(pima, pima_stan):
    assert isinstance(pima_stan, StanLogDensity) and pima_stan.dim == pima.dim
    z = np.random.default_rng(1).normal(scale=0.5, size=(300, pima.dim))
    np.testing.assert_allclose(pima_stan(z), pima.log_pi1(z), rtol=1e-11)


@needs_data
def test_smc_log_z_is_the_same_with_either_target(pima, pima_stan):
    common = {"q": 1.0, "n_particles": 400, "schedule": np.linspace(0, 1, 30) ** 4,
              "n_runs": 2, "seed": 5}
    numpy_run = smc(pima.log_pi0, pima.sample_pi0, pima.log_pi1, **common)
    stan_run = smc(pima.log_pi0, pima.sample_pi0, pima_stan, **common)
    assert stan_run.smc.attrs["log_z"] == pytest.approx(numpy_run.smc.attrs["log_z"], abs=1e-8)


def test_a_new_target_is_one_stan_file(cmdstan, tmp_path):
    """Z = 7 on the unconstrained space: two normals and a gamma, all normalised,
    times 7; the positive parameter's Jacobian is the library's business."""
    file = tmp_path / "three.stan"
    file.write_text(
        "parameters {\n  vector[2] z;\n  real<lower=0> s;\n}\nmodel {\n"
        "  z ~ normal(1, 0.5);\n  s ~ gamma(3, 2);\n  target += log(7);\n}\n"
    )
    target = stan_log_density(file)
    assert target.dim == 3

    def log_pi0(z):
        return -0.5 * np.sum(z**2, axis=1) - 1.5 * math.log(2 * math.pi)

    def sample_pi0(rng, n):
        return rng.standard_normal((n, 3))

    for run in (
        smc(log_pi0, sample_pi0, target, q=0.5, n_particles=1000, n_moves=3,
            n_runs=4, seed=2),
        ais(log_pi0, sample_pi0, target, np.linspace(0, 1, 60) ** 2, q=0.5,
            n_particles=1000, n_moves=2, n_runs=4, seed=3),
    ):
        error = run.smc.attrs["log_z"] - math.log(7)
        assert abs(error) < 4 * run.smc.attrs["log_z_se"] + 0.02, run.smc.attrs
