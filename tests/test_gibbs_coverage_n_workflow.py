"""The gibbs-coverage-n workflow with quick settings (exact posteriors, no compiler), and its resume."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from stanflow import idata
from stanflow.workflows import run_workflow


def test_gibbs_coverage_n_quick(tmp_path):
    summary = run_workflow("gibbs-coverage-n", tmp_path, quick=True)

    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert summary["omega_star"] == pytest.approx(0.6266, abs=1e-4)
    assert summary["formula"]["1"] == pytest.approx(0.879, abs=1e-3)
    assert summary["formula"]["5"] == pytest.approx(0.512, abs=1e-3)
    replications = summary["replications"]
    largest = summary[f"n{summary['sizes'][-1]}"]
    for omega, expected in summary["formula"].items():
        se = math.sqrt(max(expected * (1 - expected), 0.01) / replications)
        assert abs(largest["coverage"][omega] - expected) < 4 * se, omega
    for n in summary["sizes"]:
        row = summary[f"n{n}"]
        # the split is exact: estimator's share + posterior's share = the excess
        assert row["estimator_part"] + row["posterior_part"] == pytest.approx(row["mean_excess_small_omega"])
        assert 0.4 < row["omega_n"] < 1.0
        assert 0.8 < row["median_sd_ratio"] < 1.2
    assert summary["excess_fit"]["dof"] == len(summary["sizes"]) - 2

    data = idata.load(tmp_path / "gibbs_coverage_n.nc")
    assert data.coverage["coverage"].dims == ("n", "omega")
    np.testing.assert_allclose(
        data.coverage["coverage"].sel(n=50).values, list(summary["n50"]["coverage"].values())
    )
    assert (tmp_path / "gibbs_coverage_n.png").read_bytes()[:4] == b"\x89PNG"
    assert summary["seed"] == 20240518 and summary["settings"] == {"replications": 1000}

    # one piece per n; a rerun into the same folder computes nothing: the same numbers
    before = {path.name: path.read_text() for path in (tmp_path / "runs").glob("*.json")}
    assert sorted(before) == sorted(f"n{n}.json" for n in summary["sizes"])
    again = run_workflow("gibbs-coverage-n", tmp_path, quick=True)
    assert {path.name: path.read_text() for path in (tmp_path / "runs").glob("*.json")} == before
    assert {k: v for k, v in again.items() if k != "provenance"} == {
        k: v for k, v in summary.items() if k != "provenance"}
