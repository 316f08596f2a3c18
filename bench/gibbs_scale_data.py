"""GPC at scale against the size of the data: the program's data cut by observation or whole.

The median regressions of ``bench/gibbs_scale.py`` at K = 5 for n = 10^3, 10^4 and 10^5,
and at the goal's size K = 20, n = 2000: ``calibrate_path(program, rules=["plugin"],
resamples="transport", seed=1)`` timed ``--repeats`` times (default 2) each way at each
size, alternately (which goes first swaps every repeat)

- **sliced**: the program as it loads, its prior read from the evaluation form on one
  observation and, where the data pass two chunks of ``stanflow.gibbs.slices.CHUNK_BYTES``,
  its target from chunks of them (``program.slices``);
- **whole**: the same program with ``program.slices = None``, every call on all the data
  (stanflow before the slices).

With ``--own``, instead, the median regression at K = 5, n = 10^4 as a user writes it (one
Stan file, ``OWN_PROGRAM``, its prior in Stan, not the template's box): there the prior comes
from Stan beside every total loss, so the one-observation slice is what counts; written to
``bench/results/gibbs_scale_data_own.json``.

Reports each wall and CPU time (the process's, all threads), the coverage evaluations, the
medians' wall (in all and per evaluation) and their growth for 10x the data, and both roots (the same up
to rounding).

Writes ``bench/results/gibbs_scale_data.json``, keeping two earlier runs: ``doubling_search``
(before GPC's search for the moved design was guided, commit 3a0e273) and ``prior_start``
(before the moved design started its path near the data, commit 958013e).

    python bench/gibbs_scale_data.py [--repeats 2] [--own]
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path

from _common import RESULTS_DIR, machine_info, median, print_table, write_results
from gibbs_scale import B, program_for

from stanflow import arviz_compat
from stanflow.gibbs import LossProgram
from stanflow.gibbs.path import calibrate_path

SIZES = [(5, 1000), (5, 10_000), (5, 100_000), (20, 2000)]
OWN_SIZE = (5, 10_000)
OWN_PROGRAM = """\
data {
  int<lower=1> N;
  int<lower=1> K;
  matrix[N, K] X;
  vector[N] y;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
}
parameters {
  vector[K] beta;
}
model {
  vector[N] u = y - X * beta;
  target += -omega * dot_product(weights, 0.5 * u - fmin(u, 0));
  target += normal_lpdf(beta | 0, 10);
}
"""


def own_program(K: int, n: int, folder: Path) -> LossProgram:
    """The data of ``program_for(K, n)`` in :data:`OWN_PROGRAM`, a user's own file."""
    template = program_for(K, n)
    file = folder / "median_regression.stan"
    file.write_text(OWN_PROGRAM)
    program = LossProgram(file, {"N": n, "K": K, "X": template.design, "y": template.y})
    program.model()  # the NUTS executable for its prior's draws, compiled before timing
    return program


def calibration(program) -> dict:
    start, cpu = time.perf_counter(), time.process_time()
    c = arviz_compat.group(
        calibrate_path(program, B=B, seed=1, rules=["plugin"], resamples="transport"),
        "calibration")
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    evaluations = int(c["evaluations"])
    return {"wall_s": wall, "cpu_s": cpu, "evaluations": evaluations,
            "omega": float(c["omega"]), "omega_se": float(c["omega_se"])}


MODES = ("sliced", "whole")


def size_row(K: int, n: int, repeats: int, program=None) -> dict:
    program = program_for(K, n) if program is None else program
    sliced = program.slices
    assert sliced is not None, "the benchmark's programs can be cut"
    row: dict = {"K": K, "n": n, "chunks": len(sliced.chunks), "sliced": [], "whole": []}
    for repeat in range(repeats):
        for mode in (MODES if repeat % 2 == 0 else MODES[::-1]):
            program.slices = sliced if mode == "sliced" else None
            run = calibration(program)
            row[mode].append(run)
            print(f"K = {K}, n = {n}, {mode}: {run['wall_s']:.1f} s (CPU {run['cpu_s']:.1f} s), "
                  f"{run['evaluations']} evaluations, omega {run['omega']:.4f}", flush=True)
    for mode in MODES:
        runs = row[mode]
        row[f"{mode}_median"] = {
            key: median([r[key] for r in runs]) for key in ("wall_s", "cpu_s")
        } | {"wall_per_evaluation_s": median([r["wall_s"] / r["evaluations"] for r in runs]),
             "cpu_per_evaluation_s": median([r["cpu_s"] / r["evaluations"] for r in runs])}
    row["whole_over_sliced"] = row["whole_median"]["wall_s"] / row["sliced_median"]["wall_s"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="runs each way at each size")
    parser.add_argument("--own", action="store_true", help="a user's own program instead")
    args = parser.parse_args()
    info = machine_info()
    if args.own:
        with tempfile.TemporaryDirectory() as folder:
            row = size_row(*OWN_SIZE, args.repeats, own_program(*OWN_SIZE, Path(folder)))
        print(f"own program: whole / sliced {row['whole_over_sliced']:.2f}")
        write_results("gibbs_scale_data_own", {
            "command": "python bench/gibbs_scale_data.py --own"
            + ("" if args.repeats == 2 else f" --repeats {args.repeats}"),
            "machine": info, "B": B, "repeats": args.repeats, "program": OWN_PROGRAM,
            "row": row,
        })
        return
    rows = [size_row(K, n, args.repeats) for K, n in SIZES]
    sweep = [r for r in rows if r["K"] == 5]
    growth = {
        f"{mode}_{per}": [b[f"{mode}_median"][f"{per}_per_evaluation_s"]
                          / a[f"{mode}_median"][f"{per}_per_evaluation_s"]
                          for a, b in itertools.pairwise(sweep)]
        for mode in MODES for per in ("wall", "cpu")
    } | {
        f"{mode}_total_wall": [b[f"{mode}_median"]["wall_s"] / a[f"{mode}_median"]["wall_s"]
                               for a, b in itertools.pairwise(sweep)]
        for mode in MODES
    }
    print_table(["K", "n", "chunks", "sliced s", "whole s", "whole / sliced"],
                [[r["K"], r["n"], r["chunks"], f"{r['sliced_median']['wall_s']:.1f}",
                  f"{r['whole_median']['wall_s']:.1f}", f"{r['whole_over_sliced']:.2f}"]
                 for r in rows])
    print("for 10x n:", {k: [round(g, 1) for g in v] for k, v in growth.items()})
    stored = RESULTS_DIR / "gibbs_scale_data.json"
    kept = {key: value for key, value in json.loads(stored.read_text()).items()
            if key in ("doubling_search", "prior_start")} if stored.exists() else {}
    write_results("gibbs_scale_data", {
        "command": "python bench/gibbs_scale_data.py"
        + ("" if args.repeats == 2 else f" --repeats {args.repeats}"),
        "machine": info, "B": B, "repeats": args.repeats, "rows": rows,
        "growth_per_10x_n": growth,
    } | kept)


if __name__ == "__main__":
    main()
