"""Benchmark: LCVI vs plain ADVI on the Last.fm matrix factorisation, and against the PyTorch reference.

The ``lcvi-mf`` workflow's setting (992 users x 100 artists, K = 20, the
authors' split, exp utility with gamma = 1/M90, linearised estimator on 2
stratified outcome samples, 30000 ADVI iterations with one gradient sample,
LCVI branching off plain VI at 15000 with decisions every 1500), per seed and
loss, side by side in one run:

- ``plain``: one CmdStan ADVI run of 30000 iterations as a user would start
  it (through cmdstanpy; ``eta`` adapted);
- ``lcvi``: the whole LCVI procedure of :func:`stanflow.lcvi.run_lcvi`
  (plain VI included) for the check loss tau = 0.2 (the paper's tilted) and for squared loss.

The reference is the authors' PyTorch code on this machine kind: about 85 s CPU
per 1000 Adam steps, about 40 minutes per 30001-step run (VI or LCVI).
Reported: wall-time ratios LCVI / plain (goal: at most 3), the CPU time of an
LCVI procedure against one reference LCVI run (goal: at least 10x less), and
the test risks (the workflow's 5-seed numbers are in its summary.json).

Usage::

    STANFLOW_DATA_DIR=../shared/data .venv/bin/python bench/lcvi_mf.py [--seeds 1]
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from functools import partial

import numpy as np
from _common import machine_info, print_table, timed_call, write_results

from stanflow.lcvi import Utility, empirical_risk, run_lcvi
from stanflow.lcvi.mf import (
    cell_locations,
    load_lastfm,
    matrix_factorisation,
    reference_split,
)
from stanflow.losses import bound_loss

REFERENCE_CPU_PER_1000_STEPS = 85.0
REFERENCE_RUN_SECONDS = 40 * 60.0  # 30001 steps
ITERATIONS = 30_000
LOSSES = {"tilted_0.2": ("check", {"tau": 0.2}), "squared": ("squared", {})}


def plain(model, data, seed):
    """One CmdStan ADVI run of the whole budget, as a user would start it."""
    with tempfile.TemporaryDirectory() as tmp:
        return model.variational(
            data=data, seed=seed, iter=ITERATIONS, grad_samples=1, eval_elbo=1000,
            tol_rel_obj=1e-9, draws=20, output_dir=tmp, require_converged=False,
        )


def lcvi(problem, loss, seed, advi):
    """The whole LCVI procedure in the ``lcvi-mf`` workflow's setting."""
    return run_lcvi(
        problem, loss, utility=Utility(kind="exp", estimator="linearised", n_outcomes=2),
        n_draws=200, decision_every=ITERATIONS // 20, seed=seed, advi_args=advi,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args()
    logging.getLogger("cmdstanpy").setLevel(logging.ERROR)

    Y = load_lastfm(100)
    split = reference_split(Y.shape)
    problem = matrix_factorisation(Y, split, K=20, prior_sd=10.0, noise_sd=1.0)
    y_test = Y[split.test_rows, split.test_cols]
    advi = {"iter": ITERATIONS, "grad_samples": 1, "output_samples": 20}

    def test_risk(loop, step, loss):
        z = step.state.draws(loop.eps_theta)
        loc = cell_locations(z, (*Y.shape, 20), split.test_rows, split.test_cols)
        h = loss.mixture_decision(loc, np.ones(y_test.size))
        return empirical_risk(y_test, h, loss)

    per_run, rows = [], []
    for seed in range(1, args.seeds + 1):
        for name, (family, params) in LOSSES.items():
            loss = bound_loss(family, **params)
            bound = problem.bind(loss)
            model = bound.executable()  # compiled before timing
            data = bound.stan_data(
                np.zeros(problem.n), np.zeros((1, problem.n)), np.full((1, problem.n), 0.5),
                bound.settings(0.0, "exp", 1.0, "linearised", 1),
            )

            jobs = [
                ("plain", partial(plain, model, data, seed)),
                ("lcvi", partial(lcvi, problem, loss, seed, advi)),
            ]
            if seed % 2 == 0:
                jobs.reverse()
            record = {"seed": seed, "loss": name}
            for job, call in jobs:
                result, record[f"{job}_wall"], record[f"{job}_cpu"] = timed_call(call)
                if job == "lcvi":
                    record["test_risk_vi"] = test_risk(result, result.baseline, loss)
                    record["test_risk_lcvi"] = test_risk(result, result.steps[-1], loss)
                    record["lcvi_blocks_wall"] = sum(s.seconds for s in result.steps[1:])
            record["ratio_wall"] = record["lcvi_wall"] / record["plain_wall"]
            record["speedup_vs_reference_cpu"] = REFERENCE_RUN_SECONDS / record["lcvi_cpu"]
            record["reduction_pct"] = 100 * (
                1 - record["test_risk_lcvi"] / record["test_risk_vi"]
            )
            per_run.append(record)
            rows.append(
                [
                    seed,
                    name,
                    f"{record['plain_wall']:.1f}",
                    f"{record['lcvi_wall']:.1f}",
                    f"{record['ratio_wall']:.2f}",
                    f"{record['lcvi_cpu']:.1f}",
                    f"{record['speedup_vs_reference_cpu']:.1f}",
                    f"{record['test_risk_vi']:.4f}",
                    f"{record['test_risk_lcvi']:.4f}",
                ]
            )
    print_table(
        [
            "seed",
            "loss",
            "plain ADVI wall s",
            "LCVI wall s",
            "LCVI / plain",
            "LCVI CPU s",
            "x faster than ref.",
            "test risk VI",
            "test risk LCVI",
        ],
        rows,
    )
    results = {
        "seeds": args.seeds,
        "iterations": ITERATIONS,
        "per_run": per_run,
        "ratio_wall": {
            name: float(np.mean([r["ratio_wall"] for r in per_run if r["loss"] == name]))
            for name in LOSSES
        },
        "speedup_vs_reference_cpu": {
            name: float(
                np.mean([r["speedup_vs_reference_cpu"] for r in per_run if r["loss"] == name])
            )
            for name in LOSSES
        },
        "reference": {
            "cpu_seconds_per_1000_steps": REFERENCE_CPU_PER_1000_STEPS,
            "seconds_per_30001_step_run": REFERENCE_RUN_SECONDS,
        },
        "machine": machine_info(),
    }
    print(
        json.dumps(
            {k: v for k, v in results.items() if k not in ("per_run", "machine")},
            indent=2,
        )
    )
    write_results("lcvi_mf", results)


if __name__ == "__main__":
    main()
