"""Peer benchmark: R's bridgesampling against stanflow's bridge sampling, SMC and TI, log Z.

Two posteriors, the same draws for both bridge samplers:

* **Pima** Bayesian logistic regression (``stanflow.qpaths.load_uci("pima")``,
  d = 9, prior ``N(0, 5^2 I)``, the Stan program
  ``stan/qpaths/logistic_regression.stan``); reference ``log Z`` the
  ``qpaths-smc`` workflow's (``results/qpaths-smc/summary.json``, key
  ``truth.pima``, Student-t importance sampling, standard error 0.001). Draws:
  NUTS through cmdstanpy (stanflow's compiled executable: 4 chains x (1000
  warm-up + 2000 draws)).
* **The Bayesian lasso of WBB** (:mod:`stanflow.wbb.bayes_lasso`: the diabetes
  data of ``wbb-diabetes``, 442 x 10 standardised, ``y`` centred, ``sigma`` its
  least-squares residual sd, ``lam`` the maximiser of ``p(y | lam)`` stored in
  ``results/wbb-diabetes/summary.json``); ``log p(y | lam)`` by importance
  sampling from a Student-t (5 degrees of freedom, the moments of a long Gibbs
  run, 2 x 10^6 draws; the posterior is log-concave) as the reference, its
  standard error stated. Draws: Park and Casella's Gibbs sampler
  (:func:`stanflow.wbb.gibbs_lasso`, 4 chains x (1000 warm-up + 2000 draws)).

Per seed (``--seeds``, default 10), on the same draws:

* R's ``bridgesampling::bridge_sampler`` through its matrix interface, the log
  posterior written in R with every constant, methods ``"normal"`` (its
  default) and ``"warp3"``; timed inside R (``system.time``), all seeds in one
  ``Rscript`` process (``bridgesampling_fit.R``; draws and data as CSV files).
  R and bridgesampling come from Debian (``r-cran-bridgesampling``, installed
  by ``apt-get`` if missing);
* stanflow's :func:`stanflow.bridge.bridge_sampling` on the same log density in
  process (the Stan program through ``stan_log_density``; the lasso's
  :func:`stanflow.wbb.lasso_log_density`), timed per call;

and without draws, from the prior (``GaussianBase(9, 5)``; the lasso's Laplace
prior) to the posterior:

* stanflow's :func:`stanflow.qpaths.smc` with its defaults (1000 particles, 4
  runs, self-tuning moves, the final bridge);
* stanflow's :func:`stanflow.qpaths.thermodynamic_integration` with its
  defaults (200 chains, 50 warm-up and 100 draws per temperature) on the
  schedule ``beta_k = (k / 40)^5``, k = 0..40 (Friel and Pettitt's power
  schedule; TI has no default schedule).

Reported per problem and method: median absolute error and mean error against
the reference, the median of the method's own error estimate, median seconds per
estimate. The sampling time of the draws is reported apart (both bridge
samplers need it; SMC and TI do not). Run it pinned to one core (``taskset -c
0``) for comparable times.

Usage::

    taskset -c 0 .venv/bin/python bench/peers/bridgesampling_log_z.py [--seeds 10] [--quick]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import REPO, machine_info, median, print_table, write_results
from _r import ensure_r

R_SCRIPT = Path(__file__).resolve().parent / "bridgesampling_fit.R"
PIMA_REFERENCE = REPO / "results" / "qpaths-smc" / "summary.json"
LASSO_SETTINGS = REPO / "results" / "wbb-diabetes" / "summary.json"
SEED = 20261204
CHAINS, WARMUP, DRAWS = 4, 1000, 2000
SMC_PARTICLES = 1000
TI_SCHEDULE = np.linspace(0.0, 1.0, 41) ** 5
REFERENCE_DRAWS = 2_000_000
QUICK_SEEDS = 2
R_METHODS = ("normal", "warp3")


@dataclass
class Problem:
    """One posterior: its log density, prior (normalised, with draws), reference and draws."""

    name: str
    X: np.ndarray
    y: np.ndarray
    r_model: list[str]
    density: Callable[[np.ndarray], np.ndarray]
    base: Any
    truth: float
    truth_se: float
    draws: Callable[[int], np.ndarray]
    settings: dict[str, Any] = field(default_factory=dict)


class LaplaceBase:
    """The Bayesian lasso's prior, ``b_j`` iid Laplace(``rate``): normalised log density, draws."""

    def __init__(self, d: int, rate: float) -> None:
        self.d, self.rate = d, rate

    def __call__(self, z: np.ndarray) -> np.ndarray:
        return self.d * math.log(self.rate / 2) - self.rate * np.abs(z).sum(axis=1)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.laplace(0.0, 1 / self.rate, size=(n, self.d))


def pima() -> Problem:
    """Pima logistic regression: the Stan program in process, NUTS draws."""
    from stanflow.models import compile_model
    from stanflow.qpaths import GaussianBase, load_uci, stan_log_density
    from stanflow.resources import resource_dir

    target = load_uci("pima")
    program = resource_dir("stan") / "qpaths" / "logistic_regression.stan"
    model = compile_model(program)
    density = stan_log_density(program, target.stan_data())
    stored = json.loads(PIMA_REFERENCE.read_text())["truth"]["pima"]

    def draws(seed: int) -> np.ndarray:
        fit = model.sample(data=target.stan_data(), chains=CHAINS, parallel_chains=1,
                           iter_warmup=WARMUP, iter_sampling=DRAWS, seed=SEED + seed,
                           show_progress=False)
        return fit.stan_variable("z")

    return Problem(
        "pima", target.X, target.y, ["logistic"], density, GaussianBase(target.dim, 5.0),
        float(stored["log_z"]), float(stored["se"]), draws,
        {"d": target.dim, "prior": "N(0, 5^2 I)",
         "reference": str(PIMA_REFERENCE.relative_to(REPO)), "draws": "NUTS (cmdstanpy)"},
    )


def lasso() -> Problem:
    """The Bayesian lasso on the diabetes data at ``wbb-diabetes``'s ``lam``: Gibbs draws."""
    from functools import partial

    from stanflow.wbb import gibbs_lasso, lasso_log_density

    sys.path.insert(0, str(REPO / "workflows"))
    from wbb_diabetes import diabetes

    X, y, _ = diabetes()
    stored = json.loads(LASSO_SETTINGS.read_text())["marginal_likelihood"]
    lam, sigma = float(stored["lam_ml"]), float(stored["sigma"])
    density = partial(lasso_log_density, X=X, y=y, lam=lam, sigma=sigma)

    def draws(seed: int) -> np.ndarray:
        beta = gibbs_lasso(X, y, lam, sigma, DRAWS, seed=SEED + seed, chains=CHAINS,
                           warmup=WARMUP)
        return beta.reshape(-1, X.shape[1])

    truth, truth_se = importance_reference(density, gibbs_lasso(
        X, y, lam, sigma, 20_000, seed=SEED - 1, chains=1, warmup=WARMUP).reshape(-1, X.shape[1]))
    return Problem(
        "lasso", X, y, ["lasso", repr(lam), repr(sigma)], density,
        LaplaceBase(X.shape[1], lam / sigma**2), truth, truth_se, draws,
        {"d": X.shape[1], "prior": "Laplace(rate lam / sigma^2)", "lam": lam, "sigma": sigma,
         "reference": f"Student-t(5) importance sampling, {REFERENCE_DRAWS} draws",
         "draws": "Gibbs (stanflow.wbb.gibbs_lasso)"},
    )


def importance_reference(density: Callable[[np.ndarray], np.ndarray],
                         fitted_to: np.ndarray) -> tuple[float, float]:
    """``log Z`` by importance sampling from a t(5) with the draws' mean and 1.2 times
    their covariance; the estimate and its standard error (delta method)."""
    from scipy.stats import multivariate_t

    proposal = multivariate_t(fitted_to.mean(axis=0), 1.2 * np.cov(fitted_to.T), df=5, seed=SEED)
    log_w = []
    for _ in range(REFERENCE_DRAWS // 100_000):
        z = proposal.rvs(100_000)
        log_w.append(density(z) - proposal.logpdf(z))
    log_w = np.concatenate(log_w)
    top = log_w.max()
    w = np.exp(log_w - top)
    return float(top + np.log(w.mean())), float(w.std() / (w.mean() * math.sqrt(len(w))))


def write_data_csv(X: Any, y: Any, path: Path) -> None:
    """Write ``y`` and the columns of ``X`` (``x1``, ...) at full precision."""
    header = ",".join(["y", *(f"x{j + 1}" for j in range(X.shape[1]))])
    np.savetxt(path, np.column_stack([y, X]), delimiter=",", fmt="%.17g", header=header,
               comments="")


def write_draws_csv(draws: Any, path: Path) -> None:
    """Write the draws with columns ``z1``, ... at full precision."""
    header = ",".join(f"z{j + 1}" for j in range(draws.shape[1]))
    np.savetxt(path, draws, delimiter=",", fmt="%.17g", header=header, comments="")


def stanflow_bridge(problem: Problem, draws: np.ndarray, seed: int) -> dict[str, Any]:
    """:func:`stanflow.bridge.bridge_sampling` on the draws, timed."""
    from stanflow.bridge import bridge_sampling

    start = time.perf_counter()
    result = bridge_sampling(problem.density, draws, seed=seed)
    seconds = time.perf_counter() - start
    return {"log_z": result.log_marginal, "se": result.relative_error,
            "n_iter": result.n_iter, "converged": result.converged, "seconds": seconds}


def stanflow_smc(problem: Problem, seed: int) -> dict[str, Any]:
    """stanflow's default SMC from the prior, timed."""
    from stanflow.qpaths import smc

    start = time.perf_counter()
    attrs = smc(problem.base, problem.base.sample, problem.density,
                n_particles=SMC_PARTICLES, seed=seed).smc.attrs
    return {"log_z": float(attrs["log_z"]), "se": float(attrs["log_z_se"]),
            "seconds": time.perf_counter() - start}


def stanflow_ti(problem: Problem, seed: int) -> dict[str, Any]:
    """stanflow's thermodynamic integration from the prior on :data:`TI_SCHEDULE`, timed."""
    from stanflow.qpaths import thermodynamic_integration

    start = time.perf_counter()
    attrs = thermodynamic_integration(problem.base, problem.base.sample, problem.density,
                                      TI_SCHEDULE, seed=seed).smc.attrs
    return {"log_z": float(attrs["log_z"]), "se": float(attrs["log_z_se"]),
            "seconds": time.perf_counter() - start}


def run_r(rscript: str, problem: Problem, folder: Path, seeds: int) -> dict[str, Any]:
    """bridgesampling on every seed's draws in one Rscript process; rows, versions, wall."""
    import pandas as pd

    data_csv, out = folder / "data.csv", folder / "r_results.csv"
    write_data_csv(problem.X, problem.y, data_csv)
    model, *extra = problem.r_model
    start = time.perf_counter()
    proc = subprocess.run(
        [rscript, str(R_SCRIPT), model, str(data_csv), str(folder), str(seeds), str(out), *extra],
        capture_output=True, text=True, check=False,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{R_SCRIPT.name} failed:\n{proc.stdout}\n{proc.stderr}")
    return {"rows": pd.read_csv(out), "process_wall": wall,
            "versions": proc.stdout.strip().splitlines()[0]}


def run_problem(problem: Problem, seeds: int, rscript: str) -> dict[str, Any]:
    """Every method on every seed of one problem; summaries and the runs."""
    sampling: list[dict[str, Any]] = []
    runs: dict[str, list[dict[str, Any]]] = {"stanflow_bridge": [], "stanflow_smc": [],
                                             "stanflow_ti": []}
    with tempfile.TemporaryDirectory(prefix="stanflow-peers-bridge-") as tmp:
        folder = Path(tmp)
        for seed in range(seeds):
            start = time.perf_counter()
            draws = problem.draws(seed)
            sampling.append({"seed": seed, "seconds": time.perf_counter() - start,
                             "draws": len(draws)})
            write_draws_csv(draws, folder / f"draws_{seed}.csv")
            runs["stanflow_bridge"].append({"seed": seed, **stanflow_bridge(problem, draws, seed)})
            runs["stanflow_smc"].append({"seed": seed, **stanflow_smc(problem, seed)})
            runs["stanflow_ti"].append({"seed": seed, **stanflow_ti(problem, seed)})
            print(f"{problem.name} seed {seed}: draws {sampling[-1]['seconds']:.1f} s, "
                  + ", ".join(f"{name} {r[-1]['log_z'] - problem.truth:+.4f} "
                              f"({r[-1]['seconds']:.2f} s)" for name, r in runs.items()),
                  flush=True)
        r = run_r(rscript, problem, folder, seeds)
    runs = {**{f"bridgesampling_{m}": r_runs(r["rows"], m) for m in R_METHODS}, **runs}
    methods = {name: summarise(method_runs, problem.truth) for name, method_runs in runs.items()}
    print()
    print_table(["method", "median |error|", "mean error", "sd error", "median est. error",
                 "median s"],
                [[name, m["median_abs_error"], m["mean_error"], m["sd_error"],
                  "n/a" if m["median_estimated_error"] is None else m["median_estimated_error"],
                  m["median_seconds"]] for name, m in methods.items()])
    print(f"{problem.name}: draws median {median([n['seconds'] for n in sampling]):.1f} s per "
          f"seed; R process {r['process_wall']:.1f} s for {seeds} seeds x {len(R_METHODS)} "
          "methods\n")
    return {
        "settings": {**problem.settings, "log_z_truth": problem.truth,
                     "log_z_truth_se": problem.truth_se},
        "r_bridgesampling": r["versions"],
        "sampling_median_seconds": median([n["seconds"] for n in sampling]),
        "r_process_wall": r["process_wall"],
        "methods": methods,
        "runs": runs,
        "sampling": sampling,
    }


def summarise(runs: list[dict[str, Any]], truth: float) -> dict[str, Any]:
    """Errors against ``truth``, the median own error estimate (None if none) and median seconds."""
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
    picked = rows[rows["method"] == method].sort_values("seed")
    return [{"seed": int(r.seed), "log_z": float(r.logml),
             "se": math.sqrt(r.re2) if math.isfinite(r.re2) else None,
             "n_iter": int(r.niter), "seconds": float(r.seconds)}
            for r in picked.itertuples()]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the seeds of both problems, print tables, write ``bench/results/bridgesampling_log_z.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds per problem (default 10)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK_SEEDS} seeds, results not written")
    args = parser.parse_args(argv)
    seeds = QUICK_SEEDS if args.quick else args.seeds
    if seeds < 2:
        parser.error(f"--seeds must be at least 2, got {seeds}")

    from cmdstanpy.utils import get_logger

    from stanflow import __version__

    get_logger().setLevel(logging.WARNING)  # after its set-up, which sets DEBUG
    info = machine_info()
    rscript = ensure_r("bridgesampling")
    problems = {}
    for build in (pima, lasso):
        problem = build()
        problems[problem.name] = run_problem(problem, seeds, rscript)
    data = {
        "benchmark": "bridgesampling_log_z",
        "command": "taskset -c 0 .venv/bin/python bench/peers/bridgesampling_log_z.py "
        f"--seeds {seeds}" + (" --quick" if args.quick else ""),
        "machine": info,
        "versions": {"r_bridgesampling": problems["pima"]["r_bridgesampling"],
                     "stanflow": __version__},
        "settings": {
            "seeds": seeds, "seed": SEED,
            "draws": {"chains": CHAINS, "warmup": WARMUP, "draws": DRAWS},
            "r_methods": list(R_METHODS), "smc_particles": SMC_PARTICLES,
            "ti_schedule": "beta_k = (k / 40)^5, k = 0..40",
            "stanflow_error": "iid formula (no spectral correction); bridgesampling's re2 "
            "uses the spectral density of the posterior half",
        },
        "problems": problems,
    }
    if not args.quick:
        print(f"wrote {write_results('bridgesampling_log_z', data)}")
    return data


if __name__ == "__main__":
    main()
