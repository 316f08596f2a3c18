"""The gibbs-coverage workflow with quick settings (grid computations, no compiler), and its resume."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from workflow_checks import rerun_reads_back

from stanflow import idata
from stanflow.workflows import run_workflow


def test_gibbs_coverage_quick(tmp_path):
    summary = run_workflow("gibbs-coverage", tmp_path, quick=True)

    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert summary["omega_star"] == pytest.approx(0.6266, abs=1e-4)
    assert summary["median"] == pytest.approx(1.6783, abs=1e-4)
    assert summary["density_at_median"] == pytest.approx(0.3133, abs=1e-4)
    formula = summary["coverage_formula"]
    assert formula["1"] == pytest.approx(0.879, abs=1e-3)
    assert formula["5"] == pytest.approx(0.512, abs=1e-3)
    assert (
        summary["coverage_n400"].keys()
        == formula.keys()
        == summary["coverage_n50"].keys()
    )
    # 200 replications: within 4 binomial standard errors of the asymptotic curve.
    replications = summary["replications"]
    assert replications == 200
    for omega, expected in formula.items():
        se = math.sqrt(max(expected * (1 - expected), 0.01) / replications)
        assert abs(summary["coverage_n400"][omega] - expected) < 4 * se, omega
    assert 0.4 < summary["crossing_n400"] < 1.0
    assert summary["calibrated_omega"]["plugin"] == pytest.approx(0.6266, abs=0.03)
    # GPC starts at omega = 1, where the intervals under-cover, so it must come down.
    assert 0.45 < summary["calibrated_omega"]["gpc"] < 1.0

    data = idata.load(tmp_path / "gibbs_coverage.nc")
    assert data.calibration["omega"].dims == ("n", "replicate")
    assert data.calibration["omega"].shape == (2, replications)
    np.testing.assert_allclose(
        data.coverage["coverage"].sel(n=400).values,
        list(summary["coverage_n400"].values()),
    )
    assert (tmp_path / "gibbs_coverage.png").read_bytes()[:4] == b"\x89PNG"
    assert summary["seed"] == 20240504
    assert summary["settings"] == {"replications": 200, "gpc_replications": 4}

    # per n the coverage, GPC from 1 and from the plug-in; the plotted data set
    # a rerun into the same folder computes nothing: the same pieces, the same numbers
    kept = rerun_reads_back("gibbs-coverage", tmp_path, summary)
    assert sorted(kept) == sorted(
        ["example.json", *(f"n{n}/{part}.json" for n in (50, 400)
                           for part in ("coverage", "gpc", "gpc_from_plugin"))])

