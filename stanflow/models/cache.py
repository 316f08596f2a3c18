"""The content-addressed cache of compiled artefacts, ``$STANFLOW_HOME/models/<key>/``.

Executables (:mod:`stanflow.models.executables`) and model libraries
(:mod:`stanflow.models.libraries`) share it: a key is the hash of everything
the artefact depends on, an entry is built at most once, into a temporary
folder that is renamed into place, under a per-key file lock (so two
processes asking for the same entry build it once).
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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stanflow.toolchain.layout import stanflow_home

PathLike = str | os.PathLike

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
MANIFEST = "stanflow.json"
"""Each entry's record of what it was built from."""


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
        The toolchain identity, as given by ``stanflow.toolchain.identity()``,
        plus anything else the artefact depends on (its kind, for a library
        the BridgeStan version it reports).
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


def ensure_entry(
    key: str,
    manifest: Mapping[str, Any],
    build: Callable[[Path], None],
) -> Path:
    """Return the cache entry ``key``, building it first if it is missing.

    Parameters
    ----------
    key : str
        From :func:`cache_key`.
    manifest : mapping
        What the entry was built from; written to ``stanflow.json`` with the
        key and the build time once ``build`` succeeds.
    build : callable
        ``build(folder)`` fills an empty temporary folder; it raises on failure,
        and then nothing is left behind.

    Returns
    -------
    pathlib.Path
        ``cache_dir() / key``.
    """
    folder = cache_dir()
    entry = folder / key
    if entry.is_dir():
        return entry
    folder.mkdir(parents=True, exist_ok=True)
    locks = folder / ".locks"  # one lock file per key, kept out of the listing
    locks.mkdir(exist_ok=True)
    with open(locks / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not entry.is_dir():
            _build(entry, manifest, build)
    return entry


def _build(
    entry: Path, manifest: Mapping[str, Any], build: Callable[[Path], None]
) -> None:
    """Build into a temporary folder beside ``entry`` and rename it into place."""
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=entry.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the entry is an ordinary folder
        build(tmp)
        record = {
            "key": entry.name,
            **manifest,
            "created": datetime.datetime.now(datetime.UTC).isoformat(),
        }
        (tmp / MANIFEST).write_text(json.dumps(record, indent=2, default=str) + "\n")
        try:
            os.rename(tmp, entry)
        except OSError:
            if not entry.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_name(name: str | None, source: PathLike) -> str:
    """Return a valid model name: ``name``, or one made from ``source``'s file name."""
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


def check_options(field: str, options: dict[Any, Any]) -> dict[str, Any]:
    """Drop options set to False/None and check keys are strings; return sorted."""
    for key in options:
        if not isinstance(key, str) or not key:
            raise ValueError(f"{field}: keys must be non-empty strings, got {key!r}")
    return {
        k: v for k, v in sorted(options.items()) if v is not None and v is not False
    }
