"""The own-model-lcvi workflow with quick settings: its programs, keys and truths."""

from __future__ import annotations

import json

import numpy as np
import pytest

from stanflow.lcvi import LcviProgram
from stanflow.workflows import list_workflows, run_workflow


@pytest.mark.e2e
def test_own_model_lcvi_quick(tmp_path, cmdstan):
    assert "own-model-lcvi" in dict(list_workflows())
    summary = run_workflow("own-model-lcvi", tmp_path, quick=True)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    conjugate, lognormal = summary["conjugate"], summary["lognormal"]
    # LCVI's decisions at the brute-force calibrated optimum (4000 ADVI iterations)
    assert conjugate["decision_max_abs_error"] < 0.1
    assert conjugate["plain_vi_sd_max_rel_error"] < 0.05  # mean-field is exact here
    assert conjugate["sd_shrinkage"] < 0.9  # the calibration shrinks q
    assert set(lognormal["risk"]) == {"vi", "lcvi", "nuts"} and lognormal["seeds"] == 2
    for values in lognormal["risk"].values():
        assert np.isfinite(values["mean"]) and values["mean"] > 0
    # numerical Bayes decisions from the program's predictive: its quantiles within MC error
    assert lognormal["bayes_decision_max_z"] < 5
    assert lognormal["bayes_decision_max_rel_error"] < 0.1
    # the programs are the user's files, written into OUT/stan/
    for relative in summary["programs"].values():
        assert (tmp_path / relative).is_file()
        assert "#include lcvi_data.stan" in (tmp_path / relative).read_text()
    assert (tmp_path / "own_model_lcvi.png").is_file()
    program = LcviProgram(tmp_path / summary["programs"]["lognormal"],
                          {"N": 1, "K": 1, "X": [[0.0]], "y": [1.0], "M": 1, "X_new": [[0.0]]},
                          n_decisions=1)
    assert program.n == 1
