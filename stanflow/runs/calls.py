"""Independent in-process calls on the run layer's executors, kept and retried.

A run set (:class:`~stanflow.runs.RunSet`) spreads CmdStan runs; some work is
instead a Python function of NumPy arrays and a Stan program loaded in process
(moving particles to bootstrap resamples, for one). :class:`Workers` is the
argument object saying where such calls run (an executor: this process, or a
Dask cluster), how often a failed call is tried again, and in which folder
finished calls are kept, so that a calibration interrupted (a crash, Ctrl-C, a
lost worker) and run again with the same folder reads what was done and
computes only the rest.

A kept call is found by its content: the file's name is a digest of the
function, the caller's description of what ``shared`` is, and the item, so a
call is read back only when it would compute the same thing. Files are written
atomically; one that does not load is computed again, never trusted.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from stanflow.atomic import write_atomic
from stanflow.runs.executors import Executor, LocalExecutor
from stanflow.validation import check_int

logger = logging.getLogger("stanflow.runs")

CALLS = "calls"
"""The folder, inside ``out_dir``, of the kept calls."""
PROGRESS_DELAY = 5.0
"""A map's progress bar appears once it has run this many seconds: long work shows
where it is, short work prints nothing."""


class CallFailed(RuntimeError):
    """A call failed on every attempt; the message holds its last traceback."""


@dataclass(frozen=True)
class Workers:
    """Where independent in-process calls run, whether they are kept, how often retried.

    Parameters
    ----------
    executor : Executor, optional
        :class:`~stanflow.runs.LocalExecutor` (default: in this process) or
        :class:`~stanflow.runs.DaskExecutor` (tasks on a cluster, the shared
        objects scattered to every worker once; the workers need stanflow and
        the compiled Stan libraries at the same paths, a shared filesystem).
    out_dir : str or os.PathLike, optional
        Keep every finished call here; a rerun with the same folder reads the
        calls it would compute again. Default: keep nothing.
    retries : int, default 1
        Times a failed call is tried again before the work stops with
        :class:`CallFailed`.
    progress : bool, default True
        A progress bar on stderr over each map's calls, shown once the map has
        run :data:`PROGRESS_DELAY` seconds.
    """

    executor: Executor | None = None
    out_dir: str | os.PathLike | None = None
    retries: int = 1
    progress: bool = True

    def validate(self) -> Workers:
        """Raise ``ValueError``/``TypeError`` naming a bad field; return ``self``."""
        if self.executor is not None and not isinstance(self.executor, Executor):
            raise TypeError(
                "Workers.executor must be a stanflow.runs Executor (LocalExecutor or "
                f"DaskExecutor), got {type(self.executor).__name__}")
        check_int(self.retries, "Workers.retries", 0)
        if not isinstance(self.progress, bool):
            raise TypeError(f"Workers.progress must be True or False, got {self.progress!r}")
        if self.out_dir is not None:
            folder = Path(self.out_dir)
            if folder.exists() and not folder.is_dir():
                raise ValueError(f"Workers.out_dir {str(folder)!r} exists and is not a folder")
        return self

    def map(
        self,
        fn: Callable[[Any, Any], Any],
        shared: Any,
        items: Sequence[Any],
        *,
        context: str = "",
        desc: str = "calls",
    ) -> list[Any]:
        """``[fn(shared, item) for item in items]``, spread, kept and retried.

        Parameters
        ----------
        fn : callable
            A module-level function (it is pickled by name).
        shared : object
            Sent once to wherever the calls run.
        items : sequence
            One call each; picklable.
        context : str
            What ``shared`` is, for the kept calls' names (a digest of the
            program and its data, say): calls are read back only under the
            same context.
        desc : str
            The progress bar's label.

        Raises
        ------
        CallFailed
            If a call fails ``1 + retries`` times, with its last traceback.
        """
        executor = self.executor or LocalExecutor()
        results: list[Any] = [None] * len(items)
        folder = None if self.out_dir is None else Path(self.out_dir) / CALLS
        # only kept calls need names (each a digest of the pickled item)
        names = [] if folder is None else [_call_name(fn, context, item) for item in items]
        pending = []
        for index in range(len(items)):
            kept = _MISSING if folder is None else _read(folder / names[index])
            if kept is _MISSING:
                pending.append(index)
            else:
                results[index] = kept
        with tqdm(total=len(items), initial=len(items) - len(pending), desc=desc, unit="call",
                  disable=not self.progress, delay=PROGRESS_DELAY) as bar:
            for attempt in range(1 + self.retries):
                if not pending:
                    break
                failed: list[tuple[int, str]] = []
                for call in executor.run_calls(fn, shared, [items[i] for i in pending]):
                    index = pending[call.index]
                    if not call.ok:
                        failed.append((index, call.value))
                        continue
                    results[index] = call.value
                    bar.update()
                    if folder is not None:
                        _keep(folder / names[index], call.value)
                pending = sorted(index for index, _ in failed)
                if failed and attempt < self.retries:
                    logger.warning("%d of %d calls of %s failed; trying them again",
                                   len(failed), len(items), fn.__name__)
        if pending:
            index, trace = min(failed)
            raise CallFailed(
                f"{fn.__name__}: call {index + 1} of {len(items)} failed on "
                f"{1 + self.retries} attempts; the last:\n{trace}")
        return results


def as_workers(workers: Any) -> Workers:
    """``workers`` checked (:meth:`Workers.validate`), ``Workers()`` for None."""
    if workers is None:
        return Workers()
    if not isinstance(workers, Workers):
        raise TypeError(f"workers must be a stanflow.runs.Workers, got {type(workers).__name__}")
    return workers.validate()


_MISSING = object()


def _call_name(fn: Callable[..., Any], context: str, item: Any) -> str:
    digest = hashlib.sha256()
    digest.update(f"{fn.__module__}.{fn.__qualname__}\0{context}\0".encode())
    digest.update(pickle.dumps(item, protocol=5))
    return digest.hexdigest()[:40] + ".pkl"


def _read(path: Path) -> Any:
    if not path.exists():
        return _MISSING
    try:
        with open(path, "rb") as handle:
            return pickle.load(handle)
    except Exception as error:  # a damaged entry is computed again, never trusted
        logger.warning("kept call %s does not load (%s); computing it again", path, error)
        return _MISSING


def _keep(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(temporary: str) -> None:
        with open(temporary, "wb") as handle:
            pickle.dump(value, handle, protocol=5)

    write_atomic(path, write)
