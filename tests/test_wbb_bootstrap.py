"""The WBB driver: weights reproducible from the root seed, the InferenceData
layout, failed solves reported, and WBB draws against exact posteriors."""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.wbb import (
    Draws,
    bootstrap_weights,
    draw_weights,
    solve_lasso,
    wbb,
    wbb_lasso,
    wbb_ridge,
    wbb_trend_filter,
)

RNG = np.random.default_rng(7)


def test_weights_depend_only_on_seed_and_draw_index():
    w, wp = bootstrap_weights(42, 6, 10)
    later, later_p = bootstrap_weights(42, 6, 3, start=4)
    np.testing.assert_array_equal(w[4:7], later)
    np.testing.assert_array_equal(wp[4:7], later_p)
    one, one_p = draw_weights(42, 8, 6)
    np.testing.assert_array_equal(one, w[8])
    assert one_p == wp[8]
    fixed, fixed_p = bootstrap_weights(42, 6, 10, prior="fixed")
    np.testing.assert_array_equal(fixed, w)  # common random numbers across the variants
    np.testing.assert_array_equal(fixed_p, 1.0)
    big, _ = bootstrap_weights(42, 2000, 500)
    assert big.mean() == pytest.approx(1, abs=0.01) and big.var() == pytest.approx(1, abs=0.02)


def test_idata_layout_and_batching_do_not_change_the_draws():
    X = RNG.normal(size=(80, 3))
    y = X @ [1.0, 0.0, -1.0] + 0.5 + RNG.normal(size=80)
    whole = wbb_lasso(X, y, 10.0, 30, seed=1, fit_intercept=True, feature_names=["a", "b", "c"])
    batched = wbb_lasso(X, y, 10.0, 30, seed=1, fit_intercept=True, feature_names=["a", "b", "c"],
                        batch_size=7)
    assert whole.posterior.beta.dims == ("chain", "draw", "feature")
    assert list(whole.posterior.feature.values) == ["a", "b", "c"]
    assert whole.posterior.intercept.shape == (1, 30)
    assert whole.weights.w.dims == ("chain", "draw", "obs") and whole.weights.w_prior.shape == (1, 30)
    assert bool(whole.sample_stats.converged.all()) and "n_sweeps" in whole.sample_stats
    assert whole.attrs["n_failed"] == 0 and whole.attrs["root_seed"] == 1
    np.testing.assert_allclose(whole.posterior.beta.values, batched.posterior.beta.values, atol=1e-8)
    np.testing.assert_array_equal(whole.weights.w.values, batched.weights.w.values)
    w = whole.weights.w.values[0, 5]
    prior_weight = whole.weights.w_prior.values[0, 5]
    direct = solve_lasso(X, y, 10.0, weights=w, prior_weight=prior_weight, fit_intercept=True)
    np.testing.assert_allclose(whole.posterior.beta.values[0, 5], direct.beta[0], atol=1e-8)


def test_failed_solves_are_reported_not_kept():
    def solve(w, wp):
        ok = w[:, 0] > 0.5
        return Draws({"theta": w.sum(axis=1)}, ok, {})

    with pytest.warns(RuntimeWarning, match="did not converge"):
        idata = wbb(solve, 4, 50, seed=3)
    ok = idata.sample_stats.converged.values[0]
    assert 0 < idata.attrs["n_failed"] == (~ok).sum()
    assert np.all(np.isnan(idata.posterior.theta.values[0, ~ok]))
    assert np.all(np.isfinite(idata.posterior.theta.values[0, ok]))
    with pytest.raises(RuntimeError, match="did not converge"):
        wbb(solve, 4, 50, seed=3, on_failure="raise")


def test_trend_filter_driver():
    y = np.sin(np.linspace(0, 3, 60)) + 0.1 * RNG.normal(size=60)
    idata = wbb_trend_filter(y, 0.5, 1, 5, seed=0)
    assert idata.posterior.theta.dims == ("chain", "draw", "obs")
    assert bool(idata.sample_stats.converged.all())
    assert set(idata.sample_stats.data_vars) == {"converged", "gap", "n_newton"}


@pytest.mark.parametrize("n", [20, 200, 2000])
def test_normal_mean_with_known_variance(n):
    # y_i ~ N(mu, sigma^2), prior mu ~ N(0, tau^2): the posterior is N(m, v) with
    # v = 1 / (n / sigma^2 + 1 / tau^2), m = v sum(y) / sigma^2. WBB: ridge on a
    # column of ones with lam = sigma^2 / tau^2 and a fixed prior weight. Its
    # spread comes from the data (s^2 / n), so it matches v up to the sampling
    # error of s^2, sqrt(2 / n), plus the Monte Carlo error of B draws.
    sigma, tau, B = 2.0, 3.0, 2000
    y = RNG.normal(1.0, sigma, size=n)
    v = 1 / (n / sigma**2 + 1 / tau**2)
    m = v * y.sum() / sigma**2
    draws = wbb_ridge(np.ones((n, 1)), y, sigma**2 / tau**2, B, seed=n, prior="fixed")
    mu = draws.posterior.beta.values.ravel()
    assert abs(mu.mean() - m) <= 4 * np.sqrt(v / B) + 2 * np.sqrt(v) / n
    assert abs(mu.var() / v - 1) <= 4 * np.sqrt(2 / B) + 4 * np.sqrt(2 / n) + 2 / n


@pytest.mark.parametrize("prior", ["fixed", "random"])
def test_ridge_wbb_matches_the_gaussian_posterior(prior):
    # y = X beta + N(0, sigma^2), prior beta ~ N(0, sigma^2 / lam I): the
    # posterior is N((X'X + lam I)^-1 X'y, sigma^2 (X'X + lam I)^-1).
    n, B, sigma, lam = 2000, 2000, 1.5, 50.0
    X = RNG.normal(size=(n, 3)) @ np.array([[1.0, 0.5, 0.0], [0.0, 1.0, 0.3], [0.0, 0.0, 1.0]])
    y = X @ [0.2, -0.1, 0.05] + sigma * RNG.normal(size=n)
    precision = X.T @ X + lam * np.eye(3)
    mean = np.linalg.solve(precision, X.T @ y)
    sd = sigma * np.sqrt(np.diag(np.linalg.inv(precision)))
    draws = wbb_ridge(X, y, lam, B, seed=9, prior=prior).posterior.beta.values[0]
    np.testing.assert_array_less(np.abs(draws.mean(axis=0) - mean) / sd, 4 / np.sqrt(B) + 3 / np.sqrt(n))
    np.testing.assert_array_less(np.abs(draws.std(axis=0) / sd - 1), 4 / np.sqrt(2 * B) + 4 * np.sqrt(2 / n))
