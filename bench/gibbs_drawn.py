"""GPC at scale with each resample evaluated on its drawn observations, against every observation.

A bootstrap resample leaves out about 1/e of the observations; the moved design
evaluates each resample's loss on the evaluation form loaded with its drawn
observations alone (``stanflow.gibbs.drawn``) and runs its block kernels with
BLAS on one thread. This benchmark takes both away again, side by side in one
run, alternating, on the median regressions of ``bench/gibbs_scale.py`` (K = 20,
n = 2000, the goal's size; K = 5, n = 10^4):

- ``shipped``: ``calibrate_path(program, rules=["plugin"], resamples="transport",
  seed=1)`` as it ships, every run loading its resamples' forms afresh;
- ``all_observations``: the same with the program's cut switched off
  (``program.drawn = None``): every resample's weights on the whole data;
- ``all_observations_blas``: that, and BLAS's threads left as they are.

Each run's wall time, root, evaluations and resample moves; the numbers must be
the same in every mode (the cut leaves the target's value unchanged where the
data are not chunked). Writes ``bench/results/gibbs_drawn.json``.

    python bench/gibbs_drawn.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import contextlib

from _common import machine_info, median, write_results
from gibbs_scale import B, calibration, program_for

import stanflow.gibbs.path.bridge as bridge
import stanflow.gibbs.path.moving as moving

SIZES = [(20, 2000), (5, 10_000)]
MODES = ["shipped", "all_observations", "all_observations_blas"]
KEYS = ("omega", "omega_se", "evaluations", "resample_moves", "bridged")


def run(program, mode: str) -> dict:
    """One calibration in ``mode`` (module docstring)."""
    drawn, limit = program.drawn, moving.one_blas_thread
    if mode != "shipped":
        program.drawn = None
    if mode == "all_observations_blas":  # the block kernels' BLAS limit taken out
        moving.one_blas_thread = bridge.one_blas_thread = contextlib.nullcontext
    try:
        return calibration(program, "transport")
    finally:
        program.drawn = drawn
        moving.one_blas_thread = bridge.one_blas_thread = limit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    info = machine_info()
    rows = []
    for K, n in SIZES:
        program = program_for(K, n)
        if program.drawn is None:
            raise SystemExit(f"K = {K}, n = {n}: the program's data cannot be cut")
        runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
        for repeat in range(args.repeats):
            for mode in MODES:
                r = run(program, mode)
                runs[mode].append(r)
                print(f"K = {K}, n = {n}, {mode}, run {repeat + 1}: {r['wall_s']:.1f} s, "
                      f"omega {r['omega']:.4f}, {r['evaluations']} evaluations, "
                      f"{r['resample_moves']} moves", flush=True)
        wall = {mode: median([r["wall_s"] for r in runs[mode]]) for mode in MODES}
        numbers = {mode: [{key: r[key] for key in KEYS} for r in runs[mode]] for mode in MODES}
        first = numbers["shipped"][0]
        rows.append({
            "K": K, "n": n, "runs": runs, "wall_median_s": wall,
            "speedup": {mode: wall[mode] / wall["shipped"] for mode in MODES[1:]},
            "same_numbers": all(record == first for mode in MODES for record in numbers[mode]),
            "numbers": first,
        })
        print(f"K = {K}, n = {n}: " + ", ".join(f"{m} {wall[m]:.1f} s" for m in MODES))
    command = "python bench/gibbs_drawn.py" + (
        f" --repeats {args.repeats}" if args.repeats != 2 else "")
    write_results("gibbs_drawn", {"command": command, "machine": info, "B": B, "rows": rows})


if __name__ == "__main__":
    main()
