"""The gibbs-path workflow with quick settings (one data set per example)."""

from __future__ import annotations

import json

import pytest
from workflow_checks import rerun_reads_back

from stanflow import idata
from stanflow.workflows import list_workflows, run_workflow

KEYS = {
    "max_cdf_error_vs_grid",
    "log_z_error_vs_grid",
    "omega_gpc_path",
    "omega_gpc_robbins_monro",
    "omega_gpc_fixed_point",
    "omega_star",
    "wall_seconds_path",
    "wall_seconds_robbins_monro",
}


@pytest.mark.e2e
def test_gibbs_path_quick(tmp_path, cmdstan):
    assert "gibbs-path" in dict(list_workflows())
    summary = run_workflow("gibbs-path", tmp_path, quick=True)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert set(summary) >= KEYS
    assert summary["omega_star"] == pytest.approx(0.6266, abs=1e-4)
    # 4000 particles: the DKW bound at failure probability 1e-3 is about 0.045.
    assert 0 < summary["max_cdf_error_vs_grid"] < 0.05
    for details in summary["median"].values():
        assert details["max_cdf_error_over_dkw"] < 1
        assert details["max_log_z_z"] < 4
        # The exact grid coverage at the path's root is 0.95 give or take the
        # Monte Carlo flips of a few resamples in 200.
        low, high = details["exact_coverage_at_path_root"]
        assert 0.93 <= low <= high <= 0.97
        assert details["converged_count_path"] == details["replications"] == 1
        assert 0.3 < details["omega_gpc_path"] < 1.5
    qr = summary["quantile_regression"]
    assert qr["converged_count_path"] == qr["replications"] == 1
    assert 0.4 < qr["omega_gpc_path"] < 1.6
    assert qr["nuts_check"]["max_abs_z_mean"] < 4 and qr["nuts_check"]["max_abs_z_quantile"] < 4
    assert (tmp_path / "gibbs_path.png").stat().st_size > 10_000
    data = idata.load(tmp_path / "gibbs_path.nc")
    assert set(data.calibration["rule"].values) == {
        "gpc_path", "gpc_robbins_monro", "gpc_fixed_point", "plugin", "holmes_walker"}
    # the schedule without the particles, and the functionals the figure draws
    assert data["path"]["omega"].dims == ("step",) and "theta" not in data["path"]
    assert data["path_functionals"]["mean"].dims == ("omega", "param")
    assert data.replications_quantreg.sizes["replicate"] == 1

    # one piece per data set; a rerun into the folder reads them back
    kept = rerun_reads_back("gibbs-path", tmp_path, summary)
    assert sorted(kept) == ["median/n100/000.json", "median/n400/000.json", "quantreg/000.json"]

