"""WBB of a weighted logistic regression: in-process L-BFGS against one CmdStan ``optimize`` run per draw.

Pima (768 x 8, predictors centred and scaled to sd 0.5 by
``stanflow.qpaths.logistic.load_uci``, labels +-1), logistic loss
``log(1 + exp(-y f))``, ridge penalty ``lam |beta|^2 / 2`` with ``lam = 1``,
unpenalised intercept, random prior weight, root seed 13. Side by side in one run:

- ``stanflow.wbb.inprocess.wbb_glm_inprocess``: ``--draws`` draws (default
  1000) end to end (weights, the unit-weight warm start, batched L-BFGS on
  Stan's gradients, InferenceData), with the default threads (the cores this
  process may use) and with one thread; models compiled and loaded once
  before timing (a load from the cache is timed separately);
- scipy's L-BFGS-B, one ``minimize`` per draw on the same Stan objective
  (``WeightedGlm(problem).objective``, same start and tolerances), on the first
  ``--runs-draws`` draws: the per-draw design the batched one replaces;
- ``stanflow.wbb.stan_optimize.wbb_glm``: the first ``--runs-draws`` of the same
  draws (default 200: same root seed, so the same weights), the run layer's
  ``LocalExecutor`` on all cores, executable compiled beforehand, once at
  CmdStan's default tolerances (its fastest) and once at tight ones
  (``tol_rel_grad = tol_rel_obj = 1``, machine precision, as in
  ``tests/test_wbb_*_e2e.py``).

Reported: draws per second of each, the ratios to the run layer, and the
largest difference of the optima (intercept and coefficients) on the shared
draws, absolute and relative to the largest coefficient (only draws the run
layer reports converged). Needs ``STANFLOW_DATA_DIR`` (the UCI data).

    STANFLOW_DATA_DIR=/work/shared/data python bench/wbb_inprocess.py [--draws 1000] [--runs-draws 200]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import RESULTS_DIR, machine_info
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

from stanflow.models import default_threads
from stanflow.qpaths.logistic import load_uci
from stanflow.wbb.glm import GlmProblem
from stanflow.wbb.inprocess import WeightedGlm, lbfgs_draws, wbb_glm_inprocess
from stanflow.wbb.stan_optimize import glm_model, wbb_glm

SEED = 13
LAM = 1.0
TIGHT = {"tol_rel_grad": 1.0, "tol_rel_obj": 1.0}
GTOL, FTOL = 1e-10, 1e-16


def optima(idata: Any, draws: int) -> np.ndarray:
    """(intercept, beta) of the first ``draws`` draws, shape (draws, 1 + p)."""
    post = idata.posterior
    return np.column_stack([post.intercept.values[0, :draws], post.beta.values[0, :draws]])


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = call()
    return out, time.perf_counter() - start


def scipy_per_draw(glm: WeightedGlm, w: np.ndarray, wp: np.ndarray) -> np.ndarray:
    """One scipy L-BFGS-B run per draw from the unit-weight optimum, as the batched path starts."""
    unit = lbfgs_draws(glm, None, 1.0)
    start = np.r_[unit.params["intercept"][0], unit.params["beta"][0]]
    out = np.empty((w.shape[0], start.size))
    with threadpool_limits(limits=1, user_api="blas"):
        for b in range(w.shape[0]):
            value = glm.objective(start, w[b], wp[b])[0]
            options = {"gtol": GTOL * max(1.0, abs(value)), "ftol": 1e-14, "maxiter": 10_000}
            out[b] = minimize(glm.objective, start, args=(w[b], wp[b]), jac=True,
                              method="L-BFGS-B", options=options).x
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--runs-draws", type=int, default=200)
    args = parser.parse_args()
    B, B_runs = args.draws, min(args.runs_draws, args.draws)
    target = load_uci("pima")
    X, y = target.X[:, 1:], target.y  # load_uci prepends a column of ones: our intercept instead
    info = machine_info()

    problem = GlmProblem(X, y, LAM, loss="logistic", penalty="ridge", fit_intercept=True)
    glm, load_seconds = timed(lambda: WeightedGlm(problem))
    glm_model("logistic", "ridge")  # compile the executable before timing
    wbb_glm_inprocess(problem, 2, seed=SEED)  # first-call costs (imports, caches) not timed
    inproc, inproc_seconds = timed(lambda: wbb_glm_inprocess(problem, B, seed=SEED))
    one, one_seconds = timed(lambda: wbb_glm_inprocess(problem, B, seed=SEED, threads=1))
    w, wp = inproc.weights.w.values[0, :B_runs], inproc.weights.w_prior.values[0, :B_runs]
    per_draw, scipy_seconds = timed(lambda: scipy_per_draw(glm, w, wp))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # draws that stop early are NaN, counted below
        runs_default, default_seconds = timed(lambda: wbb_glm(problem, B_runs, seed=SEED))
        runs_tight, tight_seconds = timed(lambda: wbb_glm(problem, B_runs, seed=SEED, args=TIGHT))

    ours = optima(inproc, B_runs)
    scale = float(np.abs(ours).max())
    seconds = {
        "inprocess": inproc_seconds,
        "inprocess_one_thread": one_seconds,
        "scipy_lbfgsb_per_draw": scipy_seconds,
        "runs_default_tolerances": default_seconds,
        "runs_tight_tolerances": tight_seconds,
    }
    counts = {"inprocess": B, "inprocess_one_thread": B}
    rates = {k: counts.get(k, B_runs) / v for k, v in seconds.items()}
    others = {"runs_default_tolerances": optima(runs_default, B_runs),
              "runs_tight_tolerances": optima(runs_tight, B_runs),
              "scipy_lbfgsb_per_draw": per_draw,
              "inprocess_one_thread": optima(one, B_runs)}
    diffs = {k: float(np.nanmax(np.abs(ours - v))) for k, v in others.items()}
    stats = inproc.sample_stats
    result = {
        "problem": {"data": "pima", "n": int(X.shape[0]), "p": int(X.shape[1]), "lam": LAM,
                    "loss": "logistic", "penalty": "ridge", "prior": "random", "seed": SEED},
        "draws": {"inprocess": B, "others": B_runs},
        "seconds": {**seconds, "inprocess_model_load_from_cache": load_seconds},
        "draws_per_second": rates,
        "ratio_inprocess_vs_runs_default_tolerances": rates["inprocess"] / rates["runs_default_tolerances"],
        "ratio_inprocess_vs_runs_tight_tolerances": rates["inprocess"] / rates["runs_tight_tolerances"],
        "ratio_inprocess_one_thread_vs_runs_default_tolerances":
            rates["inprocess_one_thread"] / rates["runs_default_tolerances"],
        "ratio_inprocess_vs_scipy_per_draw": rates["inprocess"] / rates["scipy_lbfgsb_per_draw"],
        "max_abs_diff_of_optima_vs_inprocess": diffs,
        "max_rel_diff_of_optima_vs_inprocess": {k: v / scale for k, v in diffs.items()},
        "max_abs_coefficient": scale,
        "converged": {
            "inprocess": int(stats.converged.values.sum()),
            "runs_default_tolerances": int(runs_default.sample_stats.converged.values.sum()),
            "runs_tight_tolerances": int(runs_tight.sample_stats.converged.values.sum()),
        },
        "inprocess_mean_iterations": float(stats.n_iter.values.mean()),
        "inprocess_max_grad_norm": float(stats.grad_norm.values.max()),
        "threads": {"inprocess": default_threads(), "runs_cores": len(os.sched_getaffinity(0))},
        "machine": info,
        "load_average_at_end": list(os.getloadavg()),
    }
    print(json.dumps(result, indent=1))
    (RESULTS_DIR / "wbb_inprocess.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
