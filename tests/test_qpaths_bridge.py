"""Bridge sampling of log Z (``stanflow.wbb.bridge_sampling``) on targets with known constants.

Gaussians ``exp(C) N(mu, Sigma)`` (log Z = C), the 2-d banana
``exp(-(z0^2 / A^2 + (z1 - B z0^2)^2) / 2)`` (Z = 2 pi A; exact draws by
transforming normal draws, a target no normal proposal fits), and a Stan
program with a constrained parameter whose Z is known (log Z = log 7), in process.
Bad input is in ``tests/test_wbb_bridge_sampling.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from stanflow.wbb import bridge_sampling

BANANA_A, BANANA_B = 1.5, 0.5


def gaussian_case(d: int, seed: int, n: int = 4000):
    """``(log_density, draws, C)`` for ``exp(C) N(mu, Sigma)`` with a dense ``Sigma``."""
    rng = np.random.default_rng(seed)
    root = rng.normal(size=(d, d))
    normal = stats.multivariate_normal(rng.normal(size=d), root @ root.T + d * np.eye(d))
    constant = 3.7

    def log_density(z: np.ndarray) -> np.ndarray:
        return constant + np.atleast_1d(normal.logpdf(z))

    return log_density, normal.rvs(n, random_state=rng).reshape(n, d), constant


def banana_log_density(z: np.ndarray) -> np.ndarray:
    return -(z[:, 0] ** 2 / BANANA_A**2 + (z[:, 1] - BANANA_B * z[:, 0] ** 2) ** 2) / 2


def banana_draws(seed: int, n: int = 4000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    z0 = BANANA_A * rng.standard_normal(n)
    return np.column_stack([z0, BANANA_B * z0**2 + rng.standard_normal(n)])


@pytest.mark.parametrize("d", [1, 5])
def test_gaussian_log_z_is_its_constant(d):
    log_density, draws, constant = gaussian_case(d, seed=d)
    result = bridge_sampling(log_density, draws, seed=1)
    assert result.converged and result.n_iter < 50
    assert 0 < result.relative_error < 0.02
    assert abs(result.log_marginal - constant) < 4 * result.relative_error + 0.01, result


def test_banana_log_z_is_log_2_pi_a():
    result = bridge_sampling(banana_log_density, banana_draws(0, n=12000), seed=0)
    assert result.converged
    truth = math.log(2 * math.pi * BANANA_A)
    assert abs(result.log_marginal - truth) < 4 * result.relative_error + 0.01


def test_the_error_estimate_matches_the_spread_over_seeds():
    """On exact (iid) draws the iid error formula is the right one: within a factor 1.6."""
    runs = [bridge_sampling(banana_log_density, banana_draws(s), seed=s) for s in range(30)]
    errors = np.array([r.log_marginal for r in runs]) - math.log(2 * math.pi * BANANA_A)
    spread, estimated = errors.std(), np.mean([r.relative_error for r in runs])
    assert estimated / 1.6 < spread < 1.6 * estimated, (spread, estimated)
    assert abs(errors.mean()) < 3 * spread / math.sqrt(len(runs))


@pytest.mark.e2e
def test_a_stan_program_with_a_constraint(cmdstan, tmp_path):
    """Z = 7 on the unconstrained scale: normals, a gamma on s > 0 (its Jacobian is
    the library's), times 7; exact draws, the positive one mapped to log s."""
    from stanflow.qpaths.stan_density import stan_log_density

    file = tmp_path / "three.stan"
    file.write_text(
        "parameters {\n  vector[2] z;\n  real<lower=0> s;\n}\nmodel {\n"
        "  z ~ normal(1, 0.5);\n  s ~ gamma(3, 2);\n  target += log(7);\n}\n"
    )
    rng = np.random.default_rng(3)
    draws = np.column_stack([
        rng.normal(1, 0.5, size=(4000, 2)), np.log(rng.gamma(3, 1 / 2, size=4000)),
    ])
    result = bridge_sampling(stan_log_density(file), draws, seed=3)
    assert abs(result.log_marginal - math.log(7)) < 4 * result.relative_error + 0.01, result


def test_running_out_of_iterations_is_reported():
    result = bridge_sampling(banana_log_density, banana_draws(0), seed=0, max_iter=1, tol=1e-300)
    assert not result.converged and result.n_iter == 1
