"""One call of :meth:`stanflow.runs.RunSet.run`: the runs not done yet, scheduled and followed.

A session holds the run set's folder (:func:`stanflow.runs.bookkeeping.hold_folder`),
gives its attempts a staging folder of their own (``staging/<session>``), submits
the runs in chunks to an executor, records each outcome in the manifest as it
arrives and submits the next attempt of a run that failed while it has retries
left. Ctrl-C stops the executor and keeps the runs that finished
(:class:`stanflow.outdir.Interrupted`).
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from stanflow.outdir import Interrupted
from stanflow.runs.bookkeeping import RunResult, hold_folder, is_done, run_result
from stanflow.runs.commands import (
    LOGS_DIR,
    OUTPUT_DIR,
    STAGING_DIR,
    command_tokens,
    console_file,
    output_files,
    staged_files,
)
from stanflow.runs.executors import Executor
from stanflow.runs.jobs import Chunk, Job, Outcome, make_chunks
from stanflow.runs.manifest import Manifest, read_manifest
from stanflow.runs.plan import Plan, PlannedRun

logger = logging.getLogger("stanflow.runs")


def run_session(
    folder: Path,
    plan: Plan,
    executor: Executor,
    *,
    retries: int,
    timeout: float | None,
    chunk_size: int | None,
    progress: bool,
) -> Generator[RunResult, None, None]:
    """Run what is not done of the set ``plan`` in ``folder``; yield each result as it ends.

    The options are :meth:`stanflow.runs.RunSet.run`'s, checked.
    """
    with hold_folder(folder):
        records = read_manifest(folder)
        todo = [run for run in plan.runs if not is_done(folder, run, records)]
        if not todo:
            return
        session = Session(
            folder=folder,
            plan=plan,
            staging=_new_staging(folder),
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
                    for chunk in session.chunks(attempts, executor.cores, chunk_size):
                        session.submit(executor, chunk)
                    yield from session.follow(executor, manifest, progress)
                except (KeyboardInterrupt, GeneratorExit) as stopped:
                    # Ctrl-C here, or in the caller's loop (which then closes this)
                    executor.stop()
                    session.keep_finished(executor.finished(), manifest)
                    if isinstance(stopped, GeneratorExit):
                        raise
                    raise _interrupted(folder, plan) from None  # one message, not two
        finally:
            executor.stop()
            shutil.rmtree(session.staging, ignore_errors=True)


@dataclass
class Session:
    """One call of :meth:`RunSet.run`: its staging folder, its attempts, its runs in flight.

    Attributes
    ----------
    folder : pathlib.Path
        The run set's folder.
    plan : Plan
        The run set's plan.
    staging : pathlib.Path
        Where its attempts write (``staging/<session>``).
    first : dict of int to int
        The first attempt number of each run, by index.
    retries : int
    timeout : float or None
        As given to :meth:`RunSet.run`.
    jobs : dict of int to Job
        The latest job submitted of each run.
    """

    folder: Path
    plan: Plan
    staging: Path
    first: dict[int, int]
    retries: int
    timeout: float | None
    jobs: dict[int, Job] = field(default_factory=dict)

    def submit(self, executor: Executor, chunk: Chunk) -> None:
        """Submit ``chunk``."""
        self.jobs.update((job.index, job) for job in chunk.jobs)
        executor.submit(chunk)

    def final(self, outcome: Outcome) -> bool:
        """Whether ``outcome`` ends its run: a success, or its last attempt."""
        retried = outcome.attempt - self.first[outcome.index]
        return outcome.status == "ok" or retried >= self.retries

    def follow(
        self, executor: Executor, manifest: Manifest, progress: bool
    ) -> Iterator[RunResult]:
        """Record each outcome as it arrives, then yield or retry its run; a progress bar."""
        with tqdm(
            total=len(self.jobs), disable=not progress, unit="run", desc="runs"
        ) as bar:
            for outcome in executor.outcomes():
                run = self.plan.runs[outcome.index]
                record = manifest.append(outcome)
                if not self.final(outcome):
                    self._retry(executor, run, outcome)
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
                yield run_result(self.folder, run, record)

    def keep_finished(self, outcomes: Iterable[Outcome], manifest: Manifest) -> None:
        """After a stop: record the runs that succeeded unrecorded, drop the others' consoles.

        ``outcomes`` are every outcome of the session (:meth:`Executor.finished`);
        the manifest on disk says which are recorded, so a Ctrl-C anywhere
        between a run's end (its files moved into place) and its record loses
        nothing. The jobs still running were killed (or had not started), so
        their console text is cut short; a later attempt under the same number
        writes it anew.
        """
        records = read_manifest(self.folder)

        def recorded(index: int, attempt: int) -> bool:
            # attempts of a run are recorded in order: the latest covers earlier ones
            return index in records and records[index].attempt >= attempt

        for outcome in outcomes:
            if outcome.status == "ok" and not recorded(outcome.index, outcome.attempt):
                records[outcome.index] = manifest.append(outcome)
        for job in self.jobs.values():
            if not recorded(job.index, job.attempt):
                Path(job.console).unlink(missing_ok=True)

    def chunks(
        self, attempts: Sequence[tuple[PlannedRun, int]], cores: int, size: int | None
    ) -> list[Chunk]:
        """The chunks running each run at its attempt number."""
        return make_chunks(
            [(self._job(run, attempt), run.threads) for run, attempt in attempts],
            exe=self.plan.exe,
            batch=self.plan.batch,
            cores=cores,
            timeout=self.timeout,
            workdir=str(self.staging),
            size=size,
        )

    def _retry(self, executor: Executor, run: PlannedRun, outcome: Outcome) -> None:
        """Submit the next attempt of ``run``, alone in its chunk."""
        logger.info(
            "run %d: attempt %d ended with %s; retrying",
            run.index,
            outcome.attempt,
            outcome.status,
        )
        (chunk,) = self.chunks([(run, outcome.attempt + 1)], executor.cores, None)
        self.submit(executor, chunk)

    def _job(self, run: PlannedRun, attempt: int) -> Job:
        return Job(
            index=run.index,
            attempt=attempt,
            args=tuple(command_tokens(self.folder, run, self.staging)),
            console=str(console_file(self.folder, run, attempt)),
            staged=tuple(map(str, staged_files(self.staging, run))),
            outputs=tuple(map(str, output_files(self.folder, run))),
        )


def _interrupted(folder: Path, plan: Plan) -> Interrupted:
    """Ctrl-C's one line: the runs done and kept in the folder, and how to resume."""
    records = read_manifest(folder)
    done = sum(is_done(folder, run, records) for run in plan.runs)
    command = (
        f"stanflow.runs.resume({str(folder)!r}), or the same call again with the "
        "same seed and out_dir"
    )
    return Interrupted(folder, command, done, unit="run", total=len(plan.runs))


def _new_staging(folder: Path) -> Path:
    """Prepare the folders of a new session; drop staging left by earlier ones."""
    for name in (OUTPUT_DIR, LOGS_DIR):
        (folder / name).mkdir(exist_ok=True)
    staging = folder / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)
    session = staging / uuid.uuid4().hex[:12]
    session.mkdir(parents=True)
    return session
