"""The docs agree with the stored full runs in results/, and those runs are stored properly.

Every results block of README.md and docs/*.md (``<!-- results WORKFLOW: ... -->``)
must show exactly what its template gives on ``results/<workflow>/summary.json``;
fix a failure with ``stanflow results render README.md docs/*.md`` after a new
full run, never by editing numbers (docs/results.md).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from stanflow.stored_results import provenance_problems, stale_blocks
from stanflow.workflows import list_workflows

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
STORED = sorted(path.parent for path in RESULTS.glob("*/summary.json"))
SUMMARY_LIMIT = 64_000
FILE_LIMIT = 1_000_000


@pytest.mark.parametrize("doc", DOCS, ids=[p.relative_to(ROOT).as_posix() for p in DOCS])
def test_results_blocks_match_the_stored_runs(doc):
    stale = stale_blocks(doc.read_text(), RESULTS)
    assert not stale, f"{doc.name}: re-render with `stanflow results render`:\n" + "\n".join(stale)


def test_stored_workflows_quoted():
    # The mechanism is in use: the main workflow and the learning-rate path are stored.
    assert {"eight-schools", "gibbs-path"} <= {folder.name for folder in STORED}


@pytest.mark.parametrize("folder", STORED, ids=[p.name for p in STORED])
def test_stored_run_is_a_full_run_with_provenance(folder):
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text())
    assert provenance_problems(summary, folder.name) == []
    assert folder.name in dict(list_workflows())
    assert summary_path.stat().st_size < SUMMARY_LIMIT


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout"
)
@pytest.mark.parametrize("folder", STORED, ids=[p.name for p in STORED])
def test_stored_files_that_git_sees_are_small(folder):
    files = [path for path in folder.rglob("*") if path.is_file()]
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--stdin"],
        input="\n".join(str(path) for path in files), capture_output=True, text=True,
        check=False,  # exit status 1: nothing ignored
    ).stdout.split()
    kept = [path for path in files if str(path) not in ignored]
    assert folder / "summary.json" in kept
    assert [path.name for path in kept if path.suffix == ".nc"] == []
    assert [path.name for path in kept if path.stat().st_size > FILE_LIMIT] == []
