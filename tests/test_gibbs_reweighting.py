"""Importance reweighting of one Gibbs posterior sample into many (pure NumPy)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stanflow.gibbs.gpc import bootstrap_indices, draws_coverage, reweighting


def test_resample_counts_match_bincount():
    indices = bootstrap_indices(30, 50, 4)
    counts = reweighting.resample_counts(indices, 30)
    assert counts.shape == (50, 30)
    for row, idx in zip(counts, indices, strict=True):
        np.testing.assert_array_equal(row, np.bincount(idx, minlength=30))
    with pytest.raises(ValueError, match="indices"):
        reweighting.resample_counts(np.array([[0, 30]]), 30)


def test_reweighted_squared_loss_posteriors_match_closed_form():
    """Squared loss and a flat prior: the Gibbs posterior of a resample with mean
    ybar_b is N(ybar_b, 1 / (2 omega n)). Draws from the full-data posterior at
    omega_ref = omega / 4, reweighted, must give each resample's mean and sd."""
    rng = np.random.default_rng(0)
    n, omega, omega_ref = 40, 1.3, 1.3 / 4
    y = rng.normal(1.0, 1.0, n)
    theta = rng.normal(y.mean(), 1 / math.sqrt(2 * omega_ref * n), 400_000)
    pointwise = (y[None, :] - theta[:, None]) ** 2
    indices = bootstrap_indices(n, 25, 1)
    counts = reweighting.resample_counts(indices, n)
    w = reweighting.normalise(reweighting.log_weights(pointwise, counts, omega, omega_ref))
    sd = 1 / math.sqrt(2 * omega * n)
    mean = w @ theta
    var = w @ theta**2 - mean**2
    ess = reweighting.kish_ess(w)
    assert np.all(np.abs(mean - y[indices].mean(axis=1)) < 5 * sd / np.sqrt(ess))
    np.testing.assert_allclose(np.sqrt(var), sd, rtol=0.05)
    # A proposal twice as wide keeps a sizeable share of the draws.
    assert np.all(ess > 0.2 * len(theta))


def test_log_weights_full_data_at_reference_rate_are_flat():
    rng = np.random.default_rng(2)
    pointwise = rng.random((100, 7))
    lw = reweighting.log_weights(pointwise, np.ones((1, 7)), 0.5, 0.5)
    np.testing.assert_allclose(lw, 0.0, atol=1e-12)
    assert reweighting.kish_ess(reweighting.normalise(lw))[0] == pytest.approx(100)
    with pytest.raises(ValueError, match="share n"):
        reweighting.log_weights(pointwise, np.ones((1, 6)), 1.0, 0.5)
    with pytest.raises(ValueError, match="finite"):
        reweighting.log_weights(np.full((3, 7), np.nan), np.ones((1, 7)), 1.0, 0.5)


def test_equal_weights_reproduce_the_unweighted_regions():
    """With equal weights the weighted regions are the draws' own regions
    (regions.draws_coverage), up to the quantile interpolation of ties at the edge."""
    rng = np.random.default_rng(5)
    S, B = 4000, 300
    draws1 = rng.normal(size=S)
    equal = np.full((B, S), 1 / S)
    for estimate in np.linspace(-2.5, 2.5, 21):
        weighted = reweighting.interval_coverage(draws1, equal, estimate, 0.05)
        assert np.all(weighted) == (draws_coverage(draws1[None], estimate, 0.05) == 1.0)
    draws2 = rng.normal(size=(S, 2)) @ np.array([[1.0, 0.5], [0.0, 2.0]])
    for estimate in ([0.0, 0.0], [2.0, 3.0], [4.0, -6.0]):
        weighted = reweighting.ellipsoid_coverage(draws2, equal[:2], np.array(estimate), 0.05)
        assert bool(weighted[0]) == (draws_coverage(draws2[None], np.array(estimate), 0.05) == 1.0)


def test_weighted_regions_match_exact_normal_coverage():
    """Each weighting is a N(mu_b, 1) (scalar) or N(mu_b, I) (2-D) posterior via
    importance weights from N(0, 2^2): the region holds 0 iff |mu_b| <= 1.96
    (scalar) or |mu_b|^2 <= chi2_2(0.95) = -2 log 0.05 (vector)."""
    rng = np.random.default_rng(6)
    S, B = 100_000, 40
    mu1 = np.linspace(-3, 3, B)
    draws1 = rng.normal(0, 2, S)
    log_w = -0.5 * (draws1[None, :] - mu1[:, None]) ** 2 + draws1[None, :] ** 2 / 8
    inside = reweighting.interval_coverage(draws1, reweighting.normalise(log_w), 0.0, 0.05)
    clear = np.abs(np.abs(mu1) - 1.96) > 0.1
    np.testing.assert_array_equal(inside[clear], (np.abs(mu1) <= 1.96)[clear])
    mu2 = np.column_stack([np.linspace(-3, 3, B), np.linspace(2, -1, B)])
    draws2 = rng.normal(0, 2, (S, 2))
    log_w = -0.5 * np.sum((draws2[None] - mu2[:, None]) ** 2, axis=2) + np.sum(draws2**2, axis=1) / 8
    inside = reweighting.ellipsoid_coverage(draws2, reweighting.normalise(log_w), np.zeros(2), 0.05)
    radius = -2 * math.log(0.05)
    r2 = np.sum(mu2**2, axis=1)
    clear = np.abs(r2 - radius) > 0.4
    np.testing.assert_array_equal(inside[clear], (r2 <= radius)[clear])
