"""The LCVI workflows in quick mode: their outputs, summary keys and the missing-data error."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from stanflow.lcvi.mf import load_lastfm, reference_split
from stanflow.workflows import run_workflow

pytestmark = pytest.mark.e2e


def test_eight_schools_workflow(cmdstan, tmp_path):
    summary = run_workflow("lcvi-eight-schools", tmp_path, quick=True)
    for key in [
        "risk_hmc",
        "risk_vi",
        "risk_lcvi",
        "risk_reduction_pct_mean",
        "risk_reduction_pct_sd",
        "n_seeds",
    ]:
        assert np.isfinite(summary[key]), key
    assert summary["n_seeds"] == 2 and summary["seed"] == [1, 2]
    # LCVI stops at the budget of 2000 once settled, else goes on to at most 4000
    for settled, iterations in zip(summary["settled"], summary["advi_iterations"], strict=True):
        assert iterations in (2000, 3000, 4000) and (settled or iterations == 4000)
    reduction = 100 * (
        1
        - np.array(summary["risk_lcvi_per_seed"])
        / np.array(summary["risk_vi_per_seed"])
    )
    assert summary["risk_reduction_pct_mean"] == pytest.approx(reduction.mean())
    assert summary["seeds_reduced"] == int(np.sum(reduction > 0))
    assert summary["risk_reduction_pct_range"] == pytest.approx(
        {"min": reduction.min(), "max": reduction.max()}
    )
    assert summary["advi_iterations_range"]["max"] == max(summary["advi_iterations"])
    # Calibration lowers the risk of mean-field VI; the exact posterior has less still.
    assert summary["risk_lcvi"] < summary["risk_vi"]
    assert summary["risk_hmc"] < summary["risk_lcvi"]
    for name in ["marginals.png", "risk.png", "lcvi_eight_schools.nc", "hmc.nc"]:
        assert (tmp_path / name).stat().st_size > 0
    assert json.loads((tmp_path / "summary.json").read_text())["n_seeds"] == 2


def test_matrix_factorisation_workflow(cmdstan, tmp_path):
    summary = run_workflow("lcvi-mf", tmp_path, quick=True)
    for setting in ("code", "text"):
        records = sorted((tmp_path / "runs" / setting).glob("seed-*-*.json"))
        assert len(records) == 8  # 2 seeds x 4 losses, each written when done
    assert set(summary["risk_reduction_pct"]) == {
        "tilted_0.2",
        "tilted_0.5",
        "tilted_0.8",
        "squared",
    }
    assert summary["n_seeds"] == 2 and summary["shape"] == [200, 30]
    assert summary["seed"] == [1, 2]
    for name, runs in summary["runs"].items():
        reductions = [r["reduction_pct"] for r in runs]
        assert summary["risk_reduction_pct"][name]["mean"] == pytest.approx(
            np.mean(reductions)
        )
        for r in runs:
            assert r["risk_vi"] > 0 and r["risk_lcvi"] > 0 and r["lcvi_blocks"] == 10
        assert summary["test_risk"][name]["reference"]["n_seeds"] == 10
    # the text's setting: all sd 10 and u = M - l with M the plain-VI losses' 90th percentile
    assert summary["settings"]["text"]["noise_sd"] == 10.0
    assert summary["settings"]["text"]["utility"] == "linear"
    assert summary["settings"]["code"] | {"source": None} == {
        "noise_sd": 1.0, "prior_sd": 10.0, "utility": "exp", "source": None
    }
    text = summary["text"]
    for name, runs in text["runs"].items():
        assert text["risk_reduction_pct"][name]["mean"] == pytest.approx(
            np.mean([r["reduction_pct"] for r in runs])
        )
        for r in runs:
            assert r["config"]["setting"]["noise_sd"] == 10.0
            assert r["risk_vi"] > 0 and r["risk_lcvi"] > 0
        # M is a loss value (the 90th percentile), gamma its inverse
        assert text["utility_scale_M90"][name]["mean"] > 0
    for name in summary["runs"]:
        gammas = [r["utility_scale"] for r in summary["runs"][name]]
        assert summary["utility_scale_M90"][name]["mean"] == pytest.approx(np.mean(gammas))
    for part in (summary, text):
        runs = [r for records in part["runs"].values() for r in records]
        plain = {r["seed"]: r["seconds_vi"] for r in runs}
        assert part["compute_seconds"] == pytest.approx(
            sum(plain.values()) + sum(r["seconds_lcvi"] for r in runs)
        )
    # the four losses of a seed share one plain-VI run
    for seed in (1, 2):
        shared = {r["seconds_vi"] for runs in summary["runs"].values() for r in runs if r["seed"] == seed}
        assert len(shared) == 1
    figures = ["reductions.png", "risks.png", "decision_shift.png", "intervals.png",
               "user_shifts.png", "lcvi_mf.nc"]
    for name in figures:
        assert (tmp_path / name).stat().st_size > 0
    # Fig. 3: each tau-decision lies inside its own 90 % predictive interval, and
    # the per-user mean shifts are those of a group-by over the test cells' users
    Y = load_lastfm(30)[:200]
    split = reference_split(Y.shape)
    cells = summary["interval_cells"]
    for name in ["tilted_0.2", "tilted_0.8"]:
        with np.load(tmp_path / "runs" / "code" / f"seed-1-{name}-test-decisions.npz") as saved:
            for method in ("vi", "lcvi"):
                low, high = saved[f"interval_{method}"]
                assert np.all((low <= saved[method][cells]) & (saved[method][cells] <= high))
                assert summary["interval_width"][name][method] == pytest.approx(np.mean(high - low))
            by_user = pd.Series(saved["lcvi"] - saved["vi"]).groupby(split.test_rows).mean()
        shift = summary["user_mean_shift"][name]
        assert shift["mean"] == pytest.approx(by_user.mean())
        assert shift["q50"] == pytest.approx(by_user.median())
    # A rerun into the same folder reads the records instead of running again.
    again = run_workflow("lcvi-mf", tmp_path, quick=True)
    assert again["runs"] == summary["runs"]
    assert again["text"] == summary["text"]
    assert again["user_mean_shift"] == summary["user_mean_shift"]


def test_matrix_factorisation_without_data_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("STANFLOW_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(
        FileNotFoundError, match="lastfm_counts_992x1003.csv.*Last.fm-1K"
    ):
        run_workflow("lcvi-mf", tmp_path / "out", quick=True)
