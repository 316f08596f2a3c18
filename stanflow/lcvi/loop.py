"""The LCVI loop: ADVI on ELBO + U alternated with the decision step.

Iteration 0 is plain VI (weight 0 on U); its Bayes decisions ``h_0`` and the
losses of its posterior-predictive draws at ``h_0`` set the utility's scale
(``M`` at a percentile, :func:`stanflow.lcvi.losses.utility_scale`) unless given.
Iteration ``t >= 1`` runs ADVI on ``ELBO + U(., h_{t-1})`` and takes ``h_t``
as the Bayes decision of the predictive of its fit, with the likelihood's noise
integrated out (:meth:`stanflow.lcvi.losses.Loss.mixture_decision`). The loop
stops when ``max |h_t - h_{t-1}| <= tol`` or after ``max_iter`` iterations.

Why the decisions settle: every ADVI run is the same deterministic function of
its data. All runs share the seed, the step size ``eta`` (adapted once, then
fixed: adaptation picks ``eta`` from a grid, which would make the map ``h ->
h'`` jump) and the number of iterations (``tol_rel_obj`` so small that ADVI
never stops early, so the random stream is consumed identically), i.e. common
random numbers for the gradient draws, the output draws and hence the
decisions. With ``grad_samples = 10`` and 10000 iterations the final iterate is
close to the optimum, and the map ``h -> h'`` is a contraction in practice
(``tests/test_lcvi_conjugate_e2e.py``, ``docs/lcvi.md``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import arviz as az
import cmdstanpy
import numpy as np
import xarray as xr

from stanflow.idata import to_inference_data
from stanflow.lcvi.losses import Loss, get_loss, utility_scale
from stanflow.lcvi.problem import Problem
from stanflow.lcvi.stan import lcvi_model, stan_data, variational
from stanflow.lcvi.utility import (
    normal_outcomes,
    outcome_base_samples,
    utility_per_theta,
)

ADVI_DEFAULTS: dict[str, Any] = {
    "eta": None,
    "iter": 10_000,
    "grad_samples": 10,
    "elbo_samples": 100,
    "eval_elbo": 1000,
    "tol_rel_obj": 1e-9,
    "draws": 1000,
}
"""ADVI settings of every run of the loop unless overridden (see the module docstring)."""


class Loop(NamedTuple):
    """What :func:`run_lcvi` did.

    Attributes
    ----------
    steps : list of Step
        ``steps[0]`` is plain VI, then one per LCVI iteration.
    scale : float
        ``M`` or ``gamma`` used.
    settled : bool
        Whether the decisions settled within ``max_iter``.
    args : dict
        The ADVI settings of every run (``eta`` included).
    eps_y : ndarray, shape (S, N)
        The fixed outcome base samples.
    """

    steps: list[Step]
    scale: float
    settled: bool
    args: dict[str, Any]
    eps_y: np.ndarray


class Step(NamedTuple):
    """One ADVI fit of the loop and what it is judged by.

    Attributes
    ----------
    fit : cmdstanpy.CmdStanVB
    decisions : ndarray, shape (N,)
        Bayes decisions of its predictive.
    elbo : float
        ``mean(log_p - weight * U_theta - log q)`` over its draws (up to the
        constants Stan drops), ``q``'s scales estimated from its draws.
    utility : float
        ``U`` at the decisions the fit was run with.
    risk : float
        Empirical risk ``mean_n l(y_n, decisions_n)`` on the problem's ``y``.
    seconds : float
        Wall time of the ADVI run.
    """

    fit: cmdstanpy.CmdStanVB
    decisions: np.ndarray
    elbo: float
    utility: float
    risk: float
    seconds: float


def empirical_risk(y: np.ndarray, h: np.ndarray, loss: Loss) -> float:
    """``mean_n l(y_n, h_n)``; ``y`` and ``h`` of one shape."""
    y, h = np.asarray(y, dtype=float), np.asarray(h, dtype=float)
    if h.shape != y.shape:
        raise ValueError(f"h (decisions) must have shape {y.shape}, got {h.shape}")
    return float(loss.value(y, h).mean())


def settled(previous: np.ndarray, current: np.ndarray, tol: float) -> bool:
    """Whether ``max |current - previous| <= tol``."""
    return float(np.max(np.abs(np.asarray(current) - previous))) <= tol


def bayes_decisions(
    problem: Problem, fit: cmdstanpy.CmdStanVB, loss: Loss
) -> np.ndarray:
    """Bayes decisions for the problem's outcomes under the predictive of ``fit``."""
    return loss.mixture_decision(problem.location(fit), problem.sd)


def lcvi(
    problem: Problem,
    loss: str | Loss,
    *,
    kind: str = "linear",
    scale: float | None = None,
    percentile: float = 90.0,
    estimator: str = "linearised",
    n_outcomes: int = 5,
    stratified: bool = True,
    max_iter: int = 10,
    tol: float = 0.05,
    algorithm: str = "meanfield",
    seed: int = 1,
    warm_start: bool = False,
    variational_args: Mapping[str, Any] | None = None,
    **loss_params: float,
) -> az.InferenceData:
    """Run plain VI then LCVI on a problem.

    Parameters
    ----------
    problem : Problem
        A model in an LCVI template with its data (:mod:`stanflow.lcvi.problem`).
    loss : str or Loss
        With ``loss_params`` (e.g. ``q=0.2``) when a name.
    kind : {"linear", "exp"}, default "linear"
    scale : float, optional
        ``M`` or ``gamma``; by default from the plain-VI losses at ``percentile``.
    percentile : float, default 90
    estimator : {"naive", "linearised"}, default "linearised"
    n_outcomes : int, default 5
        Fixed outcome base samples ``S`` per ``theta``, at least 1.
    stratified : bool, default True
        Stratified base samples (:func:`stanflow.lcvi.utility.outcome_base_samples`).
    max_iter : int, default 10
        LCVI iterations after plain VI, at least 1.
    tol : float, default 0.05
        Decisions have settled when no decision moved by more than this (units of ``y``).
    algorithm : {"meanfield", "fullrank"}, default "meanfield"
    seed : int, default 1
        Seeds the base samples and every ADVI run.
    warm_start : bool, default False
        Start each LCVI run at the previous fit's mean (all CmdStan allows: not
        its scales). Off by default: a warm-started run goes on optimising where
        the last one stopped, so its risk mixes calibration with a longer
        optimisation that plain VI did not get; cold runs from the same seed
        give plain VI and LCVI the same budget and the same random numbers.
    variational_args : mapping, optional
        Overrides of :data:`ADVI_DEFAULTS` and more keyword arguments of
        ``CmdStanModel.variational``. ``eta=None`` adapts the step size once
        (a short plain-VI run) and uses it in every run.

    Returns
    -------
    arviz.InferenceData
        The last LCVI fit's groups (posterior, sample_stats, ...) and a
        ``decisions`` group over ``iteration`` (0: plain VI) and ``decision``:
        ``h``, ``elbo``, ``utility``, ``risk``, ``seconds``; attributes
        ``problem``, ``loss``, ``loss_params``, ``utility_kind``, ``scale``,
        ``estimator``, ``settled`` and the ADVI settings (``advi_eta``, ...).
        :func:`run_lcvi` returns the fits themselves, plain VI's included.
    """
    loop = run_lcvi(
        problem,
        loss,
        kind=kind,
        scale=scale,
        percentile=percentile,
        estimator=estimator,
        n_outcomes=n_outcomes,
        stratified=stratified,
        max_iter=max_iter,
        tol=tol,
        algorithm=algorithm,
        seed=seed,
        warm_start=warm_start,
        variational_args=variational_args,
        **loss_params,
    )
    loss = get_loss(loss, **loss_params)
    return to_idata(problem, loop, loss, kind, estimator)


def run_lcvi(
    problem: Problem,
    loss: str | Loss,
    *,
    kind: str = "linear",
    scale: float | None = None,
    percentile: float = 90.0,
    estimator: str = "linearised",
    n_outcomes: int = 5,
    stratified: bool = True,
    max_iter: int = 10,
    tol: float = 0.05,
    algorithm: str = "meanfield",
    seed: int = 1,
    warm_start: bool = False,
    variational_args: Mapping[str, Any] | None = None,
    **loss_params: float,
) -> Loop:
    """The loop of :func:`lcvi`, returning its fits rather than InferenceData.

    Parameters as :func:`lcvi`.

    Returns
    -------
    Loop
    """
    loss = get_loss(loss, **loss_params)
    if isinstance(n_outcomes, bool) or int(n_outcomes) < 1 or int(max_iter) < 1:
        raise ValueError(
            f"n_outcomes and max_iter must be >= 1, got {n_outcomes!r}, {max_iter!r}"
        )
    if algorithm not in ("meanfield", "fullrank"):
        raise ValueError(
            f"algorithm must be 'meanfield' or 'fullrank', got {algorithm!r}"
        )
    if not tol > 0:
        raise ValueError(f"tol must be positive, got {tol!r}")
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
    args = {"algorithm": algorithm, "seed": seed, "require_converged": False}
    args |= ADVI_DEFAULTS | dict(variational_args or {})
    h = np.zeros(problem.n)

    def run(h, weight, scale, inits) -> Step:
        data = stan_data(problem, h, eps_y, loss, kind, scale, estimator, weight)
        start = time.perf_counter()
        fit = variational(model, data, inits, **args)
        seconds = time.perf_counter() - start
        return judge(
            problem, fit, h, eps_y, loss, kind, scale, estimator, weight, seconds
        )

    if args.get("eta") is None:  # adapt once, on plain VI, with a short run
        short = args | {"iter": args["eval_elbo"], "adapt_engaged": True}
        data = stan_data(problem, h, eps_y, loss, kind, 1.0, estimator, 0.0)
        args["eta"] = float(variational(model, data, **short).eta)
    args["adapt_engaged"] = False
    vi = run(h, 0.0, scale or 1.0, None)
    h = vi.decisions
    if scale is None:
        loc = problem.location(vi.fit)
        y_rep = loc + problem.sd * rng.standard_normal(loc.shape)
        scale = utility_scale(loss.value(y_rep, h), kind, percentile)
    steps = [vi]
    done = False
    for _ in range(int(max_iter)):
        inits = problem.inits(steps[-1].fit) if warm_start else None
        step = run(h, 1.0, scale, inits)
        steps.append(step)
        done = settled(h, step.decisions, tol)
        h = step.decisions
        if done:
            break
    return Loop(steps, float(scale), done, args, eps_y)


def judge(
    problem: Problem,
    fit: cmdstanpy.CmdStanVB,
    h: np.ndarray,
    eps_y: np.ndarray,
    loss: Loss,
    kind: str,
    scale: float,
    estimator: str,
    weight: float,
    seconds: float = float("nan"),
) -> Step:
    """ELBO, utility term, decisions and risk of one fit run at decisions ``h``."""
    u = utility_per_theta(
        normal_outcomes(problem.location(fit), problem.sd, eps_y),
        h,
        loss,
        kind,
        scale,
        estimator,
    )
    sample = fit.variational_sample_pd
    # CmdStan's log_g__ is -|eta|^2 / 2 of the standardised draw: add the
    # normal's log-normaliser, with the scales estimated from the draws.
    z = problem.unconstrained(fit)
    log_normaliser = np.sum(np.log(z.std(axis=0))) + z.shape[1] * np.log(2 * np.pi) / 2
    elbo = log_normaliser + np.mean(
        sample["log_p__"].to_numpy() - weight * u - sample["log_g__"].to_numpy()
    )
    decisions = bayes_decisions(problem, fit, loss)
    risk = empirical_risk(problem.y, decisions, loss)
    return Step(fit, decisions, float(elbo), float(u.mean()), risk, seconds)


def to_idata(
    problem: Problem, loop: Loop, loss: Loss, kind: str, estimator: str
) -> az.InferenceData:
    """InferenceData of the last fit with the loop's record as group ``decisions``."""
    steps = loop.steps
    idata = to_inference_data(steps[-1].fit, dims=dict(problem.dims))
    decisions = xr.Dataset(
        {
            "h": (("iteration", "decision"), np.stack([s.decisions for s in steps])),
            "elbo": ("iteration", [s.elbo for s in steps]),
            "utility": ("iteration", [s.utility for s in steps]),
            "risk": ("iteration", [s.risk for s in steps]),
            "seconds": ("iteration", [s.seconds for s in steps]),
        },
        coords={"iteration": np.arange(len(steps))},
        attrs={
            "problem": problem.name,
            "loss": loss.name,
            "loss_params": list(loss.params),
            "utility_kind": kind,
            "scale": loop.scale,
            "estimator": estimator,
            "settled": int(loop.settled),
        }
        | {
            f"advi_{k}": int(v) if isinstance(v, bool) else v
            for k, v in loop.args.items()
            if isinstance(v, (int, float, str))
        },
    )
    idata.add_groups({"decisions": decisions})
    return idata
