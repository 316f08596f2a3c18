"""Atomic file writes: a reader finds the old file or the new one, never a part of one.

Guarantee: :func:`write_atomic` writes through a temporary file in the target's
folder, flushes it to disk (``fsync``) and renames it onto the target
(``os.replace``, atomic within one file system); if writing fails, the
temporary file is removed and the target is left as it was. A failure of the
disk (full, read-only, no permission) is a :class:`WriteError` naming the file.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

DISK_ERRORS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}
)
"""``errno`` values of a disk that refuses a write: full, too big, read-only, no permission, failing."""


class WriteError(OSError):
    """A file could not be written; it is as it was before the write.

    ``str(error)`` is one line naming the file and the cause, e.g. ``cannot
    write out/fit.nc: No space left on device (needs 3.2 MB, 1.0 MB free)``.
    ``errno`` and ``filename`` are those of an ``OSError``.
    """

    def __init__(self, path: str | os.PathLike, code: int | None, cause: str) -> None:
        super().__init__(code, cause, os.fspath(path))

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


def write_atomic(path: str | os.PathLike, write: Callable[[str], Any]) -> Path:
    """Call ``write`` on a temporary file beside ``path``, then rename it to ``path``.

    Parameters
    ----------
    path : path-like
        The file to write; its folder must exist.
    write : callable
        ``tmp -> None``: writes the whole content to the file named ``tmp``.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    WriteError
        If the disk refuses the write (an ``OSError`` whose ``errno`` is one of
        :data:`DISK_ERRORS`, from the disk or raised by ``write``); any other
        error propagates as it was raised.
    """
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        if error.errno not in DISK_ERRORS:
            raise
        raise _write_error(path, error) from error
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as written:
            os.fsync(written.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the result is an ordinary file
        os.replace(tmp, path)
    except OSError as error:
        if error.errno not in DISK_ERRORS:
            raise
        raise _write_error(path, error) from error
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def write_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` to ``path`` as one ``.npz`` (``numpy.savez``), atomically."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as handle:  # a file object: numpy.savez would add ".npz" to a name
            # The stubs type **kwds as if a key could be numpy's allow_pickle flag.
            np.savez(handle, **arrays)  # type: ignore[arg-type]

    return write_atomic(path, write)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically: the file is either the old one or the new one."""
    return write_atomic(Path(path), lambda tmp: Path(tmp).write_text(text))


def write_json(path: str | os.PathLike, record: Mapping[str, Any]) -> Path:
    """Write ``record`` as strict JSON to ``path`` atomically.

    NumPy scalars and arrays become numbers and lists; NaN and infinities
    become ``null``; paths become strings. A file is either complete or
    absent, so a rerun can trust every file it finds.

    Raises
    ------
    TypeError
        If a value cannot be written as JSON; the message names its key.
    """
    path = Path(path)
    text = json.dumps(_jsonable(record, path.stem), indent=2, allow_nan=False) + "\n"
    return write_text(path, text)


def require_space(path: str | os.PathLike, size: int) -> None:
    """Check that the folder of ``path`` has ``size`` bytes free, before writing them.

    Raises
    ------
    WriteError
        ``ENOSPC``, naming ``path``, the bytes needed and the bytes free.
    """
    free = shutil.disk_usage(Path(path).parent).free
    if free < size:
        raise WriteError(
            path,
            errno.ENOSPC,
            f"{os.strerror(errno.ENOSPC)} (needs {size_text(size)}, {size_text(free)} free)",
        )


def size_text(size: int) -> str:
    """``size`` bytes for a message: ``"512 bytes"``, ``"3.2 MB"``, ``"1.5 GB"`` (SI units)."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def _write_error(path: Path, error: OSError) -> WriteError:
    """``error`` as a :class:`WriteError` of ``path``; another file it names stays in the cause."""
    named = None if error.filename is None else Path(os.fsdecode(error.filename))
    own = named is None or named in (path.parent, path) or named.parent == path.parent
    cause = error.strerror if own and error.strerror else str(error)
    return WriteError(path, error.errno, cause)


def _jsonable(value: Any, where: str) -> Any:
    """A JSON-ready copy of ``value``; ``where`` names it in errors."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, f"{where}[{k!r}]") for k, v in value.items()}
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return _jsonable(value.tolist(), where)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(
        f"{where} is a {type(value).__name__}, which cannot be written as JSON"
    )
