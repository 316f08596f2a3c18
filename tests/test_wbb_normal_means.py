"""The WBB normal-means toy against independent truths: the posterior mean by numerical
integration, the WBB draw by numerical minimisation, the WBB mean and P(0) by integrating
over the weights' distribution; the workflow in quick mode."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import integrate, optimize

from stanflow import idata
from stanflow.wbb import (
    bootstrap_weights,
    laplace_posterior_mean,
    soft_threshold,
    wbb_mean,
    wbb_normal_means,
    wbb_prob_zero,
)
from stanflow.workflows import run_workflow

CASES = [(0.0, 1.0), (0.5, 1.0), (3.0, 1.0), (-2.0, 0.5), (10.0, 1.0), (40.0, 3.0), (1.0, 10.0), (-6.0, 2.0)]


def posterior_mean_by_quadrature(y: float, lam: float) -> float:
    """E[theta | y] for N(theta, 1) x Laplace(lam), integrating the unnormalised posterior."""
    log_post = lambda t: -((y - t) ** 2) / 2 - lam * abs(t)
    top = max(log_post(t) for t in np.linspace(min(y, 0) - 1, max(y, 0) + 1, 2001))
    density = lambda t: np.exp(log_post(t) - top)
    lo, hi = min(y, 0) - 15, max(y, 0) + 15
    z = integrate.quad(density, lo, hi, points=[0.0, y], limit=200)[0]
    m = integrate.quad(lambda t: t * density(t), lo, hi, points=[0.0, y], limit=200)[0]
    return m / z


@pytest.mark.parametrize("y, lam", CASES)
def test_posterior_mean_matches_quadrature(y, lam):
    assert laplace_posterior_mean(y, lam) == pytest.approx(
        posterior_mean_by_quadrature(y, lam), abs=1e-9
    )


def test_posterior_mean_is_odd_and_tends_to_y_minus_lam():
    y = np.linspace(-5, 5, 41)
    np.testing.assert_allclose(laplace_posterior_mean(-y, 1.3), -laplace_posterior_mean(y, 1.3), atol=1e-14)
    assert laplace_posterior_mean(200.0, 2.0) == pytest.approx(198.0, abs=1e-12)
    assert laplace_posterior_mean(-200.0, 2.0) == pytest.approx(-198.0, abs=1e-12)


def test_soft_threshold_minimises_the_weighted_objective():
    rng = np.random.default_rng(5)
    for _ in range(20):
        y, lam = rng.normal(0, 3), rng.exponential(2)
        w1, w2 = rng.exponential(size=2)
        fit = optimize.minimize_scalar(
            lambda t, y=y, lam=lam, w1=w1, w2=w2: w1 * (y - t) ** 2 / 2 + w2 * lam * abs(t),
            bounds=(-abs(y) - 1, abs(y) + 1), method="bounded", options={"xatol": 1e-10},
        )
        assert soft_threshold(y, lam * w2 / w1) == pytest.approx(fit.x, abs=1e-7)


def expected_by_quadrature(y: float, lam: float, prior: str, f) -> float:
    """E[f(theta_WBB)] by integrating over w1 (and w2) ~ Exp(1) directly, not over their
    ratio; each integral is split where the draw leaves 0 (w2 / w1 = |y| / lam)."""
    top = 60.0  # exp(-60): the tail beyond is negligible

    def over_w2(w1: float) -> float:
        if prior == "fixed":
            return f(soft_threshold(y, lam / w1))
        kink = min(w1 * abs(y) / lam, top)
        pieces = [(0.0, kink), (kink, top)]
        return sum(
            integrate.quad(lambda w2: f(soft_threshold(y, lam * w2 / w1)) * np.exp(-w2), a, b,
                           epsabs=1e-12, epsrel=1e-11)[0]
            for a, b in pieces if b > a
        )

    kink = lam / abs(y)  # fixed prior: the draw is 0 for w1 < kink
    return integrate.quad(lambda w1: over_w2(w1) * np.exp(-w1), 0, top,
                          points=[kink] if prior == "fixed" and kink < top else None,
                          epsabs=1e-11, epsrel=1e-10, limit=200)[0]


@pytest.mark.parametrize("prior", ["random", "fixed"])
@pytest.mark.parametrize("y, lam", [(0.5, 1.0), (3.0, 1.0), (-2.0, 0.5), (1.0, 4.0)])
def test_wbb_mean_and_prob_zero_match_integration_over_the_weights(y, lam, prior):
    mean = expected_by_quadrature(y, lam, prior, lambda t: t)
    zero = expected_by_quadrature(y, lam, prior, lambda t: float(t == 0))
    assert wbb_mean(y, lam, prior) == pytest.approx(mean, abs=2e-7)
    assert wbb_prob_zero(y, lam, prior) == pytest.approx(zero, abs=2e-7)
def test_draws_are_soft_thresholds_with_the_bootstrap_weights():
    y, lams = np.array([-3.0, 0.0, 0.4, 2.5]), np.array([0.5, 2.0])
    draws = wbb_normal_means(y, lams, 50, seed=9, prior="random")
    w, wp = bootstrap_weights(9, 1, 50, prior="random")
    np.testing.assert_array_equal(draws.weights["w"].values[0], w)
    theta = draws.posterior["theta"].values[0]
    assert theta.shape == (50, 2, 4)
    assert list(draws.posterior["theta"].dims) == ["chain", "draw", "lam", "y"]
    truth = soft_threshold(y[None, None, :], lams[None, :, None] * (wp / w[:, 0])[:, None, None])
    np.testing.assert_array_equal(theta, truth)
    fixed = wbb_normal_means(y, lams, 50, seed=9, prior="fixed")
    np.testing.assert_array_equal(fixed.weights["w_prior"].values[0], np.ones(50))


@pytest.mark.parametrize("prior", ["random", "fixed"])
def test_monte_carlo_mean_agrees_with_the_exact_wbb_mean(prior):
    y, lams = np.array([0.5, 2.0, 6.0]), np.array([1.0, 3.0])
    theta = wbb_normal_means(y, lams, 4000, seed=3, prior=prior).posterior["theta"].values[0]
    mcse = theta.std(axis=0, ddof=1) / np.sqrt(len(theta))
    z = (theta.mean(axis=0) - wbb_mean(y[None, :], lams[:, None], prior)) / mcse
    assert np.all(np.abs(z) < 4)
    zero = (theta == 0).mean(axis=0) - wbb_prob_zero(y[None, :], lams[:, None], prior)
    assert np.all(np.abs(zero) < 4 * np.sqrt(0.25 / len(theta)))


def test_the_wbb_mean_is_not_the_posterior_mean():
    """Exact means: the WBB over-shrinks a large observation by about lam log(|y| / lam)
    where the posterior shrinks it by lam; 1000 draws resolve the gap at y = 4, lam = 1."""
    lam = 1.0
    for y in (20.0, 100.0, 1e4):
        gap = wbb_mean(y, lam) - laplace_posterior_mean(y, lam)
        assert gap == pytest.approx(-lam * (np.log1p(y / lam) - 1), rel=1e-6)
    theta = wbb_normal_means([4.0], [lam], 1000, seed=1).posterior["theta"].values[0, :, 0, 0]
    mcse = theta.std(ddof=1) / np.sqrt(len(theta))
    assert laplace_posterior_mean(4.0, lam) - theta.mean() > 4 * mcse


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: laplace_posterior_mean(1.0, 0.0), "lam"),
        (lambda: wbb_mean(np.nan, 1.0), "y"),
        (lambda: wbb_prob_zero(1.0, 1.0, prior="none"), "prior"),
        (lambda: wbb_normal_means([[1.0]], [1.0], 10, seed=1), "1-d"),
    ],
)
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_workflow_quick(tmp_path):
    summary = run_workflow("wbb-normal-means", tmp_path, quick=True)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert (tmp_path / "wbb_normal_means.png").stat().st_size > 0
    assert summary["n_draws"] == 200 and summary["seed"] > 0
    assert summary["settings"] == {"n_draws": 200, "y_points": 17}
    # one cell per prior weight, read back by a rerun into the same folder
    pieces = {path.name: path.stat().st_mtime_ns for path in (tmp_path / "runs").iterdir()}
    assert sorted(pieces) == ["fixed.json", "random.json"]
    again = run_workflow("wbb-normal-means", tmp_path, quick=True)
    assert {path.name: path.stat().st_mtime_ns for path in (tmp_path / "runs").iterdir()} == pieces
    assert {k: v for k, v in again.items() if k != "provenance"} == {
        k: v for k, v in summary.items() if k != "provenance"}
    y = np.array(summary["y"])
    draws = idata.load(tmp_path / "wbb_normal_means_random.nc").posterior["theta"].values[0]
    for i, lam in enumerate(summary["lam"]):
        key = f"{lam:g}"
        for row in summary["at_y"][key]:
            assert row["posterior_mean"] == pytest.approx(laplace_posterior_mean(row["y"], lam))
            for prior in ("random", "fixed"):
                assert row[f"wbb_{prior}_exact"] == pytest.approx(wbb_mean(row["y"], lam, prior))
        for prior in ("random", "fixed"):
            entry = summary["wbb"][prior][key]
            assert entry["max_mc_error_in_mcse"] < 4.5
            gap = np.array(entry["mean"]) - laplace_posterior_mean(y, lam)
            assert entry["max_abs_difference"] == pytest.approx(np.abs(gap).max())
        np.testing.assert_allclose(summary["wbb"]["random"][key]["mean"], draws[:, i].mean(axis=0))
    # over-shrinkage of large observations, resolved by the draws
    assert all(summary["wbb"]["fixed"][f"{lam:g}"]["difference_at_max"] < 0 for lam in summary["lam"])
    row = summary["at_y"]["1"][-1]  # y = 8, lam = 1
    assert row["y"] == 8 and row["posterior_mean"] - row["wbb_random"] > 4 * row["wbb_random_mcse"]
