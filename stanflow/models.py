"""Stan templates -> Stan programs -> compiled models in a content-addressed cache.

A *template* is an ordinary Stan file whose ``#include`` lines stanflow resolves
itself (see ``docs/templates.md``). :func:`render` flattens the includes into one
self-contained program; :func:`compile_model` hashes that program together with
the toolchain identity and the compiler flags, and compiles it at most once into
``$STANFLOW_HOME/models/<key>/``.
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import cmdstanpy

from stanflow import toolchain
from stanflow.toolchain.layout import stanflow_home

PathLike = str | os.PathLike

STAN_DIR = Path(__file__).resolve().parent.parent / "stan"
"""The repository's ``stan/`` folder: shipped programs, templates and snippets."""

DEFAULT_CPP_OPTIONS: dict[str, Any] = {"STAN_THREADS": True}
"""C++ options unless overridden; stanflow runs chains as threads of one process."""

STAN_SUFFIXES = (".stan", ".stanfunctions")

_INCLUDE = re.compile(
    r"""^\s*\#include
        (?: \s*"(?P<quoted>[^"]+)" | \s*<(?P<angled>[^>]+)> | \s+(?P<bare>[^\s"<]\S*) )
        \s*(?://.*)?$""",
    re.VERBOSE,
)
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_STANC_LINE = re.compile(r"', line (\d+)")


class TemplateError(ValueError):
    """An ``#include`` or slot of a Stan template cannot be resolved."""


class CompileError(RuntimeError):
    """A Stan program failed to compile.

    Attributes
    ----------
    console : str
        The compiler's console output, including stanc's message with the line.
    """

    def __init__(self, message: str, console: str) -> None:
        super().__init__(message)
        self.console = console


def cache_dir() -> Path:
    """Return the folder holding compiled models, ``<stanflow_home()>/models``."""
    return stanflow_home() / "models"


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
    return _Renderer(include_paths, slots).run(path)[0]


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
            target = Path(target).resolve()
            if not target.is_file():
                raise TemplateError(f"slots[{slot!r}]: file not found: {target}")
            self.slots[slot] = target
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


def cache_key(
    code: str,
    *,
    name: str,
    toolchain: Mapping[str, Any],
    cpp_options: Mapping[str, Any],
    stanc_options: Mapping[str, Any],
) -> str:
    """Return the content address of a compiled model.

    Parameters
    ----------
    code : str
        The rendered Stan program.
    name : str
        The model name (it names the executable and the C++ class).
    toolchain : mapping
        The toolchain identity, as given by ``stanflow.toolchain.identity()``.
    cpp_options, stanc_options : mapping
        The normalised compiler flags; their order does not matter.

    Returns
    -------
    str
        32 lowercase hex digits.
    """
    payload = json.dumps(
        {
            "code": code,
            "name": name,
            "toolchain": toolchain,
            "cpp_options": cpp_options,
            "stanc_options": stanc_options,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def compile_model(
    source: PathLike,
    *,
    name: str | None = None,
    include_paths: Iterable[PathLike] = (),
    slots: Mapping[str, PathLike] | None = None,
    cpp_options: Mapping[str, Any] | None = None,
    stanc_options: Mapping[str, Any] | None = None,
) -> cmdstanpy.CmdStanModel:
    """Render, compile (once per content) and load a Stan program.

    The rendered program, the model name, the toolchain identity and the sorted
    flags are hashed into a key; ``$STANFLOW_HOME/models/<key>/`` holds the
    program, its executable and a ``stanflow.json`` manifest. A hit loads the
    executable without recompiling (and within one process returns the model
    object loaded before). A miss compiles into a temporary folder beside it
    and renames it into place, under a per-key file lock, so two processes
    asking for the same model compile it once.

    Parameters
    ----------
    source : str or os.PathLike
        The Stan program or template; see :func:`program_path` for shipped ones.
    name : str, optional
        Model name, letters, digits and ``_`` starting with a letter.
        Defaults to the file name of ``source`` without its suffix.
    include_paths, slots
        Passed to :func:`render`.
    cpp_options : mapping, optional
        Merged over :data:`DEFAULT_CPP_OPTIONS`; a value of ``False`` or
        ``None`` removes the option (``{"STAN_THREADS": False}``).
    stanc_options : mapping, optional
        Passed to stanc through cmdstanpy, e.g. ``{"O1": True}``. Includes are
        resolved by :func:`render`, so ``include-paths`` is rejected here.

    Returns
    -------
    cmdstanpy.CmdStanModel

    Raises
    ------
    TemplateError
        If the template cannot be rendered.
    CompileError
        If stanc or the C++ compiler fails; no cache entry is left behind.
    ValueError
        If ``name``, ``cpp_options`` or ``stanc_options`` is malformed.
    """
    name = _check_name(name, source)
    cpp = _check_options("cpp_options", {**DEFAULT_CPP_OPTIONS, **(cpp_options or {})})
    stanc = _check_options("stanc_options", dict(stanc_options or {}))
    if "include-paths" in stanc:
        raise ValueError(
            "stanc_options: 'include-paths' is not used, stanflow resolves includes "
            "itself; pass include_paths= instead"
        )
    code, origins = _Renderer(include_paths, slots).run(source)
    identity = toolchain.identity()
    key = cache_key(
        code, name=name, toolchain=identity, cpp_options=cpp, stanc_options=stanc
    )
    folder = cache_dir()
    entry = folder / key
    if not entry.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not entry.is_dir():
                manifest = {
                    "key": key,
                    "name": name,
                    "source": str(Path(source).resolve()),
                    "slots": {
                        k: str(Path(v).resolve()) for k, v in (slots or {}).items()
                    },
                    "cpp_options": cpp,
                    "stanc_options": stanc,
                    "toolchain": identity,
                    "created": datetime.datetime.now(datetime.UTC).isoformat(),
                }
                _build(entry, name, code, origins, manifest, source)
    exe = entry / name
    loaded = _LOADED.get(key)
    if loaded is None or loaded[0] != exe.stat().st_mtime_ns:
        model = cmdstanpy.CmdStanModel(
            stan_file=entry / f"{name}.stan",
            exe_file=exe,
            stanc_options=stanc or None,
            cpp_options=cpp or None,
        )
        loaded = _LOADED[key] = (exe.stat().st_mtime_ns, model)
    return loaded[1]


_LOADED: dict[str, tuple[int, cmdstanpy.CmdStanModel]] = {}
"""Models loaded in this process by cache key (with the executable's mtime):
building a ``CmdStanModel`` runs stanc for the program's info, about 40 ms,
which loops that compile the same program in every call need not pay again."""


def _build(
    entry: Path,
    name: str,
    code: str,
    origins: list[tuple[Path, int]],
    manifest: dict[str, Any],
    source: PathLike,
) -> None:
    """Compile into a temporary folder beside ``entry`` and rename it into place."""
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=entry.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the entry is an ordinary folder
        stan_file = tmp / f"{name}.stan"
        stan_file.write_text(code)
        try:
            cmdstanpy.compile_stan_file(
                stan_file,
                force=True,
                stanc_options=manifest["stanc_options"] or None,
                cpp_options=manifest["cpp_options"] or None,
            )
        except ValueError as err:
            console = str(err).split("Console:\n", 1)[-1]
            raise CompileError(
                f"Stan program {source} failed to compile:\n{console}"
                f"{_origin_note(console, origins)}",
                console,
            ) from None
        (tmp / "stanflow.json").write_text(
            json.dumps(manifest, indent=2, default=str) + "\n"
        )
        try:
            os.rename(tmp, entry)
        except OSError:
            if not entry.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _origin_note(console: str, origins: list[tuple[Path, int]]) -> str:
    """Say which template file and line a stanc error's rendered line came from."""
    match = _STANC_LINE.search(console)
    if match is None:
        return ""
    line = int(match.group(1))
    if not 1 <= line <= len(origins):
        return ""
    path, number = origins[line - 1]
    return f"\n(line {line} of the rendered program is {path}, line {number})"


def _check_name(name: str | None, source: PathLike) -> str:
    if name is None:
        stem = Path(source).name.split(".")[0]
        name = re.sub(r"\W", "_", stem)
        if not name[:1].isalpha():
            name = f"model_{name}"
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            "name must start with a letter and contain only letters, digits and _, "
            f"got {name!r}"
        )
    return name


def _check_options(field: str, options: dict[Any, Any]) -> dict[str, Any]:
    """Drop options set to False/None and check keys are strings; return sorted."""
    for key in options:
        if not isinstance(key, str) or not key:
            raise ValueError(f"{field}: keys must be non-empty strings, got {key!r}")
    return {
        k: v for k, v in sorted(options.items()) if v is not None and v is not False
    }
