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

import hashlib
import json
import queue
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stanflow.models.evaluation import default_threads
from stanflow.pieces import Pieces, Stopped
from stanflow.validation import check_int

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
        if any(part.endswith(".partial") for part in parts):
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
    report : callable, optional
        ``summary -> None``: prints what a reader of the console wants to see
        (called last).
    jobs : int or None, default 1
        Cells at a time; ``None`` is one per core.
    """

    settings: Mapping[str, Mapping[str, Any]]
    cells: Callable[[Mapping[str, Any]], Iterable[Cell]]
    compute: Callable[[CellRun], Mapping[str, Any]]
    summarise: Callable[[Mapping[str, Any], Records], Mapping[str, Any]]
    seed: int
    figures: Callable[[Path, Mapping[str, Any], Records], None] | None = None
    report: Callable[[Mapping[str, Any]], None] | None = None
    jobs: int | None = 1

    def __post_init__(self) -> None:
        if not isinstance(self.settings, Mapping) or set(self.settings) != {"quick", "full"}:
            raise ValueError("settings must have exactly the keys 'quick' and 'full'")
        object.__setattr__(self, "seed", check_int(self.seed, "seed", 0))
        if self.jobs is not None:
            object.__setattr__(self, "jobs", check_int(self.jobs, "jobs"))

    def run(self, out: Path, quick: bool) -> dict[str, Any]:
        """Compute (or read back) every cell into ``out/runs``, write the figures, return the summary.

        Raises
        ------
        ValueError
            Before any work, if the cells are not well declared (a name twice,
            a need not declared before), or if a stored cell that needs no other
            was computed with other parameters
            (:class:`stanflow.pieces.ConfigurationError`, naming the file and the
            fields); a cell that needs others is checked once they are done
            (its configuration holds their records' digests).
        KeyboardInterrupt
            On Ctrl-C, once the running cells are kept (a second Ctrl-C
            abandons them).
        """
        out = Path(out)
        settings = self.settings["quick" if quick else "full"]
        cells = declared_cells(self.cells(settings))
        pieces = Pieces(out / "runs")
        for cell in cells:  # stale pieces are found before any work
            if not cell.needs:
                pieces.check(cell.name, self._config(cell, {}))
        jobs = default_threads() if self.jobs is None else self.jobs
        records = _run_cells(
            cells, lambda cell, needed: self._piece(out, pieces, settings, cell, needed), pieces, jobs
        )
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
            self.figures(out, summary, records)
        if self.report is not None:
            self.report(summary)
        return summary

    def _config(self, cell: Cell, needed: Records) -> dict[str, Any]:
        """What a cell's record depends on: its params, the seed, the records it needs."""
        config = {**cell.params, "seed": self.seed}
        if cell.needs:
            config["needs"] = {name: record_digest(needed[name]) for name in cell.needs}
        return config

    def _piece(
        self, out: Path, pieces: Pieces, settings: Mapping[str, Any], cell: Cell, needed: Records
    ) -> dict:
        """The cell's record: read back (its files still there), or computed and kept."""
        run = CellRun(cell, settings, self.seed, needed, pieces.scratch(cell.name), out)
        config = self._config(cell, needed)
        record = pieces.get(cell.name, config, lambda: self.compute(run))
        missing = [name for name in record.get("files", []) if not (out / name).is_file()]
        if missing:  # a kept record whose files are gone: computed again, not trusted
            print(f"{cell.name}: {', '.join(missing)} missing from {out}: computing it again",
                  file=sys.stderr, flush=True)
            pieces.path(cell.name).unlink()
            record = pieces.get(cell.name, config, lambda: self.compute(run))
        return record


def own_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's record without the runner's ``config`` and ``seconds``."""
    return {key: value for key, value in record.items() if key not in ("config", "seconds")}


def record_digest(record: Mapping[str, Any]) -> str:
    """A digest of a record's content (its ``seconds`` left out: a rerun's time differs)."""
    content = {key: value for key, value in record.items() if key != "seconds"}
    text = json.dumps(content, sort_keys=True, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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


Finished = tuple[Cell, "dict | None", "BaseException | None"]


def _run_cells(
    cells: Sequence[Cell],
    piece: Callable[[Cell, Records], dict],
    pieces: Pieces,
    jobs: int,
) -> dict[str, dict]:
    """Every cell's record by name: ``piece(cell, needed)``, ``jobs`` at a time in threads.

    ``cells`` as :func:`declared_cells` returns them. A cell starts once the
    cells it needs are done, declared order first. After a failure no new cell
    starts (``pieces.stop``), the running ones finish and are kept, and the
    first failure other than :class:`~stanflow.pieces.Stopped` is raised (the
    others said on stderr). On Ctrl-C likewise, saying which cells are still
    running; a second Ctrl-C abandons them (their results are not kept, and
    their threads end with the process).
    """
    records: dict[str, dict] = {}
    waiting = list(cells)
    running: dict[str, Cell] = {}
    finished: queue.Queue[Finished] = queue.Queue()
    failures: list[tuple[Cell, BaseException]] = []

    def work(cell: Cell, needed: Records) -> None:
        try:
            finished.put((cell, piece(cell, needed), None))
        except BaseException as error:
            pieces.stop.set()  # before any other cell can start a piece
            finished.put((cell, None, error))

    def collect() -> None:
        cell, record, error = finished.get()
        del running[cell.name]
        if error is not None:
            failures.append((cell, error))
        elif record is not None:
            records[cell.name] = record

    try:
        while running or (waiting and not failures):
            for cell in [c for c in waiting if all(n in records for n in c.needs)]:
                if len(running) == jobs or failures:
                    break
                waiting.remove(cell)
                running[cell.name] = cell
                needed = {name: records[name] for name in cell.needs}
                threading.Thread(target=work, args=(cell, needed), name=f"cell {cell.name}",
                                 daemon=True).start()
            if not running:  # declared_cells makes this impossible; never wait for nothing
                raise RuntimeError(f"cells {[c.name for c in waiting]} need cells that never ran")
            collect()
    except KeyboardInterrupt:
        pieces.stop.set()
        if running:
            print(f"stopping: {len(running)} running cell(s) finish and are kept "
                  f"({', '.join(running)}); Ctrl-C again abandons them", file=sys.stderr, flush=True)
            try:
                while running:
                    collect()
            except KeyboardInterrupt:
                pieces.abandon()
                raise
        raise
    pieces.stop.set()
    if failures:
        causes = [f for f in failures if not isinstance(f[1], Stopped)] or failures
        for cell, error in causes[1:]:
            print(f"cell {cell.name} failed too: {error!r}", file=sys.stderr, flush=True)
        raise causes[0][1]
    return {cell.name: records[cell.name] for cell in cells}
