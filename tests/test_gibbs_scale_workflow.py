"""The gibbs-scale workflow with quick settings (K = 6, n = 300; three data sets per shape design)."""

from __future__ import annotations

import json

import pytest

from stanflow.workflows import list_workflows, run_workflow


@pytest.mark.e2e
def test_gibbs_scale_quick(tmp_path, cmdstan):
    assert "gibbs-scale" in dict(list_workflows())
    summary = run_workflow("gibbs-scale", tmp_path, quick=True)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    # The check loss at tau = 0.5 with N(0, 1) errors: H = phi(0) E[xx'], J = E[xx'] / 4,
    # so every rule's rate tends to 4 phi(0) = 1.60.
    assert 1.0 < summary["omega"]["plugin"]["median"] < 2.4
    assert 0.7 < summary["omega"]["gpc"]["median"] < 2.8
    assert summary["resamples"] == ["transport"]  # K = 6: the path alone would not serve
    assert summary["ess_min_per_resample"]["min"] >= 100
    assert summary["converged"] == 2
    for key in ("gpc", "omega_1"):
        assert summary["coverage"][key]["datasets"] == 2
    for design, slope in (("hetero_tau90", 1.6408), ("homo_tau50", 1.0)):
        record = summary["shape"][design]
        assert record["true_slope"] == pytest.approx(slope, abs=1e-4)
        assert set(record["coverage"]) == {"gpc", "adjusted", "plugin", "plugin_adjusted"}
        assert record["datasets"] == 3
        # The fix moves draws, not learning rates: the plug-in's rate is the same.
        assert record["omega_median"]["plugin"] == record["omega_median"]["plugin_adjusted"]
    assert (tmp_path / "gibbs_scale.png").stat().st_size > 10_000
