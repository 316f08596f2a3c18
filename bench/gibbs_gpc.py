"""GPC for the quantile regression of gibbs-calibrate (b) through Stan and the run layer.

n = 50, X ~ chi2_2 - 2, Y = 2 + X + N(0, 2^2), tau = 0.5, B = 200 resamples,
N(0, 10^2) prior. Both designs of the Stan backend in one run, side by side:

- ``reweight`` (default): one proposal run (20000 draws, 4 one-chain runs) whose
  importance weights serve all resamples and steps; a whole calibration;
- ``resample``: every step samples the 200 resamples, 2000 draws + warm-up
  each, one chain (batch mode packs them into few processes); ``--resample-steps``
  steps, timed per step.

Reports wall time per step and per calibration, and the sampling limit (sum of the
CSVs' total times / cores). Reference: the authors' Rcpp (random-walk Metropolis,
200 posteriors of 2000 draws per step, one thread), 0.79 s per step, about 7 s per
calibration, measured on this machine kind.

    python bench/gibbs_gpc.py [--resample-steps 2] [--warmup 300]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from stanflow.gibbs import StanBackend, TemplateProgram, calibrate_gpc, linear_program
from stanflow.gibbs.templates import glm_minimiser
from stanflow.losses import loss_function

REFERENCE = {"per_step_s": 0.79, "per_calibration_s": 7.0}


def problem() -> tuple[TemplateProgram, np.ndarray]:
    rng = np.random.default_rng(20240505)
    x = rng.chisquare(2, size=50) - 2
    y = 2 + x + rng.normal(0, 2, size=50)
    X = np.column_stack([np.ones(50), x])
    program = linear_program(y, X, loss="check", loss_params={"tau": 0.5}, prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    return program, glm_minimiser(y, X, loss_function("check", {"tau": 0.5}))


def timed(design: str, cores: int, max_steps: int = 16, **backend) -> dict:
    program, beta = problem()
    start = time.perf_counter()
    c = calibrate_gpc(program, estimate=beta, backend=StanBackend(design=design, **backend),
                      B=200, seed=1, max_steps=max_steps).calibration
    total = time.perf_counter() - start
    walls = c["step_wall_time"].values
    sampling = c["step_sampling_time"].values
    result = {
        "steps": int(c["steps"]),
        "converged": bool(c["converged"]),
        "omega": float(c["omega"]),
        "omega_path": c["omega_path"].values.round(4).tolist(),
        "coverage_path": c["coverage_path"].values.tolist(),
        "wall_per_step_s": walls.round(3).tolist(),
        "median_wall_per_step_s": float(np.median(walls)),
        "calibration_wall_s": total,
        "sampling_limit_s": float(sampling.sum() / cores),
    }
    if design == "reweight":
        result.update(ess_min=c["ess_min"].values.round(0).tolist(),
                      ess_median=c["ess_median"].values.round(0).tolist(),
                      n_direct=c["n_direct"].values.tolist(),
                      proposal_runs=len(np.unique(c["omega_ref"].values)))
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--resample-steps", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=300)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    timed("reweight", cores, max_steps=1)  # compile once, outside the timings
    reweight = timed("reweight", cores, warmup=args.warmup)
    resample = timed("resample", cores, draws=2000, warmup=args.warmup,
                     max_steps=args.resample_steps)
    result = {
        "cores": cores,
        "B": 200,
        "reweight": reweight,
        "resample": resample,
        "ratio_calibration_reweight_vs_rcpp": (
            reweight["calibration_wall_s"] / REFERENCE["per_calibration_s"]
        ),
        "ratio_step_resample_vs_reweight": (
            resample["median_wall_per_step_s"] / reweight["median_wall_per_step_s"]
        ),
        "reference_rcpp": REFERENCE,
    }
    print(json.dumps(result, indent=1))
    out = Path(__file__).parent / "results" / "gibbs_gpc.json"
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
