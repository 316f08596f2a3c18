"""Executors: where the chunks of a run set run. Local threads, or a Dask cluster.

Both have the same small interface, used by :meth:`stanflow.runs.RunSet.run`:
``start(paths)`` before anything is submitted, ``submit(chunk)`` any time,
``outcomes()`` yielding each job's :class:`~stanflow.runs.jobs.Outcome` as it
arrives (chunks submitted while iterating included), ``stop()`` to abandon
what is still running, promptly (its executable processes are killed), and
``finished()``, once stopped, every outcome of the jobs that ended (yielded or
not: a Ctrl-C can land between a job's end and its record). In-process work that
is not a CmdStan run (a function of NumPy arrays and a Stan program loaded in
process) runs through ``run_calls(fn, shared, items)``, with
:class:`stanflow.runs.Workers` keeping the results and retrying failures.

Workers and the run set share a filesystem: the executable, the inputs and the
outputs are read and written in place (see ``docs/runs.md`` for why).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import traceback
import uuid
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from stanflow.runs.batch import run_chunk, run_chunk_collect
from stanflow.runs.jobs import Chunk, Outcome
from stanflow.validation import check_int

logger = logging.getLogger("stanflow.runs")

STOP_WAIT_SECONDS = 5.0
"""How long a Dask stop waits for its tasks to end and report the jobs that ended."""


class Executor(ABC):
    """Runs chunks of jobs and streams their outcomes back."""

    @property
    @abstractmethod
    def cores(self) -> int:
        """Cores available to run jobs (used to size chunks)."""

    @abstractmethod
    def start(self, paths: Sequence[str]) -> None:
        """Prepare to run; ``paths`` must be visible wherever jobs run."""

    @abstractmethod
    def submit(self, chunk: Chunk) -> None:
        """Queue ``chunk``."""

    @abstractmethod
    def outcomes(self) -> Iterator[Outcome]:
        """Yield outcomes as jobs end, until every submitted job has one."""

    @abstractmethod
    def stop(self) -> None:
        """Abandon queued chunks and end running ones, killing their processes."""

    @abstractmethod
    def finished(self) -> list[Outcome]:
        """Once stopped, the outcome of every job that ended since :meth:`start`.

        Those :meth:`outcomes` yielded and those it had not yet: a job can end
        in the instant the run set stops (Ctrl-C), its files already in place.
        The run set records those its manifest lacks.
        """

    @abstractmethod
    def run_calls(
        self, fn: Callable[[Any, Any], Any], shared: Any, items: Sequence[Any]
    ) -> Iterator[Call]:
        """``fn(shared, item)`` for every item, yielding each :class:`Call` as it ends.

        ``shared`` is sent once wherever the calls run; ``fn``, ``shared`` and
        the items must pickle for executors in other processes. A call that
        raises ends as a failed :class:`Call` with its traceback; stopping the
        iteration (Ctrl-C) abandons the calls still running.
        """


@dataclass(frozen=True)
class Call:
    """How one call of :meth:`Executor.run_calls` ended.

    Attributes
    ----------
    index : int
        The item's position.
    ok : bool
    value : Any
        ``fn``'s return value, or the traceback text of a failed call.
    """

    index: int
    ok: bool
    value: Any


@dataclass(frozen=True)
class _Released:
    """A local chunk ended and gives its cores back."""

    cores: int


class LocalExecutor(Executor):
    """Run chunks on this machine, keeping ``cores`` cores busy and no more.

    A chunk needs as many cores as its jobs' threads (``chains *
    threads_per_chain``); it starts when that many are free, so chunks of
    single-threaded runs fill every core and threaded runs are not
    oversubscribed. A chunk needing more cores than there are runs alone.

    Parameters
    ----------
    cores : int, optional
        Cores to use; default: the cores this process may run on.
    """

    def __init__(self, cores: int | None = None) -> None:
        if cores is None:
            cores = len(os.sched_getaffinity(0))
        self._cores = check_int(cores, "cores")
        self._state: _LocalState | None = None
        self._finished: list[Outcome] = []

    @property
    def cores(self) -> int:
        return self._cores

    def start(self, paths: Sequence[str]) -> None:
        self._state = _LocalState(free=self._cores)
        self._finished = []

    def submit(self, chunk: Chunk) -> None:
        state = self._running()
        state.expected += len(chunk.jobs)
        state.waiting.append(chunk)
        self._dispatch()

    def outcomes(self) -> Iterator[Outcome]:
        state = self._running()
        while state.expected > 0:
            item = state.events.get()
            if isinstance(item, _Released):
                state.free += item.cores
                self._dispatch()
                continue
            state.expected -= 1
            yield item

    def stop(self) -> None:
        state, self._state = self._state, None
        if state is None:
            return
        state.stop.set()
        for thread in state.threads:
            if thread.ident is not None:  # an interrupt may come between append and start
                thread.join()
        self._finished = list(state.finished)

    def finished(self) -> list[Outcome]:
        return list(self._finished)

    def run_calls(
        self, fn: Callable[[Any, Any], Any], shared: Any, items: Sequence[Any]
    ) -> Iterator[Call]:
        """In this process, one after another (the in-process Stan calls use every core)."""
        for index, item in enumerate(items):
            try:
                value = fn(shared, item)
            except Exception:
                yield Call(index, False, traceback.format_exc())
            else:
                yield Call(index, True, value)

    def _running(self) -> _LocalState:
        if self._state is None:
            raise RuntimeError("LocalExecutor used before start()")
        return self._state

    def _dispatch(self) -> None:
        """Start waiting chunks, in order, while their cores are free."""
        state = self._running()
        while state.waiting:
            need = min(state.waiting[0].cores, self._cores)
            if need > state.free:
                return
            chunk = state.waiting.popleft()
            state.free -= need
            thread = threading.Thread(
                target=_local_worker, args=(chunk, need, state), daemon=True
            )
            state.threads.append(thread)
            thread.start()


@dataclass
class _LocalState:
    """What a started LocalExecutor tracks; only the calling thread changes it."""

    free: int
    expected: int = 0
    waiting: deque[Chunk] = field(default_factory=deque)
    events: queue.SimpleQueue[Outcome | _Released] = field(
        default_factory=queue.SimpleQueue
    )
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    finished: list[Outcome] = field(default_factory=list)
    """Every outcome, kept by the worker threads before it is queued."""


def _local_worker(chunk: Chunk, cores: int, state: _LocalState) -> None:
    def report(outcome: Outcome) -> None:
        # in this thread, which no Ctrl-C interrupts: kept before it can be lost
        state.finished.append(outcome)
        state.events.put(outcome)

    try:
        run_chunk(chunk, report, state.stop)
    finally:
        state.events.put(_Released(cores))


class DaskExecutor(Executor):
    """Run chunks as tasks on a Dask cluster.

    Each chunk is one task (:func:`stanflow.runs.batch.run_chunk_collect`); its
    outcomes arrive when the whole chunk ends. Dask runs one task per worker
    thread, so give workers as many threads as cores divided by the threads of
    one run. The workers must have stanflow installed and see the run folder
    and the executable at the same paths as this process (a shared filesystem);
    :meth:`start` checks that before anything is submitted. :meth:`stop`
    sets a ``distributed.Event`` on which the running tasks kill their
    processes (within about a second) and the queued ones end at once, waits
    for them to return the outcomes of the jobs that ended (at most
    ``STOP_WAIT_SECONDS``), and cancels what has not ended by then.

    Parameters
    ----------
    client : distributed.Client
        A connected client; the executor never closes it.
    """

    def __init__(self, client: Any) -> None:
        try:
            from distributed import Client, Event, as_completed, wait
        except ImportError as error:
            raise ImportError(
                "DaskExecutor needs dask.distributed: pip install 'stanflow[dask]'"
            ) from error
        if not isinstance(client, Client):
            raise TypeError(
                f"client must be a distributed.Client, got {type(client).__name__}"
            )
        self._client = client
        self._as_completed = as_completed
        self._event = Event
        self._wait = wait
        self._pending: Any = None
        self._submitted: list[Any] = []
        """Every task of this start: :meth:`finished` reads those that ended."""
        self._finished: list[Outcome] = []
        self._stop_name = ""
        self._chunks: dict[str, Chunk] = {}
        self._shared: tuple[Any, Any] | None = None
        """The object last scattered by :meth:`run_calls` and its future."""

    @property
    def cores(self) -> int:
        return max(1, sum(self._client.nthreads().values()))

    def start(self, paths: Sequence[str]) -> None:
        if not self._client.nthreads():
            raise RuntimeError("the Dask cluster has no workers")
        unseen = self._client.run(missing_paths, list(paths))
        for worker, missing in sorted(unseen.items()):
            if missing:
                raise RuntimeError(
                    f"Dask worker {worker} cannot see {missing[0]}: the run folder and "
                    "the model executable must be on a filesystem shared with the "
                    "workers, at the same path"
                )
        self._pending = self._as_completed()
        self._stop_name = f"stanflow-stop-{uuid.uuid4().hex}"
        self._chunks = {}
        self._submitted = []

    def submit(self, chunk: Chunk) -> None:
        if self._pending is None:
            raise RuntimeError("DaskExecutor used before start()")
        key = f"stanflow-runs-{uuid.uuid4().hex}"
        future = self._client.submit(
            run_chunk_collect, chunk, self._stop_name, key=key, pure=False
        )
        self._chunks[key] = chunk
        self._submitted.append(future)
        self._pending.add(future)

    def outcomes(self) -> Iterator[Outcome]:
        if self._pending is None:
            raise RuntimeError("DaskExecutor used before start()")
        for future in self._pending:
            chunk = self._chunks.pop(future.key)
            try:
                outcomes = future.result()
            except Exception:
                message = "the Dask task failed:\n" + traceback.format_exc()
                outcomes = [
                    Outcome(job.index, job.attempt, "error", None, 0.0, message)
                    for job in chunk.jobs
                ]
            yield from outcomes

    def run_calls(
        self, fn: Callable[[Any, Any], Any], shared: Any, items: Sequence[Any]
    ) -> Iterator[Call]:
        """As tasks on the cluster, ``shared`` scattered to every worker once.

        The same object in the next call is not sent (nor unpickled by the
        workers) again. Needs no :meth:`start`; the calls' own files (none, or
        a program's compiled library) must be where the workers can see them.
        """
        if not self._client.nthreads():
            raise RuntimeError("the Dask cluster has no workers")
        if self._shared is None or self._shared[0] is not shared:
            [handle] = self._client.scatter([shared], broadcast=True, hash=False)
            self._shared = (shared, handle)
        return _dask_calls(self._client, self._as_completed, fn, self._shared[1], items)

    def stop(self) -> None:
        submitted, self._submitted = self._submitted, []
        self._pending = None
        self._chunks = {}
        self._finished = []
        # best effort: a scheduler that cannot be reached (a reason to press
        # Ctrl-C) must not turn the stop into a network error
        try:
            if not submitted:
                return
            self._event(self._stop_name, client=self._client).set()
            # told to stop, the running tasks end within a second with the
            # outcomes of their jobs that ended; the queued ones start and end
            try:
                self._wait(submitted, timeout=STOP_WAIT_SECONDS)
            except TimeoutError:
                logger.warning("the Dask tasks of this run set did not stop in time")
            for future in submitted:
                if future.status == "finished":
                    self._finished.extend(future.result())
                else:
                    future.cancel()
        except (OSError, TimeoutError) as error:
            logger.warning("could not stop the Dask tasks of this run set: %s", error)

    def finished(self) -> list[Outcome]:
        return list(self._finished)

def _dask_calls(client: Any, as_completed: Any, fn: Callable[[Any, Any], Any], handle: Any,
                items: Sequence[Any]) -> Iterator[Call]:
    futures = {}
    for index, item in enumerate(items):
        future = client.submit(fn, handle, item, key=f"stanflow-call-{uuid.uuid4().hex}", pure=False)
        futures[future.key] = (index, future)
    try:
        for future in as_completed([f for _, f in futures.values()]):
            index, _ = futures.pop(future.key)
            try:
                value = future.result()
            except Exception:
                yield Call(index, False, "the Dask task failed:\n" + traceback.format_exc())
            else:
                yield Call(index, True, value)
    finally:
        for _, future in futures.values():
            future.cancel()


def missing_paths(paths: Sequence[str]) -> list[str]:
    """Those of ``paths`` that do not exist here (run on each Dask worker)."""
    return [path for path in paths if not os.path.exists(path)]
