"""Benchmark: in-process Stan (model libraries through bridgestan) against today's paths.

Three measurements, each side by side in one invocation:

1. **Per call** on eight schools (non-centred, 10 unconstrained parameters):
   log density + gradient in process (``bridgestan.StanModel.log_density_gradient``,
   one call per point; and ``stanflow.models.log_density_gradient_rows``, per
   point of a 10^4-row batch) against cmdstanpy's ``log_prob`` (one process
   per call). Goal: in process >= 1000x cheaper per call.
2. **q-path SMC on Pima**, 10^4 particles, fixed schedule of 10 temperatures,
   M = 1 random-walk move, geometric path: the target as the Stan program
   ``stan/qpaths/logistic_regression.stan`` evaluated in process (1 and 2
   threads) against the NumPy target (float64, one BLAS thread, as in
   ``bench/qpaths_smc.py``). Goal: the Stan target at most 3x the NumPy
   kernel's wall time at the same log Z error.
3. **Growth**: SMC wall time against particles (10^3 to 10^5, Pima) and against
   dimension (synthetic logistic regressions with d = 2 to 64 coefficients,
   n = 500, 10^4 particles), NumPy and Stan targets; one figure
   ``docs/figures/inprocess_scaling.png``.

Usage::

    .venv/bin/python bench/inprocess.py [--reps 5] [--log-prob-calls 30]

Needs ``STANFLOW_DATA_DIR`` (``uci/pima-indians-diabetes.data``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from _common import REPO, machine_info, print_table, write_results
from threadpoolctl import threadpool_limits

from stanflow.models import (
    compile_model,
    load,
    log_density_gradient_rows,
    program_path,
)
from stanflow.qpaths.annealing import smc
from stanflow.qpaths.kernels import rwm_moves
from stanflow.qpaths.logistic import LogisticTarget, load_uci
from stanflow.qpaths.stan_density import StanLogDensity

LOG_Z = -391.494
SCHEDULE = np.linspace(0, 1, 10)
FIGURE = REPO / "docs" / "figures" / "inprocess_scaling.png"


def per_call(log_prob_calls: int) -> dict:
    """Seconds per log density + gradient: cmdstanpy log_prob vs in process."""
    data = json.loads((REPO / "data" / "eight_schools.json").read_text())
    source = program_path("models/eight_schools_noncentered")
    exe, model = compile_model(source), load(source, data)
    params = {"mu": 1.0, "tau": 2.0, "theta_tilde": [0.1] * 8}
    theta = model.param_unconstrain_json(params)
    exe.log_prob(params, data=data)  # warm the file cache
    start = time.perf_counter()
    for _ in range(log_prob_calls):
        exe.log_prob(params, data=data)
    cmdstanpy_s = (time.perf_counter() - start) / log_prob_calls
    calls = 20_000
    start = time.perf_counter()
    for _ in range(calls):
        model.log_density_gradient(theta)
    single_s = (time.perf_counter() - start) / calls
    points = theta + 0.1 * np.random.default_rng(0).standard_normal((10_000, len(theta)))
    rows = {}
    for threads in (1, 2):
        start = time.perf_counter()
        for _ in range(5):
            log_density_gradient_rows(model, points, threads=threads)
        rows[threads] = (time.perf_counter() - start) / (5 * len(points))
    return {
        "cmdstanpy_log_prob_s": cmdstanpy_s,
        "bridgestan_call_s": single_s,
        "rows_s_per_point": {str(k): v for k, v in rows.items()},
        "ratio_cmdstanpy_over_bridgestan_call": cmdstanpy_s / single_s,
        "ratio_cmdstanpy_over_rows_1_thread": cmdstanpy_s / rows[1],
    }


def smc_run(
    target: LogisticTarget, log_pi1, n: int, seed: int, schedule=SCHEDULE
) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    group = smc(target.log_pi0, target.sample_pi0, log_pi1, q=1.0, n_particles=n,
                n_moves=1, moves=rwm_moves, schedule=schedule, n_runs=2, seed=seed).smc
    return (time.perf_counter() - start) / 2, group.log_z.values


def smc_pima(target: LogisticTarget, reps: int) -> dict:
    """NumPy target vs the Stan target (1 and 2 threads), alternating, same seeds."""
    model = load(program_path("qpaths/logistic_regression"), target.stan_data())
    sides = {
        "numpy": target.log_pi1,
        "stan_1_thread": StanLogDensity(model, threads=1),
        "stan_2_threads": StanLogDensity(model, threads=2),
    }
    raw = {name: {"wall_s": [], "abs_errors": []} for name in sides}
    rng = np.random.default_rng(11)
    for _ in range(reps):
        seed = int(rng.integers(2**31))
        for name, density in sides.items():
            wall, log_z = smc_run(target, density, 10_000, seed)
            raw[name]["wall_s"].append(wall)
            raw[name]["abs_errors"].extend(np.abs(log_z - LOG_Z).tolist())
    summary = {
        name: {
            "wall_s_per_run": float(np.median(r["wall_s"])),
            "median_abs_error": float(np.median(r["abs_errors"])),
            **r,
        }
        for name, r in raw.items()
    }
    for name in ("stan_1_thread", "stan_2_threads"):
        summary[name]["wall_ratio_over_numpy"] = (
            summary[name]["wall_s_per_run"] / summary["numpy"]["wall_s_per_run"]
        )
    return summary


def synthetic(d: int, n: int = 500) -> LogisticTarget:
    rng = np.random.default_rng(d)
    X = np.column_stack([np.ones(n), 0.5 * rng.standard_normal((n, d - 1))])
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-X @ rng.normal(size=d))), 1.0, -1.0)
    return LogisticTarget(X, y)


def growth(pima: LogisticTarget) -> dict:
    """Wall seconds per SMC run against particles (Pima) and dimension (synthetic)."""
    out: dict = {"particles": {}, "dimension": {}}
    pima_model = load(program_path("qpaths/logistic_regression"), pima.stan_data())
    for n in (1_000, 10_000, 100_000):
        out["particles"][n] = {
            "numpy": smc_run(pima, pima.log_pi1, n, 3)[0],
            "stan": smc_run(pima, StanLogDensity(pima_model), n, 3)[0],
        }
    for d in (2, 8, 32, 64):
        target = synthetic(d)
        model = load(program_path("qpaths/logistic_regression"), target.stan_data())
        schedule = np.linspace(0, 1, 30) ** 3
        out["dimension"][d] = {
            "numpy": smc_run(target, target.log_pi1, 10_000, 3, schedule)[0],
            "stan": smc_run(target, StanLogDensity(model), 10_000, 3, schedule)[0],
        }
    return out


def plot(growth_results: dict) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in (
        (axes[0], "particles", "particles (Pima, d = 9, 10 temperatures)"),
        (axes[1], "dimension", "coefficients d (n = 500, 10^4 particles, 30 temperatures)"),
    ):
        cells = {int(x): v for x, v in growth_results[key].items()}
        xs = sorted(cells)
        for side, style in (("numpy", "o-"), ("stan", "s--")):
            ax.plot(xs, [cells[x][side] for x in xs], style,
                    label="NumPy target" if side == "numpy" else "Stan target, in process")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(xs, [f"{x:,}" for x in xs])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel(label)
        ax.set_ylabel("wall seconds per SMC run")
        ax.legend()
    fig.suptitle("q-path SMC (random-walk moves, M = 1): cost growth")
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5, help="SMC calls per side")
    parser.add_argument("--log-prob-calls", type=int, default=30)
    parser.add_argument("--skip-growth", action="store_true")
    parser.add_argument("--replot", action="store_true",
                        help="only redraw the figure from bench/results/inprocess.json")
    args = parser.parse_args()
    if args.replot:
        plot(json.loads((REPO / "bench" / "results" / "inprocess.json").read_text())["growth"])
        return 0
    info = machine_info()
    with threadpool_limits(limits=1):
        calls = per_call(args.log_prob_calls)
        pima = load_uci("pima")
        smc_results = smc_pima(pima, args.reps)
        growth_results = None if args.skip_growth else growth(pima)
    print_table(
        ["path", "seconds per log density + gradient"],
        [
            ["cmdstanpy log_prob", f"{calls['cmdstanpy_log_prob_s']:.4g}"],
            ["bridgestan, one call", f"{calls['bridgestan_call_s']:.3g}"],
            *([f"rows, {k} thread(s), per point", f"{v:.3g}"]
              for k, v in calls["rows_s_per_point"].items()),
        ],
    )
    print_table(
        ["SMC target", "wall s/run", "med |err|", "ratio to NumPy"],
        [[name, f"{r['wall_s_per_run']:.2f}", f"{r['median_abs_error']:.1f}",
          f"{r.get('wall_ratio_over_numpy', 1.0):.2f}"] for name, r in smc_results.items()],
    )
    if growth_results is not None:
        plot(growth_results)
        print(f"figure {FIGURE.relative_to(REPO)}")
    path = write_results(
        "inprocess",
        {
            "benchmark": "inprocess",
            "command": " ".join([sys.executable, *sys.argv]),
            "machine": info,
            "load_average_at_end": list(os.getloadavg()),
            "per_call": calls,
            "smc_pima": {"n_particles": 10_000, "n_moves": 1,
                         "schedule": SCHEDULE.tolist(), "log_z_truth": LOG_Z,
                         "results": smc_results},
            "growth": growth_results,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
