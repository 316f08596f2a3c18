"""Smooth weighted problems through CmdStan's ``optimize``, one run per WBB draw.

Each draw ``b`` solves the problem of a :class:`~stanflow.wbb.glm.GlmProblem`,

    minimise_{alpha, beta}  sum_i w_bi loss(y_i, alpha + x_i' beta)  +  lam * wp_b * penalty(beta),

with the template ``stan/wbb/weighted_glm.stan``: the loss and the penalty are
slots (``loss.stanfunctions``, any of ``stan/losses``; ``penalty.stanfunctions``,
``stan/wbb/penalties``), the weights ``w``, ``w_prior`` and ``lambda`` are data,
so one compiled model serves every draw. The draws are a
:class:`stanflow.runs.RunSet` of ``optimize`` runs (L-BFGS by default), which
its batch mode packs into few processes, locally or on Dask.

Convergence per draw is read from the run's console text: a run has converged
when it exited 0 and L-BFGS reported ``Optimization terminated normally`` with
``Convergence detected``. CmdStan also exits 0 when it hits the iteration limit
(``Maximum number of iterations hit``): such a draw is *not* converged, and
neither is a run that failed (non-zero exit, timeout).

Scaling: the losses of ``stan/losses`` are not halved (``squared`` is
``(y - f)^2``), so ``loss="squared"`` with ``penalty="ridge"`` (``|beta|^2 / 2``)
at ``lam`` is :func:`stanflow.wbb.ridge.solve_ridge` at ``lam / 2``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cmdstanpy
import numpy as np

from stanflow.arviz_compat import Results
from stanflow.losses import loss_slot_file
from stanflow.models import compile_model, program_path
from stanflow.outdir import Interrupted
from stanflow.runs import Executor, RunResult, RunSet, RunSpec
from stanflow.wbb._checks import check_weights
from stanflow.wbb.bootstrap import Draws, check_draws, wbb
from stanflow.wbb.glm import GlmProblem, check_problem
from stanflow.wbb.penalties import penalty_slot_file

TEMPLATE = "wbb/weighted_glm"
CONVERGED = ("Optimization terminated normally", "Convergence detected")


def glm_model(
    loss: str | os.PathLike = "squared", penalty: str | os.PathLike = "ridge"
) -> cmdstanpy.CmdStanModel:
    """The compiled template with a loss and a penalty bound.

    Parameters
    ----------
    loss : str or path
        A name in ``stan/losses`` (``squared``, ``logistic``, ``huber``, ...) or
        the path of a file defining ``real loss(real y, real f, vector loss_params)``.
    penalty : str or path
        A name in ``stan/wbb/penalties`` (``ridge``, ``pseudo_huber``) or the
        path of a file defining ``real penalty(vector beta, vector penalty_params)``.

    Returns
    -------
    cmdstanpy.CmdStanModel
    """
    return compile_model(
        program_path(TEMPLATE),
        name="wbb_glm",
        slots={
            "loss.stanfunctions": loss_slot_file(loss),
            "penalty.stanfunctions": penalty_slot_file(penalty),
        },
        cpp_options={"STAN_THREADS": False},
        driver="stanflow",  # the run set's batch mode is stanflow's extension
    )


def optimize_draws(
    model: cmdstanpy.CmdStanModel,
    problem: GlmProblem,
    weights: np.ndarray,
    prior_weight: float | np.ndarray = 1.0,
    *,
    init: np.ndarray | None = None,
    args: Mapping[str, Any] | None = None,
    out_dir: str | Path | None = None,
    executor: Executor | None = None,
    progress: bool = False,
) -> Draws:
    """Solve ``B`` weighted problems, one ``optimize`` run each.

    Parameters
    ----------
    model : cmdstanpy.CmdStanModel
        From :func:`glm_model`, with ``problem``'s loss and penalty.
    problem : GlmProblem
        The data, ``lam``, the intercept and the slots' parameters.
    weights : ndarray, shape (n,) or (B, n)
        Non-negative observation weights.
    prior_weight : float or ndarray, shape (B,)
        Non-negative multiplier of the penalty per draw.
    init : ndarray, shape (p,), optional
        Starting ``beta`` of every run (zeros if omitted; the intercept starts at 0).
    args : mapping, optional
        CmdStan ``optimize`` arguments (default ``{"algorithm": "lbfgs",
        "iter": 10000, "sig_figs": 18}``: full precision in the CSV; e.g.
        ``tol_rel_grad``).
    out_dir : path, optional
        The run set's folder (kept); a temporary folder, removed afterwards, if omitted.
    executor : stanflow.runs.Executor, optional
        ``LocalExecutor()`` if omitted.
    progress : bool
        Show the run layer's progress bar.

    Returns
    -------
    Draws
        ``params``: ``beta`` (B, p) and, with an intercept, ``intercept`` (B,);
        ``converged``; ``stats``: ``objective`` (the minimised value) and
        ``exit_code`` (-1: none).

    Raises
    ------
    TypeError
        If ``problem`` is not a :class:`GlmProblem`.
    ValueError
        For bad weights or ``init``, before any run.
    """
    check_problem(problem)
    X, y, lam, fit_intercept = problem.X, problem.y, problem.lam, problem.fit_intercept
    w, wp = check_weights(weights, prior_weight, problem.n)
    p = problem.n_features
    start = np.zeros(p) if init is None else np.asarray(init, dtype=float)
    if start.shape != (p,) or not np.all(np.isfinite(start)):
        raise ValueError(f"init must be finite with shape ({p},), got {start.shape}")
    inits = {"beta": start.tolist(), "alpha": [0.0] * int(fit_intercept)}
    shared = {
        "N": X.shape[0], "K": p, "X": X, "y": y, "lambda": lam, "fit_intercept": int(fit_intercept),
        "n_loss_params": len(problem.loss_params),
        "loss_params": np.asarray(problem.loss_params, dtype=float),
        "n_penalty_params": len(problem.penalty_params),
        "penalty_params": np.asarray(problem.penalty_params, dtype=float),
    }
    run_args = {"algorithm": "lbfgs", "iter": 10_000, "sig_figs": 18, **dict(args or {})}
    specs = [
        RunSpec(method="optimize", data={**shared, "w": w[b], "w_prior": float(wp[b])},
                inits=inits, args=run_args, seed=0)
        for b in range(w.shape[0])
    ]
    folder = Path(tempfile.mkdtemp(prefix="wbb-optimize-")) if out_dir is None else Path(out_dir)
    try:
        runset = RunSet(model, specs, out_dir=folder, root_seed=0)
        # run what is not done yet (all of it in a new folder), then read every
        # run by index: a call resumed after an interrupt gets all B draws
        deque(runset.run(executor, progress=progress), maxlen=0)
        results = runset.results()
        if [r.index for r in results] != list(range(len(specs))):
            raise RuntimeError(f"the run set in {folder} lacks results for some draws")
        return _collect(results, p, fit_intercept)
    except Interrupted:
        if out_dir is None:  # the folder is removed below: nothing is kept to resume
            raise KeyboardInterrupt from None
        raise
    finally:
        if out_dir is None:
            shutil.rmtree(folder, ignore_errors=True)


def run_converged(result: RunResult) -> bool:
    """Whether an ``optimize`` run exited 0 and L-BFGS/BFGS reported convergence."""
    if not result.ok:
        return False
    text = result.console.read_text(errors="replace")
    return all(phrase in text for phrase in CONVERGED)


def _collect(results: list[RunResult], p: int, fit_intercept: bool) -> Draws:
    B = len(results)
    beta, intercept = np.full((B, p), np.nan), np.zeros(B)
    objective = np.full(B, np.nan)
    converged = np.zeros(B, dtype=bool)
    exit_code = np.array([-1 if r.exit_code is None else r.exit_code for r in results])
    for b, result in enumerate(results):
        if not result.ok:
            continue
        draws = result.draws()
        row = dict(zip(draws.names, draws.values[0, -1], strict=True))
        beta[b] = [row[f"beta[{j + 1}]"] for j in range(p)]
        if fit_intercept:
            intercept[b] = row["alpha[1]"]
        objective[b] = -row["lp__"]
        converged[b] = run_converged(result)
    params = {"beta": beta, "intercept": intercept} if fit_intercept else {"beta": beta}
    return Draws(params, converged, {"objective": objective, "exit_code": exit_code})


def wbb_glm(
    problem: GlmProblem,
    B: int,
    *,
    seed: int,
    prior: str = "random",
    args: Mapping[str, Any] | None = None,
    out_dir: str | Path | None = None,
    executor: Executor | None = None,
    batch_size: int | None = None,
    on_failure: str = "warn",
    progress: bool = False,
) -> Results:
    """WBB draws of a smooth penalised problem through CmdStan ``optimize``.

    Every draw starts from ``beta = 0``; ``sample_stats`` holds ``converged``,
    ``objective`` and ``exit_code``. With ``out_dir``, batch ``k`` (of
    ``batch_size`` draws, all at once by default) keeps its run set in
    ``out_dir/batch-<k>``.

    Parameters
    ----------
    problem : GlmProblem
        The data, ``lam``, loss, penalty, their parameters, the intercept and
        the feature names; the executable is :func:`glm_model` of its loss
        and penalty.
    B, seed, prior, batch_size, on_failure
        As in :func:`stanflow.wbb.bootstrap.wbb`.
    args, out_dir, executor, progress
        As in :func:`optimize_draws`.

    Returns
    -------
    Results
        Root attributes: ``solver`` (``stan_optimize``) and ``problem``'s
        :meth:`~GlmProblem.describe`.

    Raises
    ------
    TypeError
        If ``problem`` is not a :class:`GlmProblem`.
    ValueError, TypeError
        For the driver's settings (:func:`stanflow.wbb.bootstrap.check_draws`),
        before anything compiles.
    """
    check_problem(problem)
    check_draws(B, seed=seed, prior=prior, batch_size=batch_size,
                on_failure=on_failure)
    model = glm_model(problem.loss, problem.penalty)
    batches = itertools.count()

    def solve(w: np.ndarray, wp: np.ndarray) -> Draws:
        folder = None if out_dir is None else Path(out_dir) / f"batch-{next(batches)}"
        return optimize_draws(
            model, problem, w, wp, args=args, out_dir=folder, executor=executor, progress=progress,
        )

    return wbb(
        solve, problem.n, B, seed=seed, prior=prior, batch_size=batch_size,
        coords={"feature": problem.features}, dims={"beta": ["feature"]}, on_failure=on_failure,
        attrs={"solver": "stan_optimize", **problem.describe()},
    )
