"""Benchmark: LCVI vs plain ADVI on a program of your own (the log-normal regression).

The ``lognormal`` program of the ``own-model-lcvi`` workflow (outcomes of any
form, ``exp(mu + sigma z)``, decisions for 50 held-out points, check loss
tau = 0.8), per seed a data set of that workflow, side by side in one run
(the order alternates between seeds):

- ``plain``: one CmdStan ADVI run as a user would start it on the program with
  the utility term off, with the LCVI loop's settings (mean-field, 10000
  iterations, 10 gradient samples, ``eta`` adapted, 1000 draws), through cmdstanpy;
- ``lcvi``: the whole LCVI procedure of :func:`stanflow.lcvi.run_lcvi` at the
  same budget (plain VI, its decisions and M90, the LCVI blocks, every
  decision step with the outcomes read from the program in process).

Reported: the wall-time ratio (goal: LCVI at most 3x plain ADVI) and the risk
reduction. The programs are compiled before any timing.

Usage::

    .venv/bin/python bench/lcvi_own_model.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
from _common import REPO, machine_info, print_table, timed_call, write_results

from stanflow.lcvi import ADVI_DEFAULTS, LcviProgram, run_lcvi
from stanflow.lcvi.utility import uniform_base_samples
from stanflow.losses import bound_loss


def _workflow():
    spec = importlib.util.spec_from_file_location("own_model_lcvi",
                                                  REPO / "workflows" / "own_model_lcvi.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    logging.getLogger("cmdstanpy").setLevel(logging.ERROR)
    workflow = _workflow()
    config = workflow.SETTINGS["full"]["lognormal"]
    loss = bound_loss("check", tau=config["tau"])
    per_seed, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        path = workflow.write_programs(tmp_path)["lognormal"]
        for seed in range(1, args.seeds + 1):
            data, y_new = workflow.lognormal_data(config, seed)
            program = LcviProgram(path, data, y=y_new, name="lognormal")
            model = program.bind(loss)
            executable = model.executable()  # compiled before timing
            N = program.n
            plain_data = model.stan_data(np.zeros(N), np.zeros((1, N)),
                                         uniform_base_samples(1, N, 0, False),
                                         model.settings(0.0, "linear", 1.0, "linearised", 1))

            def plain(seed=seed, plain_data=plain_data, executable=executable):
                return executable.variational(
                    data=plain_data, seed=seed, iter=ADVI_DEFAULTS["iter"],
                    grad_samples=ADVI_DEFAULTS["grad_samples"],
                    eval_elbo=ADVI_DEFAULTS["eval_elbo"],
                    tol_rel_obj=ADVI_DEFAULTS["tol_rel_obj"],
                    draws=ADVI_DEFAULTS["output_samples"], output_dir=tmp_path,
                    require_converged=False,
                )

            jobs = {"plain": plain, "lcvi": partial(run_lcvi, program, loss, seed=seed)}
            order = list(jobs) if seed % 2 else list(reversed(jobs))
            times = {name: timed_call(jobs[name]) for name in order}
            lcvi = times["lcvi"][0]
            record = {
                "seed": seed,
                "plain_wall": times["plain"][1], "lcvi_wall": times["lcvi"][1],
                "plain_cpu": times["plain"][2], "lcvi_cpu": times["lcvi"][2],
                "reduction_pct": 100 * (lcvi.baseline.risk - lcvi.steps[-1].risk)
                / lcvi.baseline.risk,
            }
            per_seed.append(record)
            rows.append([seed, f"{record['plain_wall']:.2f}", f"{record['lcvi_wall']:.2f}",
                         f"{record['lcvi_wall'] / record['plain_wall']:.2f}",
                         f"{record['reduction_pct']:.2f}"])
    print_table(["seed", "plain ADVI wall s", "LCVI wall s", "ratio", "reduction %"], rows)

    def mean(key):
        return float(np.mean([r[key] for r in per_seed]))

    results = {
        "seeds": args.seeds,
        "per_seed": per_seed,
        "ratio_lcvi_to_plain_wall": mean("lcvi_wall") / mean("plain_wall"),
        "ratio_lcvi_to_plain_cpu": mean("lcvi_cpu") / mean("plain_cpu"),
        "risk_reduction_pct": {"mean": mean("reduction_pct"),
                               "sd": float(np.std([r["reduction_pct"] for r in per_seed],
                                                  ddof=1))},
        "machine": machine_info(),
    }
    print(json.dumps({k: v for k, v in results.items() if k not in ("per_seed", "machine")},
                     indent=2))
    write_results("lcvi_own_model", results)


if __name__ == "__main__":
    main()
