"""GPC at scale: is the moved design's stated root error right? Its root over independent seeds.

Median regression at ``--K`` coefficients (10 or 20), n = 500, B = 200 (the data and
resamples of ``bench/gibbs_scale.py``): the whole moved-design root (``TransportCoverage`` and
``search_root``, as ``path_gpc`` runs them) with ``--seeds`` independent seeds
(each seed its own path, anchors, regions and moves), against the root's stated standard
error ``omega_se`` (the root mean square over the seeds) and beside the NUTS root stored by
``bench/gibbs_scale_nuts.py``.

Writes the size's entry of ``bench/results/gibbs_root_spread.json`` (the other sizes' entries,
each with its own command and machine, are kept, and so are the other keys: ``doubling_search``
holds the entries made before GPC's search for the moved design was guided, at commit 3a0e273,
``prior_start`` those made before the moved design started its path near the data, at 958013e).

    python bench/gibbs_root_spread.py --K 20 [--seeds 10]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from _common import machine_info, write_results
from gibbs_scale import B, program_for
from gibbs_scale_nuts import moved_root

RESULTS = Path(__file__).resolve().parent / "results"
VERSUS_NUTS = RESULTS / "gibbs_scale_nuts.json"
SIZES = (10, 20)
N = 500
FIRST_SEED = 200


def one_root(program, seed: int) -> dict:
    """The moved design's root and stated error with ``seed`` (path and coverage)."""
    _, found = moved_root(program, seed)
    return {"seed": seed, "root": found["root"], "omega_se": found["root_se"],
            "converged": found["converged"], "count_variance": found["count_variance_at_root"],
            "count_slope": found["count_slope"], "evaluations": found["evaluations"],
            "wall_s": found["wall_s"]}


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
    kept = json.loads(stored.read_text()) if stored.exists() else {"sizes": []}
    kept["sizes"] = sorted([s for s in kept["sizes"] if s["K"] != args.K] + [entry],
                           key=lambda s: s["K"])
    write_results("gibbs_root_spread", kept)


if __name__ == "__main__":
    main()
