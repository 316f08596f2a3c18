"""The public API: a set of independent Stan runs of one compiled model.

Three steps, as in cmdstanpy (model, run, fit): :class:`RunSet` validates the
specifications and writes the plan into its folder; :meth:`RunSet.run` executes
what is not done yet, yielding a :class:`RunResult` per run as it finishes;
:meth:`RunSet.to_inference_data` reads all results into one InferenceData with
a ``run`` dimension. :meth:`RunSet.open` and :func:`resume` continue a run set
from its folder alone, for instance after a crash.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import uuid
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cmdstanpy
import numpy as np
import xarray as xr
from tqdm.auto import tqdm

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.outdir import Interrupted
from stanflow.runs.arguments import is_int, is_real
from stanflow.runs.batch import supports_batch
from stanflow.runs.commands import (
    LOGS_DIR,
    OUTPUT_DIR,
    STAGING_DIR,
    command_tokens,
    console_file,
    output_files,
    staged_files,
)
from stanflow.runs.executors import Executor, LocalExecutor
from stanflow.runs.jobs import Chunk, Job, Outcome, make_chunks
from stanflow.runs.manifest import Manifest, Record, read_manifest
from stanflow.runs.plan import Plan, PlannedRun, make_plan, read_plan, write_plan
from stanflow.runs.results import RUN_DIM, RunDraws, collect, read_run
from stanflow.runs.seeds import new_root_seed
from stanflow.runs.sizes import declared_shapes
from stanflow.runs.spec import (
    InvalidRunSpec,
    ModelInterface,
    RunSpec,
    as_spec,
    check_spec,
)

logger = logging.getLogger("stanflow.runs")

_LOCK_FILE = ".lock"


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


class RunSet:
    """Independent runs of one compiled model, with their own folder.

    Parameters
    ----------
    model : cmdstanpy.CmdStanModel
        A compiled model (e.g. from :func:`stanflow.models.compile_model`).
    specs : iterable of RunSpec or mapping
        One specification per run; a mapping holds :class:`RunSpec` fields.
        All runs share one method and number of chains, so that their results
        stack into one InferenceData.
    out_dir : str or os.PathLike
        The run set's folder: plan, manifest, inputs, outputs, console logs.
        If it already holds this same run set, the RunSet continues it.
    root_seed : int, optional
        Seeds of runs without their own come from it (run ``i`` gets the
        ``i``-th ``SeedSequence`` child), so results do not depend on
        scheduling. Default: fresh entropy, recorded in the plan.

    Raises
    ------
    TypeError
        If ``model`` is not a CmdStanModel.
    ValueError
        If the executable does not exist, ``specs`` is empty, or ``out_dir``
        holds a different run set.
    InvalidRunSpec
        If a specification does not fit the model or CmdStan's arguments, naming
        the run and the field. Nothing is written or launched then.
    """

    def __init__(
        self,
        model: cmdstanpy.CmdStanModel,
        specs: Iterable[RunSpec | Mapping[str, Any]],
        *,
        out_dir: str | os.PathLike,
        root_seed: int | None = None,
    ) -> None:
        exe, interface = _model_interface(model)
        specs = list(specs)
        if not specs:
            raise ValueError("specs is empty: a run set needs at least one run")
        checked = [
            check_spec(as_spec(spec, i), i, interface) for i, spec in enumerate(specs)
        ]
        for run in checked[1:]:
            for name in ("method", "chains"):
                if getattr(run, name) != getattr(checked[0], name):
                    raise InvalidRunSpec(
                        run.index,
                        name,
                        f"{getattr(run, name)!r} differs from run 0's "
                        f"{getattr(checked[0], name)!r}; the runs of a run set share "
                        "one method and number of chains",
                    )
        if root_seed is None:
            root_seed = new_root_seed()
        elif not is_int(root_seed) or root_seed < 0:
            raise ValueError(f"root_seed must be an int >= 0, got {root_seed!r}")
        folder = Path(out_dir).absolute()
        folder.mkdir(parents=True, exist_ok=True)
        plan = make_plan(
            checked,
            exe=exe,
            root_seed=int(root_seed),
            batch=supports_batch(exe),
            folder=folder,
        )
        write_plan(folder, plan)
        self._folder = folder
        self._plan = plan

    @classmethod
    def open(cls, out_dir: str | os.PathLike) -> RunSet:
        """The run set in ``out_dir``, from its plan alone (no model needed).

        Raises
        ------
        ValueError
            If ``out_dir`` holds no run set.
        """
        runset = cls.__new__(cls)
        runset._folder = Path(out_dir).absolute()
        runset._plan = read_plan(runset._folder)
        return runset

    @property
    def out_dir(self) -> Path:
        """The run set's folder."""
        return self._folder

    @property
    def plan(self) -> Plan:
        """What every run does (method, arguments, seed, input files)."""
        return self._plan

    def __len__(self) -> int:
        return len(self._plan.runs)

    def run(
        self,
        executor: Executor | None = None,
        *,
        retries: int = 1,
        timeout: float | None = None,
        chunk_size: int | None = None,
        progress: bool = True,
    ) -> Generator[RunResult, None, None]:
        """Run what is not done yet; yield each run's result as it finishes.

        Runs already done (an ``ok`` record in the manifest and their files
        present) are skipped, so calling this again after an interruption
        resumes. Nothing runs until the returned iterator is consumed, e.g.
        ``for result in runset.run(): ...`` or ``list(runset.run())``.

        Parameters
        ----------
        executor : Executor, optional
            Where to run: :class:`~stanflow.runs.LocalExecutor` (default) or
            :class:`~stanflow.runs.DaskExecutor`.
        retries : int
            Further attempts for a run that fails or times out, per call.
        timeout : float, optional
            Seconds one attempt may take before it is killed.
        chunk_size : int, optional
            Runs per executable process; default from the number of runs and cores.
        progress : bool
            Show a progress bar.

        Yields
        ------
        RunResult
            One per run that was not done, in the order they finish; failed
            runs too (after their last attempt), with their console text.

        Raises
        ------
        ValueError
            If an option is invalid (raised here, before anything runs).
        RuntimeError
            If another process is running this run set.
        stanflow.outdir.Interrupted
            On Ctrl-C while it waits for runs (a ``KeyboardInterrupt``): the
            running processes are killed, the finished runs stay recorded, and
            the message says how many and how to resume, e.g. ``interrupted;
            kept 37 finished runs of 200 in DIR; resume with:
            stanflow.runs.resume('DIR'), or the same call again with the same seed and out_dir``.
        """
        if not is_int(retries) or retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        if timeout is not None and (not is_real(timeout) or not timeout > 0):
            raise ValueError(f"timeout must be a number > 0 or None, got {timeout!r}")
        if chunk_size is not None and (not is_int(chunk_size) or chunk_size < 1):
            raise ValueError(
                f"chunk_size must be an int >= 1 or None, got {chunk_size!r}"
            )
        if executor is not None and not isinstance(executor, Executor):
            raise TypeError(
                f"executor must be an Executor, got {type(executor).__name__}"
            )
        if not os.access(self._plan.exe, os.X_OK):
            raise ValueError(
                f"the model executable {self._plan.exe} no longer exists; compile "
                "the model again (same program and options give the same path)"
            )
        return self._run(
            executor or LocalExecutor(),
            retries=int(retries),
            timeout=None if timeout is None else float(timeout),
            chunk_size=chunk_size,
            progress=progress,
        )

    def results(self) -> list[RunResult]:
        """The latest result of every run that has one, by index."""
        records = read_manifest(self._folder)
        return [
            self._result(run, records[run.index])
            for run in self._plan.runs
            if run.index in records
        ]

    def missing(self) -> list[int]:
        """Indices of the runs that are not done."""
        records = read_manifest(self._folder)
        return [run.index for run in self._plan.runs if not self._done(run, records)]

    def to_inference_data(
        self,
        *,
        coords: Mapping[str, Sequence[Any]] | None = None,
        dims: Mapping[str, Sequence[str]] | None = None,
    ) -> Results:
        """All results as one InferenceData with a ``run`` dimension.

        Parameters
        ----------
        coords, dims
            Coordinates and dim names for the Stan variables' own dims, as in
            :func:`stanflow.idata.to_inference_data`.

        Returns
        -------
        Results
            ``posterior`` and ``sample_stats`` with dims ``(chain, draw, run,
            ...)``; runs without results hold NaN. ``run_stats`` per run:
            ``status`` (``ok``, ``failed``, ``timeout``, ``error`` or
            ``missing``), ``attempts``, ``exit_code`` (-1 when there is none),
            ``seed``, ``wall_time``, and per ``(run, chain)`` ``total_time``
            (the CSV's ``Elapsed Time ... (Total)``) and, for ``sample``,
            ``divergences``. Root attributes: ``method``, ``root_seed``,
            ``n_runs``, ``n_ok``.

        Raises
        ------
        ValueError
            If no run has results, or runs have different output shapes.
        """
        records = read_manifest(self._folder)
        runs = self._plan.runs
        done = [self._done(run, records) for run in runs]
        method = runs[0].method
        groups = collect(
            [
                output_files(self._folder, run) if ok else None
                for run, ok in zip(runs, done, strict=True)
            ],
            method,
            coords=coords,
            dims=dims,
        )
        run_stats = _run_stats(runs, records).merge(groups.pop("chain_stats"))
        attrs = {
            "method": method,
            "root_seed": str(self._plan.root_seed),
            "n_runs": len(runs),
            "n_ok": int(sum(done)),
        }
        return arviz_compat.build(groups | {"run_stats": run_stats}, attrs=attrs)

    def _run(
        self,
        executor: Executor,
        *,
        retries: int,
        timeout: float | None,
        chunk_size: int | None,
        progress: bool,
    ) -> Generator[RunResult, None, None]:
        folder, plan = self._folder, self._plan
        with _folder_lock(folder):
            records = read_manifest(folder)
            todo = [run for run in plan.runs if not self._done(run, records)]
            if not todo:
                return
            session = _Session(
                folder=_new_session(folder),
                first={
                    run.index: records[run.index].attempt + 1 if run.index in records else 1
                    for run in todo
                },
                retries=retries,
                timeout=timeout,
            )
            try:
                with Manifest(folder) as manifest:
                    try:
                        executor.start([plan.exe, str(folder)])
                        attempts = [(run, session.first[run.index]) for run in todo]
                        for chunk in self._chunks(attempts, session, executor.cores, chunk_size):
                            session.submit(executor, chunk)
                        yield from self._follow(executor, manifest, session, progress)
                    except (KeyboardInterrupt, GeneratorExit) as stopped:
                        # Ctrl-C here, or in the caller's loop (which then closes this)
                        executor.stop()
                        session.keep_finished(executor.unread(), manifest)
                        if isinstance(stopped, GeneratorExit):
                            raise
                        raise self._interrupted() from None  # one message, not two
            finally:
                executor.stop()
                shutil.rmtree(session.folder, ignore_errors=True)

    def _follow(
        self, executor: Executor, manifest: Manifest, session: _Session, progress: bool
    ) -> Iterator[RunResult]:
        """Record each outcome as it arrives, then yield or retry its run; a progress bar."""
        with tqdm(
            total=len(session.running), disable=not progress, unit="run", desc="runs"
        ) as bar:
            for outcome in executor.outcomes():
                run = self._plan.runs[outcome.index]
                # out of `running` first: an interrupt between the two lines then
                # leaves an unrecorded run (redone later), never a recorded run
                # whose console the clean-up would delete
                del session.running[run.index]
                record = manifest.append(outcome)
                if not session.final(outcome):
                    self._retry(executor, run, outcome, session)
                    continue
                bar.update()
                if outcome.status != "ok":
                    logger.warning(
                        "run %d ended with %s after attempt %d: %s",
                        run.index,
                        outcome.status,
                        outcome.attempt,
                        outcome.message,
                    )
                yield self._result(run, record)

    def _interrupted(self) -> Interrupted:
        """Ctrl-C's one line: the runs done and kept in the folder, and how to resume."""
        done = len(self) - len(self.missing())
        command = (
            f"stanflow.runs.resume({str(self._folder)!r}), or the same call again with the "
            "same seed and out_dir"
        )
        return Interrupted(self._folder, command, done, unit="run", total=len(self))

    def _retry(
        self, executor: Executor, run: PlannedRun, outcome: Outcome, session: _Session
    ) -> None:
        """Submit the next attempt of ``run``, alone in its chunk."""
        logger.info(
            "run %d: attempt %d ended with %s; retrying",
            run.index,
            outcome.attempt,
            outcome.status,
        )
        (chunk,) = self._chunks([(run, outcome.attempt + 1)], session, executor.cores, None)
        session.submit(executor, chunk)

    def _chunks(
        self,
        attempts: Sequence[tuple[PlannedRun, int]],
        session: _Session,
        cores: int,
        size: int | None,
    ) -> list[Chunk]:
        """The chunks running each run at its attempt number."""
        return make_chunks(
            [
                (self._job(run, attempt, session.folder), run.threads)
                for run, attempt in attempts
            ],
            exe=self._plan.exe,
            batch=self._plan.batch,
            cores=cores,
            timeout=session.timeout,
            workdir=str(session.folder),
            size=size,
        )

    def _job(self, run: PlannedRun, attempt: int, session: Path) -> Job:
        return Job(
            index=run.index,
            attempt=attempt,
            args=tuple(command_tokens(self._folder, run, session)),
            console=str(console_file(self._folder, run, attempt)),
            staged=tuple(map(str, staged_files(session, run))),
            outputs=tuple(map(str, output_files(self._folder, run))),
        )

    def _done(self, run: PlannedRun, records: Mapping[int, Record]) -> bool:
        record = records.get(run.index)
        return (
            record is not None
            and record.status == "ok"
            and all(path.is_file() for path in output_files(self._folder, run))
        )

    def _result(self, run: PlannedRun, record: Record) -> RunResult:
        return RunResult(
            index=run.index,
            status=record.status,
            attempts=record.attempt,
            exit_code=record.exit_code,
            seed=run.seed,
            method=run.method,
            wall_time=record.wall_time,
            outputs=output_files(self._folder, run),
            console=console_file(self._folder, run, record.attempt),
            message=record.message,
        )


@dataclass
class _Session:
    """One call of :meth:`RunSet.run`: its staging folder, its attempts, its runs in flight.

    Attributes
    ----------
    folder : pathlib.Path
        Where its attempts write (``staging/<session>``).
    first : dict of int to int
        The first attempt number of each run, by index.
    retries : int
    timeout : float or None
        As given to :meth:`RunSet.run`.
    running : dict of int to Job
        The job of each run submitted whose outcome is not recorded yet.
    """

    folder: Path
    first: dict[int, int]
    retries: int
    timeout: float | None
    running: dict[int, Job] = field(default_factory=dict)

    def submit(self, executor: Executor, chunk: Chunk) -> None:
        """Submit ``chunk``, its jobs running until their outcome is recorded."""
        self.running.update((job.index, job) for job in chunk.jobs)
        executor.submit(chunk)

    def final(self, outcome: Outcome) -> bool:
        """Whether ``outcome`` ends its run: a success, or its last attempt."""
        retried = outcome.attempt - self.first[outcome.index]
        return outcome.status == "ok" or retried >= self.retries

    def keep_finished(self, outcomes: Iterable[Outcome], manifest: Manifest) -> None:
        """After a stop: record the runs that succeeded as it came, drop the others' consoles.

        The jobs still running were killed (or had not started), so their
        console text is cut short; a later attempt under the same number
        writes it anew.
        """
        for outcome in outcomes:
            if outcome.status == "ok" and outcome.index in self.running:
                manifest.append(outcome)
                del self.running[outcome.index]
        for job in self.running.values():
            Path(job.console).unlink(missing_ok=True)


def resume(
    out_dir: str | os.PathLike, executor: Executor | None = None, **options: Any
) -> RunSet:
    """Finish the run set in ``out_dir``: run only what is missing, then return it.

    Parameters
    ----------
    out_dir : str or os.PathLike
        A run set's folder.
    executor : Executor, optional
    **options
        ``retries``, ``timeout``, ``chunk_size``, ``progress``: see :meth:`RunSet.run`.

    Returns
    -------
    RunSet
        Its results equal those of an uninterrupted run: seeds, data and
        arguments all come from the plan.

    Raises
    ------
    stanflow.outdir.Interrupted
        On Ctrl-C, as :meth:`RunSet.run`.
    """
    runset = RunSet.open(out_dir)
    # consumed by C code: Ctrl-C then always lands inside the run, which says what it kept
    deque(runset.run(executor, **options), maxlen=0)
    return runset


def _run_stats(runs: Sequence[PlannedRun], records: Mapping[int, Record]) -> xr.Dataset:
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


def _model_interface(model: cmdstanpy.CmdStanModel) -> tuple[str, ModelInterface]:
    if not isinstance(model, cmdstanpy.CmdStanModel):
        raise TypeError(
            f"model must be a cmdstanpy.CmdStanModel, got {type(model).__name__}"
        )
    exe = model.exe_file
    if not exe or not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        raise ValueError(
            f"model: executable {exe!r} does not exist; compile the model first"
        )
    info = model.src_info() if model.stan_file else {}
    shapes = declared_shapes(model.code() or "") if model.stan_file else None
    threaded = str(model.exe_info().get("STAN_THREADS", "false")).lower() == "true"
    return str(Path(exe).absolute()), ModelInterface(
        inputs=info.get("inputs"),
        parameters=info.get("parameters"),
        threaded=threaded,
        shapes=shapes,
    )


def _new_session(folder: Path) -> Path:
    """Prepare the folders of a new session; drop staging left by earlier ones."""
    for name in (OUTPUT_DIR, LOGS_DIR):
        (folder / name).mkdir(exist_ok=True)
    staging = folder / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)
    session = staging / uuid.uuid4().hex[:12]
    session.mkdir(parents=True)
    return session


@contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder/.lock`` so that two processes never run one run set at once."""
    with open(folder / _LOCK_FILE, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"{folder} is being run by another process") from None
        yield
