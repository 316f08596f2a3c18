"""What a run set's folder says of its runs, and who may run them.

A run is *done* when its latest manifest record is ``ok`` and its output files
exist (:func:`is_done`); its latest record and its files make its
:class:`RunResult`, and all the records the ``run_stats`` group of the results
(:func:`run_stats`). One process at a time runs a set: it holds the folder's
:data:`LOCK_FILE` (:func:`hold_folder`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr

from stanflow.locks import file_lock
from stanflow.runs.commands import console_file, output_files
from stanflow.runs.manifest import Record
from stanflow.runs.plan import PlannedRun
from stanflow.runs.results import RUN_DIM, RunDraws, read_run

LOCK_FILE = ".lock"
"""The lock file of a run set inside its folder, held while a process runs the set."""


@dataclass(frozen=True)
class RunResult:
    """How one run of a run set ended.

    Attributes
    ----------
    index : int
        The run's position in the run set.
    status : str
        ``ok``, or after the last attempt ``failed`` (non-zero exit code),
        ``timeout`` or ``error`` (could not be run).
    attempts : int
        Attempts made so far, over all sessions.
    exit_code : int or None
    seed : int
    method : str
    wall_time : float
        Seconds the last attempt took.
    outputs : tuple of pathlib.Path
        The CSV files, one per chain (present when ``status == "ok"``).
    console : pathlib.Path
        Console text of the last attempt.
    message : str
        For a failure: what went wrong and the end of the console text.
    """

    index: int
    status: str
    attempts: int
    exit_code: int | None
    seed: int
    method: str
    wall_time: float
    outputs: tuple[Path, ...]
    console: Path
    message: str

    @property
    def ok(self) -> bool:
        """Whether the run succeeded."""
        return self.status == "ok"

    def draws(self) -> RunDraws:
        """Read this run's draws: column names and a ``(chain, draw, column)`` array."""
        if not self.ok:
            raise ValueError(
                f"run {self.index} has no draws: it ended with {self.status}"
            )
        return read_run(self.outputs, self.method)


def is_done(folder: Path, run: PlannedRun, records: Mapping[int, Record]) -> bool:
    """Whether ``run`` of the set in ``folder`` is done, by the manifest's ``records``."""
    record = records.get(run.index)
    return (
        record is not None
        and record.status == "ok"
        and all(path.is_file() for path in output_files(folder, run))
    )


def run_result(folder: Path, run: PlannedRun, record: Record) -> RunResult:
    """The result of ``run`` of the set in ``folder`` that its latest ``record`` gives."""
    return RunResult(
        index=run.index,
        status=record.status,
        attempts=record.attempt,
        exit_code=record.exit_code,
        seed=run.seed,
        method=run.method,
        wall_time=record.wall_time,
        outputs=output_files(folder, run),
        console=console_file(folder, run, record.attempt),
        message=record.message,
    )


def run_stats(runs: Sequence[PlannedRun], records: Mapping[int, Record]) -> xr.Dataset:
    """Per-run diagnostics from the plan and the latest manifest records."""
    latest = [records.get(run.index) for run in runs]
    exit_codes = [
        -1 if r is None or r.exit_code is None else r.exit_code for r in latest
    ]
    return xr.Dataset(
        {
            "status": (RUN_DIM, [r.status if r else "missing" for r in latest]),
            "attempts": (RUN_DIM, np.array([r.attempt if r else 0 for r in latest])),
            "exit_code": (RUN_DIM, np.array(exit_codes)),
            "seed": (RUN_DIM, np.array([run.seed for run in runs], dtype=np.int64)),
            "wall_time": (
                RUN_DIM,
                np.array([r.wall_time if r else np.nan for r in latest]),
            ),
        },
        coords={RUN_DIM: np.arange(len(runs))},
    )


@contextmanager
def hold_folder(folder: Path) -> Iterator[None]:
    """Hold ``folder/.lock`` so that two processes never run one run set at once.

    Raises
    ------
    RuntimeError
        At once, if another process holds it.
    """

    def refuse(holder: str) -> None:
        raise RuntimeError(f"{folder} is being run by another process")

    with file_lock(folder / LOCK_FILE, on_busy=refuse):
        yield
