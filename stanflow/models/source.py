"""A user's Stan program as text: read, formatted, described, and rewritten.

The contracts of stanflow's own-model programs (the loss program of
:mod:`stanflow.gibbs.contract`, the LCVI program of
:mod:`stanflow.lcvi.contract`) read a program the same way: its ``#include``
lines resolved (:func:`stanflow.models.templates.render_with_origins`), the
result formatted by ``stanc --auto-format`` with every declaration on one
line, and described by ``stanc --info``. Their *evaluation forms* move some of
the data block's declarations to the end of the parameters block
(:func:`move_to_parameters`), so that one library loaded in process serves
every value of the variables stanflow sets.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from stanflow.models.cache import CompileError
from stanflow.models.templates import origin_note, render_with_origins

_NAME = re.compile(r"[^A-Za-z0-9_]")
FORMAT_WIDTH = "10000"
"""``--max-line-length`` for the formatter: every declaration on one line."""


def read_source(
    path: Path,
    stanc: Path,
    *,
    include_paths: Iterable[str | os.PathLike] = (),
    slots: Mapping[str, str | os.PathLike] | None = None,
) -> tuple[str, dict]:
    """The program with its includes resolved and formatted, and its ``stanc --info``.

    Raises
    ------
    stanflow.models.CompileError
        If stanc rejects the program; the message names the line and, for a
        line from an included file, that file.
    """
    rendered, origins = render_with_origins(path, include_paths=include_paths, slots=slots)
    try:
        return _described(path, rendered, stanc)
    except CompileError as err:
        raise CompileError(f"{err}{origin_note(err.console, origins)}", err.console) from None


def block_lines(code: str, name: str) -> list[str]:
    """The lines inside the top-level block ``name`` of formatted code."""
    lines = code.splitlines()
    try:
        start = lines.index(f"{name} {{")
    except ValueError:
        return []
    end = lines.index("}", start)
    return lines[start + 1 : end]


def move_to_parameters(
    code: str, moved: Callable[[str], bool], declarations: Iterable[str]
) -> str:
    """Formatted ``code`` with the data lines ``moved`` selects replaced by parameters.

    The data block loses every line for which ``moved(line)`` is true; the
    parameters block gains ``declarations`` (one per line) at its end.
    """
    out: list[str] = []
    block = None
    for line in code.splitlines():
        opening = re.match(r"^(\w[\w ]*\w|\w+) \{$", line)
        if opening:
            block = opening.group(1)
        if block == "data" and moved(line):
            continue
        if block == "parameters" and line == "}":
            out += [f"  {declaration}" for declaration in declarations]
        if line == "}":
            block = None
        out.append(line)
    return "\n".join(out) + "\n"


def check_compiles(path: Path, code: str, stanc: Path) -> None:
    """Run ``stanc --info`` on ``code`` (once per content in a process).

    Raises
    ------
    stanflow.models.CompileError
        With stanc's message.
    """
    key = (hashlib.sha256(code.encode()).hexdigest(), str(stanc))
    if key in _CHECKED:
        return
    _stanc_info(path, code, stanc)
    _CHECKED.add(key)


def cmdstan_name(label: str) -> str:
    """bridgestan's ``theta.1.2`` as cmdstanpy's ``theta[1,2]``."""
    base, *index = label.split(".")
    return f"{base}[{','.join(index)}]" if index else base


def model_name(name: str | None, path: Path) -> str:
    """``name``, or a cache name from the file's stem (a valid C++ identifier)."""
    if name is not None:
        return name
    cleaned = _NAME.sub("_", path.stem)
    return cleaned if cleaned[:1].isalpha() else f"m_{cleaned}"


def _described(path: Path, rendered: str, stanc: Path) -> tuple[str, dict]:
    """The formatted program and its ``--info``, once per content in a process."""
    key = (hashlib.sha256(rendered.encode()).hexdigest(), str(stanc))
    if key not in _DESCRIBED:
        code = _run_stanc(path, rendered, stanc,
                          ["--auto-format", f"--max-line-length={FORMAT_WIDTH}"])
        _DESCRIBED[key] = (code, _stanc_info(path, code, stanc))
    code, info = _DESCRIBED[key]
    return code, json.loads(json.dumps(info))


_DESCRIBED: dict[tuple[str, str], tuple[str, dict]] = {}
_CHECKED: set[tuple[str, str]] = set()


def _stanc_info(path: Path, code: str, stanc: Path) -> dict:
    return json.loads(_run_stanc(path, code, stanc, ["--info"]))


def _run_stanc(path: Path, code: str, stanc: Path, flags: list[str]) -> str:
    with tempfile.TemporaryDirectory(prefix="stanflow-source-") as folder:
        file = Path(folder) / path.name
        file.write_text(code)
        result = subprocess.run(
            [str(stanc), *flags, f"--filename-in-msg={path}", str(file)],
            capture_output=True, text=True, check=False,
        )
    if result.returncode != 0:
        console = result.stdout + result.stderr
        raise CompileError(f"Stan program {path} does not compile:\n{console}", console)
    return result.stdout
