"""GPC at scale against the size of the data: the program's data cut by observation or whole.

The median regressions of ``bench/gibbs_scale.py`` at K = 5 for n = 10^3, 10^4 and 10^5,
and at the goal's size K = 20, n = 2000: ``calibrate_path(program, rules=["plugin"],
resamples="transport", seed=1)`` timed twice at each size, alternately

- **sliced**: the program as it loads, its prior read from the evaluation form on one
  observation and, where the data pass two chunks of ``stanflow.gibbs.slices.CHUNK_BYTES``,
  its target from chunks of them (``program.slices``);
- **whole**: the same program with ``program.slices = None``, every call on all the data
  (stanflow before the slices).

Reports each wall time, the coverage evaluations, the wall per evaluation and its growth for
10x the data, and both roots (the same up to rounding).

Writes ``bench/results/gibbs_scale_data.json``.

    python bench/gibbs_scale_data.py
"""

from __future__ import annotations

import argparse
import itertools
import time

from _common import machine_info, print_table, write_results
from gibbs_scale import B, program_for

from stanflow import arviz_compat
from stanflow.gibbs.path import calibrate_path

SIZES = [(5, 1000), (5, 10_000), (5, 100_000), (20, 2000)]


def calibration(program) -> dict:
    start = time.perf_counter()
    c = arviz_compat.group(
        calibrate_path(program, B=B, seed=1, rules=["plugin"], resamples="transport"),
        "calibration")
    wall = time.perf_counter() - start
    evaluations = int(c["evaluations"])
    return {"wall_s": wall, "evaluations": evaluations, "wall_per_evaluation_s": wall / evaluations,
            "omega": float(c["omega"]), "omega_se": float(c["omega_se"])}


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    info = machine_info()
    rows = []
    for i, (K, n) in enumerate(SIZES):
        program = program_for(K, n)
        sliced = program.slices
        assert sliced is not None, "the benchmark's programs can be cut"
        row = {"K": K, "n": n, "chunks": len(sliced.chunks)}
        for mode in (("sliced", "whole") if i % 2 == 0 else ("whole", "sliced")):
            program.slices = sliced if mode == "sliced" else None
            row[mode] = calibration(program)
            print(f"K = {K}, n = {n}, {mode}: {row[mode]['wall_s']:.1f} s, "
                  f"{row[mode]['evaluations']} evaluations, omega {row[mode]['omega']:.4f}",
                  flush=True)
        row["whole_over_sliced"] = row["whole"]["wall_s"] / row["sliced"]["wall_s"]
        rows.append(row)
    sweep = [r for r in rows if r["K"] == 5]
    growth = {
        mode: [b[mode]["wall_per_evaluation_s"] / a[mode]["wall_per_evaluation_s"]
               for a, b in itertools.pairwise(sweep)]
        for mode in ("sliced", "whole")
    }
    print_table(["K", "n", "chunks", "sliced s (evals)", "whole s (evals)", "whole / sliced"],
                [[r["K"], r["n"], r["chunks"],
                  f"{r['sliced']['wall_s']:.1f} ({r['sliced']['evaluations']})",
                  f"{r['whole']['wall_s']:.1f} ({r['whole']['evaluations']})",
                  f"{r['whole_over_sliced']:.2f}"] for r in rows])
    print("wall per evaluation for 10x n:",
          {mode: [round(g, 1) for g in values] for mode, values in growth.items()})
    write_results("gibbs_scale_data", {
        "command": "python bench/gibbs_scale_data.py", "machine": info, "B": B,
        "rows": rows, "growth_per_10x_n": growth,
    })


if __name__ == "__main__":
    main()
