"""Helpers shared by the benchmark scripts in ``bench/``.

The scripts are run as ``python bench/<name>.py`` so this module is importable
as ``_common`` (the script's folder is first on ``sys.path``).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stanflow.atomic import write_atomic

REPO = Path(__file__).resolve().parent.parent
"""The repository root."""

RESULTS_DIR = REPO / "bench" / "results"
"""Where each benchmark writes ``<name>.json``."""


@dataclass
class Timed:
    """Wall and CPU time of one child process.

    Attributes
    ----------
    wall : float
        Wall-clock seconds.
    cpu : float
        User + system CPU seconds of the child (and its children).
    sys : float
        The system (kernel) part of ``cpu``.
    minor_faults : int
        Page faults served without I/O (fresh pages of memory, mostly).
    """

    wall: float
    cpu: float
    sys: float = 0.0
    minor_faults: int = 0


def run_timed(
    cmd: Sequence[str], cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> Timed:
    """Run a command to completion and time it.

    Parameters
    ----------
    cmd : sequence of str
        The command line.
    cwd : pathlib.Path, optional
        Working directory.
    env : mapping, optional
        The command's environment; by default this process's.

    Returns
    -------
    Timed
        Wall time and the child's CPU time.

    Raises
    ------
    RuntimeError
        If the command fails; the message holds its output.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        list(cmd), cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(
            f"command failed ({proc.returncode}): {' '.join(cmd)}\n"
            f"{proc.stdout}\n{proc.stderr}"
        )
    sys_ = after.ru_stime - before.ru_stime
    cpu = (after.ru_utime - before.ru_utime) + sys_
    faults = after.ru_minflt - before.ru_minflt
    return Timed(wall=wall, cpu=cpu, sys=sys_, minor_faults=faults)


def children_cpu() -> float:
    """User + system CPU seconds of all finished child processes of this process."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_call(call: Callable[[], Any]) -> tuple[Any, float, float]:
    """``call()``'s result, its wall seconds and the CPU seconds of the child processes it ran."""
    cpu, start = children_cpu(), time.perf_counter()
    result = call()
    return result, time.perf_counter() - start, children_cpu() - cpu


def median(values: Sequence[float]) -> float:
    """Return the median of a non-empty sequence of numbers."""
    return float(statistics.median(values))


def machine_info() -> dict[str, Any]:
    """Describe the machine and the moment of a benchmark run.

    Returns
    -------
    dict
        Date (UTC), host CPU model, core count, load average, Python version.
    """
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu_model": cpu_model,
        "cores": os.cpu_count(),
        "load_average_at_start": list(os.getloadavg()),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def write_results(name: str, data: dict[str, Any]) -> Path:
    """Write a benchmark's results to ``bench/results/<name>.json``, atomically.

    Parameters
    ----------
    name : str
        The benchmark's name.
    data : dict
        JSON-serialisable results.

    Returns
    -------
    pathlib.Path
        The file written.
    """
    return write_json(RESULTS_DIR / f"{name}.json", data)


def write_json(path: Path, data: Any) -> Path:
    """Write ``data`` as JSON to ``path`` atomically (:func:`stanflow.atomic.write_atomic`):
    a reader (or a rerun after a crash) sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=2, default=str) + "\n"
    return write_atomic(path, lambda tmp: Path(tmp).write_text(text))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a plain-text table with right-aligned columns.

    Parameters
    ----------
    headers : sequence of str
        Column titles.
    rows : sequence of sequences
        Cell values; floats are shown with 3 significant decimals.
    """

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
        return str(value)

    table = [list(headers)] + [[cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(headers))]
    for k, row in enumerate(table):
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        if k == 0:
            print("  ".join("-" * w for w in widths))
