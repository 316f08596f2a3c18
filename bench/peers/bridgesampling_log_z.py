"""Peer benchmark: R's bridgesampling against stanflow's bridge_sampling, log Z of Pima.

Bayesian logistic regression on Pima (``stanflow.qpaths.load_uci("pima")``,
d = 9, prior ``N(0, 5^2 I)``, the Stan program
``stan/qpaths/logistic_regression.stan``); the reference ``log Z`` is the
``qpaths-smc`` workflow's (``results/qpaths-smc/summary.json``, key
``log_z_truth``, Student-t importance sampling, standard error 0.001).

Per seed (``--seeds``, default 10), NUTS through cmdstanpy (stanflow's compiled
executable of the program: 4 chains x (1000 warm-up + 2000 draws)) gives 8000
posterior draws; then, on the same draws:

* R's ``bridgesampling::bridge_sampler`` through its matrix interface, the log
  posterior written in R with every constant (``dnorm(z, 0, 5, log = TRUE)``
  and ``plogis(y * X z, log.p = TRUE)``), unbounded parameters, methods
  ``"normal"`` (its default) and ``"warp3"``; timed inside R (``system.time``),
  all seeds in one ``Rscript`` process (``bridgesampling_fit.R``; draws and data
  passed as CSV files). R and bridgesampling come from Debian
  (``r-cran-bridgesampling``, installed by ``apt-get`` if missing);
* stanflow's :func:`stanflow.wbb.bridge_sampling` on the Stan program
  in process (``stan_log_density``), timed per call (the program loaded once);
* for reference, stanflow's default SMC (``smc`` with ``GaussianBase(9, 5)`` as
  base, the same Stan density as target, ``n_particles=1000``, its default
  self-tuning moves and 4 runs), timed per call; it needs no posterior draws.

Reported per method: median absolute error and mean error against the
reference, the median of the method's own error estimate, median seconds per
estimate. The NUTS sampling time is reported apart (both bridge samplers need
it; SMC does not). Run it pinned to one core (``taskset -c 0``) for
comparable times.

Usage::

    taskset -c 0 .venv/bin/python bench/peers/bridgesampling_log_z.py [--seeds 10] [--quick]
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import REPO, machine_info, median, print_table, write_results
from _r import ensure_r

R_SCRIPT = Path(__file__).resolve().parent / "bridgesampling_fit.R"
REFERENCE = REPO / "results" / "qpaths-smc" / "summary.json"
SEED = 20261204
CHAINS, WARMUP, DRAWS = 4, 1000, 2000
SMC_PARTICLES = 1000
QUICK_SEEDS = 2
R_METHODS = ("normal", "warp3")


def write_data_csv(X: Any, y: Any, path: Path) -> None:
    """Write ``y`` and the columns of ``X`` (``x1``, ...) at full precision."""
    import numpy as np

    header = ",".join(["y", *(f"x{j + 1}" for j in range(X.shape[1]))])
    np.savetxt(path, np.column_stack([y, X]), delimiter=",", fmt="%.17g", header=header,
               comments="")


def write_draws_csv(draws: Any, path: Path) -> None:
    """Write the draws with columns ``z1``, ... at full precision."""
    import numpy as np

    header = ",".join(f"z{j + 1}" for j in range(draws.shape[1]))
    np.savetxt(path, draws, delimiter=",", fmt="%.17g", header=header, comments="")


def nuts_draws(model: Any, data: dict[str, Any], seed: int) -> tuple[Any, float]:
    """Posterior draws ``(CHAINS * DRAWS, d)`` of ``z`` by NUTS, and the sampling seconds."""
    start = time.perf_counter()
    fit = model.sample(data=data, chains=CHAINS, parallel_chains=1, iter_warmup=WARMUP,
                       iter_sampling=DRAWS, seed=seed, show_progress=False)
    return fit.stan_variable("z"), time.perf_counter() - start


def stanflow_bridge(density: Any, draws: Any, seed: int) -> dict[str, Any]:
    """``stanflow.wbb.bridge_sampling`` on the draws, timed."""
    from stanflow.wbb import bridge_sampling

    start = time.perf_counter()
    result = bridge_sampling(density, draws, seed=seed)
    seconds = time.perf_counter() - start
    return {"log_z": result.log_marginal, "se": result.relative_error,
            "n_iter": result.n_iter, "converged": result.converged, "seconds": seconds}


def stanflow_smc(density: Any, seed: int) -> dict[str, Any]:
    """stanflow's default SMC from ``GaussianBase(d, 5)``, timed."""
    from stanflow.qpaths import GaussianBase, smc

    base = GaussianBase(density.dim, 5.0)
    start = time.perf_counter()
    attrs = smc(base, base.sample, density, n_particles=SMC_PARTICLES, seed=seed).smc.attrs
    return {"log_z": float(attrs["log_z"]), "se": float(attrs["log_z_se"]),
            "seconds": time.perf_counter() - start}


def run_r(rscript: str, data_csv: Path, folder: Path, seeds: int) -> dict[str, Any]:
    """bridgesampling on every seed's draws in one Rscript process; rows, versions, wall."""
    import pandas as pd

    out = folder / "r_results.csv"
    start = time.perf_counter()
    proc = subprocess.run(
        [rscript, str(R_SCRIPT), str(data_csv), str(folder), str(seeds), str(out)],
        capture_output=True, text=True, check=False,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{R_SCRIPT.name} failed:\n{proc.stdout}\n{proc.stderr}")
    return {"rows": pd.read_csv(out), "process_wall": wall,
            "versions": proc.stdout.strip().splitlines()[0]}


def summarise(runs: list[dict[str, Any]], truth: float) -> dict[str, Any]:
    """Errors against ``truth``, the median own error estimate (None if none) and median seconds."""
    import numpy as np

    errors = np.array([r["log_z"] for r in runs]) - truth
    estimated = [r["se"] for r in runs if r["se"] is not None]
    return {
        "median_abs_error": float(np.median(np.abs(errors))),
        "mean_error": float(errors.mean()),
        "sd_error": float(errors.std(ddof=1)) if len(errors) > 1 else float("nan"),
        "median_estimated_error": median(estimated) if estimated else None,
        "median_seconds": median([r["seconds"] for r in runs]),
    }


def r_runs(rows: Any, method: str) -> list[dict[str, Any]]:
    """One method's R rows as run records (``se`` = sqrt(re2) as stanflow's, None for warp3)."""
    import math

    picked = rows[rows["method"] == method].sort_values("seed")
    return [{"seed": int(r.seed), "log_z": float(r.logml),
             "se": math.sqrt(r.re2) if math.isfinite(r.re2) else None,
             "n_iter": int(r.niter), "seconds": float(r.seconds)}
            for r in picked.itertuples()]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the seeds, print a table, write ``bench/results/bridgesampling_log_z.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="NUTS runs (default 10)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK_SEEDS} seeds, results not written")
    args = parser.parse_args(argv)
    seeds = QUICK_SEEDS if args.quick else args.seeds
    if seeds < 2:
        parser.error(f"--seeds must be at least 2, got {seeds}")

    from cmdstanpy.utils import get_logger

    from stanflow import __version__
    from stanflow.models import compile_model
    from stanflow.qpaths import load_uci, stan_log_density
    from stanflow.resources import resource_dir

    get_logger().setLevel(logging.WARNING)  # after its set-up, which sets DEBUG
    info = machine_info()
    rscript = ensure_r("bridgesampling")
    truth = float(json.loads(REFERENCE.read_text())["log_z_truth"]["pima"])
    target = load_uci("pima")
    program = resource_dir("stan") / "qpaths" / "logistic_regression.stan"
    start = time.perf_counter()
    model = compile_model(program)
    density = stan_log_density(program, target.stan_data())
    load_seconds = time.perf_counter() - start

    nuts: list[dict[str, Any]] = []
    bridge: list[dict[str, Any]] = []
    reference_smc: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="stanflow-peers-bridge-") as tmp:
        folder = Path(tmp)
        data_csv = folder / "data.csv"
        write_data_csv(target.X, target.y, data_csv)
        for seed in range(seeds):
            draws, seconds = nuts_draws(model, target.stan_data(), SEED + seed)
            write_draws_csv(draws, folder / f"draws_{seed}.csv")
            nuts.append({"seed": seed, "seconds": seconds, "draws": len(draws)})
            bridge.append({"seed": seed, **stanflow_bridge(density, draws, seed)})
            reference_smc.append({"seed": seed, **stanflow_smc(density, seed)})
            print(f"seed {seed}: NUTS {seconds:.1f} s, bridge {bridge[-1]['log_z']:.4f} "
                  f"({bridge[-1]['seconds']:.2f} s), SMC {reference_smc[-1]['log_z']:.4f} "
                  f"({reference_smc[-1]['seconds']:.1f} s)", flush=True)
        r = run_r(rscript, data_csv, folder, seeds)
    runs = {f"bridgesampling_{m}": r_runs(r["rows"], m) for m in R_METHODS}
    runs["stanflow_bridge"] = bridge
    runs["stanflow_smc_1000"] = reference_smc
    methods = {name: summarise(method_runs, truth) for name, method_runs in runs.items()}
    rows = [[name, m["median_abs_error"], m["mean_error"], m["sd_error"],
             "n/a" if m["median_estimated_error"] is None else m["median_estimated_error"],
             m["median_seconds"]]
            for name, m in methods.items()]
    print()
    print_table(["method", "median |error|", "mean error", "sd error", "median est. error",
                 "median s"], rows)
    print(f"NUTS ({CHAINS} x {WARMUP} + {DRAWS}): median "
          f"{median([n['seconds'] for n in nuts]):.1f} s per seed; R process "
          f"{r['process_wall']:.1f} s for {seeds} seeds x {len(R_METHODS)} methods")
    data = {
        "benchmark": "bridgesampling_log_z",
        "command": "taskset -c 0 .venv/bin/python bench/peers/bridgesampling_log_z.py "
        f"--seeds {seeds}" + (" --quick" if args.quick else ""),
        "machine": info,
        "versions": {"r_bridgesampling": r["versions"], "stanflow": __version__},
        "settings": {
            "data": "pima", "d": target.dim, "prior": "N(0, 5^2 I)",
            "log_z_truth": truth, "reference": str(REFERENCE.relative_to(REPO)),
            "seeds": seeds, "nuts": {"chains": CHAINS, "iter_warmup": WARMUP,
                                     "iter_sampling": DRAWS, "seed": SEED},
            "r_methods": list(R_METHODS), "smc_particles": SMC_PARTICLES,
            "stanflow_error": "iid formula (no spectral correction); bridgesampling's re2 "
            "uses the spectral density of the posterior half",
        },
        "stanflow_load_seconds": load_seconds,
        "nuts_median_seconds": median([n["seconds"] for n in nuts]),
        "r_process_wall": r["process_wall"],
        "methods": methods,
        "runs": runs,
        "nuts": nuts,
    }
    if not args.quick:
        print(f"wrote {write_results('bridgesampling_log_z', data)}")
    return data


if __name__ == "__main__":
    main()
