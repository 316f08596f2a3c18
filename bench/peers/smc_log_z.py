"""Peer benchmark: log Z by annealed SMC, stanflow's defaults against PyMC and BlackJAX.

Bayesian logistic regression on UCI Pima (d = 9) and Sonar (d = 61), the q-path
target: predictors scaled to sd 0.5 with an intercept, prior ``N(0, 5^2 I)``
(normalised), ``Z = p(y)``. The reference ``log Z`` is the stored one of the
``qpaths-smc`` workflow (``results/qpaths-smc/summary.json``, Student-t importance
sampling on SMC particles).

- **stanflow**: ``stanflow.qpaths.smc`` with its defaults (self-tuning moves:
  independence proposals fitted to the particles where they work, HMC on
  Stan's gradients in process where they do not, repeated until the particles
  decorrelate) on ``stan/qpaths/logistic_regression.stan`` evaluated in process
  (``stan_log_density``) from ``GaussianBase(d, 5)``; one estimate is one call
  of two runs (``n_runs=2``): SMC's estimate combined with the final bridge on
  their pooled particles (``attrs["log_z"]``; SMC's alone, ``log_z_smc``, is
  reported beside it from the same calls), its CPU time the call's.
- **PyMC** (``_pymc_smc_worker.py``): ``pm.sample_smc`` with its defaults (IMH
  kernel, correlation threshold 0.01), one chain.
- **BlackJAX** (``_blackjax_smc_worker.py``): ``adaptive_tempered_smc`` with a
  NUTS inner kernel under ``inner_kernel_tuning`` (mass matrix from the
  particles, step size from the acceptance rate), 10 moves per temperature.

Everything runs on one core (``taskset -c 0``; the peers in their own venv,
compiled or jitted before the timed calls). Two comparisons per data set:
**equal particles** (``--particles`` for all) and **equal CPU time** (each peer
gets the particle count that its measured CPU seconds per particle give for
stanflow's median CPU seconds per run). Reported per side: median absolute
error against the reference, mean error (bias), median wall and CPU seconds.
Order: half of stanflow's runs, PyMC, BlackJAX, the other half, then the
equal-CPU peers.

Usage::

    taskset -c 0 .venv/bin/python bench/peers/smc_log_z.py [--datasets pima sonar] \
        [--seeds 10] [--blackjax-seeds 3] [--particles 2000] [--peer-venv /work/peers/pymc-venv]

Needs ``STANFLOW_DATA_DIR``. The peer venv is made (``pip install pymc blackjax
jax[cpu]``) when it is missing. ``--quick``: Pima only, 2 seeds, 500 particles, not written.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import REPO, machine_info, median, print_table, write_results
from _venv import ensure_venv

HERE = Path(__file__).resolve().parent
WORKERS = {"pymc": HERE / "_pymc_smc_worker.py", "blackjax": HERE / "_blackjax_smc_worker.py"}
REFERENCE = REPO / "results" / "qpaths-smc" / "summary.json"
MIN_PEER_PARTICLES = 100
RUNS_PER_CALL = 2
"""stanflow's estimate: one ``smc`` call of two runs (its final bridge pools their particles)."""


def stanflow_runs(name: str, particles: int, seeds: list[int]) -> dict[str, Any]:
    """``smc`` with its defaults on the Stan target in process; one entry per run."""
    from stanflow.qpaths import load_uci, smc, stan_log_density
    from stanflow.qpaths.densities import GaussianBase
    from stanflow.resources import resource_dir

    target = load_uci(name)
    start = time.perf_counter()
    program = stan_log_density(
        resource_dir("stan") / "qpaths" / "logistic_regression.stan", target.stan_data()
    )
    load_seconds = time.perf_counter() - start
    base = GaussianBase(target.dim, target.prior_sd)
    runs = []
    for seed in seeds:
        wall, cpu = time.perf_counter(), time.process_time()
        group = smc(base, base.sample, program, n_particles=particles, seed=seed,
                    n_runs=RUNS_PER_CALL).smc
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        attrs = group.attrs
        runs.append({
            "seed": seed, "log_z": float(attrs["log_z"]), "log_z_se": float(attrs["log_z_se"]),
            "log_z_smc": float(attrs["log_z_smc"]),
            "log_z_bridge": float(attrs.get("log_z_bridge", np.nan)),
            "wall_seconds": wall, "cpu_seconds": cpu,
            "n_stages": group.n_steps.values.tolist(),
            "n_moves": np.nansum(group.n_moves.values, axis=1).astype(int).tolist(),
        })
        print(f"  stanflow {name} seed {seed}: {attrs['log_z']:.3f} (SMC alone "
              f"{attrs['log_z_smc']:.3f}, bridge {attrs.get('log_z_bridge', np.nan):.3f}; "
              f"{cpu:.1f} s CPU; {attrs['moves']})", flush=True)
    return {"load_seconds": load_seconds, "runs": runs}


def peer_runs(python: Path, peer: str, data: Path, particles: int, seeds: list[int]
              ) -> dict[str, Any]:
    """Run one worker; its JSON."""
    command = [str(python), str(WORKERS[peer]), str(data), "--particles", str(particles),
               "--seeds", *map(str, seeds)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{peer} worker failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout)
    for run in result["runs"]:
        print(f"  {peer} N={particles} seed {run['seed']}: {run['log_z']:.3f} "
              f"({run['cpu_seconds']:.1f} s CPU)", flush=True)
    return result


def summary(runs: list[dict[str, Any]], truth: float, particles: int,
            key: str = "log_z") -> dict[str, Any]:
    errors = np.array([r[key] for r in runs]) - truth
    return {
        "particles": particles,
        "runs": len(runs),
        "median_abs_error": float(np.median(np.abs(errors))),
        "mean_error": float(errors.mean()),
        "max_abs_error": float(np.abs(errors).max()),
        "median_wall_seconds": median([r["wall_seconds"] for r in runs]),
        "median_cpu_seconds": median([r["cpu_seconds"] for r in runs]),
    }


def one_dataset(name: str, args: argparse.Namespace, python: Path, truth: float,
                folder: Path) -> dict[str, Any]:
    from stanflow.qpaths import load_uci

    target = load_uci(name)
    data = folder / f"{name}.npz"
    np.savez(data, X=target.X, y=target.y, prior_sd=target.prior_sd)
    seeds = list(range(args.seeds))
    half = len(seeds) // 2 + len(seeds) % 2
    n = args.particles
    print(f"{name}: equal particles (N = {n})", flush=True)
    first = stanflow_runs(name, n, seeds[:half])
    pymc = peer_runs(python, "pymc", data, n, list(range(args.seeds)))
    blackjax = peer_runs(python, "blackjax", data, n, list(range(args.blackjax_seeds)))
    second = stanflow_runs(name, n, seeds[half:]) if seeds[half:] else {"runs": []}
    ours = first["runs"] + second["runs"]
    budget = median([r["cpu_seconds"] for r in ours])
    equal_cpu = {}
    for peer, result, count in (("pymc", pymc, args.seeds), ("blackjax", blackjax,
                                                                args.blackjax_seeds)):
        per_particle = median([r["cpu_seconds"] for r in result["runs"]]) / n
        particles = max(MIN_PEER_PARTICLES, round(budget / per_particle))
        print(f"{name}: {peer} at stanflow's CPU time ({budget:.1f} s): N = {particles}",
              flush=True)
        equal_cpu[peer] = peer_runs(python, peer, data, particles, list(range(100, 100 + count)))
    return {
        "d": target.dim,
        "reference_log_z": truth,
        "stanflow_load_seconds": first["load_seconds"],
        "equal_particles": {
            "stanflow": summary(ours, truth, n),
            "stanflow_smc_alone": summary(ours, truth, n, key="log_z_smc"),
            "pymc": summary(pymc["runs"], truth, n),
            "blackjax": summary(blackjax["runs"], truth, n),
        },
        "equal_cpu": {
            "cpu_budget_seconds": budget,
            "pymc": summary(equal_cpu["pymc"]["runs"], truth,
                            equal_cpu["pymc"]["settings"]["particles"]),
            "blackjax": summary(equal_cpu["blackjax"]["runs"], truth,
                                equal_cpu["blackjax"]["settings"]["particles"]),
        },
        "runs": {"stanflow": ours, "pymc": pymc["runs"], "blackjax": blackjax["runs"],
                 "pymc_equal_cpu": equal_cpu["pymc"]["runs"],
                 "blackjax_equal_cpu": equal_cpu["blackjax"]["runs"]},
        "peer_settings": {"pymc": pymc["settings"], "blackjax": blackjax["settings"]},
        "peer_versions": {"pymc": pymc["versions"], "blackjax": blackjax["versions"]},
        "peer_first_call_seconds": {"pymc": pymc["first_call_seconds"],
                                    "blackjax": blackjax["first_call_seconds"]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["pima", "sonar"],
                        choices=["pima", "sonar"])
    parser.add_argument("--seeds", type=int, default=10, help="runs per side (stanflow, PyMC)")
    parser.add_argument("--blackjax-seeds", type=int, default=3,
                        help="BlackJAX runs (NUTS moves take minutes per run)")
    parser.add_argument("--particles", type=int, default=2000)
    parser.add_argument("--peer-venv", type=Path, default=Path("/work/peers/pymc-venv"))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.datasets, args.seeds, args.blackjax_seeds, args.particles = ["pima"], 2, 1, 500
    truth = json.loads(REFERENCE.read_text())["log_z_truth"]
    python = ensure_venv(args.peer_venv, ["pymc", "blackjax"], ["pymc", "blackjax", "jax[cpu]"])
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in args.datasets:
            results[name] = one_dataset(name, args, python, truth[name], Path(folder))
    rows = []
    for name, result in results.items():
        for comparison in ("equal_particles", "equal_cpu"):
            for side, s in result[comparison].items():
                if isinstance(s, dict):
                    rows.append([name, comparison, side, s["particles"], s["runs"],
                                 s["median_abs_error"], s["mean_error"],
                                 s["median_cpu_seconds"], s["median_wall_seconds"]])
    print_table(["data", "comparison", "side", "N", "runs", "median |err|", "mean err",
                 "CPU s", "wall s"], rows)
    if not args.quick:
        path = write_results("smc_log_z", {
            "command": " ".join(["taskset -c 0 .venv/bin/python bench/peers/smc_log_z.py",
                                 *sys.argv[1:]]),
            "machine": machine_info(), "settings": vars(args) | {"peer_venv": str(args.peer_venv)},
            "datasets": results,
        })
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
