"""Closed-form location posteriors and GPC's exact fixed point, against independent truths."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from stanflow.gibbs import GridBackend, location_program
from stanflow.gibbs.exact_location import absolute_cdf, absolute_segments, squared_cdf
from stanflow.gibbs.gpc import bootstrap_indices, calibrate_gpc
from stanflow.gibbs.gpc.fixed_point import (
    bootstrap_count,
    bootstrap_counts,
    fixed_points,
    gpc_fixed_points,
    plateau_end,
)
from stanflow.gibbs.gpc.reweighting import resample_counts


def _quad_cdf(loss, x, lower, upper, knots):
    """P(theta <= x) for the density ∝ exp(-loss(theta)) on [lower, upper], by quadrature."""
    inside = [k for k in knots if lower < k < upper]
    shift = min(loss(t) for t in np.linspace(lower, upper, 2001))
    density = lambda t: math.exp(-(loss(t) - shift))
    left = integrate.quad(density, lower, x, points=[k for k in inside if k < x] or None, limit=200)[0]
    right = integrate.quad(density, x, upper, points=[k for k in inside if k > x] or None, limit=200)[0]
    return left / (left + right)


@pytest.mark.parametrize("omega", [0.05, 0.7, 4.0])
def test_absolute_cdf_matches_quadrature_with_weights_and_outliers(omega):
    rng = np.random.default_rng(1)
    y = np.r_[rng.gamma(2.0, 1.0, 12), -0.5, 9.3]  # two observations outside the support
    weights = rng.integers(0, 4, y.size).astype(float)
    loss = lambda t: omega * float(np.sum(weights * np.abs(y - t)))
    for x in (0.3, 1.7, 2.9):
        expected = _quad_cdf(loss, x, 0.0, 8.0, y)
        got = absolute_cdf(absolute_segments(y, x, (0.0, 8.0), weights), omega)
        assert got == pytest.approx(expected, rel=1e-8, abs=1e-12)


def test_absolute_cdf_one_observation_is_a_truncated_laplace():
    # density ∝ exp(-omega |y - t|) on [a, b], x < y: closed form
    y, a, b, omega, x = 2.0, 0.0, 5.0, 1.5, 1.2
    left = (math.exp(-omega * (y - x)) - math.exp(-omega * (y - a))) / omega
    total = (1 - math.exp(-omega * (y - a))) / omega + (1 - math.exp(-omega * (b - y))) / omega
    assert absolute_cdf(absolute_segments([y], x, (a, b)), omega) == pytest.approx(left / total, rel=1e-12)


def test_absolute_cdf_broadcasts_data_sets_against_learning_rates():
    rng = np.random.default_rng(2)
    y = rng.gamma(2.0, 1.0, (5, 30))
    omegas = np.array([0.3, 1.0, 3.0])
    table = absolute_cdf(absolute_segments(y[:, None, :], 1.6, (0, 8)), omegas)
    assert table.shape == (5, 3)
    for r in range(5):
        for k, omega in enumerate(omegas):
            single = absolute_cdf(absolute_segments(y[r], 1.6, (0, 8)), omega)
            assert table[r, k] == pytest.approx(single, rel=1e-12)
    assert absolute_cdf(absolute_segments(y, 0.0, (0, 8)), 2.0) == pytest.approx(np.zeros(5))
    assert absolute_cdf(absolute_segments(y, 8.0, (0, 8)), 2.0) == pytest.approx(np.ones(5))


def test_squared_cdf_matches_quadrature_over_the_real_line():
    rng = np.random.default_rng(3)
    y, weights, omega, x = rng.normal(1.0, 2.0, 9), rng.integers(1, 4, 9).astype(float), 0.4, 1.3
    loss = lambda t: omega * float(np.sum(weights * (y - t) ** 2))
    shift = loss(np.average(y, weights=weights))
    density = lambda t: math.exp(-(loss(t) - shift))
    left = integrate.quad(density, -np.inf, x)[0]
    total = integrate.quad(density, -np.inf, np.inf)[0]
    assert squared_cdf(y, x, omega, weights) == pytest.approx(left / total, rel=1e-8)


def test_exact_location_inputs_are_checked():
    with pytest.raises(ValueError, match="x must lie in bounds"):
        absolute_segments([1.0, 2.0], 9.0, (0, 8))
    with pytest.raises(ValueError, match="bounds must be finite with lower < upper"):
        absolute_segments([1.0, 2.0], 1.0, (3, 0))
    with pytest.raises(ValueError, match="weights must be finite and non-negative"):
        absolute_segments([1.0, 2.0], 1.0, (0, 8), [1.0, -1.0])
    with pytest.raises(ValueError, match="omega must be positive"):
        absolute_cdf(absolute_segments([1.0, 2.0], 1.0, (0, 8)), 0.0)
    with pytest.raises(ValueError, match="weights must not be all zero"):
        squared_cdf([1.0, 2.0], 1.0, 1.0, [0.0, 0.0])


# ------------------------------------------------------------ GPC's fixed point


def test_squared_fixed_point_is_between_order_statistics_of_resample_thresholds():
    # Resample b covers ybar while |ybar_b - ybar| sqrt(2 omega n) <= z, i.e. for
    # omega <= z^2 / (2 n d_b^2): 190 of 200 cover between the 10th and 11th
    # smallest thresholds.
    rng = np.random.default_rng(4)
    y = rng.gamma(2.0, 1.0, (3, 40))
    seeds = np.array([11, 12, 13])
    found = gpc_fixed_points(y, loss="squared", seeds=seeds)
    z = stats.norm.ppf(0.975)
    for r in range(3):
        counts = resample_counts(bootstrap_indices(40, 200, np.random.SeedSequence(int(seeds[r]))), 40)
        distance = counts @ y[r] / 40 - y[r].mean()
        thresholds = np.sort(z**2 / (2 * 40 * distance**2))
        assert found.lower[r] == pytest.approx(thresholds[9], rel=1e-6)
        assert found.upper[r] == pytest.approx(thresholds[10], rel=1e-6)
    assert np.all(found.count == 190)


@pytest.mark.e2e
def test_absolute_fixed_point_holds_robbins_monro_gpc_run_to_convergence(cmdstan):
    # calibrate_gpc with eps = 0 on a fine grid stops where the count is exactly
    # 190 of 200: on the plateau the exact bisection finds.
    rng = np.random.default_rng(5)
    y = rng.gamma(2.0, 1.0, (2, 60))
    estimate = np.median(y, axis=1)
    found = gpc_fixed_points(y, loss="absolute", seeds=np.array([0, 1]), bounds=(0, 8))
    for r in range(2):
        run = calibrate_gpc(location_program(y[r], bounds=(0, 8)), backend=GridBackend(2001),
                            seed=r, eps=0.0, max_steps=300, estimate=float(estimate[r])).calibration
        assert bool(run["converged"])
        omega = float(run["omega"])
        tolerance = 5e-3 * omega  # the grid's error in the interval ends
        assert found.lower[r] - tolerance <= omega <= found.upper[r] + tolerance
    assert np.all(found.count == 190)
    assert np.all(found.lower < found.upper)


def test_count_falls_with_omega_and_plateau_end_is_its_crossing():
    rng = np.random.default_rng(6)
    y = rng.gamma(2.0, 1.0, (1, 50))
    counts = bootstrap_counts(50, 200, [7])
    count = bootstrap_count(y, np.median(y, 1), counts, loss="absolute", bounds=(0, 8))
    omegas = np.geomspace(0.05, 20, 60)
    values = np.array([count(np.array([w]))[0] for w in omegas])
    assert values[0] == 200 and values[-1] < 190
    assert np.all(np.diff(values) <= 0)
    end = plateau_end(count, 190, np.array([0.05]), np.array([20.0]))
    assert count(end * (1 - 1e-6))[0] >= 190 > count(end * (1 + 1e-6))[0]


def test_fixed_point_inputs_are_checked():
    y = np.random.default_rng(7).gamma(2.0, 1.0, (2, 20))
    with pytest.raises(ValueError, match="loss must be one of"):
        gpc_fixed_points(y, loss="huber", seeds=[1, 2])
    with pytest.raises(ValueError, match="bounds are required"):
        gpc_fixed_points(y, loss="absolute", seeds=[1, 2])
    with pytest.raises(ValueError, match="seeds must be 2 integers"):
        gpc_fixed_points(y, loss="squared", seeds=[1])
    with pytest.raises(ValueError, match="whole"):
        gpc_fixed_points(y, loss="squared", seeds=[1, 2], B=30)
    count = bootstrap_count(y, y.mean(1), bootstrap_counts(20, 200, [1, 2]), loss="squared")
    with pytest.raises(ValueError, match="widen bracket"):
        fixed_points(count, 190, 2, bracket=(10.0, 20.0))
