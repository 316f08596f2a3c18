"""Benchmark: LCVI vs plain ADVI on the Last.fm matrix factorisation, and against the PyTorch reference.

One loop of the ``lcvi-mf`` workflow's full setting per seed (992 users x 100
artists, K = 20, tilted q = 0.2, exp utility, linearised estimator with 2
stratified outcome samples, 3000 ADVI iterations with one gradient sample,
one LCVI iteration), timed in the same run:

- ``vi``: the plain-VI ADVI run (wall time; the decision step is not in it);
- ``lcvi``: the LCVI ADVI run alone, and the whole loop (eta adaptation, plain
  VI, decisions, LCVI) in wall and CPU time of the CmdStan processes.

The reference is the authors' PyTorch code on this machine kind: about 85 s
CPU per 1000 Adam steps, about 40 minutes per 30001-step run (VI or LCVI).
Reported: seconds per 1000 ADVI iterations and per run, the speed-up of a
stanflow run over a reference run, and the test-risk reduction of this seed
(the workflow's 5-seed numbers are in its summary.json).

Usage::

    STANFLOW_DATA_DIR=../shared/data /work/venv/bin/python bench/lcvi_mf.py [--seeds 1]
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import time

import numpy as np
from _common import machine_info, print_table, write_results

from stanflow.lcvi import empirical_risk, get_loss, lcvi_model, run_lcvi
from stanflow.lcvi.mf import (
    cell_locations,
    load_lastfm,
    matrix_factorisation,
    split_cells,
)

REFERENCE_CPU_PER_1000_STEPS = 85.0
REFERENCE_RUN_SECONDS = 40 * 60.0  # 30001 steps
ITERATIONS = 3000


def children_cpu() -> float:
    """User + system CPU seconds of all finished child processes."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args()
    logging.getLogger("cmdstanpy").setLevel(logging.ERROR)

    Y = load_lastfm(100)
    loss = get_loss("tilted", q=0.2)
    per_seed, rows = [], []
    for seed in range(1, args.seeds + 1):
        split = split_cells(Y.shape, np.random.default_rng(1000 + seed))
        problem = matrix_factorisation(Y, split, K=20, prior_sd=10.0, noise_sd=1.0)
        lcvi_model(loss, problem.template)  # compiled before timing
        cpu, start = children_cpu(), time.perf_counter()
        loop = run_lcvi(
            problem,
            loss,
            kind="exp",
            estimator="linearised",
            n_outcomes=2,
            max_iter=1,
            seed=seed,
            variational_args={"iter": ITERATIONS, "grad_samples": 1, "draws": 100},
        )
        loop_wall, loop_cpu = time.perf_counter() - start, children_cpu() - cpu
        y_test = Y[split.test_rows, split.test_cols]
        risks = [
            empirical_risk(
                y_test,
                loss.mixture_decision(
                    cell_locations(step.fit, split.test_rows, split.test_cols), 1.0
                ),
                loss,
            )
            for step in (loop.steps[0], loop.steps[-1])
        ]
        vi, lcvi = loop.steps[0].seconds, loop.steps[-1].seconds
        record = {
            "seed": seed,
            "vi_wall": vi,
            "lcvi_run_wall": lcvi,
            "loop_wall": loop_wall,
            "loop_cpu": loop_cpu,
            "vi_wall_per_1000": 1000 * vi / ITERATIONS,
            "lcvi_wall_per_1000": 1000 * lcvi / ITERATIONS,
            "risk_vi": risks[0],
            "risk_lcvi": risks[1],
            "reduction_pct": 100 * (risks[0] - risks[1]) / risks[0],
        }
        per_seed.append(record)
        rows.append(
            [
                seed,
                f"{vi:.1f}",
                f"{lcvi:.1f}",
                f"{loop_wall:.1f}",
                f"{loop_cpu:.1f}",
                f"{record['reduction_pct']:.2f}",
            ]
        )
    print_table(
        [
            "seed",
            "VI run wall s",
            "LCVI run wall s",
            "loop wall s",
            "loop CPU s",
            "test risk reduction %",
        ],
        rows,
    )
    mean = {
        k: float(np.mean([r[k] for r in per_seed])) for k in per_seed[0] if k != "seed"
    }
    results = {
        "seeds": args.seeds,
        "iterations": ITERATIONS,
        "per_seed": per_seed,
        "mean": mean,
        "ratio_lcvi_run_to_vi_run_wall": mean["lcvi_run_wall"] / mean["vi_wall"],
        "ratio_loop_to_vi_run_wall": mean["loop_wall"] / mean["vi_wall"],
        "speedup_per_1000_steps_vs_reference": REFERENCE_CPU_PER_1000_STEPS
        / mean["lcvi_wall_per_1000"],
        "speedup_per_run_vs_reference": REFERENCE_RUN_SECONDS / mean["loop_cpu"],
        "reference": {
            "cpu_seconds_per_1000_steps": REFERENCE_CPU_PER_1000_STEPS,
            "seconds_per_30001_step_run": REFERENCE_RUN_SECONDS,
            "test_risk_reduction_pct_tilted_0.2": 2.45,
        },
        "machine": machine_info(),
    }
    print(
        json.dumps(
            {k: v for k, v in results.items() if k not in ("per_seed", "machine")},
            indent=2,
        )
    )
    write_results("lcvi_mf", results)


if __name__ == "__main__":
    main()
