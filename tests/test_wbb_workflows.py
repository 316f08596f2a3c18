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


def test_wbb_trend_filtering_quick(tmp_path):
    summary = run_workflow("wbb-trend-filtering", tmp_path, quick=True)
    assert (tmp_path / "wbb_trend_filtering.png").is_file()
    assert summary["n_draws"] + summary["n_failed_draws"] == 40 and summary["coverage_replicates"] == 2
    assert 0.7 <= summary["band_coverage"] <= 1.0
    # A band from the draws' spread: wider than zero, narrower than the noise.
    assert 0 < summary["mean_band_width"] < 2 * 1.96 * 2.0
    assert summary["fit_mse"] < 0.5 * 2.0**2
    draws = idata.load(tmp_path / "wbb_trend_filtering.nc")
    assert draws.posterior["theta"].shape == (1, 40, 500)
    converged = draws.sample_stats["converged"].values[0]
    assert converged.sum() == summary["n_draws"]
    assert np.isfinite(draws.posterior["theta"].values[0, converged]).all()


def test_wbb_nn_quick(tmp_path):
    summary = run_workflow("wbb-nn", tmp_path, quick=True)
    assert (tmp_path / "wbb_nn_accuracy.png").is_file()
    assert summary["data"] == "sklearn 8x8 digits"
    low, high = summary["accuracy_ci95"]
    assert 0.8 < low <= summary["accuracy_mean"] <= high <= 1.0
    assert summary["n_draws"] + summary["n_failed"] == 10
    draws = idata.load(tmp_path / "wbb_nn.nc")
    accuracy = draws.posterior["test_accuracy"].values[0]
    assert np.nanmean(accuracy) == pytest.approx(summary["accuracy_mean"])
