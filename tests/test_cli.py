"""The ``stanflow`` command line, with the toolchain and workflows faked."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from stanflow import cli


@pytest.fixture
def workflows(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Install a fake ``stanflow.workflows``; returns the run_workflow calls."""
    calls: list[tuple] = []

    def run_workflow(name: str, out: Path, quick: bool) -> dict:
        calls.append((name, out, quick))
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text("{}")
        (out / "figures").mkdir()
        (out / "figures" / "shrinkage.png").write_bytes(b"")
        return {"summary": str(out / "summary.json")}

    fake = types.ModuleType("stanflow.workflows")
    fake.list_workflows = lambda: [
        ("eight-schools", "Hierarchical model of the eight schools"),
        ("lcvi-lastfm", "Loss-calibrated VI on Last.fm counts"),
    ]
    fake.run_workflow = run_workflow
    monkeypatch.setitem(sys.modules, "stanflow.workflows", fake)
    return calls


def test_list(workflows, capsys) -> None:
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("eight-schools") and out[0].endswith("eight schools")
    assert len(out) == 2


def test_run_default_output_directory(workflows, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "eight-schools", "--quick"]) == 0
    assert workflows == [("eight-schools", Path("runs/eight-schools"), True)]
    out = capsys.readouterr().out
    assert "summary: runs/eight-schools/summary.json" in out
    assert "figure:  runs/eight-schools/figures/shrinkage.png" in out


def test_run_with_out(workflows, tmp_path) -> None:
    assert cli.main(["run", "lcvi-lastfm", "--out", str(tmp_path / "x")]) == 0
    assert workflows == [("lcvi-lastfm", tmp_path / "x", False)]


def test_run_unknown_workflow_lists_names(workflows, capsys) -> None:
    assert cli.main(["run", "nine-schools"]) == 2
    err = capsys.readouterr().err
    assert "'nine-schools'" in err and "eight-schools, lcvi-lastfm" in err
    assert workflows == []


def test_missing_subcommand_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(["toolchain"])
    assert caught.value.code == 2


def test_toolchain_path_prints_only_the_path(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setattr(cli, "ensure", lambda: tmp_path)
    assert cli.main(["toolchain", "path"]) == 0
    assert capsys.readouterr().out == f"{tmp_path}\n"


def test_toolchain_install_passes_flags(monkeypatch, capsys, tmp_path) -> None:
    calls = []
    monkeypatch.setattr(
        cli, "install", lambda progress, force: calls.append((progress, force)) or tmp_path
    )
    assert cli.main(["toolchain", "install", "--force", "--quiet"]) == 0
    assert calls == [(False, True)]
    assert capsys.readouterr().out == f"{tmp_path}\n"


def test_toolchain_info_json(monkeypatch, capsys) -> None:
    facts = {"path": "/x", "kind": "stanflow", "installed": False, "marker": None}
    monkeypatch.setattr(cli, "info", lambda: facts)
    assert cli.main(["toolchain", "info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == facts
    assert cli.main(["toolchain", "info"]) == 0
    assert "kind: stanflow" in capsys.readouterr().out.splitlines()


def test_invalid_cmdstan_is_reported_not_raised(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setenv("CMDSTAN", str(tmp_path / "absent"))
    assert cli.main(["toolchain", "info"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stanflow: error: $CMDSTAN=") and "is not a directory" in err


def test_an_output_folder_that_cannot_be_created_is_one_line(workflows, capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["run", "eight-schools", "--out", str(blocker / "out")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"stanflow run: --out {blocker / 'out'}: cannot create")
    assert len(err.splitlines()) == 1
    assert workflows == []
