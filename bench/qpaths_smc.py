"""Benchmark: q-path SMC on Pima logistic regression, 10^4 particles, M = 1.

The setting of the authors' numba SMC timing (about 1 s CPU per run with the
fixed schedule of 10 temperatures, 2 to 3 s with the adaptive one, on this
machine kind): ``stanflow.qpaths.annealing.smc`` with random-walk moves, one move
per temperature, for the geometric path (q = 1) and the q-path of the ESS
heuristic (``stanflow.qpaths.choose_q.heuristic_q``, fitted on 10^4 prior
draws for beta_1 = 1/9). Each configuration is run ``--runs`` times, one
``smc`` call per run (so each timing includes the initial prior draws).

Reported per configuration: wall and CPU seconds per run (median), the median
``|log Z_hat - log Z|`` against ``log Z = -391.494`` (the paper's value,
which our Laplace-t importance sampler reproduces to 0.002), the error per
wall second (``median error x median seconds``: the error-time product, lower
is better, and plain ``error / seconds`` as asked), and particle-moves per
second (``N x temperatures x M / wall seconds``). Geometric and q-path runs
alternate in one invocation so they see the same machine load.

Usage::

    .venv/bin/python bench/qpaths_smc.py [--runs 5] [--particles 10000]

Needs ``STANFLOW_DATA_DIR`` (``uci/pima-indians-diabetes.data``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from _common import machine_info, print_table, write_results
from threadpoolctl import threadpool_limits

from stanflow.qpaths.annealing import smc
from stanflow.qpaths.choose_q import heuristic_q
from stanflow.qpaths.kernels import rwm_moves
from stanflow.qpaths.logistic import load_uci

LOG_Z = -391.494
REFERENCE = {"fixed_cpu_s": 1.0, "adaptive_cpu_s": [2.0, 3.0]}
SCHEDULES = {"fixed": np.linspace(0, 1, 10), "adaptive": None}


def one_run(target, q: float, schedule, n: int, seed: int) -> dict:
    """One SMC run; wall and CPU seconds, error, temperatures, moves per second."""
    wall, cpu = time.perf_counter(), time.process_time()
    group = smc(
        target.log_pi0,
        target.sample_pi0,
        target.log_pi1,
        q=q,
        n_particles=n,
        n_moves=1,
        moves=rwm_moves,
        schedule=schedule,
        n_runs=2,
        seed=seed,
    ).smc
    wall, cpu = (time.perf_counter() - wall) / 2, (time.process_time() - cpu) / 2
    steps = group.n_steps.values
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "abs_errors": np.abs(group.log_z.values - LOG_Z).tolist(),
        "temperatures": steps.tolist(),
        "moves_per_s": float(n * steps.mean() / wall),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=6, help="runs per configuration")
    parser.add_argument("--particles", type=int, default=10_000)
    parser.add_argument("--kernel-dtype", default="float32", choices=("float32", "float64"))
    args = parser.parse_args()
    info = machine_info()
    target = load_uci("pima", kernel_dtype=args.kernel_dtype)
    rng = np.random.default_rng(20201214)
    draws = target.sample_pi0(rng, args.particles)
    q_heuristic = heuristic_q(target.log_pi0(draws), target.log_pi1(draws), 1 / 9)
    paths = {"geometric": 1.0, "q_path": q_heuristic}
    raw: dict = {s: {p: [] for p in paths} for s in SCHEDULES}
    # smc() with n_runs=2 per call (its minimum); --runs / 2 calls, alternating paths.
    # One BLAS thread throughout, like the single-threaded reference: idle OpenBLAS
    # threads spin and would add CPU time without adding speed.
    with threadpool_limits(limits=1):
        for _ in range(max(1, args.runs // 2)):
            for schedule_name, schedule in SCHEDULES.items():
                for path, q in paths.items():
                    seed = int(rng.integers(2**31))
                    raw[schedule_name][path].append(
                        one_run(target, q, schedule, args.particles, seed)
                    )
    results, rows = {}, []
    for schedule_name in SCHEDULES:
        for path, q in paths.items():
            calls = raw[schedule_name][path]
            errors = [e for call in calls for e in call["abs_errors"]]
            wall = float(np.median([c["wall_s"] for c in calls]))
            cpu = float(np.median([c["cpu_s"] for c in calls]))
            error = float(np.median(errors))
            cell = {
                "q": q,
                "wall_s_per_run": wall,
                "cpu_s_per_run": cpu,
                "median_abs_error": error,
                "error_times_wall_s": error * wall,
                "error_per_wall_s": error / wall,
                "particle_moves_per_s": float(
                    np.median([c["moves_per_s"] for c in calls])
                ),
                "temperatures": [t for c in calls for t in c["temperatures"]],
                "abs_errors": errors,
            }
            results.setdefault(schedule_name, {})[path] = cell
            rows.append(
                [
                    schedule_name,
                    path,
                    f"{q:.5f}",
                    f"{wall:.2f}",
                    f"{cpu:.2f}",
                    f"{error:.2f}",
                    f"{error * wall:.2f}",
                    f"{cell['particle_moves_per_s']:.3g}",
                ]
            )
    print_table(
        [
            "schedule",
            "path",
            "q",
            "wall s/run",
            "cpu s/run",
            "med |err|",
            "err x wall",
            "moves/s",
        ],
        rows,
    )
    for schedule_name in SCHEDULES:
        geo, qp = results[schedule_name]["geometric"], results[schedule_name]["q_path"]
        results[schedule_name]["ratios_geometric_over_q_path"] = {
            "median_abs_error": geo["median_abs_error"] / qp["median_abs_error"],
            "error_times_wall_s": geo["error_times_wall_s"] / qp["error_times_wall_s"],
            "wall_s_per_run": geo["wall_s_per_run"] / qp["wall_s_per_run"],
        }
    path = write_results(
        "qpaths_smc",
        {
            "benchmark": "qpaths_smc",
            "command": " ".join([sys.executable, *sys.argv]),
            "machine": info,
            "load_average_at_end": list(os.getloadavg()),
            "n_particles": args.particles,
            "kernel_dtype": args.kernel_dtype,
            "n_moves": 1,
            "runs_per_configuration": 2 * max(1, args.runs // 2),
            "log_z_truth": LOG_Z,
            "reference_authors_numba": REFERENCE,
            "results": results,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
