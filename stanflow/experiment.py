"""One experiment runner: a workflow declares its cells, the runner computes and keeps them.

A workflow (``workflows/<name>.py``) declares an :class:`Experiment`: its
settings (quick and full), the cells of a run (:class:`Cell`: a name, the
parameters the cell depends on, the cells whose records it needs), the
function that computes one cell, the summary and the figures. The runner owns
the rest:

- **seeds**: one experiment seed, handed to every cell (:class:`CellRun`) and
  written as the summary's ``seed``;
- **checkpoints and resume**: every finished cell is a piece in ``out/runs``
  (:class:`stanflow.pieces.Pieces`), read back by a rerun; a piece computed
  with other parameters is an error naming the piece and the fields;
- **parallel cells**: ``jobs`` cells at a time in threads, each once the cells
  it needs are done, declared order first; the first failure (or Ctrl-C) starts
  no new cell, the running ones finish and are kept;
- the summary's ``settings``, ``seed`` and ``compute_seconds``; the command line,
  ``summary.json`` and its provenance are :mod:`stanflow.workflows`'.

Threads suit cells whose work leaves Python (Stan through bridgestan or
CmdStan, NumPy's large array operations).

Example
-------
::

    def cells(settings):
        return [Cell(f"seed-{s}", {"n": settings["n"], "s": s}) for s in range(settings["seeds"])]

    def compute(run: CellRun) -> dict:
        x = run.rng(run.cell.params["s"]).normal(size=run.cell.params["n"])
        return {"mean": float(x.mean())}

    EXPERIMENT = Experiment(
        settings={"quick": {"n": 10, "seeds": 2}, "full": {"n": 1000, "seeds": 20}},
        cells=cells, compute=compute, seed=1,
        summarise=lambda settings, records: {"means": [r["mean"] for r in records.values()]},
    )

    def run(out: Path, quick: bool) -> dict:
        return EXPERIMENT.run(out, quick)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stanflow.models.evaluation import default_threads
from stanflow.pieces import Pieces

RUNNER_KEYS = ("settings", "seed", "compute_seconds")
"""Summary keys the runner writes (a summary of the workflow's own may not have them)."""


@dataclass(frozen=True)
class Cell:
    """One piece of an experiment, computed once and kept in ``out/runs/<name>.json``.

    Parameters
    ----------
    name : str
        Unique in the run; ``/`` makes subfolders (``"pima/truth"``).
    params : mapping, optional
        JSON-like: everything the cell's result depends on besides the
        experiment's seed and the records of ``needs``. A stored piece with
        other ``params`` is an error, so list exactly what matters (a count of
        data sets that only adds cells does not).
    needs : tuple of str, optional
        Names of cells declared before this one whose records it reads.
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    needs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        parts = self.name.split("/") if isinstance(self.name, str) else [""]
        if any(part in ("", ".", "..") or "\\" in part for part in parts):
            raise ValueError(
                f"cell name {self.name!r}: use non-empty parts separated by '/', no '.' or '..'"
            )
        if self.name.endswith(".partial"):
            raise ValueError(f"cell name {self.name!r}: '.partial' ends a scratch folder's name")
        if not isinstance(self.params, Mapping):
            raise TypeError(f"cell {self.name!r}: params must be a mapping")
        if "seed" in self.params:
            raise ValueError(f"cell {self.name!r}: params key 'seed' is the runner's")
        try:
            json.dumps(self.params, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise TypeError(f"cell {self.name!r}: params must be JSON-like ({error})") from error
        object.__setattr__(self, "needs", tuple(self.needs))


@dataclass(frozen=True)
class CellRun:
    """What the computation of one cell gets from the runner.

    Attributes
    ----------
    cell : Cell
    settings : mapping
        The experiment's settings of this run (quick or full).
    seed : int
        The experiment's seed.
    needed : mapping of str to dict
        The records of ``cell.needs``, by name.
    scratch : pathlib.Path
        A folder (not made) where a long cell may keep its partial state; it
        is removed once the cell's record is written.
    out : pathlib.Path
        The run's output folder, for files a cell leaves beside its record
        (an InferenceData, a Stan file it wrote): write them atomically
        (:mod:`stanflow.atomic`), under names no other cell uses.
    """

    cell: Cell
    settings: Mapping[str, Any]
    seed: int
    needed: Mapping[str, dict]
    scratch: Path
    out: Path

    @property
    def params(self) -> Mapping[str, Any]:
        """The cell's parameters."""
        return self.cell.params

    def rng(self, *stream: int) -> np.random.Generator:
        """A generator of the experiment's seed and ``stream``: ``default_rng([seed, *stream])``."""
        return np.random.default_rng([self.seed, *stream])


Records = Mapping[str, dict]
"""The records of a run's cells by name, in declared order; each has ``config`` and ``seconds``."""


@dataclass(frozen=True)
class Experiment:
    """A workflow's experiment: settings, cells, their computation, summary and figures.

    Parameters
    ----------
    settings : mapping
        ``{"quick": {...}, "full": {...}}``, JSON-like; the run's is written as
        the summary's ``settings``.
    cells : callable
        ``settings -> iterable of Cell``: the run's cells, in the order they
        should start.
    compute : callable
        ``CellRun -> dict``: one cell's record (JSON-like).
    summarise : callable
        ``(settings, records) -> dict``: the summary; the runner adds
        ``settings``, ``seed`` and ``compute_seconds`` (the wall seconds of
        computing every cell, in whichever run computed it).
    seed : int
        The experiment's seed (:attr:`CellRun.seed`).
    figures : callable, optional
        ``(out, summary, records) -> None``: writes the figures into ``out``.
    jobs : int or None, default 1
        Cells at a time; ``None`` is one per core.
    """

    settings: Mapping[str, Mapping[str, Any]]
    cells: Callable[[Mapping[str, Any]], Iterable[Cell]]
    compute: Callable[[CellRun], Mapping[str, Any]]
    summarise: Callable[[Mapping[str, Any], Records], Mapping[str, Any]]
    seed: int
    figures: Callable[[Path, Mapping[str, Any], Records], None] | None = None
    jobs: int | None = 1

    def __post_init__(self) -> None:
        if not isinstance(self.settings, Mapping) or set(self.settings) != {"quick", "full"}:
            raise ValueError("settings must have exactly the keys 'quick' and 'full'")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")
        if self.jobs is not None and (
            isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1
        ):
            raise ValueError(f"jobs must be a positive int or None, got {self.jobs!r}")

    def run(self, out: Path, quick: bool) -> dict[str, Any]:
        """Compute (or read back) every cell into ``out/runs``, write the figures, return the summary.

        Raises
        ------
        ValueError
            Before any work, if the cells are not well declared (a name twice,
            a need not declared before); and if a stored piece has other
            parameters (:class:`stanflow.pieces.ConfigurationError`).
        """
        settings = self.settings["quick" if quick else "full"]
        cells = declared_cells(self.cells(settings))
        pieces = Pieces(Path(out) / "runs")
        jobs = default_threads() if self.jobs is None else self.jobs
        records = run_cells(
            cells, lambda cell, needed: self._piece(Path(out), pieces, settings, cell, needed),
            pieces, jobs)
        summary = dict(self.summarise(settings, records))
        taken = [key for key in RUNNER_KEYS if key in summary]
        if taken:
            raise ValueError(f"summary keys {taken} are the runner's; rename them")
        summary |= {
            "settings": settings,
            "seed": self.seed,
            "compute_seconds": float(sum(record["seconds"] for record in records.values())),
        }
        if self.figures is not None:
            self.figures(Path(out), summary, records)
        return summary

    def _piece(
        self, out: Path, pieces: Pieces, settings: Mapping[str, Any], cell: Cell, needed: Records
    ) -> dict:
        """The cell's record: read back, or computed and kept."""
        run = CellRun(cell, settings, self.seed, needed, pieces.scratch(cell.name), out)
        return pieces.get(cell.name, {**cell.params, "seed": self.seed}, lambda: self.compute(run))


def declared_cells(cells: Iterable[Cell]) -> list[Cell]:
    """``cells`` as a list, checked: unique names, each need declared before the cell."""
    checked: list[Cell] = []
    names: set[str] = set()
    for cell in cells:
        if not isinstance(cell, Cell):
            raise TypeError(f"cells must be Cell objects, got {type(cell).__name__}")
        if cell.name in names:
            raise ValueError(f"cell {cell.name!r} is declared twice")
        late = [need for need in cell.needs if need not in names]
        if late:
            raise ValueError(f"cell {cell.name!r} needs {late}, not declared before it")
        names.add(cell.name)
        checked.append(cell)
    return checked


def run_cells(
    cells: Sequence[Cell],
    piece: Callable[[Cell, Records], dict],
    pieces: Pieces,
    jobs: int,
) -> dict[str, dict]:
    """Every cell's record by name: ``piece(cell, needed)``, ``jobs`` at a time in threads.

    A cell starts once the cells it needs are done, declared order first.
    After a failure or Ctrl-C no new piece starts (``pieces.stop``), the
    running ones finish and are written, and the cause is raised.
    """
    records: dict[str, dict] = {}
    waiting = list(cells)
    running: dict[Future, Cell] = {}

    def guarded(cell: Cell, needed: Records) -> dict:
        try:
            return piece(cell, needed)
        except BaseException:
            pieces.stop.set()  # before any other cell can start a piece
            raise

    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        while waiting or running:
            for cell in [c for c in waiting if all(n in records for n in c.needs)]:
                if len(running) == jobs:
                    break
                waiting.remove(cell)
                needed = {name: records[name] for name in cell.needs}
                running[pool.submit(guarded, cell, needed)] = cell
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                records[running.pop(future).name] = future.result()
    finally:
        pieces.stop.set()
        pool.shutdown(cancel_futures=True)
    return {cell.name: records[cell.name] for cell in cells}
