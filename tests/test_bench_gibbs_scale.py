"""docs/benchmarks.md's "GPC at scale" section quotes ``bench/results/gibbs_scale.json``: every
number of its tables and goals is the committed one. (The benchmark itself runs for about 15
minutes; CI does not run it.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RESULT = REPO / "bench" / "results" / "gibbs_scale.json"
DOC = REPO / "docs" / "benchmarks.md"
HEADING = "## GPC at scale (`bench/gibbs_scale.py`)"


def section() -> str:
    text = DOC.read_text()
    start = text.index(HEADING)
    end = text.find("\n## ", start + len(HEADING))
    return text[start:end]


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


@pytest.fixture(scope="module")
def data() -> dict:
    if not RESULT.exists():
        pytest.skip(f"{RESULT.name} is not committed")
    return json.loads(RESULT.read_text())


def test_the_cost_table_is_the_committed_run(data: dict) -> None:
    text = section()
    assert data["command"] in text
    rows = {(int(c[0]), int(c[1])): c for c in map(cells, text.splitlines())
            if len(c) == 9 and c[0].isdigit()}
    assert len(rows) == len(data["cost"])
    for record in data["cost"]:
        row, moved = rows[(record["K"], record["n"])], record["transport"]
        assert row[2:8] == [f"{moved['wall_s']:.1f}", f"{moved['omega']:.3f}",
                            f"{moved['omega_se']:.3f}", str(moved["evaluations"]),
                            f"{moved['ess_min_at_root']:.0f}", f"{moved['ess_median_at_root']:.0f}"]
        reweighted = record.get("reweight")
        assert row[8] == ("n/a" if reweighted is None else
                          f"{reweighted['ess_min_at_root']:.0f} / {reweighted['ess_median_at_root']:.0f}")


def test_the_nuts_table_and_the_goals_are_the_committed_run(data: dict) -> None:
    text = section()
    rows = [c for c in map(cells, text.splitlines()) if len(c) == 7 and c[0].isdigit()]
    assert len(rows) == len(data["against_resample_design"])
    for row, record in zip(rows, data["against_resample_design"], strict=True):
        assert row == [str(record["K"]), str(record["n"]), f"{record['root']:.3f}",
                       f"{record['nuts_root']:.3f}",
                       " / ".join(map(str, record["counts_moved"])),
                       " / ".join(map(str, record["counts_nuts"])),
                       f"{record['nuts_seconds_per_run']:.2f}"]
    goal = data["goal"]
    assert f"{goal['wall_s']:.1f} s for the whole calibration" in text
    assert f"{goal['wall_ratio_resample_over_moved']:.0f} times the moved design's" in text
    assert f"(smallest {goal['ess_min_over_evaluations']:.0f})" in text
    summary = DOC.read_text().split(HEADING)[0]
    assert f"| {goal['wall_s']:.1f} s, ESS >=" in summary
