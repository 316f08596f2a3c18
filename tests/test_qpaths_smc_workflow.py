"""Workflow qpaths-smc in quick mode: summary layout, the reference log Z checks, the
paper's qualitative result (fixed 10-temperature schedule: our heuristic q beats
the geometric path), and a rerun that takes every finished piece from the folder."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from workflow_checks import kept_pieces

from stanflow.workflows import WORKFLOWS_DIR, execute


def load_workflow():
    spec = importlib.util.spec_from_file_location(
        "qpaths_smc", WORKFLOWS_DIR / "qpaths_smc.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_run_and_resume(tmp_path):
    workflow = load_workflow()
    summary = execute(workflow.run, tmp_path, True)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert (tmp_path / "qpaths_smc.png").stat().st_size > 0
    for name in ("pima", "sonar"):
        for schedule in ("fixed", "adaptive"):
            cell = summary["errors"][name][schedule]["1"]
            assert set(cell) == {"geometric", "heuristic", "joint", "best_grid"}
            assert cell["geometric"]["q"] == 1.0
            assert cell["best_grid"]["q"] in summary["q_grid"]
            for path in cell.values():
                assert path["min"] <= path["median"] <= path["max"]
        fixed = summary["errors"][name]["fixed"]["1"]
        assert fixed["heuristic"]["median"] < fixed["geometric"]["median"]
        chosen = summary["heuristics"][name]
        assert 0.99 < chosen["heuristic_q"] < 1
        # The authors' delta is log10 of the largest |log pi1/pi0| at prior draws.
        assert 3 < chosen["joint"]["delta"] < 5 and 0 < chosen["joint"]["beta_1"] < 0.1
        assert np.isclose(chosen["joint"]["q"], 1 - 10 ** -chosen["joint"]["delta"])
    # Pima: the reference and the Laplace-t importance sampler agree with the paper.
    assert abs(summary["log_z_truth"]["pima"] - (-391.494)) < 0.1
    assert abs(summary["importance_sampling"]["pima"]["log_z"] - (-391.494)) < 0.02
    # A rerun into the same folder recomputes nothing: same numbers.
    pieces = kept_pieces(tmp_path)
    # per data set: truth, heuristics; per schedule 3 grid q and q = 1, 4 paths; Pima's IS
    assert len(pieces) == 2 * (2 + 2 * (4 + 4)) + 1
    rerun = execute(workflow.run, tmp_path, True)
    assert kept_pieces(tmp_path) == pieces
    assert {k: v for k, v in rerun.items() if k != "provenance"} == {
        k: v for k, v in summary.items() if k != "provenance"
    }


def test_missing_data_is_named_before_work(tmp_path, monkeypatch):
    monkeypatch.setenv("STANFLOW_DATA_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"pima-indians-diabetes\.data"):
        load_workflow().run(tmp_path, True)
