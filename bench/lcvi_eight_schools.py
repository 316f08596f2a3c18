"""Benchmark: LCVI vs plain ADVI on eight schools, and against the authors' PyTorch reference.

For ``--seeds`` seeds, :func:`stanflow.lcvi.run_lcvi` with the settings of the
``lcvi-eight-schools`` workflow (tilted q = 0.2, linearised ``M - l``, M90,
mean-field ADVI with the loop's defaults: 10000 iterations, 10 gradient
samples, ``eta`` adapted once). Per seed, in the same run:

- ``vi``: the plain-VI fit (wall time of its ADVI run);
- ``lcvi``: the whole loop, plain VI and the eta adaptation included (wall
  time, and CPU time of all CmdStan processes of the loop);
- ``advi_default``: one CmdStan ADVI run at CmdStan's own defaults (1 gradient
  sample, ``tol_rel_obj = 0.01``, adaptation), the cheapest plain ADVI.

Ratios: LCVI loop / plain VI (goal <= 3), and the reference (the authors'
PyTorch code on this machine kind, 30001 Adam steps: about 190 s CPU for VI and
again for LCVI per seed) / stanflow's CPU seconds per seed (goal >= 10), next
to the risks of VI and LCVI and the reference reduction 0.9 +- 0.4 %.

Usage::

    /work/venv/bin/python bench/lcvi_eight_schools.py [--seeds 10]
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import time

import numpy as np
from _common import REPO, machine_info, print_table, write_results

from stanflow.lcvi import eight_schools, get_loss, lcvi_model, run_lcvi, stan_data
from stanflow.lcvi.stan import variational

REFERENCE_CPU_SECONDS = 190.0  # per VI run and per LCVI run, 30001 Adam steps
REFERENCE_REDUCTION_PCT = (0.9, 0.4)


def children_cpu() -> float:
    """User + system CPU seconds of all finished child processes."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    logging.getLogger("cmdstanpy").setLevel(logging.ERROR)

    data = json.loads((REPO / "data" / "eight_schools.json").read_text())
    problem = eight_schools(data)
    loss = get_loss("tilted", q=0.2)
    model = lcvi_model(loss, problem.template)  # compiled before timing
    rows, per_seed = [], []
    for seed in range(1, args.seeds + 1):
        cpu, start = children_cpu(), time.perf_counter()
        loop = run_lcvi(problem, loss, kind="linear", estimator="linearised", seed=seed)
        lcvi_wall, lcvi_cpu = time.perf_counter() - start, children_cpu() - cpu

        plain = stan_data(
            problem, np.zeros(problem.n), loop.eps_y, loss, "linear", 1.0, weight=0.0
        )
        cpu, start = children_cpu(), time.perf_counter()
        variational(model, plain, seed=seed, require_converged=False)
        default_wall, default_cpu = time.perf_counter() - start, children_cpu() - cpu

        vi, last = loop.steps[0], loop.steps[-1]
        record = {
            "seed": seed,
            "vi_wall": vi.seconds,
            "lcvi_loop_wall": lcvi_wall,
            "lcvi_loop_cpu": lcvi_cpu,
            "lcvi_iterations": len(loop.steps) - 1,
            "settled": loop.settled,
            "advi_default_wall": default_wall,
            "advi_default_cpu": default_cpu,
            "risk_vi": vi.risk,
            "risk_lcvi": last.risk,
            "reduction_pct": 100 * (vi.risk - last.risk) / vi.risk,
        }
        per_seed.append(record)
        rows.append(
            [
                seed,
                f"{vi.seconds:.2f}",
                f"{lcvi_wall:.2f}",
                f"{lcvi_cpu:.2f}",
                f"{default_wall:.2f}",
                f"{record['reduction_pct']:.2f}",
            ]
        )
    print_table(
        [
            "seed",
            "VI wall s",
            "LCVI loop wall s",
            "LCVI loop CPU s",
            "ADVI default wall s",
            "risk reduction %",
        ],
        rows,
    )

    mean = {
        k: float(np.mean([r[k] for r in per_seed]))
        for k in per_seed[0]
        if k not in ("seed", "settled")
    }
    reductions = [r["reduction_pct"] for r in per_seed]
    results = {
        "seeds": args.seeds,
        "per_seed": per_seed,
        "mean": mean,
        "ratio_lcvi_loop_to_vi_wall": mean["lcvi_loop_wall"] / mean["vi_wall"],
        "ratio_lcvi_loop_to_advi_default_wall": mean["lcvi_loop_wall"]
        / mean["advi_default_wall"],
        "speedup_vs_reference_cpu": REFERENCE_CPU_SECONDS / mean["lcvi_loop_cpu"],
        "risk_reduction_pct": {
            "mean": float(np.mean(reductions)),
            "sd": float(np.std(reductions, ddof=1)),
        },
        "reference": {
            "cpu_seconds_per_run": REFERENCE_CPU_SECONDS,
            "risk_reduction_pct": {
                "mean": REFERENCE_REDUCTION_PCT[0],
                "sd": REFERENCE_REDUCTION_PCT[1],
            },
        },
        "settled": sum(r["settled"] for r in per_seed),
        "machine": machine_info(),
    }
    print(
        json.dumps(
            {k: v for k, v in results.items() if k not in ("per_seed", "machine")},
            indent=2,
        )
    )
    write_results("lcvi_eight_schools", results)


if __name__ == "__main__":
    main()
