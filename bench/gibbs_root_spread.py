"""GPC at scale: is the moved design's stated root error right? Its root over independent seeds.

Median regression at ``--K`` coefficients (10 or 20), n = 500, B = 200 (the data and
resamples of ``bench/gibbs_scale.py``): the whole moved-design root (``TransportCoverage`` and
``find_root`` / ``root_error``, as ``path_gpc`` runs them) with ``--seeds`` independent seeds
(each seed its own path, anchors, regions and moves), against the root's stated standard
error ``omega_se`` (the root mean square over the seeds) and beside the NUTS root stored by
``bench/gibbs_scale_nuts.py``.

Writes the size's entry of ``bench/results/gibbs_root_spread.json`` (the other sizes' entries,
each with its own command and machine, are kept).

    python bench/gibbs_root_spread.py --K 20 [--seeds 10]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _common import machine_info, write_results
from gibbs_scale import B, coverage_indices, program_for

from stanflow.gibbs.path import CALIBRATION_SAMPLER, LearningRatePath
from stanflow.gibbs.path.coverage import BootstrapProblem
from stanflow.gibbs.path.gpc_root import find_root, root_error
from stanflow.gibbs.path.transport import TransportCoverage

RESULTS = Path(__file__).resolve().parent / "results"
VERSUS_NUTS = RESULTS / "gibbs_scale_nuts.json"
SIZES = (10, 20)
N = 500
ALPHA = 0.05
FIRST_SEED = 200


def one_root(program, seed: int) -> dict:
    """The moved design's root and stated error with ``seed`` (path and coverage)."""
    start = time.perf_counter()
    path = LearningRatePath(program, sampler=CALIBRATION_SAMPLER, seed=seed)
    problem = BootstrapProblem(path, coverage_indices(program), program.estimate().theta, ALPHA)
    coverage = TransportCoverage(problem, seed=seed)
    target = (1 - ALPHA) * B
    root, history, done = find_root(coverage, 1.0, target, xtol=1e-3, max_evaluations=40)
    at_root, slope, se = root_error(coverage, root, history, target, 40, B)
    return {"seed": seed, "root": root, "omega_se": se, "converged": done,
            "count_variance": at_root.count_variance, "count_slope": slope,
            "evaluations": len(history), "wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--K", type=int, choices=SIZES, required=True)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    info = machine_info()
    program = program_for(args.K, N)
    rows = []
    for seed in range(FIRST_SEED, FIRST_SEED + args.seeds):
        rows.append(one_root(program, seed))
        r = rows[-1]
        print(f"seed {seed}: root {r['root']:.3f} +- {r['omega_se']:.3f} "
              f"(slope {r['count_slope']:.1f}, {r['wall_s']:.0f} s)", flush=True)
    roots = np.array([r["root"] for r in rows])
    stated = float(np.sqrt(np.mean(np.square([r["omega_se"] for r in rows]))))
    nuts = next(r for r in json.loads(VERSUS_NUTS.read_text())["rows"]
                if (r["K"], r["n"]) == (args.K, N))
    entry = {
        "command": f"python bench/gibbs_root_spread.py --K {args.K} --seeds {args.seeds}",
        "machine": info, "K": args.K, "n": N, "B": B, "rows": rows,
        "root_mean": float(roots.mean()), "sd_over_seeds": float(roots.std(ddof=1)),
        "stated_se_rms": stated, "sd_over_stated": float(roots.std(ddof=1)) / stated,
        "nuts_root": nuts["nuts_root"], "nuts_root_se": nuts["nuts_root_se"],
    }
    stored = RESULTS / "gibbs_root_spread.json"
    sizes = json.loads(stored.read_text())["sizes"] if stored.exists() else []
    sizes = sorted([s for s in sizes if s["K"] != args.K] + [entry], key=lambda s: s["K"])
    write_results("gibbs_root_spread", {"sizes": sizes})


if __name__ == "__main__":
    main()
