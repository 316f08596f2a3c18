"""GPC by root finding on the learning-rate path against today's reweight design, and its cost.

1. GPC for the quantile regression of ``gibbs-calibrate`` (b) (n = 50, X ~ chi2_2 - 2,
   Y = 2 + X + N(0, 2^2), tau = 0.5, N(0, 10^2) priors, B = 200; the setting of
   ``bench/gibbs_gpc.py``) on ``--replications`` data sets, both from omega0 = 1, side by
   side in one run (the order alternates per replication):

   - path: ``LearningRatePath`` of the linear template's loss program (4000 particles,
     3 random-walk moves per schedule point, the check loss from the program in
     process) + ``path_gpc`` (root of the bootstrap coverage);
   - reweight: ``calibrate_gpc(program, backend=StanBackend())`` with its defaults (one
     Stan proposal of 20000 draws through the run layer, Robbins-Monro steps,
     eps = 0.01, 16 steps).

   Accuracy: distance to each data set's bootstrap fixed point, GPC's own rule with
   eps = 0 and up to 200 steps (reweight design; not timed).
2. Cost of path GPC against n (50 to 5000, two coefficients) and against the number of
   coefficients K (1 to 20, n = 500; the extra predictors N(0, 1) with coefficient 0).

Writes ``bench/results/gibbs_path.json`` and ``bench/results/gibbs_path.png``.

    python bench/gibbs_path.py [--replications 10] [--fixed-steps 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import RESULTS_DIR, machine_info, print_table, write_results

from stanflow.gibbs import StanBackend, TemplateProgram, calibrate_gpc, linear_program
from stanflow.gibbs.path import LearningRatePath, PathSampler, path_gpc
from stanflow.gibbs.templates import glm_minimiser
from stanflow.losses import loss_function

SEED = 20240505
PRIOR = {"prior": "normal", "prior_params": {"mean": 0, "sd": 10}}
LOSS = {"loss": "check", "loss_params": {"tau": 0.5}}
SAMPLER, B = PathSampler(n_particles=4000, n_moves=3), 200


def data(rng: np.random.Generator, n: int, K: int = 2) -> tuple[TemplateProgram, np.ndarray]:
    """The quantile regression with ``K - 2`` extra N(0, 1) predictors (K = 1: intercept only),
    as the linear template's loss program, and its risk minimiser."""
    x = rng.chisquare(2, size=n) - 2
    y = 2 + x + rng.normal(0, 2, size=n)
    columns = [np.ones(n), x][:K] + [rng.normal(size=n) for _ in range(K - 2)]
    X = np.column_stack(columns)
    program = linear_program(y, X, **LOSS, **PRIOR)
    return program, glm_minimiser(y, X, loss_function("check", {"tau": 0.5}))


def path_calibration(program: TemplateProgram, beta: np.ndarray, seed: int) -> dict:
    start = time.perf_counter()
    path = LearningRatePath(program, sampler=SAMPLER, seed=seed)
    c = path_gpc(path, beta, B=B, seed=seed)
    wall = time.perf_counter() - start
    return {
        "omega": float(c["omega"]),
        "omega_se": float(c["omega_se"]),
        "converged": bool(c["converged"]),
        "wall_s": wall,
        "evaluations": int(c["evaluations"]),
        "schedule_points": len(path.levels),
        "ess_min_at_root": float(c["ess_min"][-1]),
        "ess_median_at_root": float(c["ess_median"][-1]),
        "omega_path": c["omega_path"].values.round(4).tolist(),
        "coverage_path": c["coverage_path"].values.tolist(),
    }


def reweight_calibration(program: TemplateProgram, beta: np.ndarray, seed: int, **kwargs) -> dict:
    start = time.perf_counter()
    c = calibrate_gpc(program, estimate=beta, backend=StanBackend(), B=B, seed=seed,
                      **kwargs).calibration
    wall = time.perf_counter() - start
    return {
        "omega": float(c["omega"]),
        "converged": bool(c["converged"]),
        "steps": int(c["steps"]),
        "wall_s": wall,
        "omega_path": c["omega_path"].values.round(4).tolist(),
        "coverage_path": c["coverage_path"].values.tolist(),
    }


def side_by_side(replications: int, fixed_steps: int) -> dict:
    rng = np.random.default_rng(SEED)
    rows = []
    for r in range(replications):
        program, beta = data(rng, 50)
        order = ("path", "reweight") if r % 2 == 0 else ("reweight", "path")
        result = {}
        for side in order:
            result[side] = (path_calibration if side == "path" else reweight_calibration)(program, beta, r)
        fixed = reweight_calibration(program, beta, r, eps=0.0, max_steps=fixed_steps)
        result["fixed_point"] = {k: fixed[k] for k in ("omega", "converged", "steps")}
        for side in ("path", "reweight"):
            result[side]["distance_to_fixed_point"] = abs(result[side]["omega"] - fixed["omega"])
        rows.append(result)
        print(f"replication {r}: path {result['path']['omega']:.4f} ({result['path']['wall_s']:.3f} s), "
              f"reweight {result['reweight']['omega']:.4f} ({result['reweight']['wall_s']:.3f} s), "
              f"fixed point {fixed['omega']:.4f} ({fixed['steps']} steps)", flush=True)

    def median(side: str, key: str) -> float:
        return float(np.median([row[side][key] for row in rows]))

    summary = {
        side: {
            "median_wall_s": median(side, "wall_s"),
            "median_distance_to_fixed_point": median(side, "distance_to_fixed_point"),
            "max_distance_to_fixed_point": float(max(row[side]["distance_to_fixed_point"] for row in rows)),
            "converged": int(sum(row[side]["converged"] for row in rows)),
            "median_omega": median(side, "omega"),
        }
        for side in ("path", "reweight")
    }
    summary["wall_ratio_reweight_over_path"] = (
        summary["reweight"]["median_wall_s"] / summary["path"]["median_wall_s"]
    )
    summary["fixed_points_converged"] = int(sum(row["fixed_point"]["converged"] for row in rows))
    return {"summary": summary, "replications": rows}


def scaling() -> dict:
    rng = np.random.default_rng(SEED + 1)
    by_n, by_k = [], []
    for n in (50, 200, 1000, 5000):
        program, beta = data(rng, n)
        by_n.append({"n": n, "K": 2} | path_calibration(program, beta, 0))
        print(f"n = {n}: {by_n[-1]['wall_s']:.3f} s", flush=True)
    for K in (1, 2, 5, 10, 20):
        program, beta = data(rng, 500, K)
        by_k.append({"n": 500, "K": K} | path_calibration(program, beta, 0))
        print(f"K = {K}: {by_k[-1]['wall_s']:.3f} s", flush=True)
    return {"by_n": by_n, "by_K": by_k}


def figure(cost: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, rows, key, label in ((axes[0], cost["by_n"], "n", "n (K = 2)"),
                                 (axes[1], cost["by_K"], "K", "coefficients K (n = 500)")):
        x = [row[key] for row in rows]
        ax.plot(x, [row["wall_s"] for row in rows], "o-", label="wall time of path GPC (s)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("seconds")
        twin = ax.twinx()
        twin.plot(x, [row["ess_median_at_root"] for row in rows], "s--", color="tab:orange",
                  label="median ESS per resample at the root")
        twin.plot(x, [row["ess_min_at_root"] for row in rows], "^:", color="tab:red",
                  label="smallest ESS per resample")
        twin.set_yscale("log")
        twin.set_ylabel(f"ESS of {SAMPLER.n_particles} particles")
        ax.legend(loc="upper left", fontsize=7)
        twin.legend(loc="lower right", fontsize=7)
    fig.suptitle("GPC on the learning-rate path: cost against n and K (B = 200)", fontsize=10)
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / "gibbs_path.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replications", type=int, default=10)
    parser.add_argument("--fixed-steps", type=int, default=200)
    args = parser.parse_args()
    info = machine_info()
    warm = data(np.random.default_rng(0), 50)
    reweight_calibration(*warm, 0, max_steps=1)  # compile and start up outside the timings
    path_calibration(*warm, 0)
    compared = side_by_side(args.replications, args.fixed_steps)
    cost = scaling()
    result = {"machine": info, "particles": SAMPLER.n_particles, "moves": SAMPLER.n_moves, "B": B,
              "command": f"python bench/gibbs_path.py --replications {args.replications} "
                         f"--fixed-steps {args.fixed_steps}",
              "side_by_side": compared, "cost": cost}
    write_results("gibbs_path", result)
    figure(cost)
    s = compared["summary"]
    print_table(
        ["design", "median wall s", "median |omega - fixed point|", "max |...|", "converged"],
        [[side, s[side]["median_wall_s"], s[side]["median_distance_to_fixed_point"],
          s[side]["max_distance_to_fixed_point"], f"{s[side]['converged']}/{args.replications}"]
         for side in ("path", "reweight")],
    )
    print(f"wall ratio reweight / path: {s['wall_ratio_reweight_over_path']:.1f}")
    print_table(["n", "K", "wall s", "schedule points", "evaluations", "ESS min", "ESS median"],
                [[row["n"], row["K"], row["wall_s"], row["schedule_points"], row["evaluations"],
                  row["ess_min_at_root"], row["ess_median_at_root"]]
                 for row in cost["by_n"] + cost["by_K"]])


if __name__ == "__main__":
    main()
