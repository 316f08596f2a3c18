"""Provenance of a workflow run: what ran, from which source, on which machine, when.

The workflow runner (:func:`stanflow.workflows.execute`) calls :func:`begin`
before a workflow runs and :func:`finish` after it, and writes the result as
the ``provenance`` block of ``summary.json``: the command, the seed, quick or
full, the git commit of the checkout stanflow was imported from (with a dirty
flag and the changed paths) or the installed version, the machine (platform,
CPUs, memory, Python, key package versions, the Stan toolchain), the start
time and the wall time. Stored results (``results/<workflow>/``, see
``docs/results.md``) rely on it to say how each number was made.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import stanflow

PACKAGES = (
    "numpy", "scipy", "pandas", "xarray", "arviz", "matplotlib", "cmdstanpy", "bridgestan",
)
"""Distributions whose versions a provenance records (stanflow's own is in ``source``)."""
TOOLCHAIN_FACTS = ("kind", "cmdstan_version", "stanc_version", "cxx_version", "key")
"""The facts of :func:`stanflow.toolchain.info` a provenance records."""


@dataclass(frozen=True)
class RunStart:
    """What is known when a workflow starts; see :func:`begin`."""

    workflow: str
    command: str
    argv: list[str]
    quick: bool
    started: str
    clock: float
    source: dict[str, Any]


def begin(workflow: str, out: Path, quick: bool) -> RunStart:
    """Record the start of a run, before the workflow writes anything.

    The source state is read here, so files the run itself writes (into a
    folder of the checkout such as ``results/``) do not make it dirty.

    Parameters
    ----------
    workflow : str
        The workflow's name, e.g. ``"gibbs-path"``.
    out : pathlib.Path
        The output folder, as given (it appears in ``command``).
    quick : bool
        Whether this is a ``--quick`` run.

    Returns
    -------
    RunStart
        ``command`` is the ``stanflow run`` command equivalent to this run
        (every entry point goes through the same runner); ``argv`` the
        process's own command line, as it was.
    """
    words = ["stanflow", "run", workflow, *(["--quick"] if quick else []), "--out", str(out)]
    return RunStart(
        workflow=workflow,
        command=shlex.join(words),
        argv=[sys.executable, *sys.argv],
        quick=bool(quick),
        started=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        clock=time.perf_counter(),
        source=source_state(),
    )


def finish(start: RunStart, seed: Any) -> dict[str, Any]:
    """The provenance block of a run that has just ended.

    Parameters
    ----------
    start : RunStart
        From :func:`begin`.
    seed : JSON-like
        The seed(s) the workflow reports (its summary's ``seed``), or None.

    Returns
    -------
    dict
        ``workflow``, ``command``, ``argv``, ``quick``, ``seed``, ``source``
        (see :func:`source_state`), ``machine`` (see :func:`machine`),
        ``started`` (UTC, ISO 8601) and ``wall_seconds``.
    """
    return {
        "workflow": start.workflow,
        "command": start.command,
        "argv": start.argv,
        "quick": start.quick,
        "seed": seed,
        "source": start.source,
        "machine": machine(),
        "started": start.started,
        "wall_seconds": round(time.perf_counter() - start.clock, 3),
    }


def source_state() -> dict[str, Any]:
    """Which stanflow ran: its version and, from a checkout, the git state.

    Returns
    -------
    dict
        ``version`` (``stanflow.__version__``); ``commit`` (40 hex digits),
        ``dirty`` (bool) and ``dirty_paths`` (``git status --porcelain``
        lines, untracked files included) when stanflow is imported from the
        top of a git checkout, else all three None (an installed wheel).
    """
    state: dict[str, Any] = {
        "version": stanflow.__version__, "commit": None, "dirty": None, "dirty_paths": None,
    }
    root = Path(stanflow.__file__).resolve().parent.parent
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top.strip()).resolve() != root:
        return state
    commit, status = _git(root, "rev-parse", "HEAD"), _git(root, "status", "--porcelain")
    if commit is None or status is None:
        return state
    paths = sorted(line for line in status.splitlines() if line.strip())
    state.update(commit=commit.strip(), dirty=bool(paths), dirty_paths=paths)
    return state


def machine() -> dict[str, Any]:
    """The machine and software a run used.

    Returns
    -------
    dict
        ``platform``, ``cpu`` (the model name, from ``/proc/cpuinfo`` on
        Linux), ``cpu_count`` (logical CPUs), ``usable_cpus`` (those this
        process may run on), ``memory_gb``, ``python``, ``packages``
        (name -> version, None if not installed) and ``toolchain`` (Stan and
        compiler versions of the installation in use, never building it; the
        error message if it cannot be described).
    """
    return {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gb": _memory_gb(),
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "toolchain": _toolchain(),
    }


def _git(root: Path, *args: str) -> str | None:
    """Standard output of ``git -C root ARGS``, or None if git fails or is missing."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    """Physical memory in GB, or None where ``os.sysconf`` cannot tell."""
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1)
    except (AttributeError, ValueError, OSError):
        return None


def _version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _toolchain() -> dict[str, Any]:
    """A few facts of :func:`stanflow.toolchain.info`; ``error`` if it fails."""
    from stanflow.toolchain import ToolchainError, info

    try:
        facts = info()
    except ToolchainError as error:
        return {"error": str(error)}
    return {name: facts.get(name) for name in TOOLCHAIN_FACTS}
