"""The eight-schools workflow end to end (quick settings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stanflow import idata
from stanflow.workflows import run_workflow

pytestmark = pytest.mark.e2e


def test_eight_schools_quick(cmdstan, tmp_path):
    summary = run_workflow("eight-schools", tmp_path, quick=True)

    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    for key in ("mu_mean", "tau_mean", "max_rhat", "min_ess_bulk", "divergences"):
        assert key in summary
    # Against the long reference run (tests/reference/eight_schools.json): the
    # Monte Carlo error of a mean is at most sd / sqrt(min bulk ESS).
    reference = json.loads(
        (Path(__file__).parent / "reference" / "eight_schools.json").read_text()
    )["parameters"]
    for name in ("mu", "tau"):
        error = summary[f"{name}_mean"] - reference[name]["mean"]
        assert abs(error) < 4 * reference[name]["sd"] / summary["min_ess_bulk"] ** 0.5
    assert summary["max_rhat"] < 1.1
    assert summary["min_ess_bulk"] > 100
    assert summary["divergences"] < 20
    assert summary["chains"] == 4 and summary["draws_per_chain"] == 200

    data = idata.load(tmp_path / "eight_schools.nc")
    assert data.posterior["school"].values[0] == "Choate"
    assert data.posterior["theta"].dims == ("chain", "draw", "school")
    assert "y_rep" in data.posterior_predictive and "log_lik" in data.log_likelihood
    for figure in ("forest_theta.png", "pair_theta_tilde_log_tau.png"):
        assert (tmp_path / figure).read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "stansummary.csv").is_file()
    assert (tmp_path / "diagnose.txt").is_file()
