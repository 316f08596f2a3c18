"""Benchmark: LCVI vs plain ADVI on eight schools, and against the authors' PyTorch reference.

Per seed, side by side in one run (the order alternates between seeds):

- ``plain``: one CmdStan ADVI run as a user would start it, with the LCVI
  loop's settings (mean-field, 10000 iterations, 10 gradient samples, ``eta``
  adapted, 1000 draws), through cmdstanpy;
- ``lcvi``: the whole LCVI procedure of :func:`stanflow.lcvi.run_lcvi` (plain
  VI, its decisions and M90, the LCVI blocks, the decision steps) at the same
  budget of 10000 iterations: check tau = 0.2 (the paper's tilted), linearised ``M - l``;
- ``lcvi_settled``: the same with the ``lcvi-eight-schools`` workflow's
  settling rule (``tol = 0.1``; LCVI and plain VI go on to at most 20000
  iterations while a decision still moves).

Reported: wall-time ratios to ``plain`` (goal: LCVI at most 3x), CPU seconds
of all CmdStan processes against the reference (the authors' PyTorch code on
this machine kind, 30001 Adam steps: about 190 s CPU for VI and again for LCVI
per seed; goal: at least 10x less), and the risk reductions next to the
reference's 0.9 +- 0.4 % (the authors' stored results, 11 seeds).

Usage::

    .venv/bin/python bench/lcvi_eight_schools.py [--seeds 10]
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from functools import partial

import numpy as np
from _common import REPO, machine_info, print_table, timed_call, write_results

from stanflow.lcvi import (
    ADVI_DEFAULTS,
    Utility,
    eight_schools,
    run_lcvi,
)
from stanflow.losses import bound_loss

REFERENCE_CPU_SECONDS = 190.0  # per VI run and per LCVI run, 30001 Adam steps
REFERENCE_REDUCTION_PCT = (0.9, 0.4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    logging.getLogger("cmdstanpy").setLevel(logging.ERROR)

    data = json.loads((REPO / "data" / "eight_schools.json").read_text())
    problem = eight_schools(data)
    loss = bound_loss("check", tau=0.2)
    bound = problem.bind(loss)
    model = bound.executable()  # compiled before timing
    plain_data = bound.stan_data(
        np.zeros(problem.n), np.zeros((1, problem.n)), np.full((1, problem.n), 0.5),
        bound.settings(0.0, "linear", 1.0, "linearised", 1),
    )
    n_iter = ADVI_DEFAULTS["iter"]

    def plain(seed):
        with tempfile.TemporaryDirectory() as tmp:
            return model.variational(
                data=plain_data,
                seed=seed,
                iter=n_iter,
                grad_samples=ADVI_DEFAULTS["grad_samples"],
                eval_elbo=ADVI_DEFAULTS["eval_elbo"],
                tol_rel_obj=ADVI_DEFAULTS["tol_rel_obj"],
                draws=ADVI_DEFAULTS["output_samples"],
                output_dir=tmp,
                require_converged=False,
            )

    utility = Utility(kind="linear", estimator="linearised")

    def lcvi(seed, **settle):
        return run_lcvi(problem, loss, utility=utility, seed=seed, **settle)

    per_seed, rows = [], []
    for seed in range(1, args.seeds + 1):
        jobs = {
            "plain": partial(plain, seed),
            "lcvi": partial(lcvi, seed),
            "lcvi_settled": partial(lcvi, seed, tol=0.1, max_iter=2 * n_iter),
        }
        order = list(jobs) if seed % 2 else list(reversed(jobs))
        times = {}
        for name in order:
            result, wall, cpu = timed_call(jobs[name])
            times[name] = (result, wall, cpu)
        record = {"seed": seed}
        for name in jobs:
            result, wall, cpu = times[name]
            record[f"{name}_wall"], record[f"{name}_cpu"] = wall, cpu
            if name != "plain":
                vi, last = result.baseline, result.steps[-1]
                record[f"{name}_reduction_pct"] = 100 * (vi.risk - last.risk) / vi.risk
                record[f"{name}_iterations"] = last.state.iteration
                record[f"{name}_settled"] = result.settled
        per_seed.append(record)
        rows.append(
            [
                seed,
                f"{record['plain_wall']:.2f}",
                f"{record['lcvi_wall']:.2f}",
                f"{record['lcvi_settled_wall']:.2f}",
                f"{record['lcvi_cpu']:.2f}",
                f"{record['lcvi_reduction_pct']:.2f}",
                f"{record['lcvi_settled_reduction_pct']:.2f}",
                record["lcvi_settled_iterations"],
            ]
        )
    print_table(
        [
            "seed",
            "plain ADVI wall s",
            "LCVI wall s",
            "LCVI settled wall s",
            "LCVI CPU s",
            "reduction %",
            "settled reduction %",
            "settled at it.",
        ],
        rows,
    )

    def mean(key):
        return float(np.mean([r[key] for r in per_seed]))

    def spread(key):
        values = [r[key] for r in per_seed]
        return {"mean": float(np.mean(values)), "sd": float(np.std(values, ddof=1))}

    results = {
        "seeds": args.seeds,
        "per_seed": per_seed,
        "ratio_lcvi_to_plain_wall": mean("lcvi_wall") / mean("plain_wall"),
        "ratio_lcvi_settled_to_plain_wall": mean("lcvi_settled_wall") / mean("plain_wall"),
        "speedup_vs_reference_cpu": REFERENCE_CPU_SECONDS / mean("lcvi_cpu"),
        "speedup_vs_reference_cpu_settled": REFERENCE_CPU_SECONDS / mean("lcvi_settled_cpu"),
        "risk_reduction_pct": spread("lcvi_reduction_pct"),
        "risk_reduction_pct_settled": spread("lcvi_settled_reduction_pct"),
        "settled": sum(r["lcvi_settled_settled"] for r in per_seed),
        "reference": {
            "cpu_seconds_per_run": REFERENCE_CPU_SECONDS,
            "risk_reduction_pct": {
                "mean": REFERENCE_REDUCTION_PCT[0],
                "sd": REFERENCE_REDUCTION_PCT[1],
            },
        },
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
