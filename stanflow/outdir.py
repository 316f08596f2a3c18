"""A run's output folder: checked before the run, held by it alone, reported after a fault.

:func:`prepare` creates the folder and checks, before any long work, that a
file can be written there and that :data:`MIN_FREE_BYTES` are free.
:func:`hold` locks the folder for one run (:func:`stanflow.locks.file_lock`
on :data:`LOCK_FILE` inside it, which records the holder's pid, host and
command): a second run into the folder is refused at once, naming the holder,
or waits for it. A run stopped by Ctrl-C or by a write the disk refused ends
in :class:`Interrupted` or :class:`RunFailed`, whose message is one line
saying what the folder kept. Every file stanflow writes into the folder is
written atomically (:mod:`stanflow.atomic`), so what it keeps is complete.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shlex
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stanflow.atomic import WriteError, size_text
from stanflow.locks import file_lock

MIN_FREE_BYTES = 64 * 10**6
"""Free space a run needs in its folder before it starts (each file is checked again)."""
LOCK_FILE = ".stanflow.lock"
"""The lock file of a run inside its folder; removed when the run ends."""
EXIT_INTERRUPTED = 130
"""Exit status after Ctrl-C: 128 + SIGINT, as a shell reports a process it stopped."""
WRITE_ONLY_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
"""``errno`` values only a write raises: the disk is full, the file too big, or read-only."""


class FolderError(Exception):
    """The output folder cannot take a run: not creatable, not writable or too full.

    Attributes
    ----------
    folder : pathlib.Path
    problem : str
        What is wrong, e.g. ``cannot write in it (Read-only file system)``.
    """

    def __init__(self, folder: Path, problem: str) -> None:
        super().__init__(f"{folder}: {problem}")
        self.folder = Path(folder)
        self.problem = problem


class FolderBusy(FolderError):
    """Another run holds the output folder."""


class RunFailed(Exception):
    """A run stopped because the disk refused a write; the message says what was kept."""

    def __init__(self, cause: OSError, folder: Path) -> None:
        super().__init__(f"{_cause_text(cause)}; kept {_files_text(folder)} in {folder}")


class Interrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C; the message says what was kept and how to go on.

    Parameters
    ----------
    folder : pathlib.Path
        The run's output folder.
    command : str
        The command that runs the workflow again into ``folder``.
    pieces : int or None
        Finished pieces the workflow keeps for a rerun (the cells of an
        :class:`stanflow.experiment.Experiment`, kept by
        :class:`stanflow.pieces.Pieces`); ``None`` if it keeps none, and then
        the complete files in ``folder`` are counted.
    unit : str, default "piece"
        What a piece is, e.g. ``"run"`` for the runs of a run set.
    total : int, optional
        The pieces there are in all, said as ``of <total>``.
    """

    def __init__(
        self,
        folder: Path,
        command: str,
        pieces: int | None,
        *,
        unit: str = "piece",
        total: int | None = None,
    ) -> None:
        if pieces is None:
            kept, how = _files_text(folder), "run again with"
        else:
            kept = f"{pieces} finished {unit}{'' if pieces == 1 else 's'}"
            kept, how = kept + ("" if total is None else f" of {total}"), "resume with"
        super().__init__(f"interrupted; kept {kept} in {folder}; {how}: {command}")


def prepare(folder: Path) -> None:
    """Create ``folder`` if missing; check a file can be written there and space is free.

    Parameters
    ----------
    folder : pathlib.Path

    Raises
    ------
    FolderError
        Naming the folder and the problem: it cannot be created or written, or
        it has fewer than :data:`MIN_FREE_BYTES` free (the free bytes are named).
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise FolderError(folder, f"cannot create the output folder ({_reason(error)})") from None
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".stanflow-probe-") as probe:
            probe.write(b"probe")
            probe.flush()
    except OSError as error:
        raise FolderError(folder, f"cannot write in it ({_reason(error)})") from None
    free = shutil.disk_usage(folder).free
    if free < MIN_FREE_BYTES:
        raise FolderError(
            folder,
            f"only {size_text(free)} ({free} bytes) free; "
            f"a run needs at least {size_text(MIN_FREE_BYTES)}",
        )


@contextmanager
def hold(folder: Path, wait: bool = False) -> Iterator[None]:
    """Hold ``folder`` for one run: lock :data:`LOCK_FILE` in it, remove it at the end.

    Parameters
    ----------
    folder : pathlib.Path
        An existing folder (:func:`prepare`).
    wait : bool, default False
        Wait for the run holding the folder to end (saying so on stderr)
        instead of refusing.

    Raises
    ------
    FolderBusy
        If another process holds the folder and ``wait`` is false; the message
        names its pid, host and command.
    """
    folder = Path(folder)
    with file_lock(
        folder / LOCK_FILE, on_busy=_on_busy(folder, wait), holder=_holder_record, remove=True
    ):
        yield


def interrupted_text(interrupt: KeyboardInterrupt, folder: Path) -> str:
    """The line for Ctrl-C: an :class:`Interrupted`'s, else (the run had not begun) its own.

    It mutes cmdstanpy's log first: after Ctrl-C, cmdstanpy's chain threads
    report the chains the interrupt stopped ("CmdStan error: code '-2'"), which
    would otherwise print after the one line that says what was kept.
    """
    logging.getLogger("cmdstanpy").disabled = True
    if isinstance(interrupt, Interrupted):
        return str(interrupt)
    return f"interrupted before the run started; nothing written to {folder}"


def is_refused_write(error: BaseException) -> bool:
    """Whether ``error`` is a write the disk refused (a :class:`RunFailed` then)."""
    return isinstance(error, WriteError) or (
        isinstance(error, OSError) and error.errno in WRITE_ONLY_FAULTS
    )


def complete_files(folder: Path) -> list[Path]:
    """The files in ``folder`` (recursively), without hidden ones (temporaries, the lock)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(
        path
        for path in folder.rglob("*")
        if path.is_file() and not _hidden(path.relative_to(folder))
    )


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def _on_busy(folder: Path, wait: bool) -> Callable[[str], None]:
    """What a run does when another holds ``folder``: refuse, naming the holder, or wait."""

    def busy(record: str) -> None:
        holder = _holder_text(record)
        if not wait:
            raise FolderBusy(
                folder,
                f"in use by {holder}; wait for it to end (--wait) or choose another --out",
            )
        print(f"stanflow: waiting for {holder} to release {folder}", file=sys.stderr)

    return busy


def _holder_record() -> str:
    """Who holds the lock, for its file: pid, host, command, start time (one JSON line)."""
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": shlex.join(sys.argv),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    return json.dumps(record) + "\n"


def _holder_text(record: str) -> str:
    """``pid 123 on host h (since ...): command``, from the lock file's ``record``."""
    try:
        holder: dict[str, Any] = json.loads(record)
        return (
            f"pid {holder['pid']} on {holder['host']} (since {holder['started']}): "
            f"{holder['command']}"
        )
    except (ValueError, KeyError, TypeError):  # written this instant, or not by stanflow
        return "another process"


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def _cause_text(error: OSError) -> str:
    """One line for a write the disk refused: the file, then the cause."""
    if isinstance(error, WriteError) or error.filename is None:
        return str(error)
    return f"cannot write {os.fsdecode(error.filename)}: {_reason(error)}"


def _files_text(folder: Path) -> str:
    count = len(complete_files(folder))
    return f"{count} complete file{'' if count == 1 else 's'}"
