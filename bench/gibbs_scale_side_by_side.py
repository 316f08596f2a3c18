"""GPC at scale, side by side: the moved design's calibration against the resample design's.

Median regression at K = 20 coefficients, n = 500 (or ``--n``), B = 200 (the data of
``bench/gibbs_scale.py``; the same resamples, seed 1, for both):

1. ``calibrate_path(program, rules=[], resamples="transport", seed=1)``: one path, particles
   moved to every resample, the root by bracketing (the moved design);
2. ``calibrate_gpc(program, backend=StanBackend(design="resample"), seed=1)``: Syring and
   Martin's Robbins-Monro steps with every resample sampled by NUTS at every step (one chain,
   300 warm-up iterations and 1000 draws each, through the run layer), stopping when the
   coverage is within ``eps = 0.01`` of 0.95 or after 16 steps;
3. the moved design again, so that its wall time brackets the resample design's.

The ratio is the resample design's wall over the moved design's median; beside it both rates
and how far apart they are in the moved root's stated error and (at n = 500) in the spread of
the moved roots over seeds (``bench/results/gibbs_root_spread.json``).

Writes ``bench/results/gibbs_scale_side_by_side.json`` (with ``--n``,
``gibbs_scale_side_by_side_n<n>.json``).

    python bench/gibbs_scale_side_by_side.py [--n 2000]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _common import machine_info, write_results
from gibbs_scale import B, program_for

from stanflow import arviz_compat
from stanflow.gibbs import StanBackend, calibrate_gpc
from stanflow.gibbs.path import calibrate_path

K, N = 20, 500
SEED = 1
ROOT_SPREAD = Path(__file__).resolve().parent / "results" / "gibbs_root_spread.json"


def moved(program) -> dict:
    start = time.perf_counter()
    c = arviz_compat.group(
        calibrate_path(program, B=B, seed=SEED, rules=[], resamples="transport"), "calibration")
    return {"wall_s": time.perf_counter() - start, "omega": float(c["omega"]),
            "omega_se": float(c["omega_se"]), "evaluations": int(c["evaluations"]),
            "converged": bool(c["converged"])}


def resample_design(program) -> dict:
    start = time.perf_counter()
    c = arviz_compat.group(
        calibrate_gpc(program, backend=StanBackend(design="resample"), B=B, seed=SEED),
        "calibration")
    return {"wall_s": time.perf_counter() - start, "omega": float(c["omega"]),
            "steps": int(c["steps"]), "converged": bool(c["converged"]),
            "omega_path": c["omega_path"].values.tolist(),
            "coverage_path": c["coverage_path"].values.tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=N, help="observations")
    n = parser.parse_args().n
    info = machine_info()
    program = program_for(K, n)
    first = moved(program)
    print(f"moved: {first['wall_s']:.1f} s, omega {first['omega']:.3f}", flush=True)
    nuts = resample_design(program)
    print(f"resample design: {nuts['wall_s']:.1f} s, omega {nuts['omega']:.3f}, "
          f"{nuts['steps']} steps", flush=True)
    second = moved(program)
    print(f"moved again: {second['wall_s']:.1f} s", flush=True)
    moved_wall = float(np.median([first["wall_s"], second["wall_s"]]))
    gap = nuts["omega"] - first["omega"]
    seeds = {}
    if n == N:  # the roots' spread over seeds was measured at this size
        spread = next(s for s in json.loads(ROOT_SPREAD.read_text())["sizes"] if s["K"] == K)
        seeds = {"gap_in_seed_spread": gap / spread["sd_over_seeds"],
                 "seeds_root_mean": spread["root_mean"]}
    write_results("gibbs_scale_side_by_side" + ("" if n == N else f"_n{n}"), {
        "command": "python bench/gibbs_scale_side_by_side.py" + ("" if n == N else f" --n {n}"),
        "machine": info, "K": K, "n": n, "B": B, "seed": SEED, "moved": [first, second],
        "resample_design": nuts, "wall_ratio": nuts["wall_s"] / moved_wall,
        "gap": gap, "gap_in_moved_se": gap / first["omega_se"], **seeds,
    })
    print(f"ratio {nuts['wall_s'] / moved_wall:.1f}x", flush=True)


if __name__ == "__main__":
    main()
