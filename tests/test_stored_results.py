"""Results blocks rendered from stored summaries (stanflow.stored_results), on made-up runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stanflow import cli
from stanflow.stored_results import (
    ResultsError,
    blocks,
    load_summary,
    lookup,
    render,
    render_file,
    render_template,
    stale_blocks,
)

PROVENANCE = {
    "workflow": "toy",
    "quick": False,
    "seed": 7,
    "source": {"version": "0.1.0", "commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False},
}
SUMMARY = {
    "omega": 0.68313394,
    "interval": [0.945, 0.96],
    "by_omega": {"0.25": {"ess": 3999.9}},
    "counts": {"path": 20, "rm": 7},
    "missing": None,
    "provenance": PROVENANCE,
}
DOC = """# Toy

Intro omega = <!-- results toy: {omega:.3f} -->0.683<!-- /results --> here.

<!-- results toy:
| omega | interval | ess at 0.25 | converged |
| --- | --- | --- | --- |
| {omega:.4f} | {interval.0:.3f}-{interval.1:.3f} | {by_omega.0.25.ess:.0f} | {counts.path} / {counts.rm} |
-->
| omega | interval | ess at 0.25 | converged |
| --- | --- | --- | --- |
| 0.6831 | 0.945-0.960 | 4000 | 20 / 7 |
<!-- /results -->
"""


@pytest.fixture
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    (folder / "toy").mkdir(parents=True)
    (folder / "toy" / "summary.json").write_text(json.dumps(SUMMARY))
    return folder


def test_lookup_follows_keys_indices_and_dotted_keys():
    assert lookup(SUMMARY, "interval.1") == 0.96
    assert lookup(SUMMARY, "by_omega.0.25.ess") == 3999.9
    assert lookup(SUMMARY, "provenance.source.commit").startswith("0123")
    with pytest.raises(ResultsError, match=r"no key 'pth' in counts \(keys: path, rm\)"):
        lookup(SUMMARY, "counts.pth")
    with pytest.raises(ResultsError, match="interval is a list of 2, not indexed by '2'"):
        lookup(SUMMARY, "interval.2")
    # a key that is a prefix of another dotted key: the path that resolves wins
    paths = {"q=0": {"mean": [1.0]}, "q=0.5": {"mean": [2.0]}}
    assert lookup({"paths": paths}, "paths.q=0.5.mean.0") == 2.0
    assert lookup({"paths": paths}, "paths.q=0.mean.0") == 1.0


def test_template_formats_each_value_at_its_precision():
    assert render_template("{omega:.2f} ({counts.path:d} of {counts.rm})", SUMMARY) == "0.68 (20 of 7)"
    assert render_template("{{literal}} {omega:.1%}", SUMMARY) == "{literal} 68.3%"
    with pytest.raises(ResultsError, match=r"None cannot be formatted with '\.3f'"):
        render_template("{missing:.3f}", SUMMARY)


def test_a_document_that_agrees_is_left_as_it_is(results):
    assert stale_blocks(DOC, results) == []
    assert render(DOC, results) == DOC
    assert [(b.workflow, b.line) for b in blocks(DOC)] == [("toy", 3), ("toy", 9)]


def test_a_changed_number_is_found_and_rendered_back(results):
    drifted = DOC.replace("| 0.6831 |", "| 0.6832 |").replace("-->0.683<", "-->0.68<")

    stale = stale_blocks(drifted, results)

    assert stale == [
        "line 3 (toy): shows '0.68', stored '0.683'",
        (
            "line 12 (toy): shows '| 0.6832 | 0.945-0.960 | 4000 | 20 / 7 |', "
            "stored '| 0.6831 | 0.945-0.960 | 4000 | 20 / 7 |'"
        ),
    ]
    assert render(drifted, results) == DOC


def test_render_file_rewrites_only_the_renderings(results, tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(DOC.replace("20 / 7", "19 / 7"))

    assert render_file(doc, results) == 1
    assert doc.read_text() == DOC
    assert render_file(doc, results) == 0


def test_incomplete_blocks_are_errors_with_their_line(results):
    with pytest.raises(ResultsError, match=r"line 2: '<!-- results toy:' is not part of a complete block"):
        blocks("text\n<!-- results toy: {omega} -->0.68\nmore\n")
    with pytest.raises(ResultsError, match=r"line 1: '<!-- /results -->' is not part"):
        blocks("0.68<!-- /results -->")
    # An unclosed block never swallows the next one.
    text = "<!-- results toy: {omega} -->x\n<!-- results toy: {omega} -->y<!-- /results -->"
    with pytest.raises(ResultsError, match="line 1"):
        render(text, results)


def test_missing_keys_name_the_line_and_key(results):
    with pytest.raises(ResultsError, match=r"line 2 \(toy\): 'omgea': no key 'omgea'"):
        render("x\n<!-- results toy: {omgea:.3f} -->?<!-- /results -->", results)


def test_only_stored_full_runs_render(results):
    path = results / "toy" / "summary.json"
    assert load_summary(results, "toy")["omega"] == SUMMARY["omega"]
    for change, message in [
        ({"quick": True}, "not a full run"),
        ({"seed": None}, "no seed"),
        ({"workflow": "other"}, "names workflow 'other', not 'toy'"),
        ({"source": {"commit": None}}, "no git commit"),
    ]:
        path.write_text(json.dumps({**SUMMARY, "provenance": {**PROVENANCE, **change}}))
        with pytest.raises(ResultsError, match=message):
            load_summary(results, "toy")
    path.write_text(json.dumps({"omega": 1.0}))
    with pytest.raises(ResultsError, match="no 'provenance' block"):
        load_summary(results, "toy")
    with pytest.raises(ResultsError, match=r"absent/summary.json does not exist: run `stanflow run absent"):
        load_summary(results, "absent")


def test_cli_check_and_render(results, tmp_path, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text(DOC.replace("0.6831", "0.7"))
    args = [str(doc), "--results", str(results)]

    assert cli.main(["results", "check", *args]) == 1
    assert "  line 12 (toy): shows '| 0.7 |" in capsys.readouterr().out
    assert doc.read_text() != DOC
    assert cli.main(["results", "render", *args]) == 0
    assert capsys.readouterr().out == f"{doc}: 1 block(s) re-rendered\n"
    assert cli.main(["results", "check", *args]) == 0
    assert doc.read_text() == DOC
    assert cli.main(["results", "check", str(doc), "--results", str(tmp_path)]) == 1
    assert "toy/summary.json does not exist" in capsys.readouterr().err
