"""The LCVI loop: one ADVI optimisation of ELBO + U with decision steps inside it.

Plain VI and LCVI share one ADVI trajectory up to ``branch_iter`` iterations
(same seed, initial point, adapted ``eta`` and random numbers), through
stanflow's resumable ADVI (:mod:`stanflow.advi`):

1. **Plain VI** runs ``iter`` iterations, saving its state at ``branch_iter``.
   Its Bayes decisions ``h_0`` and the losses of its posterior-predictive draws
   at ``h_0`` set the utility's scale (``M`` or ``gamma`` at a percentile,
   :func:`stanflow.lcvi.losses.utility_scale`) unless given.
2. **LCVI** continues from the state at ``branch_iter`` with the utility term
   in the target, in blocks of ``decision_every`` iterations up to ``iter``.
   Between blocks the decision step sets ``h_b`` to the decisions of the
   block's fit: the Bayes decision of its predictive with the likelihood's
   noise integrated out (:meth:`stanflow.lcvi.losses.Loss.mixture_decision`),
   or the numerical maximiser of the estimated utility term
   (:func:`stanflow.lcvi.utility.utility_decisions`).

The decisions are thus optimised jointly with the variational parameters, as
Kusmierczyk et al. did, but each decision step goes to the exact optimum
instead of taking one gradient step. The decision steps use draws of each
ADVI state from base samples fixed for the whole loop (common random
numbers), so a decision moves only when the approximation does.

3. **Settling.** If the last decision step still moved a decision by more than
   ``tol`` at ``iter``, LCVI goes on block by block until none does or it
   reaches ``max_iter`` (by default ``iter``: then it warns); plain VI is then
   continued as far (the ``baseline``).

Both methods get the same budget and the same random numbers until the
branch, so their risks are paired.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import arviz as az
import cmdstanpy
import numpy as np
import xarray as xr

from stanflow.advi import AdviState, run_advi
from stanflow.idata import to_inference_data
from stanflow.lcvi.losses import Loss, utility_scale
from stanflow.lcvi.numeric_decisions import resolve_loss
from stanflow.lcvi.problem import Problem
from stanflow.lcvi.stan import lcvi_model, stan_data
from stanflow.lcvi.utility import (
    normal_outcomes,
    outcome_base_samples,
    utility_at_locations,
    utility_decisions,
)
from stanflow.runs.arguments import check_args

ADVI_DEFAULTS: dict[str, Any] = {
    "iter": 10_000,
    "grad_samples": 10,
    "elbo_samples": 100,
    "eval_elbo": 1000,
    "tol_rel_obj": 1e-9,
    "output_samples": 1000,
}
"""ADVI settings (CmdStan's names) unless overridden. ``tol_rel_obj`` is so
small that ADVI never stops early: every run does its ``iter`` iterations."""

DECISIONS = ("bayes", "utility")


class Step(NamedTuple):
    """One fit of the loop and what it is judged by.

    Attributes
    ----------
    fit : cmdstanpy.CmdStanVB
    state : AdviState
        ADVI's state at the fit (its iteration, the approximation's parameters).
    decisions : ndarray, shape (N,)
        Decisions taken from this fit (the decision step).
    elbo : float
        ``E_q[target] - weight U + entropy(q)``: the model's target (its
        ``log_p__``, up to the constants Stan drops, holding ``weight U``)
        averaged over the fit's draws, ``U`` over the loop's draws of the
        state, the entropy exact. A block that was not the last writes only
        ``elbo_samples`` draws (as many as CmdStan estimates its ELBO from);
        the last writes ``output_samples``.
    utility : float
        ``U`` at the decisions the fit was run with (those of the previous
        step; plain VI's own for plain VI).
    risk : float
        Empirical risk ``mean_n l(y_n, decisions_n)`` on the problem's ``y``.
    seconds : float
        Wall time of the ADVI runs that led to this fit from the previous one.
    """

    fit: cmdstanpy.CmdStanVB
    state: AdviState
    decisions: np.ndarray
    elbo: float
    utility: float
    risk: float
    seconds: float


class PlainVI(NamedTuple):
    """Plain VI's part of the loop, which LCVI branches off.

    Pass it as ``vi`` to :func:`run_lcvi` to calibrate several losses on one
    plain-VI run (the states are files: the loop's ``output_dir`` must outlive
    the calls).

    Attributes
    ----------
    fit : cmdstanpy.CmdStanVB
        Plain VI after ``iter`` iterations.
    branch, end : AdviState
        Its states at ``branch_iter`` and at ``iter``.
    seconds : float
        Wall time of its ADVI runs.
    """

    fit: cmdstanpy.CmdStanVB
    branch: AdviState
    end: AdviState
    seconds: float


class Loop(NamedTuple):
    """What :func:`run_lcvi` did.

    Attributes
    ----------
    vi : PlainVI
    steps : list of Step
        ``steps[0]`` is plain VI after ``iter`` iterations (its decisions are
        ``h_0``, its losses set the scale), then one step per LCVI block;
        ``steps[-1]`` is LCVI's result.
    baseline : Step
        Plain VI after as many iterations as LCVI's result: what LCVI is
        compared with (``steps[0]`` unless LCVI went on past ``iter``).
    scale : float
        ``M`` or ``gamma`` used.
    settled : bool
        Whether the last decision step moved no decision by more than ``tol``.
    args : dict
        The ADVI settings of every run, ``eta`` (adapted or given) included.
    eps_y : ndarray, shape (S, N)
        The fixed outcome base samples.
    eps_theta : ndarray, shape (T, D)
        The fixed base samples of the draws of every state that the decisions,
        ``U`` and the risks are computed from
        (:meth:`stanflow.advi.AdviState.draws`).
    branch_iter : int
        Iterations shared by plain VI and LCVI.
    loss : Loss
    kind, estimator, decision : str
        The utility, its estimator and the decision step used.
    """

    vi: PlainVI
    steps: list[Step]
    baseline: Step
    scale: float
    settled: bool
    args: dict[str, Any]
    eps_y: np.ndarray
    eps_theta: np.ndarray
    branch_iter: int
    loss: Loss
    kind: str
    estimator: str
    decision: str


def empirical_risk(y: np.ndarray, h: np.ndarray, loss: Loss) -> float:
    """``mean_n l(y_n, h_n)``; ``y`` and ``h`` of one shape."""
    y, h = np.asarray(y, dtype=float), np.asarray(h, dtype=float)
    if h.shape != y.shape:
        raise ValueError(f"h (decisions) must have shape {y.shape}, got {h.shape}")
    return float(loss.value(y, h).mean())


def settled(previous: np.ndarray, current: np.ndarray, tol: float) -> bool:
    """Whether ``max |current - previous| <= tol``."""
    return float(np.max(np.abs(np.asarray(current) - previous))) <= tol


def bayes_decisions(problem: Problem, z: np.ndarray, loss: Loss) -> np.ndarray:
    """Bayes decisions for the problem's outcomes under the predictive of draws ``z``.

    ``z`` (T, D) are draws of ADVI's unconstrained parameters; the likelihood's
    noise is integrated out (:meth:`~stanflow.lcvi.losses.Loss.mixture_decision`).
    """
    return loss.mixture_decision(problem.location(z), problem.sd)


def lcvi(problem: Problem, loss: str | Path | Loss, **options: Any) -> az.InferenceData:
    """Run plain VI and LCVI on a problem; the result as InferenceData.

    Parameters
    ----------
    problem : Problem
        A model in an LCVI template with its data (:mod:`stanflow.lcvi.problem`).
    loss : str, path or Loss
        As for :func:`run_lcvi`.
    **options
        The keyword arguments of :func:`run_lcvi`, loss parameters
        (``q=0.2``) included.

    Returns
    -------
    arviz.InferenceData
        LCVI's last fit (posterior, sample_stats, ...) and a ``decisions``
        group over ``iteration`` (0: plain VI, then one per LCVI block) and
        ``decision``: ``h``, ``elbo``, ``utility``, ``risk``, ``seconds``,
        ``advi_iteration``, and plain VI at LCVI's budget: ``baseline_h``,
        ``baseline_risk``, ``baseline_advi_iteration``; attributes ``problem``, ``loss``, ``loss_params``,
        ``utility_kind``, ``scale``, ``estimator``, ``decision_rule``,
        ``settled``, ``branch_iter`` and the ADVI settings (``advi_eta``, ...).
        :func:`run_lcvi` returns the fits themselves, plain VI's included.
    """
    return to_idata(problem, run_lcvi(problem, loss, **options))


def run_lcvi(
    problem: Problem,
    loss: str | Path | Loss,
    *,
    kind: str = "linear",
    scale: float | None = None,
    percentile: float = 90.0,
    estimator: str = "linearised",
    n_outcomes: int = 5,
    stratified: bool = True,
    decision: str = "bayes",
    n_draws: int = 1000,
    branch_iter: int | None = None,
    decision_every: int = 1000,
    tol: float = 0.05,
    max_iter: int | None = None,
    algorithm: str = "meanfield",
    seed: int = 1,
    advi_args: Mapping[str, Any] | None = None,
    output_dir: str | Path | None = None,
    vi: PlainVI | None = None,
    **loss_params: float,
) -> Loop:
    """Plain VI and LCVI on one ADVI trajectory (see the module docstring).

    Parameters
    ----------
    problem : Problem
        A model in an LCVI template with its data (:mod:`stanflow.lcvi.problem`).
    loss : str, path or Loss
        A shipped loss's name with ``loss_params`` (e.g. ``q=0.2``); a
        :class:`~stanflow.lcvi.losses.Loss`; or a Stan file of your own
        (a path, or a string ending in ``.stanfunctions``) with no Python
        rule: its decisions are then numerical
        (:func:`stanflow.lcvi.numeric_decisions.stan_loss`) and its
        ``loss_params`` the keyword values in the order given.
    kind : {"linear", "exp"}, default "linear"
        Utility ``M - l`` or ``exp(-gamma l)``.
    scale : float, optional
        ``M`` or ``gamma``; by default from the plain-VI losses at ``percentile``.
    percentile : float, default 90
    estimator : {"naive", "linearised"}, default "linearised"
    n_outcomes : int, default 5
        Fixed outcome base samples ``S`` per ``theta``, at least 1.
    stratified : bool, default True
        Stratified base samples (:func:`stanflow.lcvi.utility.outcome_base_samples`).
    decision : {"bayes", "utility"}, default "bayes"
        The decision step: the Bayes decision of the fit's predictive, or the
        maximiser of the estimated utility term over the fit's draws and the
        base samples. With the linearised estimator and many outcome samples
        the two coincide.
    n_draws : int, default 1000
        Draws of each ADVI state that the decisions, ``U`` and the recorded
        risks are computed from, from base samples fixed for the whole loop
        (common random numbers: a decision moves only when the approximation
        does).
    branch_iter : int, optional
        ADVI iterations shared by plain VI and LCVI; by default half of
        ``advi_args["iter"]``. In ``[1, iter)``.
    decision_every : int, default 1000
        LCVI iterations between decision steps, at least 1.
    tol : float, default 0.05
        Decisions have settled when the last decision step moved none by more
        than this (units of ``y``).
    max_iter : int, optional
        If the decisions have not settled after ``iter`` iterations, LCVI goes
        on block by block until they do or it reaches ``max_iter``; plain VI is
        then continued as far, so that both get the same budget. By default
        ``iter``: the budget is fixed, and a loop that ends unsettled warns.
    algorithm : {"meanfield", "fullrank"}, default "meanfield"
    seed : int, default 1
        Seeds the base samples and the ADVI trajectory.
    advi_args : mapping, optional
        Overrides of :data:`ADVI_DEFAULTS` and more of CmdStan's
        ``variational`` arguments (``eta``, ``adapt.iter``, ``sig_figs``).
        Without ``eta``, plain VI's run adapts it as CmdStan does.
    output_dir : path, optional
        Folder in which each call makes a subfolder ``lcvi-<loss>-*`` for its
        runs' files (CSV, states, data, consoles); by default a temporary
        folder removed at the end.
    vi : PlainVI, optional
        Plain VI of an earlier loop (``loop.vi``) on the same problem, seed and
        ADVI settings, instead of running it again: its states must still
        exist, and its ``branch_iter``, ``iter`` and algorithm must match.

    Returns
    -------
    Loop
    """
    loss = resolve_loss(loss, **loss_params)
    args = _advi_args(algorithm, advi_args)
    n_iter = args["iter"]
    branch = n_iter // 2 if branch_iter is None else branch_iter
    limit = n_iter if max_iter is None else max_iter
    _check_options(
        n_outcomes, n_draws, decision, branch, n_iter, limit, decision_every, tol
    )
    # kind, scale, estimator and percentile are checked before any run
    stan_data(
        problem,
        np.zeros(problem.n),
        np.zeros((1, problem.n)),
        loss,
        kind,
        1.0 if scale is None else scale,
        estimator,
    )
    if not 0 < float(percentile) <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile!r}")
    model = lcvi_model(loss, problem.template)
    rng = np.random.default_rng(seed)
    eps_y = outcome_base_samples(int(n_outcomes), problem.n, rng, stratified)

    with tempfile.TemporaryDirectory(prefix="stanflow-lcvi-") as tmp:
        if output_dir is None:
            folder = Path(tmp)
        else:  # a folder of its own per call: loops sharing a plain VI keep their files
            Path(output_dir).mkdir(parents=True, exist_ok=True)
            folder = Path(tempfile.mkdtemp(prefix=f"lcvi-{loss.name}-", dir=output_dir))

        def advi(name, weight, h, value, iterations, resume=None, draws=None):
            run_args = args | {"iter": iterations}
            if draws is not None:
                run_args["output_samples"] = draws
            if resume is not None:  # eta and adaptation are the state's
                run_args = {
                    k: v
                    for k, v in run_args.items()
                    if k != "eta" and not k.startswith("adapt.")
                }
            data = stan_data(problem, h, eps_y, loss, kind, value, estimator, weight)
            start = time.perf_counter()
            fit, state = run_advi(
                model, data, folder, name, seed=seed, args=run_args, resume=resume
            )
            return fit, state, time.perf_counter() - start

        if vi is None:
            h = np.zeros(problem.n)
            # only the state at the branch is used, not its draws
            _, fork, seconds = advi("vi-branch", 0.0, h, 1.0, branch, draws=1)
            fit, end, more = advi("vi", 0.0, h, 1.0, n_iter - branch, fork)
            vi = PlainVI(fit, fork, end, seconds + more)
        else:
            _check_vi(vi, algorithm, branch, n_iter)
        fit, fork, end = vi.fit, vi.branch, vi.end
        args["eta"] = end.eta
        eps_theta = rng.standard_normal((int(n_draws), end.mu.size))
        h = bayes_decisions(problem, end.draws(eps_theta), loss)
        if scale is None:
            loc = problem.location(end.draws(eps_theta))
            y_rep = loc + problem.sd * rng.standard_normal(loc.shape)
            scale = utility_scale(loss.value(y_rep, h), kind, percentile)
        judge = _Judge(
            problem, eps_y, eps_theta, loss, kind, scale, estimator, decision
        )
        steps = [judge(fit, end, h, h, 0.0, vi.seconds)]
        # a block that may not be the last writes only the draws of its ELBO
        light = min(args["output_samples"], args["elbo_samples"])
        state, done, block = fork, False, 0
        while state.iteration < n_iter or (not done and state.iteration < limit):
            block += 1
            stop = n_iter if state.iteration < n_iter else limit
            iterations = min(decision_every, stop - state.iteration)
            start, h_run = state, h
            draws = None if start.iteration + iterations == limit else light
            fit, state, seconds = advi(
                f"lcvi-{block:03d}", 1.0, h_run, scale, iterations, start, draws
            )
            step = judge(fit, state, h_run, None, 1.0, seconds)
            steps.append(step)
            done = settled(h_run, step.decisions, tol)
            h = step.decisions
        if draws is not None and light < args["output_samples"]:
            # settled before max_iter: the same block again, for all the draws
            fit, again, more = advi(
                f"lcvi-{block:03d}-draws", 1.0, h_run, scale, iterations, start
            )
            _check_same_state(state, again)
            steps[-1] = judge(fit, again, h_run, None, 1.0, seconds + more)
        if not done:
            moved = float(np.max(np.abs(steps[-1].decisions - steps[-2].decisions)))
            advice = (
                f"it reached max_iter = {limit}"
                if limit > n_iter
                else "give max_iter > iter to let it go on"
            )
            warnings.warn(
                f"LCVI's decisions still moved by up to {moved:.3g} > tol = {tol:g} "
                f"in the last block (iteration {state.iteration}): {advice}, or "
                "use a larger tol",
                RuntimeWarning,
                stacklevel=2,
            )
        baseline = steps[0]
        if state.iteration > end.iteration:  # plain VI gets the same budget
            fit, longer, seconds = advi(
                "vi-longer",
                0.0,
                np.zeros(problem.n),
                1.0,
                state.iteration - end.iteration,
                end,
            )
            h_vi = bayes_decisions(problem, longer.draws(eps_theta), loss)
            baseline = judge(fit, longer, h_vi, h_vi, 0.0, seconds)
    return Loop(
        vi,
        steps,
        baseline,
        float(scale),
        done,
        args,
        eps_y,
        eps_theta,
        branch,
        loss,
        kind,
        estimator,
        decision,
    )


def _advi_args(algorithm: str, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    if algorithm not in ("meanfield", "fullrank"):
        raise ValueError(
            f"algorithm must be 'meanfield' or 'fullrank', got {algorithm!r}"
        )
    for key in ("algorithm", "tol_rel_obj"):
        if key in (overrides or {}):
            raise ValueError(
                f"advi_args[{key!r}]: set by the loop (its runs have fixed budgets), "
                "not an override"
            )
    # CmdStan's names and ranges, checked before any run
    return check_args(
        "variational", {"algorithm": algorithm} | ADVI_DEFAULTS | dict(overrides or {})
    )


def _check_vi(vi: PlainVI, algorithm: str, branch: int, n_iter: int) -> None:
    if (vi.branch.iteration, vi.end.iteration) != (branch, n_iter):
        raise ValueError(
            f"vi: plain VI ran to {vi.branch.iteration} and {vi.end.iteration} "
            f"iterations, not branch_iter={branch} and iter={n_iter}"
        )
    if vi.end.algorithm != algorithm:
        raise ValueError(f"vi: plain VI is {vi.end.algorithm!r}, not {algorithm!r}")
    for state in (vi.branch, vi.end):
        if not state.path.is_file():
            raise ValueError(f"vi: its state {state.path} no longer exists")


def _check_same_state(first: AdviState, again: AdviState) -> None:
    same = np.array_equal(first.mu, again.mu) and np.array_equal(
        first.scale, again.scale
    )
    if not same:  # resumed ADVI is deterministic: the driver broke its contract
        raise RuntimeError(
            f"ADVI resumed twice from one state ended in different states "
            f"({first.path}, {again.path})"
        )


def _check_options(
    n_outcomes: int,
    n_draws: int,
    decision: str,
    branch: int,
    n_iter: int,
    limit: int,
    decision_every: int,
    tol: float,
) -> None:
    if isinstance(n_outcomes, bool) or int(n_outcomes) < 1:
        raise ValueError(f"n_outcomes must be >= 1, got {n_outcomes!r}")
    if isinstance(n_draws, bool) or int(n_draws) < 1:
        raise ValueError(f"n_draws must be >= 1, got {n_draws!r}")
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {list(DECISIONS)}, got {decision!r}")
    if not isinstance(n_iter, int) or isinstance(n_iter, bool) or n_iter < 2:
        raise ValueError(f"advi_args['iter'] must be an integer >= 2, got {n_iter!r}")
    if isinstance(branch, bool) or not 1 <= int(branch) < n_iter:
        raise ValueError(
            f"branch_iter must be in [1, iter) = [1, {n_iter}), got {branch!r}"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < n_iter:
        raise ValueError(
            f"max_iter must be an integer >= iter = {n_iter}, got {limit!r}"
        )
    if isinstance(decision_every, bool) or int(decision_every) < 1:
        raise ValueError(f"decision_every must be >= 1, got {decision_every!r}")
    if not tol > 0:
        raise ValueError(f"tol must be positive, got {tol!r}")


class _Judge:
    """Decisions, ELBO, utility term and risk of a fit (one :class:`Step`)."""

    def __init__(
        self,
        problem: Problem,
        eps_y: np.ndarray,
        eps_theta: np.ndarray,
        loss: Loss,
        kind: str,
        scale: float,
        estimator: str,
        decision: str,
    ) -> None:
        self.problem, self.eps_y, self.eps_theta = problem, eps_y, eps_theta
        self.loss, self.kind, self.scale = loss, kind, scale
        self.estimator, self.decision = estimator, decision

    def __call__(
        self,
        fit: cmdstanpy.CmdStanVB,
        state: AdviState,
        h: np.ndarray,
        decisions: np.ndarray | None,
        weight: float,
        seconds: float,
    ) -> Step:
        """Judge ``fit`` (at ``state``), run with decisions ``h`` and utility weight ``weight``.

        ``decisions`` are the fit's own when already known (plain VI's
        ``h_0``), else taken by the decision step.
        """
        problem = self.problem
        loc = problem.location(state.draws(self.eps_theta))
        u = utility_at_locations(
            loc,
            problem.sd,
            self.eps_y,
            h,
            self.loss,
            self.kind,
            self.scale,
            self.estimator,
        )
        if decisions is None:
            decisions = (
                self.loss.mixture_decision(loc, problem.sd)
                if self.decision == "bayes"
                else utility_decisions(
                    normal_outcomes(loc, problem.sd, self.eps_y),
                    self.loss,
                    self.kind,
                    self.scale,
                    self.estimator,
                )
            )
        # log_p__ is the target, so it holds weight * U: take it out again
        log_p = np.mean(fit.variational_sample_pd["log_p__"].to_numpy())
        elbo = log_p + state.entropy() - (weight * np.mean(u) if weight else 0.0)
        risk = empirical_risk(problem.y, decisions, self.loss)
        return Step(fit, state, decisions, float(elbo), float(u.mean()), risk, seconds)


def to_idata(problem: Problem, loop: Loop) -> az.InferenceData:
    """InferenceData of LCVI's last fit with the loop's record as group ``decisions``."""
    steps = loop.steps
    idata = to_inference_data(steps[-1].fit, dims=dict(problem.dims))
    decisions = xr.Dataset(
        {
            "h": (("iteration", "decision"), np.stack([s.decisions for s in steps])),
            "elbo": ("iteration", [s.elbo for s in steps]),
            "utility": ("iteration", [s.utility for s in steps]),
            "risk": ("iteration", [s.risk for s in steps]),
            "seconds": ("iteration", [s.seconds for s in steps]),
            "advi_iteration": ("iteration", [s.state.iteration for s in steps]),
            "baseline_h": ("decision", loop.baseline.decisions),
            "baseline_risk": loop.baseline.risk,
            "baseline_advi_iteration": loop.baseline.state.iteration,
        },
        coords={"iteration": np.arange(len(steps))},
        attrs={
            "problem": problem.name,
            "loss": loop.loss.name,
            "loss_params": list(loop.loss.params),
            "utility_kind": loop.kind,
            "scale": loop.scale,
            "estimator": loop.estimator,
            "decision_rule": loop.decision,
            "settled": int(loop.settled),
            "branch_iter": loop.branch_iter,
        }
        | {
            f"advi_{k.replace('.', '_')}": int(v) if isinstance(v, bool) else v
            for k, v in loop.args.items()
            if isinstance(v, (int, float, str))
        },
    )
    idata.add_groups({"decisions": decisions})
    return idata
