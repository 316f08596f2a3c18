"""Stored results: numbers in the docs rendered from ``results/<workflow>/summary.json``.

A full run of a workflow writes its ``summary.json`` (with the runner's
``provenance`` block) into ``results/<workflow>/``, where it is committed. A
doc quotes it through a *results block*: an HTML comment holding a template
followed by the template's rendering, which Markdown shows and the comment
hides::

    <!-- results gibbs-path:
    | GPC on the path | {median.n100.omega_gpc_path:.3f} |
    -->
    | GPC on the path | 0.739 |
    <!-- /results -->

or inline: ``omega* = <!-- results gibbs-path: {omega_star:.4f} -->0.6266<!-- /results -->``.
A template is a :meth:`str.format` string whose fields are dotted paths into
the stored summary (mapping keys, list indices; a key that itself holds dots
matches the joined parts) with a format spec for the precision. The
rendering is the trimmed template formatted (:func:`render_block`).
:func:`render_file` (``stanflow results render``) rewrites the renderings;
:func:`stale_blocks` lists those that differ from their stored values. See
``docs/results.md``.
"""

from __future__ import annotations

import itertools
import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stanflow.workflows import write_text

BLOCK = re.compile(
    r"<!-- results (?P<workflow>[a-z0-9][a-z0-9-]*):(?P<template>(?:(?!-->).)*)-->"
    r"(?P<rendered>(?:(?!<!-- /?results[ :]).)*?)<!-- /results -->",
    re.DOTALL,
)
"""A results block: its workflow, template and current rendering."""
MARKER = re.compile(r"<!-- results [a-z0-9][a-z0-9-]*:|<!-- /results -->")
"""An opening or closing marker (left over outside blocks, it is an error)."""


class ResultsError(ValueError):
    """A results block or stored summary that cannot be rendered; the message says where."""


@dataclass(frozen=True)
class Block:
    """One results block of a document.

    Attributes
    ----------
    workflow : str
        Whose stored summary the template reads, e.g. ``"gibbs-path"``.
    template : str
        The format string (between ``<workflow>:`` and ``-->``).
    rendered : str
        The text now between ``-->`` and ``<!-- /results -->``.
    line : int
        The line where ``rendered`` starts (1-based; the ``-->`` line).
    """

    workflow: str
    template: str
    rendered: str
    line: int


def blocks(text: str) -> list[Block]:
    """The results blocks of a document, in order.

    Raises
    ------
    ResultsError
        If a marker opens no complete block or closes none; the message
        gives its line.
    """
    found = []
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("rendered")) + 1
        found.append(Block(match["workflow"], match["template"], match["rendered"], line))
    leftover = MARKER.search(BLOCK.sub(lambda m: " " * len(m[0]), text))
    if leftover:
        line = text.count("\n", 0, leftover.start()) + 1
        raise ResultsError(
            f"line {line}: {leftover[0]!r} is not part of a complete block "
            "'<!-- results WORKFLOW: TEMPLATE -->RENDERED<!-- /results -->'"
        )
    return found


def load_summary(results_dir: Path, workflow: str) -> dict[str, Any]:
    """The stored summary of ``workflow``, checked to be a stored full run.

    Parameters
    ----------
    results_dir : pathlib.Path
        The folder holding one folder per workflow (the repository's ``results/``).
    workflow : str

    Raises
    ------
    ResultsError
        If ``results_dir/<workflow>/summary.json`` is missing, or fails
        :func:`provenance_problems`.
    """
    path = Path(results_dir) / workflow / "summary.json"
    if not path.is_file():
        raise ResultsError(
            f"{path} does not exist: run `stanflow run {workflow} --out {path.parent}` in full"
        )
    try:
        summary = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ResultsError(f"{path} is not JSON: {error}") from None
    problems = provenance_problems(summary, workflow)
    if problems:
        raise ResultsError(f"{path}: " + "; ".join(problems))
    return summary


def provenance_problems(summary: Mapping[str, Any], workflow: str) -> list[str]:
    """Why a summary is not a stored full run of ``workflow`` (empty if it is).

    A stored run has the runner's ``provenance`` for this workflow, was not
    ``--quick``, names a seed and comes from a git checkout (a 40-digit
    ``source.commit``; dirty checkouts are allowed and flagged there).
    """
    record = summary.get("provenance")
    if not isinstance(record, Mapping):
        return ["no 'provenance' block (write it with `stanflow run`, not by hand)"]
    problems = []
    if record.get("workflow") != workflow:
        problems.append(f"provenance names workflow {record.get('workflow')!r}, not {workflow!r}")
    if record.get("quick") is not False:
        problems.append("not a full run (provenance.quick is not false)")
    if record.get("seed") is None:
        problems.append("no seed (the summary's 'seed' key)")
    commit = (record.get("source") or {}).get("commit")
    if not (isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit)):
        problems.append("no git commit (run from a checkout)")
    return problems


def lookup(summary: Mapping[str, Any], path: str) -> Any:
    """The value at dotted ``path`` in ``summary``, e.g. ``"median.n100.omega_gpc_path"``.

    A part indexes a list when the value there is a list (``interval.0``); a
    mapping key containing dots matches a run of parts equal to it
    (``by_omega.0.25.path_ess``): the shortest run with which the rest of the
    path resolves (so ``paths.q=0.5.mean`` finds the key ``q=0.5`` beside
    ``q=0``).

    Raises
    ------
    ResultsError
        If the path leads nowhere; the message names the missing part and the
        keys available there.
    """
    found = _lookup(summary, path.split("."), 0, path)
    if isinstance(found, ResultsError):
        raise found
    return found


def _lookup(value: Any, parts: list[str], i: int, path: str) -> Any:
    """:func:`lookup` from ``parts[i]`` on; a :class:`ResultsError` (returned) if it fails."""
    if i == len(parts):
        return value
    where = ".".join(parts[:i]) or "the summary"
    if isinstance(value, Mapping):
        keys = [".".join(parts[i:j]) for j in range(i + 1, len(parts) + 1)]
        first_error = None
        for key in (k for k in keys if k in value):
            found = _lookup(value[key], parts, i + key.count(".") + 1, path)
            if not isinstance(found, ResultsError):
                return found
            first_error = first_error or found
        return first_error or ResultsError(
            f"{path!r}: no key {parts[i]!r} in {where} (keys: {', '.join(map(str, value))})"
        )
    if isinstance(value, Sequence) and not isinstance(value, str):
        if not (parts[i].isdigit() and int(parts[i]) < len(value)):
            return ResultsError(
                f"{path!r}: {where} is a list of {len(value)}, not indexed by {parts[i]!r}"
            )
        return _lookup(value[int(parts[i])], parts, i + 1, path)
    return ResultsError(f"{path!r}: {where} is a {type(value).__name__}, not a mapping or list")


class _SummaryFormatter(string.Formatter):
    """:meth:`str.format` whose fields are dotted paths into one summary."""

    def __init__(self, summary: Mapping[str, Any]) -> None:
        self.summary = summary

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> tuple[Any, str]:
        return lookup(self.summary, field_name), field_name

    def format_field(self, value: Any, format_spec: str) -> str:
        try:
            return format(value, format_spec)
        except (TypeError, ValueError) as error:
            raise ResultsError(f"{value!r} cannot be formatted with {format_spec!r}: {error}") from None


def render_block(template: str, summary: Mapping[str, Any]) -> str:
    """The rendering of a block: its template trimmed and formatted.

    A block whose template starts on a new line (``<!-- results NAME:`` ends
    its line) renders as lines of their own, between the ``-->`` line and the
    closing marker; otherwise inline, without surrounding spaces.
    """
    rendered = render_template(template.strip(), summary)
    return f"\n{rendered}\n" if template.lstrip(" \t").startswith("\n") else rendered


def render_template(template: str, summary: Mapping[str, Any]) -> str:
    """The template with every field replaced by its formatted stored value.

    Raises
    ------
    ResultsError
        If a field is missing from the summary, or its value does not take
        the format spec (a ``null`` stored for NaN under ``.3f``, say).
    """
    try:
        return _SummaryFormatter(summary).vformat(template, (), {})
    except ResultsError:
        raise
    except (IndexError, KeyError, ValueError) as error:
        raise ResultsError(f"bad template {template.strip()!r}: {error}") from None


def render(text: str, results_dir: Path) -> str:
    """The document with every results block re-rendered from its stored summary.

    Raises
    ------
    ResultsError
        As :func:`blocks`, :func:`load_summary` and :func:`render_template`;
        the message gives the block's line.
    """
    summaries: dict[str, dict[str, Any]] = {}

    def rerender(match: re.Match[str]) -> str:
        workflow = match["workflow"]
        try:
            if workflow not in summaries:
                summaries[workflow] = load_summary(results_dir, workflow)
            rendered = render_block(match["template"], summaries[workflow])
        except ResultsError as error:
            line = text.count("\n", 0, match.start()) + 1
            raise ResultsError(f"line {line} ({workflow}): {error}") from None
        return match[0][: match.start("rendered") - match.start()] + rendered + "<!-- /results -->"

    blocks(text)
    return BLOCK.sub(rerender, text)


def stale_blocks(text: str, results_dir: Path) -> list[str]:
    """Lines of results blocks that differ from their stored values, one message each.

    Returns
    -------
    list of str
        ``"line N (workflow): shows '...', stored '...'"`` per differing line
        of a rendering (N: the document's line); empty when the document
        agrees with its stored results.
    """
    fresh = blocks(render(text, results_dir))
    return [
        f"line {old.line + i} ({old.workflow}): shows {shown!r}, stored {stored!r}"
        for old, new in zip(blocks(text), fresh, strict=True)
        for i, (shown, stored) in enumerate(
            itertools.zip_longest(old.rendered.split("\n"), new.rendered.split("\n"), fillvalue="")
        )
        if shown != stored
    ]


def render_file(path: Path, results_dir: Path) -> int:
    """Re-render the results blocks of a document in place (atomically, only if changed).

    Returns
    -------
    int
        How many blocks changed.

    Raises
    ------
    ResultsError
        As :func:`render`, with the document's path in front.
    """
    path = Path(path)
    text = path.read_text()
    try:
        fresh = render(text, results_dir)
    except ResultsError as error:
        raise ResultsError(f"{path}: {error}") from None
    if fresh != text:
        write_text(path, fresh)
    pairs = zip(blocks(text), blocks(fresh), strict=True)
    return sum(old.rendered != new.rendered for old, new in pairs)
