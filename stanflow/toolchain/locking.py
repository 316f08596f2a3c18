"""An exclusive inter-process lock on a file, built on ``fcntl.flock``.

The kernel drops a ``flock`` lock when its holder exits for any reason,
including ``SIGKILL``, so a crashed install never leaves a stale lock behind.
Each :func:`exclusive_lock` opens its own file description, so two threads of
one process exclude each other as well.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive_lock(
    path: Path, on_wait: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for the duration of the block.

    Parameters
    ----------
    path : pathlib.Path
        Lock file; created if missing, never deleted (deleting a lock file
        that another process has open would split the lock in two).
    on_wait : callable, optional
        Called once with a message (naming the holder's pid when known) if
        the lock is busy, before blocking until it is free.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
                on_wait(
                    f"waiting for process {holder or '?'} "
                    f"to release the lock {path}"
                )
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
