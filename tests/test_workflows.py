"""The workflow registry and its helpers, with stand-in scripts (no compiler)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stanflow import workflows

FAKE = '''
"""A stand-in workflow."""
import sys
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from stanflow.workflows import main, save_figure

DESCRIPTION = "Fake experiment for the tests"


def run(out: Path, quick: bool) -> dict:
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    save_figure(fig, out / "line.png")
    return {
        "quick": quick,
        "mean": np.float64(1.5),
        "n": np.int64(3),
        "bad": float("nan"),
        "vector": np.arange(3),
        "where": out,
    }


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
'''


@pytest.fixture
def scripts(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "fake_experiment.py").write_text(FAKE)
    (folder / "other.py").write_text(
        'DESCRIPTION: str = "Another one"\n\ndef run(out, quick):\n    return {}\n'
    )
    (folder / "_helpers.py").write_text("X = 1\n")
    monkeypatch.setattr(workflows, "WORKFLOWS_DIR", folder)
    return folder


def test_list_workflows_reads_descriptions_without_running(scripts):
    (scripts / "other.py").write_text(
        'DESCRIPTION = "Another one"\nraise SystemExit("ran")\n'
    )

    assert workflows.list_workflows() == [
        ("fake-experiment", "Fake experiment for the tests"),
        ("other", "Another one"),
    ]


def test_list_workflows_requires_a_description(scripts):
    (scripts / "broken.py").write_text("def run(out, quick):\n    return {}\n")

    with pytest.raises(
        ValueError, match=r"broken\.py: a workflow must define DESCRIPTION"
    ):
        workflows.list_workflows()


def test_shipped_workflows_are_listed():
    names = dict(workflows.list_workflows())
    assert "eight-schools" in names
    assert "Eight schools" in names["eight-schools"]


def test_run_workflow_writes_summary_and_figures(scripts, tmp_path):
    out = tmp_path / "runs" / "fake"

    summary = workflows.run_workflow("fake-experiment", out, quick=True)

    assert summary == {
        "quick": True,
        "mean": 1.5,
        "n": 3,
        "bad": None,
        "vector": [0, 1, 2],
        "where": str(out),
    }
    assert json.loads((out / "summary.json").read_text()) == summary
    assert (out / "line.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.iterdir()) == ["line.png", "summary.json"]


def test_run_workflow_unknown_name_lists_valid_ones(scripts, tmp_path):
    with pytest.raises(
        ValueError,
        match="unknown workflow 'nope'; valid workflows: fake-experiment, other",
    ):
        workflows.run_workflow("nope", tmp_path)
    assert not (tmp_path / "summary.json").exists()


def test_run_must_return_a_dict(tmp_path):
    with pytest.raises(TypeError, match="run must return a dict summary, got list"):
        workflows.execute(lambda out, quick: [1], tmp_path, False)


def test_script_runs_standalone(scripts, tmp_path):
    out = tmp_path / "standalone"
    # The script imports stanflow: make the source tree importable, installed or not.
    path = os.pathsep.join(
        filter(None, [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH")])
    )
    result = subprocess.run(
        [sys.executable, str(scripts / "fake_experiment.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert json.loads(result.stdout)["quick"] is False
    assert json.loads((out / "summary.json").read_text())["mean"] == 1.5


def test_write_summary_is_strict_json(tmp_path):
    path = workflows.write_summary(
        tmp_path, {"a": math.inf, "b": {"c": np.float32(0.5)}, "d": (1, 2)}
    )
    assert json.loads(path.read_text()) == {"a": None, "b": {"c": 0.5}, "d": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]
    with pytest.raises(TypeError, match=r"summary\['b'\]\['x'\] is a object"):
        workflows.write_summary(tmp_path, {"b": {"x": object()}})


def test_save_figure_requires_png(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure()
    with pytest.raises(ValueError, match=r"path must end in \.png"):
        workflows.save_figure(fig, tmp_path / "x.pdf")
    assert not plt.fignum_exists(fig.number)
