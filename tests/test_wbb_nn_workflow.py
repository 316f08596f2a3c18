"""The wbb-nn workflow with --quick settings: both settings, their summaries, resume."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import skew
from workflow_checks import kept_pieces

from stanflow.workflows import run_workflow


def test_wbb_nn_quick_runs_both_settings_and_resumes(tmp_path):
    summary = run_workflow("wbb-nn", tmp_path, quick=True)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert (tmp_path / "wbb_nn_accuracy.png").is_file()
    assert summary["data"] == "sklearn 8x8 digits"
    assert summary["seed"] == 20240808 and summary["init_seed"] == 20240809
    published, variant = summary["published"], summary["stanflow_variant"]

    # published: lam = 1e-4 on the sum, every digit in a stated split, a random start per draw
    assert published["lam_sum_scale"] == 1e-4
    assert published["n_train"] + published["n_test"] == 1797
    assert published["n_draws"] == published["n_draws_requested"] == 8
    # one piece per chunk of 4 draws
    chunks = sorted((tmp_path / "runs" / "published").glob("draws-*.json"))
    assert [c.name for c in chunks] == ["draws-0000.json", "draws-0004.json"]
    records = [d for c in chunks for d in json.loads(c.read_text())["draws"]]
    assert [d["draw"] for d in records] == list(range(8))
    assert len({d["init_seed"] for d in records}) == 8
    accuracy = np.array([d["accuracy"] for d in records])
    stats = published["accuracy"]
    assert stats["mean"] == pytest.approx(accuracy.mean())
    assert stats["median"] == pytest.approx(np.median(accuracy))
    assert stats["sd"] == pytest.approx(accuracy.std(ddof=1))
    assert stats["skewness"] == pytest.approx(skew(accuracy))
    assert stats["q025"] <= stats["median"] <= stats["q975"]
    assert 0.5 < stats["mean"] <= 1.0
    assert sum(published["histogram"]["counts"]) + published["histogram"]["below_range"] == 8
    # the last recorded epoch of accuracy_by_epoch comes before the final accuracy
    assert [int(e) for e in published["accuracy_by_epoch"]] == [1, 5]
    # the longer runs repeat the first draws exactly up to the budget
    longer = published["longer"]
    assert longer["epochs"][0] == published["epochs"]
    assert longer["accuracy_mean_by_epoch"][0] == pytest.approx(longer["same_draws_at_budget_mean"])
    assert published["init_only"]["n_draws"] == 4

    # variant: lam = 1e-4 n on the sum, warm starts, L-BFGS to its own stopping rule
    assert variant["lam_sum_scale"] == pytest.approx(1e-4 * variant["n_train"])
    assert variant["lam_ratio_to_published"] == pytest.approx(variant["n_train"])
    assert variant["n_draws"] + round((1 - variant["converged_fraction"]) * 6) == 6
    assert variant["unit_weight_fit"]["converged"]
    assert (tmp_path / "runs" / "stanflow_variant" / "base.json").is_file()
    low, high = variant["accuracy"]["q025"], variant["accuracy"]["q975"]
    assert 0.8 < low <= variant["accuracy"]["mean"] <= high <= 1.0
    assert summary["paper"]["q025"] == 0.407 and summary["paper"]["q975"] == 0.893

    # a rerun into the same folder resumes: nothing is recomputed, the numbers are the same
    before = kept_pieces(tmp_path)
    assert len(before) == 1 + 2 + 2 + 1 + 1
    again = run_workflow("wbb-nn", tmp_path, quick=True)
    assert kept_pieces(tmp_path) == before
    keep = ("published", "stanflow_variant", "settings", "compute_seconds")
    assert {k: again[k] for k in keep} == {k: summary[k] for k in keep}

