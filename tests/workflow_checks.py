"""The check every workflow test shares: a rerun into the same folder computes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stanflow.workflows import run_workflow


def kept_pieces(out: Path) -> dict[str, str]:
    """The text of every kept cell under ``out/runs``, by path relative to it."""
    runs = Path(out) / "runs"
    return {path.relative_to(runs).as_posix(): path.read_text() for path in runs.rglob("*.json")}


def rerun_reads_back(name: str, out: Path, summary: dict[str, Any]) -> dict[str, str]:
    """Run workflow ``name`` (quick) into ``out`` again and check that it recomputed nothing.

    The kept cells must be byte for byte the same and the summary the same but its
    ``provenance``. Returns the kept cells, for the test's own checks of their names.
    """
    before = kept_pieces(out)
    again = run_workflow(name, out, quick=True)
    assert kept_pieces(out) == before
    assert {k: v for k, v in again.items() if k != "provenance"} == {
        k: v for k, v in summary.items() if k != "provenance"}
    return before
