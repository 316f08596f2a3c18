"""Atomic file writes: a reader finds the old file or the new one, never a part of one.

Guarantee: :func:`write_atomic` writes through a temporary file in the target's
folder, flushes it to disk (``fsync``) and renames it onto the target
(``os.replace``, atomic within one file system); if writing fails, the
temporary file is removed and the target is left as it was.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


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
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as written:
            os.fsync(written.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the result is an ordinary file
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def write_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` to ``path`` as one ``.npz`` (``numpy.savez``), atomically."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as handle:  # a file object: numpy.savez would add ".npz" to a name
            np.savez(handle, **arrays)

    return write_atomic(path, write)
