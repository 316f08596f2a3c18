"""GPC at scale: particles moved to every resample, against the reweighted path and NUTS per resample.

Median regression (check loss, tau = 0.5) on an intercept and ``K - 1`` N(0, 1)
predictors (coefficients ``(1, 0.5, -0.5, 0.25, -0.25, 0, ...)``, N(0, 1)
errors), N(0, 10^2) priors, B = 200, one data set per size:

1. **Cost and health** at K = 2, 5, 10, 20, 50 (n = 500), K = 20 (n = 2000: the
   goal's size) and K = 5 (n = 10^3, 10^4; 10^5 with ``--largest``):
   ``calibrate_path(program, rules=["plugin"], resamples="transport")`` (the
   path with its defaults, 4000 particles and 3 random-walk moves, then GPC
   with particles moved to every resample): wall time, ``omega`` and its stated
   error, evaluations, the smallest and median effective sample size per
   resample at the root, resample moves (and how many went on to SMC
   bridges). Beside it, the reweighted path's
   health at its own root (``resamples="reweight"``) where it runs in minutes.
2. **Against the resample design** (every resample's posterior by NUTS: one
   chain, 300 warm-up and 1000 draws, as ``StanBackend(design="resample")``
   runs it) at K = 5, 10 and 20 (n = 500): the moved design's coverage function and
   root (``TransportCoverage`` and ``find_root``, as ``path_gpc`` runs them),
   then the count of covering resamples by NUTS at the root and at ``root *
   (1 -+ 0.1)`` with the same regions (the full data's posterior covariance,
   each resample's mean), the NUTS root by linear interpolation, and the
   distance in the stated errors. The resample design's wall time for one
   evaluation (``B`` NUTS runs, timed) at K = 20, n = 2000 is measured on
   ``--nuts-sample`` resamples and scaled to ``B``; a calibration needs as many
   evaluations as the root finder used.

Writes ``bench/results/gibbs_scale.json``.

    python bench/gibbs_scale.py [--largest] [--nuts-sample 20]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import machine_info, print_table, write_results

from stanflow import arviz_compat
from stanflow.gibbs import calibrate_path, linear_program, posterior
from stanflow.gibbs.gpc.algorithm import bootstrap_indices
from stanflow.gibbs.gpc.reweighting import resample_counts
from stanflow.gibbs.path import CALIBRATION_SAMPLER, LearningRatePath
from stanflow.gibbs.path.coverage import BootstrapProblem, region_statistic_per_resample
from stanflow.gibbs.path.gpc_root import find_root
from stanflow.gibbs.path.transport import TransportCoverage

SEED = 20261205
B = 200
SIZES = [(2, 500), (5, 500), (10, 500), (20, 500), (50, 500), (20, 2000), (5, 1000),
         (5, 10_000)]
LARGEST = (5, 100_000)
REWEIGHT_UP_TO = 20_000
"""The reweighted path runs beside the moved design up to this ``n K``."""
NUTS_SIZES = [(5, 500), (10, 500), (20, 500)]
NUTS = {"chains": 1, "iter_warmup": 300, "iter_sampling": 1000}


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
    """One ``calibrate_path`` with the ``resamples`` design, timed."""
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
        "low_ess_share": float(c["low_ess_share"]),
    }
    if "resample_moves" in c:
        record |= {"resample_moves": int(c["resample_moves"]),
                   "acceptance": float(c["acceptance"]),
                   "bridged": int(c["hmc_moves"]),
                   "hmc_acceptance": float(c["hmc_acceptance"])}
    return record


def cost_and_health(sizes: list[tuple[int, int]]) -> list[dict]:
    rows = []
    for K, n in sizes:
        program = program_for(K, n)
        row = {"K": K, "n": n, "transport": calibration(program, "transport")}
        if n * K <= REWEIGHT_UP_TO:
            row["reweight"] = calibration(program, "reweight")
        rows.append(row)
        t = row["transport"]
        print(f"K = {K}, n = {n}: {t['wall_s']:.1f} s, omega {t['omega']:.3f} "
              f"+- {t['omega_se']:.3f}, ESS min {t['ess_min_at_root']:.0f}", flush=True)
    return rows


def nuts_counts(program, coverage: TransportCoverage, omegas: list[float]) -> tuple[list[int], float]:
    """The count of covering resamples by NUTS per resample at each ``omega``, and the
    wall seconds per NUTS run."""
    counts = resample_counts(coverage_indices(program), program.n)
    K = len(program.names)
    found, seconds = [], []
    for omega in omegas:
        inside = 0
        for b in range(B):
            start = time.perf_counter()
            fit = posterior(program, omega=omega, weights=counts[b], seed=b, **NUTS)
            seconds.append(time.perf_counter() - start)
            draws = arviz_compat.group(fit, "posterior")["beta"].values.reshape(1, -1, K)
            statistic = region_statistic_per_resample(
                draws, np.zeros(draws.shape[:2]), coverage.estimate, coverage.region)[0]
            inside += int(statistic <= 0.95)
        found.append(inside)
    return found, float(np.median(seconds))


def coverage_indices(program) -> np.ndarray:
    return bootstrap_indices(program.n, B, np.random.SeedSequence(1))


def against_resample_design(sizes: list[tuple[int, int]]) -> list[dict]:
    rows = []
    for K, n in sizes:
        program = program_for(K, n)
        estimate = program.estimate().theta
        path = LearningRatePath(program, sampler=CALIBRATION_SAMPLER, seed=1)
        problem = BootstrapProblem(path, coverage_indices(program), estimate, 0.05)
        coverage = TransportCoverage(problem, seed=1)
        start = time.perf_counter()
        root, history, done = find_root(coverage, 1.0, 0.95 * B, xtol=1e-3, max_evaluations=40)
        wall = time.perf_counter() - start
        at_root = next(e for e in history if e.omega == root) if any(
            e.omega == root for e in history) else coverage(root)
        omegas = [root * 0.9, root, root * 1.1]
        counts, per_run = nuts_counts(program, coverage, omegas)
        ours = [coverage(w).count for w in omegas]
        nuts_root = interpolated_root(omegas, counts, 0.95 * B)
        rows.append({"K": K, "n": n, "root": root, "converged": done, "wall_s": wall,
                     "evaluations": len(history), "count_variance_at_root": at_root.count_variance,
                     "omegas": omegas, "counts_moved": ours, "counts_nuts": counts,
                     "nuts_root": nuts_root, "nuts_seconds_per_run": per_run})
        print(f"K = {K}: moved root {root:.3f}, NUTS root {nuts_root:.3f}; counts "
              f"{ours} vs {counts}", flush=True)
    return rows


def interpolated_root(omegas: list[float], counts: list[int], target: float) -> float:
    """Where the piecewise-linear count through ``(omegas, counts)`` crosses ``target``
    (nan when it does not within them)."""
    for k in range(len(omegas) - 1):
        (w0, c0), (w1, c1) = (omegas[k], counts[k]), (omegas[k + 1], counts[k + 1])
        if (c0 - target) * (c1 - target) <= 0 and c0 != c1:
            return float(w0 + (target - c0) * (w1 - w0) / (c1 - c0))
    return float("nan")


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
    args = parser.parse_args()
    info = machine_info()
    sizes = SIZES + ([LARGEST] if args.largest else [])
    cost = cost_and_health(sizes)
    goal_size = next(r for r in cost if (r["K"], r["n"]) == (20, 2000))
    nuts_time = nuts_evaluation_time(20, 2000, args.nuts_sample)
    versus = against_resample_design(NUTS_SIZES)
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
        "command": "python bench/gibbs_scale.py" + (" --largest" if args.largest else ""),
        "machine": info, "B": B, "seed": SEED, "nuts": NUTS,
        "cost": cost, "resample_design_time": nuts_time, "against_resample_design": versus,
        "goal": goal,
    })


if __name__ == "__main__":
    main()
