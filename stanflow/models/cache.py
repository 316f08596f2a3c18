"""The content-addressed cache of compiled artefacts, ``$STANFLOW_HOME/models/<key>/``.

Executables (:mod:`stanflow.models.executables`) and model libraries
(:mod:`stanflow.models.libraries`) share it: a key is the hash of everything
the artefact depends on, an entry is built at most once, into a temporary
folder that is renamed into place, under a per-key file lock (so two
processes asking for the same entry build it once).

An entry records what it holds: its manifest ``stanflow.json``, written last,
gives the size and sha256 of every file in it. An entry is verified before it
is served (sizes on every call, digests once per process while the files stay
the same); a damaged or incomplete one is removed and rebuilt once, under its
key's lock, with a warning naming the entry and the fault. The next build of a
key removes the temporary folders that killed builds of that key left behind.

Every key covers :data:`CACHE_FORMAT`, so entries of another format (written
by another stanflow version sharing the folder) live beside the current ones
and are never removed or rewritten.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from stanflow.atomic import write_atomic
from stanflow.locks import file_lock
from stanflow.toolchain.layout import stanflow_home

PathLike = str | os.PathLike

_log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
CACHE_FORMAT = 2
"""What an entry holds and how it is checked; part of every key and every manifest.

1: a manifest without ``"format"`` (stanflow before it versioned its keys; some of
   these record their files, none is checked).
2: the manifest records the format and the size and sha256 of every file.
"""
MANIFEST = "stanflow.json"
"""Each entry's record of what it was built from and what it holds."""
FILES = "files"
"""The manifest's field recording the entry's files: name -> ``{"size", "sha256"}``."""
FORMAT = "format"
"""The manifest's field recording the entry's :data:`CACHE_FORMAT` (absent in format 1)."""

_VERIFIED: set[tuple[Any, ...]] = set()
"""Fingerprints of entries verified in this process: their path, recorded
digests and every file's device, inode and modification time. A hit checks
sizes only, so loops that ask for an entry do not hash it again."""


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


class _Unsound(Exception):
    """An entry that must not be served; the message says why."""


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

    The key also covers :data:`CACHE_FORMAT`: a stanflow writing entries of
    another format uses other keys, so the two never replace each other's.

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
            FORMAT: CACHE_FORMAT,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


@contextlib.contextmanager
def key_lock(key: str) -> Iterator[None]:
    """Hold the file lock of cache key ``key``, ``cache_dir()/.locks/<key>.lock``.

    Whoever builds, rebuilds or removes the entry ``key`` holds it meanwhile;
    a reader that finds the entry missing or unsound takes it to look again
    once such work is done.
    """
    locks = cache_dir() / ".locks"  # one lock file per key, kept out of the listing
    locks.mkdir(parents=True, exist_ok=True)
    with file_lock(locks / f"{key}.lock"):
        yield


def ensure_entry(
    key: str, manifest: Mapping[str, Any], build: Callable[[Path], None]
) -> Path:
    """Return the cache entry ``key``, verified; build it first if it is missing or unsound.

    Parameters
    ----------
    key : str
        From :func:`cache_key`.
    manifest : mapping
        What the entry was built from; written to ``stanflow.json`` with the
        key, the cache format, the record of the entry's files and the build
        time once ``build`` succeeds.
    build : callable
        ``build(folder)`` fills an empty temporary folder; it raises on failure,
        and then nothing is left behind.

    Returns
    -------
    pathlib.Path
        ``cache_dir() / key``.

    Raises
    ------
    CompileError
        If an entry just built fails its verification; it is removed.
    """
    entry = cache_dir() / key
    if entry.is_dir() and entry_problem(entry) is None:
        return entry
    with key_lock(key):
        _ensure_locked(entry, manifest, build)
    return entry


def entry_problem(entry: Path) -> str | None:
    """Say why the cache entry ``entry`` must not be served, or return None if it is sound.

    Sound means: a manifest recording the size and sha256 of its files, and
    every recorded file present with its size and digest. The digests are
    checked once per process while the files stay the same.

    Parameters
    ----------
    entry : pathlib.Path
        An entry folder, ``cache_dir() / key``.

    Returns
    -------
    str or None
        One line naming the fault, e.g. ``"gibbs has 512 bytes, its record says 4096"``.
    """
    try:
        record = _read_record(entry)
        fingerprint = _fingerprint(entry, record)
        if fingerprint not in _VERIFIED:
            _check_digests(entry, record)
            _VERIFIED.add(fingerprint)
    except _Unsound as fault:
        return str(fault)
    return None


def of_another_format(entry: Path) -> bool:
    """Whether the manifest of ``entry`` says it was written in another :data:`CACHE_FORMAT`.

    Such an entry belongs to another stanflow version: it is never checked
    against this version's rules, removed or rewritten. An entry without a
    readable manifest is not known to be of another format.
    """
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get(FORMAT, 1) != CACHE_FORMAT


def _ensure_locked(
    entry: Path, manifest: Mapping[str, Any], build: Callable[[Path], None]
) -> None:
    """Serve, rebuild or build ``entry``; call only while holding its key's lock."""
    if entry.is_dir():
        problem = entry_problem(entry)  # another process may have rebuilt it
        if problem is None:
            return
        _log.warning("rebuilding the cache entry %s: %s", entry, problem)
        _discard(entry)
    _remove_leftovers(entry)
    _build(entry, manifest, build)
    problem = entry_problem(entry)
    if problem is not None:
        _discard(entry)
        raise CompileError(f"the cache entry {entry} just built is unusable: {problem}", problem)


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
            FORMAT: CACHE_FORMAT,
            **manifest,
            FILES: _record_files(tmp),
            "created": datetime.datetime.now(datetime.UTC).isoformat(),
        }
        text = json.dumps(record, indent=2, default=str) + "\n"
        write_atomic(tmp / MANIFEST, lambda path: Path(path).write_text(text))
        _install(tmp, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _install(built: Path, entry: Path) -> None:
    """Rename the folder ``built`` to ``entry``; call only while holding the key's lock.

    Under the lock the entry is absent, unless something that ignores the lock
    wrote it meanwhile (a copy of a cache, say): that entry is kept if it is
    sound, else replaced, with a warning; ``built`` is then left in place.
    """
    try:
        os.rename(built, entry)
        return
    except OSError as err:
        if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
    problem = entry_problem(entry)
    if problem is None:
        return
    _log.warning("replacing the cache entry %s, written meanwhile without its lock: %s",
                 entry, problem)
    _discard(entry)
    os.rename(built, entry)


def _record_files(folder: Path) -> dict[str, dict[str, Any]]:
    """The size and sha256 of every file below ``folder`` but its manifest."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p != folder / MANIFEST)
    return {
        path.relative_to(folder).as_posix(): {
            "size": path.stat().st_size,
            "sha256": _sha256(path),
        }
        for path in files
    }


def _read_record(entry: Path) -> dict[str, dict[str, Any]]:
    """The record of ``entry``'s files in its manifest; raises :class:`_Unsound`."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
    except FileNotFoundError:
        raise _Unsound(f"it has no {MANIFEST}") from None
    except (OSError, ValueError) as err:
        raise _Unsound(f"its {MANIFEST} is unreadable ({err})") from None
    record = manifest.get(FILES) if isinstance(manifest, dict) else None
    if not (isinstance(record, dict) and record and all(map(_is_file_record, record.values()))):
        raise _Unsound(f"its {MANIFEST} does not record its files' sizes and sha256 digests")
    return record


def _is_file_record(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and type(value.get("size")) is int
        and isinstance(value.get("sha256"), str)
        and _SHA256.match(value["sha256"]) is not None
    )


def _fingerprint(entry: Path, record: Mapping[str, Mapping[str, Any]]) -> tuple[Any, ...]:
    """What identifies the entry's files now, once their sizes match the record."""
    files = []
    for name, expected in sorted(record.items()):
        try:
            stat = (entry / name).stat()
        except FileNotFoundError:
            raise _Unsound(f"{name} is missing") from None
        except OSError as err:
            raise _Unsound(f"{name} cannot be read ({err.strerror})") from None
        if stat.st_size != expected["size"]:
            raise _Unsound(f"{name} has {stat.st_size} bytes, its record says {expected['size']}")
        files.append((name, expected["sha256"], stat.st_dev, stat.st_ino, stat.st_mtime_ns))
    return (str(entry), *files)


def _check_digests(entry: Path, record: Mapping[str, Mapping[str, Any]]) -> None:
    for name, expected in sorted(record.items()):
        try:
            digest = _sha256(entry / name)
        except OSError as err:
            raise _Unsound(f"{name} cannot be read ({err.strerror})") from None
        if digest != expected["sha256"]:
            raise _Unsound(f"{name} does not match its recorded sha256 digest")


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _discard(entry: Path) -> None:
    """Remove ``entry`` at once: rename it into a leftover folder, then delete that."""
    trash = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=entry.parent))
    os.rename(entry, trash / entry.name)
    shutil.rmtree(trash, ignore_errors=True)


def _remove_leftovers(entry: Path) -> None:
    """Remove temporary folders of killed builds of ``entry``'s key.

    Call only while holding the key's lock: builders hold it while building,
    so any such folder then is a leftover.
    """
    for leftover in entry.parent.glob(f".tmp-{entry.name}-*"):
        shutil.rmtree(leftover, ignore_errors=True)


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
