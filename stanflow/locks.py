"""An exclusive inter-process lock on a file, built on ``fcntl.flock``: stanflow's only one.

Everything stanflow serialises holds it: the toolchain build
(``$STANFLOW_HOME/.install.lock``), each key of the compile cache
(``models/.locks/<key>.lock``), a run set (its folder's ``.lock``) and a run
into an output folder (its ``.stanflow.lock``).

- The kernel drops a ``flock`` lock when its holder exits for any reason,
  including ``SIGKILL``, so a crashed holder never leaves a stale lock behind.
- Each :func:`file_lock` opens its own file description, so two threads of one
  process exclude each other as well.
- A holder may write who it is into the lock file; whoever finds the lock busy
  is given that text, to name the holder while it waits or when it refuses.
- A holder may remove the lock file as it ends, before it unlocks: a process
  that waited on the removed file then sees that the path names another file,
  and locks that one instead, so the lock is never split in two.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

HOLDER_BYTES = 65536
"""The most of a lock file read as its holder's description."""


@contextmanager
def file_lock(
    path: Path,
    *,
    on_busy: Callable[[str], None] | None = None,
    holder: Callable[[], str] | None = None,
    remove: bool = False,
) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for the duration of the block.

    Parameters
    ----------
    path : pathlib.Path
        The lock file, in an existing folder; created if missing.
    on_busy : callable, optional
        Called with what the holder wrote into the lock file (``""`` if
        nothing) when the lock is busy, before blocking until it is free.
        To refuse instead of waiting, raise from it: the exception propagates
        and the lock is not taken.
    holder : callable, optional
        Called once the lock is held; what it returns (who holds the lock,
        say) is written into the lock file, for others' ``on_busy``. Best
        effort: a file that cannot be written (a read-only disk) still locks,
        and then names no holder.
    remove : bool, default False
        Remove the lock file when the block ends (if the disk allows), before
        unlocking. Without it the file stays, ready for the next holder.
    """
    fd = _lock(Path(path), on_busy)
    try:
        if holder is not None:
            with suppress(OSError):
                Path(path).write_text(holder())
        yield
    finally:
        if remove:
            with suppress(OSError):
                Path(path).unlink()  # before the unlock: a waiting process then locks a new file
        os.close(fd)


def _lock(path: Path, on_busy: Callable[[str], None] | None) -> int:
    """A descriptor of ``path`` holding its exclusive lock; ``path`` is still that file."""
    while True:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)  # read-only: the disk may turn so
        try:
            _acquire(fd, on_busy)
            if _is_current(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # its holder removed it as it ended: lock the file now there


def _acquire(fd: int, on_busy: Callable[[str], None] | None) -> None:
    """Lock ``fd``; if it is busy, tell ``on_busy`` who holds it first, then wait."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    if on_busy is not None:
        on_busy(os.pread(fd, HOLDER_BYTES, 0).decode(errors="replace"))
    fcntl.flock(fd, fcntl.LOCK_EX)


def _is_current(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)
