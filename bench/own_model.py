"""A user's own program against the shipped template for the same model: is it as fast?

Two Gibbs posteriors of a location, each once as the shipped template
(``stanflow.gibbs.location_program``) and once as a user would write it, one
Stan file (written here into a temporary folder), ``y_i ~ Gamma(2, 1)``,
``n = 200``:

- **path GPC**: the median (absolute loss) with a uniform prior on [0, 8],
  ``calibrate_path`` with its defaults (4000 particles, B = 200). The template
  starts the path from exact draws of its shipped prior on the box; the user's
  program from NUTS draws of its prior (the target at ``omega = 0``), on Stan's
  unconstrained scale;
- **WBB**: 1000 draws of ``wbb_program`` with the Huber loss (``delta = 1``),
  smooth as L-BFGS needs, and a ``N(0, 10^2)`` prior.

Both programs are compiled and loaded before timing. The two variants run
alternately (which goes first swaps every repeat), ``--repeats`` times
(default 5), in one process, and the ratio of the median wall times (user /
template) is reported with both medians; the goal is at most 1.3. The
calibrated rates and the draws' means are printed to show that the two
variants compute the same thing.

    python bench/own_model.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import machine_info, median, print_table, write_results

from stanflow import arviz_compat
from stanflow.gibbs import LossProgram, calibrate_path, location_program
from stanflow.wbb import wbb_program

MEDIAN = """\
data {
  int<lower=1> N;
  vector[N] y;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
}
parameters {
  real<lower=0, upper=8> theta;
}
model {
  target += -omega * dot_product(weights, abs(y - theta));
}
"""
HUBER = """\
functions {
  real huber(real r, real delta) {
    return abs(r) <= delta ? 0.5 * square(r) : delta * (abs(r) - 0.5 * delta);
  }
}
data {
  int<lower=1> N;
  vector[N] y;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
}
parameters {
  real theta;
}
model {
  real total = 0;
  for (i in 1 : N) {
    total += weights[i] * huber(y[i] - theta, 1);
  }
  target += -omega * total + normal_lpdf(theta | 0, 10);
}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    y = np.random.default_rng(1).gamma(2.0, 1.0, size=200)
    info = machine_info()
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for name, code in (("median", MEDIAN), ("huber", HUBER)):
            paths[name] = Path(folder) / f"user_{name}.stan"
            paths[name].write_text(code)
        programs = {
            "path_gpc": {
                "template": location_program(y, bounds=(0, 8)),
                "user": LossProgram(paths["median"], {"N": len(y), "y": y}),
            },
            "wbb": {
                "template": location_program(y, loss="huber", loss_params={"delta": 1.0},
                                             prior="normal", prior_params={"mean": 0, "sd": 10}),
                "user": LossProgram(paths["huber"], {"N": len(y), "y": y}),
            },
        }
        for variants in programs.values():  # executables compiled, nothing timed yet
            for program in variants.values():
                program.model()
        tasks = {
            "path_gpc": lambda p: float(arviz_compat.group(
                calibrate_path(p, B=200, seed=1), "calibration")["omega"]),
            "wbb": lambda p: float(np.nanmean(wbb_program(p, 1000, seed=1)
                                              .posterior["theta"].values)),
        }
        times = {task: {"template": [], "user": []} for task in tasks}
        values = {task: {"template": [], "user": []} for task in tasks}
        for repeat in range(args.repeats):
            order = ("template", "user") if repeat % 2 == 0 else ("user", "template")
            for task, call in tasks.items():
                for variant in order:
                    start = time.perf_counter()
                    values[task][variant].append(call(programs[task][variant]))
                    times[task][variant].append(time.perf_counter() - start)
    rows, results = [], {}
    for task in tasks:
        t, u = median(times[task]["template"]), median(times[task]["user"])
        results[task] = {"template_seconds": t, "user_seconds": u, "ratio": u / t,
                         "times": times[task], "values": values[task]}
        rows.append([task, t, u, u / t, values[task]["template"][0], values[task]["user"][0]])
    print_table(["task", "template s", "user s", "ratio", "template value", "user value"], rows)
    write_results("own_model", {
        "machine": info, "repeats": args.repeats, "n": len(y), "results": results,
        "command": f"python bench/own_model.py --repeats {args.repeats}",
        "values": "path_gpc: GPC's root on the path; wbb: the mean of the 1000 draws",
    })


if __name__ == "__main__":
    main()
