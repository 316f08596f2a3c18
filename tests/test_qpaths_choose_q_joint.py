"""The authors' heuristic (delta and the first beta from one ESS target) against a
hand-solved case, scipy's line search along beta at their starting delta, and a
brute-force search over beta."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize

from stanflow.qpaths.choose_q_joint import DELTA_BOUNDS, joint_heuristic


def ess_fraction(log_ratio, beta, delta):
    """ESS / N of the first-step q-path weights, written out independently."""
    s = 10.0 ** (-delta)
    log_w = np.log1p(beta * np.expm1(s * log_ratio)) / s
    w = np.exp(log_w - log_w.max())
    return w.sum() ** 2 / np.sum(w**2) / len(w)


def base_draws(n=2000, d=3, seed=0):
    """Prior N(0, 5^2 I) draws and a peaked unnormalised Gaussian target."""
    z = 5.0 * np.random.default_rng(seed).standard_normal((n, d))
    log_pi0 = -0.5 * np.sum(z**2, axis=1) / 25 - d * np.log(5 * np.sqrt(2 * np.pi))
    log_pi1 = -50.0 - 0.5 * np.sum(((z - 1.0) / 0.1) ** 2, axis=1)
    return log_pi0, log_pi1


def test_two_point_case_solved_by_hand():
    # Half the draws have log pi1/pi0 = 0, half -100: delta_0 = log10(100) = 2,
    # s = 0.01. ESS/N = (1 + w)^2 / (2 (1 + w^2)) = 0.8 at w = 1/3, where w is the
    # weight ratio (1 + beta (e^{-100 s} - 1))^{1/s}: beta = (3^-s - 1) / (e^-1 - 1).
    log_pi0 = np.full(1000, -4.0)
    log_pi1 = log_pi0 + np.repeat([0.0, -100.0], 500)
    choice = joint_heuristic(log_pi0, log_pi1, target_ess=0.8)
    assert choice.delta == pytest.approx(2.0, abs=1e-12)
    assert choice.q == pytest.approx(0.99, abs=1e-12)
    expected = (3.0**-0.01 - 1) / (np.exp(-1.0) - 1)
    assert choice.beta_1 == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_line_search_of_their_optimiser(seed):
    # Powell from (beta, delta) = (1, delta_0) first minimises the squared ESS
    # gap along beta with delta_0 fixed: scipy's bounded scalar minimiser does
    # that line search here, on the independent ESS formula above.
    log_pi0, log_pi1 = base_draws(seed=seed)
    log_ratio = log_pi1 - log_pi0
    delta_0 = np.log10(np.abs(log_ratio).max())
    line = optimize.minimize_scalar(
        lambda b: (ess_fraction(log_ratio, b, delta_0) - 0.5) ** 2,
        bounds=(0.0, 1.0 - 1e-12),
        method="bounded",
        options={"xatol": 1e-12},
    )
    choice = joint_heuristic(log_pi0, log_pi1)
    assert choice.delta == pytest.approx(delta_0, rel=1e-12)
    assert line.fun < 1e-8
    assert choice.beta_1 == pytest.approx(line.x, rel=1e-3)
    assert ess_fraction(log_ratio, choice.beta_1, choice.delta) == pytest.approx(
        0.5, abs=1e-6
    )


def test_beta_against_brute_force_search():
    log_pi0, log_pi1 = base_draws(seed=4)
    log_ratio = log_pi1 - log_pi0
    choice = joint_heuristic(log_pi0, log_pi1, target_ess=0.3)
    betas = np.linspace(0, 0.005, 20_001)[1:]
    keeps = np.array([ess_fraction(log_ratio, b, choice.delta) >= 0.3 for b in betas])
    largest = betas[np.flatnonzero(keeps).max()]
    assert keeps[: np.flatnonzero(keeps).max() + 1].all()  # ESS falls with beta here
    assert abs(choice.beta_1 - largest) <= betas[1] - betas[0]


def test_full_step_bounds_and_geometric_limit():
    log_pi0, _ = base_draws()
    # A flat ratio keeps every particle: beta_1 = 1, delta = log10 3.
    flat = joint_heuristic(log_pi0, log_pi0 - 3.0)
    assert flat.beta_1 == 1.0 and flat.delta == pytest.approx(np.log10(3.0))
    # Ratios beyond 1e18 clip delta to the upper bound: the geometric path.
    huge = joint_heuristic(np.zeros(4), np.array([0.0, -1e19, -1.0, -2e19]))
    assert huge.delta == DELTA_BOUNDS[1] and huge.q == 1.0
    # Ratios all zero: delta at the lower bound (q = 0, the mixture).
    zero = joint_heuristic(log_pi0, log_pi0)
    assert zero.delta == 0.0 and zero.q == 0.0 and zero.beta_1 == 1.0


def test_bad_input_is_named():
    log_pi0, log_pi1 = base_draws(n=50)
    with pytest.raises(ValueError, match="target_ess"):
        joint_heuristic(log_pi0, log_pi1, target_ess=0.0)
    with pytest.raises(ValueError, match="same length"):
        joint_heuristic(log_pi0, log_pi1[:-1])
    bad = log_pi1.copy()
    bad[3] = -np.inf
    with pytest.raises(ValueError, match="log_pi1 must be finite"):
        joint_heuristic(log_pi0, bad)
    bad[3] = np.nan
    with pytest.raises(ValueError, match="log_pi1 contains NaN"):
        joint_heuristic(log_pi0, bad)
    with pytest.raises(ValueError, match="iterations"):
        joint_heuristic(log_pi0, log_pi1, iterations=0)
