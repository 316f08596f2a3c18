"""Running a chunk of jobs: stanflow's batch mode, or one process per job.

This is the code that runs where the executables run (a local thread or a Dask
worker). With stanflow's driver a chunk is one process, ``<exe> batch
JOBS.jsonl``, which prints ``stanflow-batch: <line> <exit code>`` after each
job; the lines are read as they come, so each job is reported as soon as it
ends. A job that exceeds the timeout gets its process killed, is reported as
timed out, and the jobs after it go to a new process; so does a process that
dies in the middle of a job. A user's own CmdStan has no batch mode: each job
is then its own process.

A job writes its CSV files into a staging folder; on success they are moved to
their final names with ``os.replace``, so a final file is always complete.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from stanflow.runs.jobs import Chunk, Job, Outcome

POLL_SECONDS = 0.2
"""How often a waiting worker checks whether it was asked to stop."""

WATCH_SECONDS = 0.5
"""How often a running Dask task asks the scheduler whether it was asked to stop."""

_BATCH_LINE = re.compile(rb"^stanflow-batch: (\d+) (-?\d+)$")
_CONSOLE_TAIL_BYTES = 4000
_CONSOLE_TAIL_LINES = 12

Report = Callable[[Outcome], None]


def supports_batch(exe: str | os.PathLike) -> bool:
    """Whether ``exe`` has stanflow's batch mode.

    Runs ``exe batch /dev/null``: stanflow's driver accepts the empty job list
    and exits 0; CmdStan rejects ``batch`` as an unknown argument.
    """
    result = subprocess.run(
        [str(exe), "batch", os.devnull],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return result.returncode == 0 and not result.stdout.strip()


def run_chunk(
    chunk: Chunk, report: Report, stop: threading.Event | None = None
) -> None:
    """Run the jobs of ``chunk``, calling ``report`` once per job as it ends.

    Parameters
    ----------
    chunk : Chunk
    report : callable
        Receives each job's :class:`Outcome`, from the calling thread.
    stop : threading.Event, optional
        When set, running processes are killed and the remaining jobs are
        dropped without a report (their executor is shutting down).

    Notes
    -----
    Unless stopped, every job is reported exactly once: an unexpected error
    (say, the executable cannot be started) is reported as an ``error``
    outcome for each job not yet reported.
    """
    reported: set[int] = set()

    def tell(outcome: Outcome) -> None:
        reported.add(outcome.index)
        report(outcome)

    try:
        if chunk.batch:
            remaining: Sequence[Job] = chunk.jobs
            while remaining and not _stopped(stop):
                remaining = _run_batch_process(chunk, remaining, tell, stop)
        else:
            for job in chunk.jobs:
                if _stopped(stop):
                    break
                _run_single_process(chunk, job, tell, stop)
    except Exception:
        message = traceback.format_exc()
        for job in chunk.jobs:
            if job.index not in reported and not _stopped(stop):
                report(Outcome(job.index, job.attempt, "error", None, 0.0, message))


def run_chunk_collect(chunk: Chunk, stop_event: str) -> list[Outcome]:
    """Run ``chunk`` and return all its outcomes (the task a Dask worker runs).

    Parameters
    ----------
    chunk : Chunk
    stop_event : str
        Name of a ``distributed.Event``: once it is set, the chunk stops as
        :func:`run_chunk` does when asked to (its process is killed).
    """
    outcomes: list[Outcome] = []
    with _watched(stop_event) as stop:
        run_chunk(chunk, outcomes.append, stop)
    return outcomes


@contextmanager
def _watched(name: str) -> Iterator[threading.Event]:
    """An event set when the Dask event ``name`` is set, watched by a thread of its own."""
    from distributed import Event, get_client  # only a Dask worker runs this

    remote = Event(name, client=get_client())  # the task's client, usable from any thread
    stop, ended = threading.Event(), threading.Event()

    def watch() -> None:
        try:
            while not ended.wait(WATCH_SECONDS):
                if remote.is_set():  # a quick look: no wait left on the scheduler
                    stop.set()
                    return
        except OSError:  # the scheduler went away (the cluster closed): no stop can come
            return

    threading.Thread(target=watch, daemon=True).start()
    try:
        yield stop
    finally:
        ended.set()


def _run_batch_process(
    chunk: Chunk, jobs: Sequence[Job], tell: Report, stop: threading.Event | None
) -> Sequence[Job]:
    """Run ``jobs`` in one batch process; return the jobs it did not get to."""
    jobs_file = Path(chunk.workdir) / f"batch-{uuid.uuid4().hex}.jsonl"
    jobs_file.write_text(
        "".join(
            json.dumps({"args": list(job.args), "console": job.console}) + "\n"
            for job in jobs
        )
    )
    process = subprocess.Popen(
        [chunk.exe, "batch", str(jobs_file)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None  # stdout=PIPE
    try:
        return _follow_batch(process, chunk, jobs, tell, stop)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        process.stdout.close()
        jobs_file.unlink(missing_ok=True)


def _follow_batch(
    process: subprocess.Popen,
    chunk: Chunk,
    jobs: Sequence[Job],
    tell: Report,
    stop: threading.Event | None,
) -> Sequence[Job]:
    """Read a batch process's report lines until it ends, times out or is stopped."""
    assert process.stdout is not None  # stdout=PIPE
    fd = process.stdout.fileno()
    position, pending = 0, b""
    other: list[bytes] = []
    started = time.monotonic()
    while position < len(jobs):
        if _stopped(stop):
            return []
        wait = _wait_seconds(started, chunk.timeout, stop)
        if wait is not None and wait <= 0:
            job = jobs[position]
            tell(_timed_out(job, chunk.timeout))
            return jobs[position + 1 :]
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            continue
        data = os.read(fd, 65536)
        if not data:
            job = jobs[position]
            code = process.wait()
            text = b"\n".join(other).decode(errors="replace").strip()
            tell(
                Outcome(
                    job.index,
                    job.attempt,
                    "failed",
                    code,
                    time.monotonic() - started,
                    f"the executable ended (exit code {code}) during this run"
                    + (f"; it printed:\n{text}" if text else "")
                    + _console_tail(job),
                )
            )
            return jobs[position + 1 :]
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            match = _BATCH_LINE.match(line.strip())
            if match is None:
                other.append(line)
                continue
            now = time.monotonic()
            position = int(match[1])
            tell(_finished(jobs[position], int(match[2]), now - started))
            position += 1
            started = now
    return []


def _run_single_process(
    chunk: Chunk, job: Job, tell: Report, stop: threading.Event | None
) -> None:
    with open(job.console, "wb") as console:
        process = subprocess.Popen(
            [chunk.exe, *job.args],
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
        )
    started = time.monotonic()
    try:
        while True:
            if _stopped(stop):
                return
            wait = _wait_seconds(started, chunk.timeout, stop)
            if wait is not None and wait <= 0:
                tell(_timed_out(job, chunk.timeout))
                return
            try:
                code = process.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    tell(_finished(job, code, time.monotonic() - started))


def _wait_seconds(
    started: float, timeout: float | None, stop: threading.Event | None
) -> float | None:
    """How long to wait for the process now: None is forever, <= 0 is timed out."""
    waits = []
    if timeout is not None:
        waits.append(started + timeout - time.monotonic())
    if stop is not None:
        waits.append(POLL_SECONDS)
    return min(waits) if waits else None


def _finished(job: Job, code: int, wall_time: float) -> Outcome:
    """A job's outcome from its exit code; on success its files are moved into place."""
    if code != 0:
        return Outcome(
            job.index,
            job.attempt,
            "failed",
            code,
            wall_time,
            f"exit code {code}" + _console_tail(job),
        )
    missing = [staged for staged in job.staged if not os.path.exists(staged)]
    if missing:
        return Outcome(
            job.index,
            job.attempt,
            "error",
            code,
            wall_time,
            f"exit code 0 but no output file {missing[0]}" + _console_tail(job),
        )
    for staged, final in zip(job.staged, job.outputs, strict=True):
        os.replace(staged, final)
    return Outcome(job.index, job.attempt, "ok", code, wall_time)


def _timed_out(job: Job, timeout: float | None) -> Outcome:
    return Outcome(
        job.index,
        job.attempt,
        "timeout",
        None,
        float(timeout or 0.0),
        f"killed after the timeout of {timeout} s" + _console_tail(job),
    )


def _console_tail(job: Job) -> str:
    return console_tail(job.console)


def console_tail(path: str | os.PathLike) -> str:
    """The last lines of a console file, headed by its path, for failure messages.

    Returns ``""`` when the file cannot be read.
    """
    try:
        with open(path, "rb") as console:
            console.seek(0, os.SEEK_END)
            console.seek(max(0, console.tell() - _CONSOLE_TAIL_BYTES))
            text = console.read().decode(errors="replace")
    except OSError:
        return ""
    lines = text.strip().splitlines()[-_CONSOLE_TAIL_LINES:]
    return f"\n--- end of console ({path}) ---\n" + "\n".join(lines)


def _stopped(stop: threading.Event | None) -> bool:
    return stop is not None and stop.is_set()
