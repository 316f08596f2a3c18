"""The workflow registry and its helpers, with stand-in scripts (no compiler)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from unittest.mock import ANY

import numpy as np
import pytest

from stanflow import provenance, workflows

ROOT = Path(__file__).resolve().parent.parent

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

    assert summary.pop("provenance")["workflow"] == "fake-experiment"
    assert summary == {
        "quick": True,
        "mean": 1.5,
        "n": 3,
        "bad": None,
        "vector": [0, 1, 2],
        "where": str(out),
    }
    assert json.loads((out / "summary.json").read_text()) == {**summary, "provenance": ANY}
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


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True).stdout


def test_summary_records_the_runs_provenance(tmp_path):
    def run(out, quick):
        time.sleep(0.2)
        return {"seed": [3, 4], "value": 1.0}

    before = datetime.now(UTC).replace(microsecond=0)
    summary = workflows.execute(run, tmp_path / "out", True)
    record = summary["provenance"]

    assert record["workflow"] == "test-workflows"  # this file's name, as for a script
    assert record["command"] == f"stanflow run test-workflows --quick --out {tmp_path / 'out'}"
    assert record["argv"][0] == sys.executable
    assert record["quick"] is True and record["seed"] == [3, 4]
    assert before <= datetime.fromisoformat(record["started"]) <= datetime.now(UTC)
    assert 0.2 <= record["wall_seconds"] < 60
    machine = record["machine"]
    assert machine["cpu_count"] == os.cpu_count() and machine["python"] == sys.version.split()[0]
    assert machine["packages"]["numpy"] == np.__version__
    if (ROOT / ".git").exists():
        source = record["source"]
        assert source["commit"] == _git("rev-parse", "HEAD").strip()
        assert source["dirty"] == bool(_git("status", "--porcelain").strip())


def test_provenance_is_the_runners_key(tmp_path):
    with pytest.raises(ValueError, match="'provenance' is the runner's"):
        workflows.execute(lambda out, quick: {"provenance": 1}, tmp_path, False)
    assert not (tmp_path / "summary.json").exists()


@pytest.mark.parametrize("inside_checkout", [False, True])
def test_an_installed_stanflow_records_its_version_not_a_commit(tmp_path, monkeypatch, inside_checkout):
    import stanflow

    if inside_checkout:  # a wheel in a venv inside some git checkout is not that checkout
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    package = tmp_path / ".venv" / "site-packages" / "stanflow"
    package.mkdir(parents=True)
    monkeypatch.setattr(stanflow, "__file__", str(package / "__init__.py"))

    assert provenance.source_state() == {
        "version": stanflow.__version__, "commit": None, "dirty": None, "dirty_paths": None,
    }


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


def test_seed_spread_is_the_mean_and_sample_sd():
    spread = workflows.seed_spread(np.array([1.0, 2.0, 4.0]))
    assert spread == {"mean": pytest.approx(7 / 3), "sd": pytest.approx(np.std([1, 2, 4], ddof=1)),
                      "per_seed": [1.0, 2.0, 4.0]}
    assert workflows.seed_spread([0.5]) == {"mean": 0.5, "sd": 0.0, "per_seed": [0.5]}
