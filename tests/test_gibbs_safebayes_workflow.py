"""The gibbs-safebayes workflow with quick settings (closed-form posteriors, no compiler)."""

from __future__ import annotations

import json

import numpy as np
from workflow_checks import rerun_reads_back

from stanflow import idata
from stanflow.gibbs.safebayes import default_etas
from stanflow.workflows import run_workflow


def test_gibbs_safebayes_quick(tmp_path):
    summary = run_workflow("gibbs-safebayes", tmp_path, quick=True)

    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    etas = default_etas()
    for model in ("wrong_model", "correct_model"):
        for prior in ("uniform", "decreasing"):
            for n in summary["sizes"]:
                row = summary[model][prior][f"n{n}"]
                floor = row["risk_floor"]
                assert floor == (1 / 80 if model == "wrong_model" else 1 / 40)
                assert all(min(etas) <= e <= 1 for e in row["eta_median"].values())
                # beta* minimises the square risk; the oracle is the best rate of the grid
                for fit, risk in row["risk"].items():
                    assert risk >= floor, (model, prior, n, fit)
                    assert row["risk"]["oracle"] <= risk + 1e-15
    data = idata.load(tmp_path / "gibbs_safebayes.nc")
    risk = data.wrong_model["risk"]
    assert risk.dims == ("prior", "replicate", "n", "fit")
    assert np.all(risk.sel(fit="oracle") <= risk.sel(fit="bayes") + 1e-15)
    assert (tmp_path / "gibbs_safebayes.png").read_bytes()[:4] == b"\x89PNG"

    # one piece per data set; a rerun into the folder reads them back
    kept = rerun_reads_back("gibbs-safebayes", tmp_path, summary)
    assert len(kept) == sum(summary["replications"].values()) == 6

