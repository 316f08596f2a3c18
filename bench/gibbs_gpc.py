"""GPC for the quantile regression of gibbs-calibrate (b) through Stan and the run layer.

n = 50, X ~ chi2_2 - 2, Y = 2 + X + N(0, 2^2), tau = 0.5; B = 200 resamples,
2000 posterior draws (+ --warmup) per resample, one chain; one RunSet per omega
step (batch mode packs the 200 runs into few processes). Reports wall time per
step, per calibration, and the sampling limit (sum of the CSVs' total times /
cores). Reference: the authors' Rcpp, 0.79 s per step, ~7 s per calibration.

    python bench/gibbs_gpc.py [--steps 16] [--warmup 300]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from stanflow.gibbs import loss_function
from stanflow.gibbs.gpc import gpc, risk_minimiser


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=300)
    args = parser.parse_args()
    rng = np.random.default_rng(20240505)
    x = rng.chisquare(2, size=50) - 2
    y = 2 + x + rng.normal(0, 2, size=50)
    X = np.column_stack([np.ones(50), x])
    beta = risk_minimiser(y, X, loss_function("check", {"tau": 0.5}))
    cores = len(os.sched_getaffinity(0))
    start = time.perf_counter()
    c = gpc(y, loss="check", loss_params={"tau": 0.5}, X=X, estimate=beta,
            prior="normal", prior_params={"mean": 0, "sd": 10}, backend="stan",
            B=200, draws=2000, warmup=args.warmup, seed=1, max_steps=args.steps).calibration
    total = time.perf_counter() - start
    walls = c["step_wall_time"].values
    sampling = c["step_sampling_time"].values
    result = {
        "cores": cores,
        "B": 200,
        "draws": 2000,
        "warmup": args.warmup,
        "steps": int(c["steps"]),
        "omega": float(c["omega"]),
        "omega_path": c["omega_path"].values.tolist(),
        "coverage_path": c["coverage_path"].values.tolist(),
        "wall_per_step_s": walls.tolist(),
        "median_wall_per_step_s": float(np.median(walls)),
        "sampling_limit_per_step_s": float(np.median(sampling) / cores),
        "calibration_wall_s": total,
        "reference_rcpp": {"per_step_s": 0.79, "per_calibration_s": 7},
    }
    print(json.dumps(result, indent=1))
    out = Path(__file__).parent / "results" / "gibbs_gpc.json"
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
