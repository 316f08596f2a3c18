"""GPC at scale: is the moved design's stated count error right? Its count over independent seeds.

At the roots of ``bench/gibbs_scale_nuts.py``'s comparison with NUTS (K = 10 and 20,
n = 500, its data and resamples), the coverage count of ``TransportCoverage`` with ``--seeds``
independent seeds (the path and the regions shared: the regions those of the benchmark's
seed-1 coverage, whose first evaluation is at ``omega = 1``), against the count's stated
standard deviation, ``sqrt(count_variance)``, and beside the NUTS count stored by
``bench/gibbs_scale_nuts.py`` at the same ``omega``.

Writes ``bench/results/gibbs_count_spread.json``.

    python bench/gibbs_count_spread.py [--seeds 8]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from _common import machine_info, write_results
from gibbs_scale import coverage_indices, program_for

from stanflow.gibbs.path import CALIBRATION_SAMPLER, LearningRatePath
from stanflow.gibbs.path.coverage import BootstrapProblem
from stanflow.gibbs.path.transport import TransportCoverage

VERSUS_NUTS = Path(__file__).resolve().parent / "results" / "gibbs_scale_nuts.json"
SIZES = [(10, 500), (20, 500)]


def spread(K: int, n: int, omega: float, seeds: int) -> dict:
    program = program_for(K, n)
    path = LearningRatePath(program, sampler=CALIBRATION_SAMPLER, seed=1)
    problem = BootstrapProblem(path, coverage_indices(program), program.estimate().theta, 0.05)
    reference = TransportCoverage(problem, seed=1)
    reference(1.0)  # the regions of the benchmark's coverage
    counts, stated = [], []
    for seed in range(100, 100 + seeds):
        coverage = TransportCoverage(problem, seed=seed)
        coverage.region = reference.region
        found = coverage(omega)
        counts.append(found.count)
        stated.append(float(np.sqrt(found.count_variance)))
        print(f"K = {K}, seed {seed}: count {found.count}, stated sd {stated[-1]:.2f}, "
              f"bridged {coverage.hmc_moves}", flush=True)
    return {"K": K, "n": n, "omega": omega, "seeds": seeds, "counts": counts,
            "stated_sd": stated, "sd_over_seeds": float(np.std(counts, ddof=1)),
            "stated_sd_rms": float(np.sqrt(np.mean(np.square(stated))))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    args = parser.parse_args()
    info = machine_info()
    versus = {(r["K"], r["n"]): r for r in json.loads(VERSUS_NUTS.read_text())["rows"]}
    rows = []
    for K, n in SIZES:
        stored = versus[(K, n)]
        row = spread(K, n, stored["root"], args.seeds)
        row["nuts_count"] = stored["counts_nuts"][1]
        rows.append(row)
    write_results("gibbs_count_spread", {
        "command": f"python bench/gibbs_count_spread.py --seeds {args.seeds}",
        "machine": info, "rows": rows,
    })


if __name__ == "__main__":
    main()
