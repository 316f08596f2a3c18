"""The gibbs-calibrate workflow with quick settings (two Stan GPC calibrations)."""

from __future__ import annotations

import json

import pytest
from workflow_checks import rerun_reads_back

from stanflow import idata
from stanflow.workflows import run_workflow


@pytest.mark.e2e
def test_gibbs_calibrate_quick(tmp_path, cmdstan):
    summary = run_workflow("gibbs-calibrate", tmp_path, quick=True)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    table = summary["table"]
    assert set(table["median"]) == {"plugin", "holmes_walker", "gpc"}
    # 1-D: Holmes-Walker's tr(H)/tr(J) equals the plug-in H/J
    assert abs(table["median"]["plugin"] - table["median"]["holmes_walker"]) < 1e-12
    assert 0.4 < table["median"]["plugin"] < 0.9
    assert 0.4 < table["median"]["gpc"] < 1.0
    assert set(table["quantreg"]) == {"plugin", "holmes_walker", "gpc"}
    # Check loss at tau = 1/2 with N(0, 2^2) errors: H = f(0) E[xx'] and
    # J = tau (1 - tau) E[xx'], so omega* = f(0) / 0.25 = 0.80. Medians of two
    # n = 50 estimates: wide bounds; GPC starts at omega0 = 1 with small steps.
    for method in ("plugin", "holmes_walker"):
        assert 0.3 < table["quantreg"][method] < 2.0
    assert 0.5 < table["quantreg"]["gpc"] < 1.5
    for value in summary["coverage_median"].values():
        assert 0.75 < value <= 1.0
    for method in table["quantreg"]:
        assert set(summary["coverage_quantreg"][method]) == {"joint", "slope"}
    data = idata.load(tmp_path / "gibbs_calibrate.nc")
    assert data.calibration_median["omega"].dims == ("calibrator", "replicate")
    assert data.calibration_quantreg["omega"].dims == ("calibrator", "replicate")

    # one piece per data set; a rerun into the folder reads them back
    kept = rerun_reads_back("gibbs-calibrate", tmp_path, summary)
    assert len(kept) == summary["replications_median"] + summary["replications_quantreg"] == 22

