"""GPC at scale spread over Dask workers: the same calibration in this process and on a cluster.

The median regression of ``bench/gibbs_scale.py`` at K = 20, n = 2000 (B = 200),
``calibrate_path(program, rules=["plugin"], resamples="transport")``, its
resamples moved in this process (the default) and on a Dask ``LocalCluster`` of
``--workers`` single-threaded worker processes (``Workers(DaskExecutor(client))``),
alternating, ``--repeats`` times each, on this machine. Recorded: wall time of
each, whether the two give the same numbers (they must: every resample draws
from its own random stream), and the cluster's start-up time (not counted in
the calibrations). On a machine of two cores a cluster cannot be faster than
the in-process calls, which already use both cores; what this measures is what
spreading costs, the price of running beyond one machine.

Writes ``bench/results/gibbs_spread.json``.

    python bench/gibbs_spread.py [--workers 2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import time

import distributed
import numpy as np
from _common import machine_info, median, print_table, write_results
from gibbs_scale import program_for

from stanflow.gibbs import calibrate_path
from stanflow.runs import DaskExecutor, Workers

K, N, B, SEED = 20, 2000, 200, 1
NUMBERS = ("omega", "omega_se", "omega_path", "coverage_path", "ess_min", "resample_moves")


def calibrate(program, workers: Workers | None) -> tuple[dict, float]:
    start = time.perf_counter()
    c = calibrate_path(program, B=B, seed=SEED, rules=["plugin"], resamples="transport",
                       workers=workers).calibration
    wall = time.perf_counter() - start
    return {name: np.asarray(c[name].values).tolist() for name in NUMBERS}, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="Dask worker processes")
    parser.add_argument("--repeats", type=int, default=2, help="calibrations of each kind")
    args = parser.parse_args()
    info = machine_info()
    program = program_for(K, N)
    start = time.perf_counter()
    with (
        distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                 dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        startup = time.perf_counter() - start
        runs: dict[str, list[float]] = {"local": [], "dask": []}
        numbers: dict[str, dict] = {}
        for _ in range(args.repeats):
            for kind, workers in (("local", None), ("dask", Workers(DaskExecutor(client)))):
                found, wall = calibrate(program, workers)
                runs[kind].append(wall)
                numbers.setdefault(kind, found)
                print(f"{kind}: {wall:.1f} s, omega {found['omega']:.4f}", flush=True)
    same = numbers["local"] == numbers["dask"]
    ratio = median(runs["dask"]) / median(runs["local"])
    print_table(["where", "wall s (median)", "runs"],
                [[kind, f"{median(walls):.1f}", len(walls)] for kind, walls in runs.items()])
    print(f"same numbers: {same}; Dask / local wall {ratio:.2f}; cluster start {startup:.1f} s")
    write_results("gibbs_spread", {
        "command": f"python bench/gibbs_spread.py --workers {args.workers} --repeats {args.repeats}",
        "machine": info, "distributed": distributed.__version__,
        "K": K, "n": N, "B": B, "seed": SEED, "workers": args.workers,
        "wall_s": runs, "wall_median_s": {k: median(v) for k, v in runs.items()},
        "dask_over_local": ratio, "same_numbers": same, "cluster_start_s": startup,
        "numbers": numbers["local"],
    })


if __name__ == "__main__":
    main()
