"""The q-path Stan template: NUTS at beta = 0.5 between two 1-D Gaussians against
a grid computation of the NumPy q-path density. One model is compiled (cached)."""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.qpaths import dlog_qpath_dbeta, log_qpath

pytestmark = pytest.mark.e2e

BASE = [-2.0, 1.0]  # mu, sigma
TARGET = [2.0, 0.7, 1.5]  # mu, sigma, log Z


def normal_logpdf(x, mu, sigma):
    return -0.5 * ((x - mu) / sigma) ** 2 - np.log(sigma * np.sqrt(2 * np.pi))


@pytest.fixture(scope="module")
def model(qpath_gaussian_model):
    return qpath_gaussian_model


@pytest.mark.parametrize("q", [0.5, 1.0])
def test_nuts_matches_the_grid_density(model, q):
    fit = model.sample(
        data={
            "d": 1,
            "beta": 0.5,
            "q": q,
            "n_base_params": 2,
            "base_params": BASE,
            "n_target_params": 3,
            "target_params": TARGET,
        },
        chains=4,
        iter_sampling=2500,
        seed=7,
        show_progress=False,
    )
    z = fit.stan_variable("z")[:, 0]
    x = np.linspace(-12, 12, 24001)
    lp0, lp1 = normal_logpdf(x, *BASE), TARGET[2] + normal_logpdf(x, *TARGET[:2])
    density = np.exp(log_qpath(lp0, lp1, 0.5, q))
    density /= np.trapezoid(density, x)
    mean = np.trapezoid(x * density, x)
    var = np.trapezoid((x - mean) ** 2 * density, x)
    n_eff = 4 * 2500 / 3  # conservative
    assert abs(z.mean() - mean) < 4 * np.sqrt(var / n_eff)
    assert abs(z.var() / var - 1) < 4 * np.sqrt(2 / n_eff) * 1.5
    np.testing.assert_allclose(
        fit.stan_variable("ti_integrand"),
        dlog_qpath_dbeta(
            fit.stan_variable("log_pi0"), fit.stan_variable("log_pi1"), 0.5, q
        ),
        rtol=1e-3,
        atol=1e-4,
    )
