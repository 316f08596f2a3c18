"""The manifest of a run set: one JSON line per finished attempt, appended as it ends.

``manifest.jsonl`` grows by one line per attempt of a run (``ok``, ``failed``,
``timeout`` or ``error``), written with a single ``write`` on a file opened for
appending, so that a killed writer leaves at most a torn last line, which
:func:`read_manifest` ignores and the next writer cuts off. A run is done when
its latest record is ``ok`` and its output files exist; everything else is what
a resume runs again.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from stanflow.runs.jobs import Outcome

MANIFEST_FILE = "manifest.jsonl"


@dataclass(frozen=True)
class Record:
    """One finished attempt of one run.

    Attributes
    ----------
    index, attempt, status, exit_code, wall_time, message
        As in :class:`stanflow.runs.jobs.Outcome`.
    """

    index: int
    attempt: int
    status: str
    exit_code: int | None
    wall_time: float
    message: str


class Manifest:
    """Appends records to ``<folder>/manifest.jsonl``.

    Parameters
    ----------
    folder : pathlib.Path
        The run set's folder.
    """

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / MANIFEST_FILE
        self._fd: int | None = None

    def __enter__(self) -> Manifest:
        self._drop_torn_line()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self

    def _drop_torn_line(self) -> None:
        """Cut a last line left unfinished by a killed writer, before appending."""
        if not self.path.is_file():
            return
        content = self.path.read_bytes()
        if content and not content.endswith(b"\n"):
            os.truncate(self.path, content.rfind(b"\n") + 1)

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def append(self, outcome: Outcome) -> Record:
        """Record an outcome with one ``write`` call; return the record."""
        if self._fd is None:
            raise RuntimeError("Manifest.append outside its with block")
        record = Record(
            index=outcome.index,
            attempt=outcome.attempt,
            status=outcome.status,
            exit_code=outcome.exit_code,
            wall_time=outcome.wall_time,
            message=outcome.message,
        )
        os.write(self._fd, (json.dumps(asdict(record)) + "\n").encode())
        return record


def read_manifest(folder: Path) -> dict[int, Record]:
    """The latest record of every run that has one.

    A last line cut short by a kill is skipped; any other unreadable line is
    an error.
    """
    path = Path(folder) / MANIFEST_FILE
    if not path.is_file():
        return {}
    latest: dict[int, Record] = {}
    lines = path.read_bytes().split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = Record(**json.loads(line))
        except (ValueError, TypeError):
            if number == len(lines):
                continue
            raise ValueError(f"{path}, line {number}: not a manifest record") from None
        if record.index not in latest or record.attempt >= latest[record.index].attempt:
            latest[record.index] = record
    return latest
