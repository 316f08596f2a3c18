"""GPC at scale: particles moved to every resample, against the reweighted path; NUTS per resample timed.

Median regression (check loss, tau = 0.5) on an intercept and ``K - 1`` N(0, 1)
predictors (coefficients ``(1, 0.5, -0.5, 0.25, -0.25, 0, ...)``, N(0, 1)
errors), N(0, 10^2) priors, B = 200, one data set per size:

1. **Cost and health** at K = 2, 5, 10, 20 (n = 500), K = 20 (n = 2000: the
   goal's size) and K = 5 (n = 10^3, 10^4; 10^5 with ``--largest``), and alone
   with ``--K50`` at K = 50 (n = 500; every resample bridged by SMC, an hour and
   more on a 2-core machine):
   ``calibrate_path(program, rules=["plugin"], resamples="transport")`` (the
   path with its defaults, 4000 particles and 3 random-walk moves, then GPC
   with particles moved to every resample): wall time, ``omega`` and its stated
   error, evaluations, the smallest and median effective sample size per
   resample at the root, resample moves (and how many went on to SMC
   bridges). Beside it, the reweighted path's
   health at its own root (``resamples="reweight"``) where it runs in minutes.
2. **The resample design's time** (every resample's posterior by NUTS: one chain,
   300 warm-up and 1000 draws, as ``StanBackend(design="resample")`` runs it) for
   one evaluation at K = 20, n = 2000: ``--nuts-sample`` NUTS runs, timed and
   scaled to ``B``; a calibration needs as many evaluations as the root finder
   used. Its accuracy against the moved design: ``bench/gibbs_scale_nuts.py``.

Writes ``bench/results/gibbs_scale.json`` (``gibbs_scale_k50.json`` with
``--K50``). Each size is kept as it finishes
(``runs/bench/gibbs_scale.checkpoint.json``); ``--resume`` goes on from there
after a stop.

    python bench/gibbs_scale.py [--largest] [--nuts-sample 20] [--resume]
    python bench/gibbs_scale.py --K50
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from _common import REPO, machine_info, print_table, write_json, write_results

from stanflow.gibbs import calibrate_path, linear_program, posterior
from stanflow.gibbs.gpc.algorithm import bootstrap_indices
from stanflow.gibbs.gpc.reweighting import resample_counts

SEED = 20261205
B = 200
SIZES = [(2, 500), (5, 500), (10, 500), (20, 500), (20, 2000), (5, 1000), (5, 10_000)]
LARGEST = (5, 100_000)
REWEIGHT_UP_TO = 20_000
"""The reweighted path runs beside the moved design up to this ``n K``."""
NUTS = {"chains": 1, "iter_warmup": 300, "iter_sampling": 1000}
K50 = (50, 500)
CHECKPOINT = REPO / "runs" / "bench" / "gibbs_scale.checkpoint.json"


def program_for(K: int, n: int):
    """The median regression of one data set of size ``(K, n)``, and its data's seed."""
    rng = np.random.default_rng([SEED, K, n])
    X = np.column_stack([np.ones(n), rng.normal(size=(n, K - 1))])
    beta = np.zeros(K)
    beta[:5] = [1.0, 0.5, -0.5, 0.25, -0.25][:K]
    y = X @ beta + rng.normal(size=n)
    return linear_program(y, X, loss="check", loss_params={"tau": 0.5}, prior="normal",
                          prior_params={"mean": 0, "sd": 10})


def calibration(program, resamples: str) -> dict:
    """One ``calibrate_path`` with the ``resamples`` design, timed; it loads the forms of
    its resamples' drawn observations itself, as a program's first calibration does."""
    if program.drawn is not None:
        program.drawn.clear()
    start = time.perf_counter()
    c = calibrate_path(program, B=B, seed=1, rules=["plugin"], resamples=resamples).calibration
    wall = time.perf_counter() - start
    at_root = int(np.argmin(np.abs(c["omega_path"].values - float(c["omega"]))))
    record = {
        "wall_s": wall,
        "omega": float(c["omega"]),
        "omega_se": float(c["omega_se"]),
        "omega_plugin": float(c["rule_omega"].sel(rule="plugin")),
        "converged": bool(c["converged"]),
        "evaluations": int(c["evaluations"]),
        "ess_min_at_root": float(c["ess_min"].values[at_root]),
        "ess_median_at_root": float(c["ess_median"].values[at_root]),
        "ess_min_over_evaluations": float(c["ess_min"].min()),
        "ess_min_per_evaluation": [float(v) for v in c["ess_min"].values],
        "low_ess_share": float(c["low_ess_share"]),
        "omega0": float(c.attrs["omega0"]),
        "omega_path": [float(w) for w in c["omega_path"].values],
    }
    if "resample_moves" in c:
        record |= {"resample_moves": int(c["resample_moves"]),
                   "acceptance": float(c["acceptance"]),
                   "bridged": int(c["hmc_moves"]),
                   "hmc_acceptance": float(c["hmc_acceptance"])}
    return record


def cost_and_health(K: int, n: int) -> dict:
    """The moved design's calibration at ``(K, n)``, and the reweighted path's beside it."""
    program = program_for(K, n)
    row = {"K": K, "n": n, "transport": calibration(program, "transport")}
    if n * K <= REWEIGHT_UP_TO:
        row["reweight"] = calibration(program, "reweight")
    t = row["transport"]
    print(f"K = {K}, n = {n}: {t['wall_s']:.1f} s, omega {t['omega']:.3f} "
          f"+- {t['omega_se']:.3f}, ESS min {t['ess_min_at_root']:.0f}", flush=True)
    return row


def coverage_indices(program) -> np.ndarray:
    return bootstrap_indices(program.n, B, np.random.SeedSequence(1))


def nuts_evaluation_time(K: int, n: int, sample: int) -> dict:
    """The resample design's wall time per evaluation at ``(K, n)``: ``sample`` NUTS runs, scaled to B."""
    program = program_for(K, n)
    counts = resample_counts(coverage_indices(program), program.n)
    start = time.perf_counter()
    for b in range(sample):
        posterior(program, omega=1.0, weights=counts[b], seed=b, **NUTS)
    per_run = (time.perf_counter() - start) / sample
    return {"K": K, "n": n, "sampled_runs": sample, "seconds_per_run": per_run,
            "seconds_per_evaluation": per_run * B}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--largest", action="store_true", help="also K = 5, n = 10^5")
    parser.add_argument("--nuts-sample", type=int, default=20,
                        help="NUTS runs timed for the resample design at K = 20, n = 2000")
    parser.add_argument("--resume", action="store_true",
                        help="keep the sizes a stopped run of the same command finished")
    parser.add_argument("--K50", action="store_true",
                        help="only K = 50, n = 500 (an hour and more), to gibbs_scale_k50.json")
    args = parser.parse_args()
    if args.K50:
        write_results("gibbs_scale_k50", {
            "command": "python bench/gibbs_scale.py --K50", "machine": machine_info(), "B": B,
            "seed": SEED, "row": cost_and_health(*K50)})
        return
    command = "python bench/gibbs_scale.py" + (" --largest" if args.largest else "")
    info = machine_info()
    sizes = SIZES + ([LARGEST] if args.largest else [])
    kept = {"command": command, "nuts_sample": args.nuts_sample, "rows": [], "nuts": None}
    if args.resume and CHECKPOINT.exists():
        found = json.loads(CHECKPOINT.read_text())
        if (found["command"], found["nuts_sample"]) == (command, args.nuts_sample):
            kept, info = found, found["machine"]
            print(f"resumed: {len(kept['rows'])} sizes kept", flush=True)
    kept["machine"] = info
    done = {(r["K"], r["n"]) for r in kept["rows"]}
    for K, n in sizes:
        if (K, n) not in done:
            kept["rows"].append(cost_and_health(K, n))
            write_json(CHECKPOINT, kept)
    if kept["nuts"] is None:
        kept["nuts"] = nuts_evaluation_time(20, 2000, args.nuts_sample)
        write_json(CHECKPOINT, kept)
    by_size = {(r["K"], r["n"]): r for r in kept["rows"]}
    cost = [by_size[size] for size in sizes]
    nuts_time = kept["nuts"]
    goal_size = by_size[(20, 2000)]
    goal = {
        "wall_s": goal_size["transport"]["wall_s"],
        "ess_min_over_evaluations": goal_size["transport"]["ess_min_over_evaluations"],
        "resample_design_wall_s": nuts_time["seconds_per_evaluation"]
        * goal_size["transport"]["evaluations"],
    }
    goal["wall_ratio_resample_over_moved"] = goal["resample_design_wall_s"] / goal["wall_s"]
    print_table(["K", "n", "wall s", "omega", "se", "evals", "ESS min", "ESS median"],
                [[r["K"], r["n"], f"{r['transport']['wall_s']:.1f}",
                  f"{r['transport']['omega']:.3f}", f"{r['transport']['omega_se']:.3f}",
                  r["transport"]["evaluations"], f"{r['transport']['ess_min_at_root']:.0f}",
                  f"{r['transport']['ess_median_at_root']:.0f}"] for r in cost])
    write_results("gibbs_scale", {
        "command": command,
        "machine": info, "B": B, "seed": SEED, "nuts": NUTS,
        "cost": cost, "resample_design_time": nuts_time,
        "goal": goal,
    })


if __name__ == "__main__":
    main()
