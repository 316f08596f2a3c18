"""The own-model workflow with quick settings: its programs, keys and closed-form checks."""

from __future__ import annotations

import json
import math

import pytest

from stanflow.gibbs import LossProgram
from stanflow.workflows import list_workflows, run_workflow

KEYS = {
    "spatial_median": {"omega_star", "omega", "coverage", "coverage_se", "coverage_asymptotic",
                       "wbb_cov_ratio", "wbb_unconverged_share"},
    "power_normal": {"log_z_max_abs_error", "mean_max_abs_error", "sd_max_rel_error", "nuts"},
    "nonlinear_median": {"omega_star", "omega", "coverage", "coverage_se"},
    "safebayes": {"eta", "eta_closed_form", "risk_ratio"},
}


@pytest.mark.e2e
def test_own_model_quick(tmp_path, cmdstan):
    assert "own-model" in dict(list_workflows())
    summary = run_workflow("own-model", tmp_path, quick=True)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    for example, keys in KEYS.items():
        assert keys <= set(summary[example]), example
    # The programs are the user's files, written into OUT/stan/, and load as loss programs.
    for name, relative in summary["programs"].items():
        assert (tmp_path / relative).is_file(), name
    assert LossProgram(tmp_path / summary["programs"]["power_normal"], {
        "N": 3, "y": [0.0, 1.0, 2.0], "sigma": 1.0, "prior_mean": 0.0, "prior_sd": 1.0}).n == 3

    spatial = summary["spatial_median"]
    assert spatial["omega_star"] == pytest.approx(math.sqrt(math.pi / 2) / 2)
    assert spatial["coverage_asymptotic"]["omega_1"] == pytest.approx(0.847, abs=1e-3)
    # n = 200: the plug-in and Holmes-Walker rates within a third of omega*, the WBB
    # covariance within a third of the sandwich.
    for rule in ("plugin", "holmes_walker"):
        assert abs(spatial["omega"][rule] / spatial["omega_star"] - 1) < 1 / 3, rule
    assert 2 / 3 < spatial["wbb_cov_ratio"] < 4 / 3
    assert 0 <= spatial["wbb_unconverged_share"] < 0.01
    normal = summary["power_normal"]
    assert normal["log_z_max_error_in_se"] < 4
    assert normal["nuts"]["mean_error_in_mcse"] < 4
    assert normal["nuts"]["sd_rel_error"] < 0.1
    assert normal["sd_max_rel_error"] < 0.15
    assert summary["safebayes"]["eta"] in summary["settings"]["safebayes"]["etas"]
    assert (tmp_path / "own_model.png").is_file()
