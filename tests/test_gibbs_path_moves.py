"""The learning-rate path's self-tuning moves (``moves="auto"``) with many coefficients.

Truth: least squares with a normal prior, whose Gibbs posterior at every
``omega`` is the normal of precision ``2 omega X'X + I / s0^2``.
"""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.gibbs import linear_program
from stanflow.gibbs.path import LearningRatePath, PathSampler


@pytest.mark.e2e
def test_self_tuning_moves_give_the_conjugate_posterior_in_twelve_dimensions(cmdstan):
    rng = np.random.default_rng(3)
    n, K, s0, omega = 400, 12, 3.0, 0.8
    X = np.column_stack([np.ones(n), rng.normal(size=(n, K - 1))])
    y = X @ rng.normal(size=K) + rng.normal(size=n)
    program = linear_program(y, X, loss="squared", prior="normal",
                             prior_params={"mean": 0, "sd": s0})
    path = LearningRatePath(program, sampler=PathSampler(n_particles=2000, n_moves=30, moves="auto"),
                            seed=1)
    path.extend(omega)
    level = path.levels[-1]
    assert level.omega == omega
    precision = 2 * omega * X.T @ X + np.eye(K) / s0**2
    cov = np.linalg.inv(precision)
    mean = cov @ (2 * omega * X.T @ y)
    white = np.linalg.cholesky(precision).T  # white @ (theta - mean) ~ N(0, I)
    u = (level.z - mean) @ white.T
    assert np.abs(u.mean(axis=0)).max() < 0.15  # 0.15 = about 6 / sqrt(2000)
    eig = np.linalg.eigvalsh(np.cov(u, rowvar=False))
    assert eig.min() > 0.8 and eig.max() < 1.25
    assert path._tuned is not None and path._tuned.history[-1]["n_moves"] >= 1
