"""Workflow qpaths-smc in quick mode: summary layout, truth checks, and the paper's
qualitative result (fixed 10-temperature schedule: q-paths beat the geometric path)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from stanflow.workflows import WORKFLOWS_DIR, execute


def load_workflow():
    spec = importlib.util.spec_from_file_location(
        "qpaths_smc", WORKFLOWS_DIR / "qpaths_smc.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_run(tmp_path):
    workflow = load_workflow()
    summary = execute(workflow.run, tmp_path, True)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert (tmp_path / "qpaths_smc.png").stat().st_size > 0
    assert (tmp_path / "qpaths_smc.nc").stat().st_size > 0
    for name in ("pima", "sonar"):
        for schedule in ("fixed", "adaptive"):
            cell = summary["errors"][name][schedule]["1"]
            assert set(cell) == {"geometric", "heuristic", "best_grid"}
            assert cell["geometric"]["q"] == 1.0
            assert cell["best_grid"]["median"] <= cell["geometric"]["median"]
        fixed = summary["errors"][name]["fixed"]["1"]
        assert fixed["heuristic"]["median"] < fixed["geometric"]["median"]
        assert 0.99 < summary["heuristic_q"][name] < 1
    # Pima: the importance-sampling check reproduces the paper's log Z.
    check = summary["truth_checks"]["pima"]["importance_sampling"]
    assert abs(check["log_z"] - (-391.494)) < 0.02


def test_missing_data_is_named_before_work(tmp_path, monkeypatch):
    monkeypatch.setenv("STANFLOW_DATA_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="pima-indians-diabetes.data"):
        load_workflow().run(tmp_path, True)
