"""Benchmark: overhead of the run layer for many short runs, local vs Dask.

500 runs of a one-parameter model (normal mean, 20 data points, a bootstrap
replicate of the data per run; 1000 warm-up + 1000 sampling iterations, 1000
draws each) as one :class:`stanflow.runs.RunSet`, executed ``--reps`` times
each, side by side (alternating order):

* ``local``: :class:`~stanflow.runs.LocalExecutor` (all cores; stanflow's
  batch mode, several runs per executable process);
* ``dask``: :class:`~stanflow.runs.DaskExecutor` on a ``LocalCluster`` with one
  single-threaded worker process per core (started before the clock starts);
* ``local, one process per run``: the local executor without batch mode, as a
  user's own CmdStan would run (batch mode switched off in this script);
* ``driver alone``: no run layer at all, the same 500 command lines in one
  ``<exe> batch`` process on one core: the floor set by the driver's own
  per-run cost outside Stan's timer (start-up, data, headers, renames).

Wall time is measured around ``list(runset.run())`` (planning, i.e. validating
and writing the 500 data files, is timed apart, and so is
``to_inference_data``). The overhead ratio is ``wall * cores / sum of the
executables' own times``, the latter being each CSV's ``Elapsed Time ...
(Total)``; 1.0 would mean the cores did nothing but Stan's own work.

Usage::

    .venv/bin/python bench/runs_overhead.py [--runs 500] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import machine_info, median, print_table, write_results

from stanflow.models import compile_model
from stanflow.runs import DaskExecutor, LocalExecutor, RunSet, RunSpec
from stanflow.runs import runset as runset_module
from stanflow.runs.commands import command_tokens
from stanflow.runs.results import read_csv

PROGRAM = """\
data {
  int<lower=0> N;
  vector[N] y;
}
parameters {
  real mu;
}
model {
  mu ~ normal(0, 10);
  y ~ normal(mu, 1);
}
"""


def specs(n_runs: int) -> list[RunSpec]:
    """One bootstrap replicate of a fixed data set per run."""
    rng = np.random.default_rng(2024)
    y = rng.normal(1.0, 1.0, 20)
    return [RunSpec(data={"N": 20, "y": rng.choice(y, 20)}) for _ in range(n_runs)]


def driver_alone(model: Any, runs: list[RunSpec], folder: Path) -> dict[str, Any]:
    """The run set's command lines in one batch process, timed without the run layer."""
    runset = RunSet(model, runs, out_dir=folder, root_seed=1)
    staging = folder / "alone"
    staging.mkdir()
    jobs = folder / "jobs.jsonl"
    jobs.write_text(
        "".join(
            json.dumps(
                {
                    "args": command_tokens(folder, run, staging),
                    "console": str(staging / f"{run.index}.log"),
                }
            )
            + "\n"
            for run in runset.plan.runs
        )
    )
    load = os.getloadavg()[0]
    start = time.perf_counter()
    subprocess.run(
        [runset.plan.exe, "batch", str(jobs)], stdout=subprocess.DEVNULL, check=True
    )
    wall = time.perf_counter() - start
    csvs = sorted(staging.glob("*.csv"))
    if len(csvs) != len(runs):
        raise RuntimeError("driver alone: not every run wrote its CSV")
    total = sum(read_csv(path, "sample")[2] for path in csvs)
    mu = np.mean([read_csv(path, "sample")[1][:, -1].mean() for path in csvs])
    return {
        "variant": "driver alone",
        "cores": 1,
        "plan_s": float("nan"),
        "wall_s": wall,
        "collect_s": float("nan"),
        "sum_csv_total_s": total,
        "overhead_ratio": wall / total,
        "load_average_1min_before": load,
        "mu_mean": float(mu),
    }


def one_rep(
    variant: str, model: Any, runs: list[RunSpec], folder: Path, client: Any
) -> dict[str, Any]:
    """Plan, run and collect one run set; return its times."""
    if variant == "driver alone":
        return driver_alone(model, runs, folder)
    start = time.perf_counter()
    if variant == "local, one process per run":
        batch = runset_module.supports_batch
        runset_module.supports_batch = lambda exe: False
        try:
            runset = RunSet(model, runs, out_dir=folder, root_seed=1)
        finally:
            runset_module.supports_batch = batch
    else:
        runset = RunSet(model, runs, out_dir=folder, root_seed=1)
    plan = time.perf_counter() - start
    executor = DaskExecutor(client) if variant == "dask" else LocalExecutor()
    cores = executor.cores
    load = os.getloadavg()[0]
    start = time.perf_counter()
    results = list(runset.run(executor, progress=False))
    wall = time.perf_counter() - start
    start = time.perf_counter()
    idata = runset.to_inference_data()
    collect = time.perf_counter() - start
    if not all(r.ok for r in results) or len(results) != len(runs):
        raise RuntimeError(f"{variant}: not every run succeeded")
    exe_total = float(idata.run_stats["total_time"].sum())
    return {
        "variant": variant,
        "cores": cores,
        "plan_s": plan,
        "wall_s": wall,
        "collect_s": collect,
        "sum_csv_total_s": exe_total,
        "overhead_ratio": wall * cores / exe_total,
        "load_average_1min_before": load,
        "mu_mean": float(idata.posterior["mu"].mean()),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print a table, write ``bench/results/runs_overhead.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.WARNING)
    from distributed import Client, LocalCluster

    info = machine_info()
    runs = specs(args.runs)
    variants = ["local", "dask", "local, one process per run", "driver alone"]
    reps: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="stanflow-bench-runs-") as tmp:
        stan = Path(tmp) / "bench_runs_normal.stan"
        stan.write_text(PROGRAM)
        model = compile_model(stan)
        cores = len(os.sched_getaffinity(0))
        start = time.perf_counter()
        with (
            LocalCluster(
                n_workers=cores,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
            ) as cluster,
            Client(cluster) as client,
        ):
            cluster_start = time.perf_counter() - start
            for i in range(args.reps):
                order = variants if i % 2 == 0 else variants[::-1]
                for variant in order:
                    folder = Path(tmp) / f"rep{i}-{variants.index(variant)}"
                    reps.append(one_rep(variant, model, runs, folder, client))
                    print(
                        f"rep {i} {variant}: wall {reps[-1]['wall_s']:.2f} s, "
                        f"ratio {reps[-1]['overhead_ratio']:.3f}"
                    )
    means = [r["mu_mean"] for r in reps]
    if max(means) - min(means) > 1e-9:
        raise RuntimeError(f"variants disagree on the draws: {sorted(set(means))}")
    summary = {}
    for variant in variants:
        mine = [r for r in reps if r["variant"] == variant]
        summary[variant] = {
            key: median([r[key] for r in mine])
            for key in (
                "plan_s",
                "wall_s",
                "collect_s",
                "sum_csv_total_s",
                "overhead_ratio",
            )
        }
    print_table(
        [
            "variant",
            "wall s",
            "sum CSV total s",
            "overhead ratio",
            "plan s",
            "collect s",
        ],
        [
            [
                v,
                m["wall_s"],
                m["sum_csv_total_s"],
                m["overhead_ratio"],
                m["plan_s"],
                m["collect_s"],
            ]
            for v, m in summary.items()
        ],
    )
    print(f"Dask LocalCluster start-up: {cluster_start:.1f} s (not in the wall times)")
    data = {
        "benchmark": "runs_overhead",
        "command": (
            ".venv/bin/python bench/runs_overhead.py "
            f"--runs {args.runs} --reps {args.reps}"
        ),
        "machine": info,
        "program": PROGRAM,
        "runs_per_set": args.runs,
        "goal": "local overhead ratio <= 1.25",
        "dask_cluster_start_s": cluster_start,
        "reps": reps,
        "medians": summary,
    }
    print(f"wrote {write_results('runs_overhead', data)}")
    return data


if __name__ == "__main__":
    main()
