"""Reading docs/benchmarks.md for the tests that tie its numbers to bench/results."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def section(heading: str) -> str:
    """The text of the docs/benchmarks.md section under ``heading``, up to the next heading
    of its level or above."""
    text = DOC.read_text()
    start = text.index(heading)
    level = heading.split(" ", 1)[0]
    ends = [i for i in (text.find(f"\n{'#' * depth} ", start + len(heading))
                        for depth in range(1, len(level) + 1)) if i >= 0]
    return text[start:min(ends)] if ends else text[start:]


def cells(line: str) -> list[str]:
    """The cells of a markdown table row."""
    return [c.strip() for c in line.strip().strip("|").split("|")]
