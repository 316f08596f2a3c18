"""Stan templates -> self-contained Stan programs.

A *template* is an ordinary Stan file whose ``#include`` lines stanflow resolves
itself (see ``docs/templates.md``). :func:`render` flattens the includes into one
program; :func:`render_with_origins` also says which file and line each line of
the program came from, so that compiler errors can point at the template.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from stanflow.resources import resource_dir

PathLike = str | os.PathLike

STAN_DIR = resource_dir("stan")
"""The shipped ``stan/`` folder (the repository's, or its copy in the package):
programs, templates and slot files."""

STAN_SUFFIXES = (".stan", ".stanfunctions")

_INCLUDE = re.compile(
    r"""^\s*\#include
        (?: \s*"(?P<quoted>[^"]+)" | \s*<(?P<angled>[^>]+)> | \s+(?P<bare>[^\s"<]\S*) )
        \s*(?://.*)?$""",
    re.VERBOSE,
)
_STANC_LINE = re.compile(r"', line (\d+)")


class TemplateError(ValueError):
    """An ``#include`` or slot of a Stan template cannot be resolved."""


def list_programs() -> list[str]:
    """List the Stan programs shipped in the repository's ``stan/`` folder.

    Returns
    -------
    list of str
        Names relative to ``stan/`` without the ``.stan`` suffix, sorted,
        e.g. ``"models/eight_schools_noncentered"``. Function snippets
        (``.stanfunctions``) are not programs and are not listed.
    """
    return sorted(
        path.relative_to(STAN_DIR).with_suffix("").as_posix()
        for path in STAN_DIR.rglob("*.stan")
    )


def program_path(name: str) -> Path:
    """Return the path of a file shipped in the repository's ``stan/`` folder.

    Parameters
    ----------
    name : str
        Path relative to ``stan/``, e.g. ``"models/eight_schools_noncentered"``;
        ``.stan`` is appended when the name has no Stan suffix.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        If no such file exists; the message lists the shipped programs.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    path = STAN_DIR / name
    if path.suffix not in STAN_SUFFIXES:
        path = path.with_name(path.name + ".stan")
    if not path.is_file():
        raise ValueError(
            f"name: no Stan file {name!r} in {STAN_DIR}; "
            f"shipped programs: {', '.join(list_programs()) or 'none'}"
        )
    return path


def render(
    path: PathLike,
    *,
    include_paths: Iterable[PathLike] = (),
    slots: Mapping[str, PathLike] | None = None,
) -> str:
    """Flatten a Stan template's ``#include`` lines into one program.

    An ``#include NAME`` line (also ``#include "NAME"`` or ``#include <NAME>``)
    is replaced by the file it names, recursively. ``NAME`` is looked up in
    ``slots`` first, then in the including file's folder, then in each of
    ``include_paths``, then in the repository's ``stan/`` folder.
    Includes inside ``//`` or ``/* */`` comments are left alone.

    Parameters
    ----------
    path : str or os.PathLike
        The template (any Stan file).
    include_paths : iterable of str or os.PathLike, optional
        Extra folders to search, in order.
    slots : mapping of str to str or os.PathLike, optional
        Bindings of include names to files, e.g.
        ``{"loss.stanfunctions": "stan/losses/absolute.stanfunctions"}``.
        Every binding must be used by some ``#include`` of the template.

    Returns
    -------
    str
        The self-contained Stan program, ending in a newline.

    Raises
    ------
    TemplateError
        If a file or folder is missing, an include cannot be resolved (the
        message names the file and line), includes form a cycle, or a slot
        binding is not used.
    """
    return render_with_origins(path, include_paths=include_paths, slots=slots)[0]


def render_with_origins(
    path: PathLike,
    *,
    include_paths: Iterable[PathLike] = (),
    slots: Mapping[str, PathLike] | None = None,
) -> tuple[str, list[tuple[Path, int]]]:
    """Render like :func:`render`; also return each program line's origin.

    Returns
    -------
    code : str
        The self-contained Stan program.
    origins : list of (pathlib.Path, int)
        For line ``i + 1`` of ``code``, the file and line it came from.
    """
    return _Renderer(include_paths, slots).run(path)


class _Renderer:
    """One rendering: the search folders, the slot bindings and which were used."""

    def __init__(
        self,
        include_paths: Iterable[PathLike],
        slots: Mapping[str, PathLike] | None,
    ) -> None:
        if isinstance(include_paths, (str, os.PathLike)):
            raise TemplateError(
                "include_paths must be a sequence of folders, not one path"
            )
        self.include_paths = [Path(p).resolve() for p in include_paths]
        for folder in self.include_paths:
            if not folder.is_dir():
                raise TemplateError(f"include_paths: {folder} is not a folder")
        self.slots: dict[str, Path] = {}
        for slot, target in (slots or {}).items():
            if not isinstance(slot, str) or not slot:
                raise TemplateError(f"slots: keys must be include names, got {slot!r}")
            path = Path(target).resolve()
            if not path.is_file():
                raise TemplateError(f"slots[{slot!r}]: file not found: {path}")
            self.slots[slot] = path
        self.used: set[str] = set()
        self.seen: set[str] = set()

    def run(self, path: PathLike) -> tuple[str, list[tuple[Path, int]]]:
        """Render ``path``; return the text and, per output line, its (file, line)."""
        path = Path(path).resolve()
        if not path.is_file():
            raise TemplateError(f"path: file not found: {path}")
        lines: list[str] = []
        origins: list[tuple[Path, int]] = []
        self._expand(path, [path], lines, origins)
        unused = sorted(set(self.slots) - self.used)
        if unused:
            raise TemplateError(
                f"slots {unused} are not included by {path} or its includes; "
                f"the include names used are {sorted(self.seen)}"
            )
        return "\n".join(lines) + "\n", origins

    def _expand(
        self,
        path: Path,
        stack: list[Path],
        lines: list[str],
        origins: list[tuple[Path, int]],
    ) -> None:
        in_comment = False
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            match = None if in_comment else _INCLUDE.match(line)
            in_comment = _ends_in_block_comment(line, in_comment)
            if match is None:
                lines.append(line)
                origins.append((path, number))
                continue
            name = match.group("quoted") or match.group("angled") or match.group("bare")
            target = self._resolve(name, path, number)
            if target in stack:
                chain = " -> ".join(str(p) for p in [*stack, target])
                raise TemplateError(
                    f"{path}, line {number}: #include {name} is a cycle: {chain}"
                )
            self._expand(target, [*stack, target], lines, origins)

    def _resolve(self, name: str, path: Path, number: int) -> Path:
        self.seen.add(name)
        if name in self.slots:
            self.used.add(name)
            return self.slots[name]
        folders = [path.parent, *self.include_paths, STAN_DIR]
        for folder in folders:
            candidate = folder / name
            if candidate.is_file():
                return candidate.resolve()
        searched = ", ".join(str(f) for f in dict.fromkeys(folders))
        raise TemplateError(
            f"{path}, line {number}: cannot resolve #include {name}: not a bound slot "
            f"and not found in {searched}; bind it with slots={{{name!r}: <file>}}"
        )


def _ends_in_block_comment(line: str, in_comment: bool) -> bool:
    """Whether a ``/* */`` comment is still open at the end of ``line``."""
    i = 0
    while i < len(line):
        if in_comment:
            end = line.find("*/", i)
            if end < 0:
                return True
            in_comment, i = False, end + 2
            continue
        tokens = [
            j
            for j in (line.find("//", i), line.find("/*", i), line.find('"', i))
            if j >= 0
        ]
        if not tokens:
            return False
        j = min(tokens)
        if line.startswith("//", j):
            return False
        if line.startswith("/*", j):
            in_comment, i = True, j + 2
        else:
            close = line.find('"', j + 1)
            i = len(line) if close < 0 else close + 1
    return in_comment


def origin_note(console: str, origins: list[tuple[Path, int]]) -> str:
    """Say which template file and line a stanc error's rendered line came from."""
    match = _STANC_LINE.search(console)
    if match is None:
        return ""
    line = int(match.group(1))
    if not 1 <= line <= len(origins):
        return ""
    path, number = origins[line - 1]
    return f"\n(line {line} of the rendered program is {path}, line {number})"
