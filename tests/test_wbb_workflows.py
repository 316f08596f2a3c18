"""The WBB workflows with --quick settings."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import load_diabetes

from stanflow import idata
from stanflow.wbb import solve_lasso
from stanflow.workflows import run_workflow


@pytest.mark.e2e
def test_wbb_diabetes_quick(tmp_path):
    summary = run_workflow("wbb-diabetes", tmp_path, quick=True)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert (tmp_path / "wbb_diabetes_marginals.png").is_file()
    assert sorted(path.stem for path in (tmp_path / "runs").glob("*.json")) == [
        "cv", "marginal_likelihood", "marginals", "posteriors"]
    coefficients = summary["coefficients"]
    assert len(coefficients) == 10 and summary["n_draws"] == 200
    fixed = idata.load(tmp_path / "wbb_fixed.nc")
    beta = fixed.posterior["beta"].values[0]
    for j, entry in enumerate(coefficients.values()):
        for variant in ("wbb_fixed", "wbb_random"):
            assert 0 <= entry[variant]["p_zero"] <= 1
        assert entry["wbb_fixed"]["mean"] == pytest.approx(beta[:, j].mean())
        assert entry["wbb_fixed"]["p_zero"] == pytest.approx(np.mean(beta[:, j] == 0))
    # The strong effects (bmi, s5) are the same under all three methods, within
    # a fraction of their size; the unit-weight lasso sits inside the WBB draws.
    for name in ("bmi", "s5"):
        entry = coefficients[name]
        assert entry["wbb_random"]["mean"] == pytest.approx(entry["bridge_mean"], rel=0.15)
        assert entry["wbb_fixed"]["p_zero"] == 0
    data = load_diabetes()
    X = (data.data - data.data.mean(axis=0)) / data.data.std(axis=0)
    y = data.target - data.target.mean()
    point = solve_lasso(X, y, summary["lam"], fit_intercept=True).beta[0]
    low, high = np.quantile(beta, [0.01, 0.99], axis=0)
    assert np.all((low <= point) & (point <= high))
    assert summary["draws_per_second"]["wbb_fixed"] > 0
    assert summary["bridge"]["max_rhat"] < 1.1 and summary["bridge"]["ess_per_second"] > 0
    _check_shapes_and_claims(summary, beta)
    _check_marginal_likelihood(summary, X, y)


def _check_shapes_and_claims(summary, fixed_beta):
    coefficients, claims = summary["coefficients"], summary["claims"]
    methods = ("wbb_fixed", "wbb_random", "bridge")
    for j, entry in enumerate(coefficients.values()):
        assert entry["wbb_fixed"]["sd"] == pytest.approx(fixed_beta[:, j].std(ddof=1))
        assert entry["wbb_fixed"]["p_small"] >= entry["wbb_fixed"]["p_zero"]
        assert entry["bridge"]["p_zero"] == 0  # a continuous posterior has no atom
        for method in methods:
            assert entry[method]["n_modes"] >= (1 if entry[method]["p_zero"] < 0.9 else 0)
    # The claims are counts of the per-coefficient numbers, recomputed here.
    for method in methods:
        assert claims["with_atom"][method] == sum(e[method]["p_zero"] > 0 for e in coefficients.values())
        assert claims["multimodal"][method] == sum(e[method]["n_modes"] > 1 for e in coefficients.values())
    assert claims["sd_fixed_below_random"] == sum(
        e["wbb_fixed"]["sd"] < e["wbb_random"]["sd"] for e in coefficients.values())
    # The WBB lasso puts mass on exactly 0 for the weak coefficients (age, s2 at the CV penalty).
    assert claims["with_atom"]["wbb_fixed"] >= 2 and claims["with_atom"]["bridge"] == 0


def _check_marginal_likelihood(summary, X, y):
    marginal = summary["marginal_likelihood"]
    grid = marginal["grid"]
    assert marginal["lam_ml"] in grid["lam"]
    assert marginal["log_marginal_max"] == max(grid["log_marginal"])
    assert marginal["log_marginal_max"] >= marginal["log_marginal_at_lam_cv"]
    # An interior maximum: neither no penalty nor the all-zero penalty is best.
    assert grid["lam"][0] < marginal["lam_ml"] < grid["lam"][-1]
    low, high = marginal["lam_within_1_of_max"]
    assert low <= marginal["lam_ml"] <= high
    assert marginal["sigma"] == pytest.approx(
        np.sqrt(np.sum((y - np.column_stack([np.ones(len(y)), X]) @ np.linalg.lstsq(
            np.column_stack([np.ones(len(y)), X]), y, rcond=None)[0]) ** 2) / (len(y) - 11)))
    for label, lam in (("ml", marginal["lam_ml"]), ("cv", summary["lam"])):
        posterior = marginal["posteriors"][label]
        assert posterior["lam"] == pytest.approx(lam)
        for entry in posterior["coefficients"].values():
            assert entry["bayes_lasso"]["p_zero"] == 0 and entry["bayes_lasso"]["sd"] > 0
        # The strongest effect (bmi) agrees between the WBB and the Bayesian lasso at either penalty.
        bmi = posterior["coefficients"]["bmi"]
        assert bmi["wbb_random"]["mean"] == pytest.approx(bmi["bayes_lasso"]["mean"], rel=0.15)


def test_wbb_trend_filtering_quick(tmp_path):
    summary = run_workflow("wbb-trend-filtering", tmp_path, quick=True)
    grid = np.geomspace(1e2, 1e5, 7)
    assert summary["lam"] in grid and summary["oracle_lam"] in grid
    assert set(summary["replicate_lams"]) <= set(grid) and len(summary["replicate_lams"]) == 2
    assert summary["lam_rule"].startswith("5-fold CV")
    # The CV error includes the noise variance (4); the oracle's error to f is the smallest on the grid.
    assert 0.8 * 2.0**2 < summary["cv_error_min"] < 1.5 * 2.0**2
    assert summary["mse_at_oracle_lam"] <= summary["mse_at_cv_lam"] == pytest.approx(summary["fit_mse"])
    assert 0 <= summary["cv_max_relative_gap"] < 1e-2 and 0 <= summary["lam_at_grid_edge"] <= 3
    assert (tmp_path / "wbb_trend_filtering.png").is_file()
    assert summary["n_draws"] + summary["n_failed_draws"] == 40 and summary["coverage_replicates"] == 2
    assert sorted(path.stem for path in (tmp_path / "runs").glob("*.json")) == [
        "coverage-00", "coverage-01", "first"]
    assert 0.7 <= summary["band_coverage"] <= 1.0
    # A band from the draws' spread: wider than zero, narrower than the noise.
    assert 0 < summary["mean_band_width"] < 2 * 1.96 * 2.0
    assert summary["fit_mse"] < 0.5 * 2.0**2
    draws = idata.load(tmp_path / "wbb_trend_filtering.nc")
    assert draws.posterior["theta"].shape == (1, 40, 500)
    converged = draws.sample_stats["converged"].values[0]
    assert converged.sum() == summary["n_draws"]
    assert np.isfinite(draws.posterior["theta"].values[0, converged]).all()
