"""Jobs, chunks and outcomes: the plain data passed between a run set and its executors.

A :class:`Job` is one attempt of one run: a CmdStan command line and its files.
A :class:`Chunk` is the unit an executor schedules: jobs run one after another
by one executable process (stanflow's batch mode) or by one process each (a
user's own CmdStan). Each job of a chunk ends in exactly one :class:`Outcome`.
All three are picklable dataclasses of str/int/float, so that a Dask worker can
receive a chunk and send outcomes back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MAX_CHUNK = 64
"""Most jobs in one chunk (one executable process)."""

GUIDED_FACTOR = 2
"""Each chunk takes ``1 / (GUIDED_FACTOR * cores)`` of the jobs still unassigned."""


@dataclass(frozen=True)
class Job:
    """One attempt of one run.

    Attributes
    ----------
    index : int
        The run's index in its run set.
    attempt : int
        1 for the first attempt.
    args : tuple of str
        CmdStan's command line without the executable.
    console : str
        File receiving the console text.
    staged, outputs : tuple of str
        Files the command writes, and where they are moved on success.
    """

    index: int
    attempt: int
    args: tuple[str, ...]
    console: str
    staged: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Chunk:
    """Jobs for one executable process (or, without batch mode, one after another).

    Attributes
    ----------
    exe : str
        The model executable.
    batch : bool
        Use stanflow's batch mode (one process for all jobs).
    cores : int
        Cores the chunk keeps busy (the jobs' ``num_threads``).
    timeout : float or None
        Seconds one job may take.
    jobs : tuple of Job
    workdir : str
        Folder for the batch job files.
    """

    exe: str
    batch: bool
    cores: int
    timeout: float | None
    jobs: tuple[Job, ...]
    workdir: str


@dataclass(frozen=True)
class Outcome:
    """How one job ended.

    Attributes
    ----------
    index, attempt : int
        As in the job.
    status : str
        ``ok``; ``failed`` (non-zero exit code); ``timeout`` (killed after the
        timeout); ``error`` (could not be run, or the worker failed).
    exit_code : int or None
        The process's exit code when it has one for this job.
    wall_time : float
        Seconds the job took, as seen by the worker.
    message : str
        For anything but ``ok``: what went wrong and the end of the console text.
    """

    index: int
    attempt: int
    status: str
    exit_code: int | None
    wall_time: float
    message: str = ""


def chunk_sizes(jobs: int, cores: int) -> list[int]:
    """Sizes of consecutive chunks for ``jobs`` jobs on ``cores`` cores ("guided").

    Each chunk takes a fixed share of the jobs not yet assigned (at most
    :data:`MAX_CHUNK`, at least 1), so chunks start large, which keeps process
    starts few, and end with single jobs, so the cores finish close together.
    """
    sizes = []
    remaining = jobs
    while remaining > 0:
        size = min(MAX_CHUNK, max(1, math.ceil(remaining / (GUIDED_FACTOR * cores))))
        sizes.append(size)
        remaining -= size
    return sizes


def make_chunks(
    jobs: Sequence[tuple[Job, int]],
    *,
    exe: str,
    batch: bool,
    cores: int,
    timeout: float | None,
    workdir: str,
    size: int | None = None,
) -> list[Chunk]:
    """Group jobs into chunks of equal thread count, in order.

    Parameters
    ----------
    jobs : sequence of (Job, int)
        Each job with its process's thread count (0 for an executable without
        threads). A batch process sets up its thread pool once, so one chunk
        holds jobs of one thread count only.
    exe, batch, timeout, workdir
        As in :class:`Chunk`.
    cores : int
        Cores of the executor, for :func:`chunk_sizes`.
    size : int, optional
        Jobs per chunk, instead of :func:`chunk_sizes`.

    Returns
    -------
    list of Chunk
    """
    groups: dict[int, list[Job]] = {}
    for job, threads in jobs:
        groups.setdefault(threads, []).append(job)
    chunks = []
    for threads, group in groups.items():
        slots = max(1, cores // max(1, threads))
        sizes = (
            [size] * math.ceil(len(group) / size)
            if size
            else chunk_sizes(len(group), slots)
        )
        start = 0
        for step in sizes:
            chunks.append(
                Chunk(
                    exe=exe,
                    batch=batch,
                    cores=max(1, threads),
                    timeout=timeout,
                    jobs=tuple(group[start : start + step]),
                    workdir=workdir,
                )
            )
            start += step
    return chunks
