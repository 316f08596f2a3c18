"""Both ArviZ lines end to end: the same eight-schools numbers, LCVI's decisions
through netCDF, and stanflow installable beside PyMC 6 (CI runs this file on
Python 3.11 with ArviZ 0.23 and on Python 3.13 with ArviZ 1.x)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from stanflow import arviz_compat, idata
from stanflow.lcvi import eight_schools, lcvi
from stanflow.workflows import DATA_DIR, run_workflow

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "reference" / "eight_schools_quick_summary.json"


@pytest.mark.e2e
def test_eight_schools_summary_is_the_same_on_both_lines(cmdstan, tmp_path):
    """The numbers ArviZ 0.23 gave (the reference file) from the same draws.

    Stan's draws depend only on the seed and the compiled model, so the
    summary's means are bit for bit the same and its diagnostics (R-hat, bulk
    and tail ESS) must agree to rounding."""
    summary = run_workflow("eight-schools", tmp_path, quick=True)
    reference = json.loads(REFERENCE.read_text())
    for key, expected in reference.items():
        if key.startswith("_"):
            continue
        assert summary[key] == pytest.approx(expected, rel=1e-12), key
    results = idata.load(tmp_path / "eight_schools.nc")
    assert type(results) is arviz_compat.Results
    assert {"posterior", "sample_stats", "posterior_predictive", "log_likelihood",
            "observed_data", "constant_data"} == set(arviz_compat.group_names(results))


@pytest.mark.e2e
def test_lcvi_decisions_round_trip(cmdstan, tmp_path):
    problem = eight_schools(json.loads((DATA_DIR / "eight_schools.json").read_text()))
    results = lcvi(
        problem,
        "check",
        tau=0.2,
        seed=5,
        decision_every=500,
        tol=10.0,  # settles at the first check
        max_iter=4000,
        advi_args={"iter": 2000, "output_samples": 300, "elbo_samples": 50},
        out_dir=tmp_path,
    )
    assert type(results) is arviz_compat.Results
    assert {"posterior", "sample_stats", "log_likelihood", "point_estimate",
            "decisions"} == set(arviz_compat.group_names(results))
    loaded = idata.load(idata.save(results, tmp_path / "lcvi.nc"))
    for name in arviz_compat.group_names(results):
        before, after = (arviz_compat.group(r, name) for r in (results, loaded))
        # netCDF reads a one-element attribute back as a scalar: [0.2] -> 0.2
        params = [np.ravel(r.attrs.pop("loss_params", [])) for r in (before, after)]
        np.testing.assert_array_equal(*params)
        xr.testing.assert_identical(after, before)
    decisions = loaded["decisions"]
    assert decisions["h"].dims == ("iteration", "decision")
    assert float(decisions.attrs["loss_params"]) == 0.2
    assert decisions.attrs["settled"] == 1


@pytest.mark.skipif(
    sys.version_info < (3, 12), reason="PyMC 6 needs ArviZ 1.x, hence Python >= 3.12"
)
def test_stanflow_installs_beside_pymc_6(tmp_path):
    """pip resolves stanflow and PyMC 6 into one environment (a dry run from PyPI)."""
    report = tmp_path / "report.json"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
         "--quiet", "--report", str(report), str(ROOT), "pymc>=6"],
        check=True, capture_output=True, text=True,
    )
    versions = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert versions["stanflow"]
    assert int(versions["pymc"].split(".")[0]) >= 6
    assert tuple(int(part) for part in versions["arviz"].split(".")[:2]) >= (1, 3)
