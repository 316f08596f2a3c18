"""Benchmark: cmdstanpy's wall time vs the time the executable reports.

A tiny model (``parameters { real x; } model { x ~ std_normal(); }``) is
compiled once with ``stanflow.models.compile_model`` (threaded, stanflow's
default); then, ``--reps`` times each, alternating:

* ``model.sample(chains=N, iter_warmup=1000, iter_sampling=1000)`` through
  cmdstanpy, timed around the call (``cmdstanpy`` wall);
* the very command line cmdstanpy ran (``fit.runset.cmd(0)``), run directly
  with ``subprocess`` and the same ``STAN_NUM_THREADS`` (``exe`` wall);
* the ``Elapsed Time ... (Total)`` the executable wrote in each chain's CSV
  (``csv``; for several chains, the slowest chain's, and the sum over chains).

for N = 1 and N = 4. With N = 4 the chains run in one process (threaded
model); cmdstanpy's default ``parallel_chains`` is ``min(chains, cores)`` = 2
threads on this machine.

So ``cmdstanpy - exe`` is cmdstanpy's own cost (argument checks, writing
the data file, starting the process, reading the CSV headers) and
``exe - csv`` is the executable's start-up, data reading and CSV writing
outside Stan's timer.

Usage::

    .venv/bin/python bench/overhead.py [--reps 20]
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine_info, median, print_table, write_results

from stanflow.models import compile_model

TINY = "parameters {\n  real x;\n}\nmodel {\n  x ~ std_normal();\n}\n"
_TOTAL = re.compile(r"#\s+([0-9.eE+-]+) seconds \(Total\)")


def csv_totals(csv_files: list[str]) -> list[float]:
    """Each chain's ``Elapsed Time ... (Total)``, one per CSV file."""
    totals = []
    for path in csv_files:
        found = _TOTAL.findall(Path(path).read_text())
        if not found:
            raise RuntimeError(f"no Elapsed Time (Total) in {path}")
        totals.append(float(found[-1]))
    return totals


def one_rep(model: Any, chains: int, seed: int, out_dir: Path) -> dict[str, float]:
    """One cmdstanpy run and one direct run of the same command; time both."""
    start = time.perf_counter()
    fit = model.sample(
        chains=chains,
        iter_warmup=1000,
        iter_sampling=1000,
        seed=seed,
        show_progress=False,
        output_dir=str(out_dir),
    )
    wall = time.perf_counter() - start
    files = list(fit.runset.csv_files)
    csv = csv_totals(files)
    cmd = fit.runset.cmd(0)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    exe_wall = time.perf_counter() - start
    exe_csv = csv_totals(files)
    return {
        "cmdstanpy_wall": wall,
        "cmdstanpy_csv_total": max(csv),
        "cmdstanpy_csv_total_sum": sum(csv),
        "exe_wall": exe_wall,
        "exe_csv_total": max(exe_csv),
        "exe_csv_total_sum": sum(exe_csv),
        "processes": 1 if not fit.runset.one_process_per_chain else chains,
        "STAN_NUM_THREADS": os.environ.get("STAN_NUM_THREADS"),
        "command": " ".join(cmd),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print a table, write ``bench/results/overhead.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    logging.getLogger("cmdstanpy").setLevel(logging.WARNING)
    info = machine_info()

    runs: dict[str, list[dict[str, Any]]] = {"chains_1": [], "chains_4": []}
    with tempfile.TemporaryDirectory(prefix="stanflow-bench-overhead-") as tmp:
        stan = Path(tmp) / "bench_overhead_tiny.stan"
        stan.write_text(TINY)
        start = time.perf_counter()
        model = compile_model(stan)
        print(
            f"compile_model: {time.perf_counter() - start:.1f} s (cached after first run)"
        )
        for i in range(args.reps):
            for chains in (1, 4) if i % 2 == 0 else (4, 1):
                runs[f"chains_{chains}"].append(
                    one_rep(model, chains, 10 + i, Path(tmp) / f"c{chains}_{i}")
                )

    summary: dict[str, dict[str, float]] = {}
    for key, rs in runs.items():
        med = {
            f: median([r[f] for r in rs])
            for f in (
                "cmdstanpy_wall",
                "cmdstanpy_csv_total",
                "cmdstanpy_csv_total_sum",
                "exe_wall",
                "exe_csv_total",
            )
        }
        med["ratio_cmdstanpy_over_csv"] = median(
            [r["cmdstanpy_wall"] / r["cmdstanpy_csv_total"] for r in rs]
        )
        med["ratio_exe_over_csv"] = median(
            [r["exe_wall"] / r["exe_csv_total"] for r in rs]
        )
        med["cmdstanpy_minus_exe"] = med["cmdstanpy_wall"] - med["exe_wall"]
        med["cmdstanpy_minus_csv"] = median(
            [r["cmdstanpy_wall"] - r["cmdstanpy_csv_total"] for r in rs]
        )
        summary[key] = med

    print_table(
        [
            "chains",
            "cmdstanpy ms",
            "exe ms",
            "CSV total ms",
            "CSV sum ms",
            "cmdstanpy/CSV",
            "exe/CSV",
            "cmdstanpy-CSV ms",
        ],
        [
            [
                k.removeprefix("chains_"),
                1e3 * m["cmdstanpy_wall"],
                1e3 * m["exe_wall"],
                1e3 * m["cmdstanpy_csv_total"],
                1e3 * m["cmdstanpy_csv_total_sum"],
                m["ratio_cmdstanpy_over_csv"],
                m["ratio_exe_over_csv"],
                1e3 * m["cmdstanpy_minus_csv"],
            ]
            for k, m in summary.items()
        ],
    )
    data = {
        "benchmark": "overhead",
        "command": f".venv/bin/python bench/overhead.py --reps {args.reps}",
        "machine": info,
        "model": TINY,
        "runs": runs,
        "medians": summary,
    }
    print(f"wrote {write_results('overhead', data)}")
    return data


if __name__ == "__main__":
    main()
