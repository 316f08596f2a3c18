"""The gibbs-gpc-bias workflow with quick settings (exact posteriors, no compiler), and its resume."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats
from workflow_checks import rerun_reads_back

from stanflow import idata
from stanflow.workflows import run_workflow


def test_gibbs_gpc_bias_quick(tmp_path):
    summary = run_workflow("gibbs-gpc-bias", tmp_path, quick=True)

    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    # omega* = 2 f(m) for the median of Gamma(2, 1), 1 / (2 Var) = 1/4 for the mean
    assert summary["absolute"]["omega_star"] == pytest.approx(0.6266, abs=1e-4)
    assert summary["absolute"]["truth"] == pytest.approx(1.6783, abs=1e-4)
    assert summary["squared"]["omega_star"] == 0.25
    for n in summary["sizes"]:
        for loss in ("absolute", "squared"):
            row = summary[loss][f"n{n}"]
            # every fixed point sits on its plateau of exactly 190 covering resamples
            assert row["count_at_omega_is_target"] == summary[loss]["replications"]
            assert row["quartiles_omega"][0] <= row["median_omega"] <= row["quartiles_omega"][1]
            assert 0.0 <= row["coverage_at_fixed_point"] <= 1.0
        # the mean's finite-n target from ybar ~ Gamma(2n, rate n), recomputed here by bisection
        z = stats.norm.ppf(0.975)
        ybar = stats.gamma(2 * n, scale=1 / n)
        low, high = 0.05, 5.0
        for _ in range(80):
            mid = 0.5 * (low + high)
            half = z / math.sqrt(2 * mid * n)
            low, high = (mid, high) if ybar.cdf(2 + half) - ybar.cdf(2 - half) > 0.95 else (low, mid)
        assert summary["squared"][f"n{n}"]["omega_n"] == pytest.approx(low, rel=1e-6)
        assert 0.3 < summary["absolute"][f"n{n}"]["mean_omega"] < 1.3
        assert 0.1 < summary["squared"][f"n{n}"]["mean_omega"] < 0.5
    assert summary["b_check"]["B"] == 1000

    data = idata.load(tmp_path / "gibbs_gpc_bias.nc")
    group = data.fixed_point_absolute
    assert group["omega"].dims == ("n", "replicate")
    assert np.all((group["lower"] <= group["omega"]) & (group["omega"] <= group["upper"]))
    assert (tmp_path / "gibbs_gpc_bias.png").read_bytes()[:4] == b"\x89PNG"
    assert summary["seed"] == 20240517 and summary["settings"]["b_check_replications"] == 4

    # per loss and n, per n the median's omega_n, and the B = 1000 check
    # a rerun into the same folder computes nothing: the same pieces, the same numbers
    kept = rerun_reads_back("gibbs-gpc-bias", tmp_path, summary)
    assert sorted(kept) == sorted(
        ["b_check.json", *(f"{part}/n{n}.json" for part in ("absolute", "squared", "oracle")
                           for n in summary["sizes"])])

