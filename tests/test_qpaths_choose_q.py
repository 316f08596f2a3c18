"""Choosing q: the grid, and the ESS heuristic against a brute-force search over delta."""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.qpaths import q_from_delta
from stanflow.qpaths.choose_q import first_step_ess, heuristic_q, q_grid


def base_draws(n=2000, d=3, seed=0):
    """Prior N(0, 5^2 I) draws and a peaked unnormalised Gaussian target."""
    z = 5.0 * np.random.default_rng(seed).standard_normal((n, d))
    log_pi0 = -0.5 * np.sum(z**2, axis=1) / 25 - d * np.log(5 * np.sqrt(2 * np.pi))
    log_pi1 = -50.0 - 0.5 * np.sum(((z - 1.0) / 0.1) ** 2, axis=1)
    return log_pi0, log_pi1


def test_grid_is_logspace_plus_the_geometric_path():
    grid = q_grid()
    assert grid.shape == (21,) and grid[-1] == 1.0
    np.testing.assert_allclose(1 - grid[:-1], np.logspace(-1, -5, 20), rtol=1e-9)
    assert np.all(np.diff(grid) > 0)


def test_heuristic_is_the_largest_delta_keeping_the_target_ess():
    log_pi0, log_pi1 = base_draws()
    beta_1 = 1 / 9
    assert first_step_ess(log_pi0, log_pi1, beta_1, 1.0) < 0.01  # geometric collapses
    q = heuristic_q(log_pi0, log_pi1, beta_1, target_ess=0.5)
    delta = -np.log10(1 - q)
    # Brute force: ESS on a fine delta grid; the last delta keeping 0.5 brackets it.
    deltas = np.linspace(0, 15, 3001)
    keeps = np.array(
        [
            first_step_ess(log_pi0, log_pi1, beta_1, q_from_delta(x)) >= 0.5
            for x in deltas
        ]
    )
    largest = deltas[np.flatnonzero(keeps).max()]
    assert abs(delta - largest) <= deltas[1] + 1e-9
    assert first_step_ess(log_pi0, log_pi1, beta_1, q) == pytest.approx(0.5, abs=1e-3)


def test_heuristic_endpoints():
    log_pi0, log_pi1 = base_draws()
    # A flat target: the geometric first step keeps every particle.
    assert heuristic_q(log_pi0, log_pi0 - 3.0, 0.5) == 1.0
    # beta_1 = 1: every path ends at the peaked target, no q keeps the ESS.
    assert heuristic_q(log_pi0, log_pi1, 1.0) == 0.0


def test_bad_input_is_named():
    log_pi0, log_pi1 = base_draws(n=50)
    with pytest.raises(ValueError, match="beta_1 must lie in"):
        heuristic_q(log_pi0, log_pi1, 1.5)
    with pytest.raises(ValueError, match="beta_1 must lie in"):
        heuristic_q(log_pi0, log_pi1, 0.0)
    bad = log_pi1.copy()
    bad[7] = np.nan
    with pytest.raises(ValueError, match="log_pi1 contains NaN"):
        heuristic_q(log_pi0, bad, 0.1)
    with pytest.raises(ValueError, match="target_ess"):
        heuristic_q(log_pi0, log_pi1, 0.1, target_ess=1.0)
    with pytest.raises(ValueError, match="same length"):
        heuristic_q(log_pi0, log_pi1[:-1], 0.1)
