"""docs/benchmarks.md's section on the shape fix at many coefficients quotes
``bench/results/gibbs_shape_coverage.json``: every cell of its table is the committed run's.
(The benchmark runs for about 25 minutes; CI does not run it.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_docs import cells, section

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "gibbs_shape_coverage.py"
RESULT = REPO / "bench" / "results" / "gibbs_shape_coverage.json"
HEADING = "## The shape fix at many coefficients (`bench/gibbs_shape_coverage.py`)"


def test_the_script_explains_itself() -> None:
    found = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                           text=True, check=True, cwd=REPO / "bench")
    assert "--datasets" in found.stdout


def test_the_table_is_the_committed_run() -> None:
    if not RESULT.exists():
        pytest.skip(f"{RESULT.name} is not committed")
    data = json.loads(RESULT.read_text())
    text = section(HEADING)
    assert data["command"] in text
    rows = {}
    for line in text.splitlines():
        row = cells(line)
        if len(row) == 7 and row[0].isdigit():
            rows[(row[0], row[1].strip("`"))] = row[2:]
    expected = {}
    for K, record in data["results"].items():
        for adjust, s in record["summary"].items():
            expected[(K, adjust)] = [
                f"{s['mean_coverage']:.3f}", f"{s['largest_gap']:.3f}",
                " / ".join(f"{p:.2f}" for p in s["coverage"]), f"{s['seconds_median']:.1f}",
                str(s["data_sets_warned"]),
            ]
    assert rows == expected
