"""The gibbs-calibrate workflow with quick settings (grid and closed forms, no Stan)."""

from __future__ import annotations

import json

from stanflow import idata
from stanflow.workflows import run_workflow


def test_gibbs_calibrate_quick(tmp_path):
    summary = run_workflow("gibbs-calibrate", tmp_path, quick=True)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    table = summary["table"]
    assert set(table["median"]) == {"plugin", "holmes_walker", "gpc"}
    # 1-D: Holmes-Walker's tr(H)/tr(J) equals the plug-in H/J
    assert abs(table["median"]["plugin"] - table["median"]["holmes_walker"]) < 1e-12
    assert 0.4 < table["median"]["plugin"] < 0.9
    assert 0.4 < table["median"]["gpc"] < 1.0
    assert set(table["quantreg"]) == {"plugin", "holmes_walker"}
    for value in summary["coverage_median"].values():
        assert 0.75 < value <= 1.0
    data = idata.load(tmp_path / "gibbs_calibrate.nc")
    assert data.calibration_median["omega"].dims == ("calibrator", "replicate")
