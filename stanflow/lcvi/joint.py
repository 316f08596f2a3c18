"""The paper's LCVI optimisation: decisions and variational parameters by joint gradient steps.

Kusmierczyk, Sakaya and Klami (2019) maximise ``ELBO(lambda) + U(lambda, h)``
with Adam over the variational parameters ``lambda`` and the decisions ``h``
together, every step with fresh draws of ``theta`` and fresh outcome samples
(double reparameterisation). This module does that in process, beside the
loop of :mod:`stanflow.lcvi.loop` (CmdStan's ADVI with fixed outcome samples
and exact decision steps):

- the program's evaluation form (:class:`stanflow.lcvi.program.LcviModel`)
  has the decisions ``lcvi_h`` and the outcome base samples ``lcvi_z`` and
  ``lcvi_u`` as parameters, so one gradient call at ``(theta_t, z_t, u_t, h)``
  gives ``d/dtheta`` and ``d/dh`` of ``log p(theta, y) + weight * U_t``; the
  components of the base samples are not used;
- a mean-field normal ``q = N(mu, diag(exp(omega))^2)`` on the unconstrained
  parameters, its reparameterised gradient from ``T`` draws
  ``theta_t = mu + exp(omega) eta_t``: ``grad_mu = mean_t g_t``,
  ``grad_omega = mean_t g_t eta_t exp(omega) + 1`` (the entropy's), and
  ``grad_h = mean_t d/dh``; all ``T`` rows in one batched call
  (:func:`stanflow.models.log_density_gradient_rows`);
- Adam (ascent) on ``(mu, omega, h)`` with a constant learning rate.

``outcomes="fresh"`` draws ``eps_y`` afresh for every row and step (the
paper); ``outcomes="fixed"`` uses one stratified antithetic ``eps_y`` for all
of them, as the loop does, so the cost of fixed outcome samples can be
measured with the optimiser held equal: ``theta`` and the outcomes have random
streams of their own, so from one seed both modes take the same draws of
``theta`` and differ only in the outcomes. Plain VI is the same optimisation
with weight 0 (``h`` then gets no gradient; with either mode it is the same).
:func:`run_lcvi_joint` runs both from one initial point; what it returns is
:class:`~stanflow.lcvi.joint_optimiser.JointFit` and :class:`JointLoop`. The
optimiser itself is :mod:`stanflow.lcvi.joint_optimiser`.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.lcvi.joint_optimiser import RECORD, JointFit, joint_model, optimise
from stanflow.lcvi.numeric_decisions import resolve_loss
from stanflow.lcvi.predictive import Predictive
from stanflow.lcvi.program import LcviProgram
from stanflow.lcvi.utility import Utility, utility_argument
from stanflow.losses import BoundLoss
from stanflow.optimiser_state import digest
from stanflow.validation import check_int

OUTCOMES = ("fresh", "fixed")
"""Outcome base samples: drawn afresh at every step (the paper's), or fixed (the loop's)."""

PARTS = ("both", "vi", "lcvi")
"""What :func:`run_lcvi_joint` optimises: plain VI and LCVI, or one of them."""


class JointLoop(NamedTuple):
    """What :func:`run_lcvi_joint` did: plain VI and LCVI by the same optimiser.

    Attributes
    ----------
    vi, lcvi : JointFit or None
        Weight 0 and weight 1, from the same initial point and seed, with the
        same number of steps; ``None`` for the part not run (``parts``).
    utility : Utility
        The utility term used, its ``scale`` (``M`` or ``gamma``) set.
    eps_theta : ndarray, shape (n_draws, D)
        The base samples of the draws that decisions and risks are computed from.
    loss : BoundLoss
    outcomes : str
    settings : dict
        ``iter``, ``lr``, ``grad_samples``, ``average``, ``seed``.
    """

    vi: JointFit | None
    lcvi: JointFit | None
    utility: Utility
    eps_theta: np.ndarray
    loss: BoundLoss
    outcomes: str
    settings: dict[str, float]


def run_lcvi_joint(
    program: LcviProgram,
    loss: str | Path | BoundLoss,
    *,
    utility: Utility | None = None,
    outcomes: str = "fresh",
    grad_samples: int = 10,
    iter: int = 10_000,
    lr: float = 0.05,
    average: float = 0.0,
    n_draws: int = 1000,
    record_every: int = 1000,
    seed: int = 1,
    parts: str = "both",
    threads: int | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 1000,
    **loss_params: float,
) -> JointLoop:
    """Plain VI and LCVI by the paper's joint gradient optimisation (module docstring).

    Both start from the same point (means uniform in ``(-2, 2)`` as CmdStan's
    ADVI, log standard deviations 0) and run ``iter`` Adam steps; plain VI
    with weight 0, LCVI with weight 1 and its decisions starting at plain VI's
    initial Bayes decisions. The scale comes from plain VI's end state
    as in :func:`stanflow.lcvi.run_lcvi` unless given. Each part has its own
    random numbers drawn from ``seed``, so with the scale given a part run
    alone (``parts``) is the same as in a run of both, to the last bit: the
    parts of a long comparison can run separately and in parallel.

    Parameters
    ----------
    program : LcviProgram
        An LCVI program with its data (:mod:`stanflow.lcvi.program`).
    loss : str, path or BoundLoss
        As for :func:`stanflow.lcvi.run_lcvi`, with ``loss_params``.
    utility : Utility, optional
        The utility term, as for :func:`stanflow.lcvi.run_lcvi` (default
        ``Utility()``); its ``n_outcomes`` outcome samples ``S`` go with every
        draw of ``theta``, and its ``scale``, unless given, comes from plain
        VI's losses at its ``percentile``.
    outcomes : {"fresh", "fixed"}, default "fresh"
        Fresh outcome base samples at every step and for every draw (the
        paper's double reparameterisation), or one fixed stratified antithetic
        set (the loop's).
    grad_samples : int, default 10
        Draws of ``theta`` per step, at least 1.
    iter : int, default 10000
        Adam steps of each optimisation, at least 1.
    lr : float, default 0.05
        Adam's learning rate (the authors' for eight schools), positive.
    average : float, default 0
        In ``[0, 1)``: the end state is the mean of the iterates of this last
        fraction of the steps (Polyak-Ruppert averaging, which removes most of
        the jitter a constant learning rate leaves); 0 is the last iterate,
        as the paper.
    n_draws : int, default 1000
        Draws of each recorded state for its Bayes decisions, at least 1.
    record_every : int, default 1000
        Steps between records, at least 1.
    seed : int, default 1
    parts : {"both", "vi", "lcvi"}, default "both"
        Optimise plain VI and LCVI, or only one of them (``"lcvi"`` needs
        ``utility.scale``); the part not run is ``None`` in the result.
    threads : int, optional
        Threads of each batched gradient call (default: one per core, at
        least 32 rows each).
    checkpoint : path-like, optional
        A folder where each part saves its optimiser's state every
        ``checkpoint_every`` steps and at its end (``vi.npz``, ``lcvi.npz``;
        :func:`optimise`): a rerun with the same arguments continues from them
        with exactly the numbers of an uninterrupted run. Remove it once the
        result is kept.
    checkpoint_every : int, default 1000

    Returns
    -------
    JointLoop
    """
    loss = resolve_loss(loss, **loss_params)
    utility = utility_argument(utility)  # checked itself when made
    if outcomes not in OUTCOMES:
        raise ValueError(f"outcomes must be one of {list(OUTCOMES)}, got {outcomes!r}")
    if parts not in PARTS:
        raise ValueError(f"parts must be one of {list(PARTS)}, got {parts!r}")
    if parts == "lcvi":
        utility.given_scale("LCVI alone (parts='lcvi')")
    for name, value in (
        ("grad_samples", grad_samples),
        ("iter", iter),
        ("n_draws", n_draws),
        ("record_every", record_every),
        ("checkpoint_every", checkpoint_every),
    ):
        check_int(value, name)
    if not (isinstance(lr, (int, float)) and np.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if not (isinstance(average, (int, float)) and 0 <= average < 1):
        raise ValueError(f"average must be in [0, 1), got {average!r}")

    rng = np.random.default_rng(seed)
    # weight 0: the scale does not enter plain VI's target
    model = program.bind(loss)  # compiled and checked before any step
    vi_model = joint_model(model, replace(utility, scale=utility.scale or 1.0), 0.0)
    D = model.dim
    mu0 = rng.uniform(-2, 2, D)
    eps_theta = rng.standard_normal((n_draws, D))
    h0 = Predictive(model, mu0 + eps_theta).bayes_decisions()
    common: dict[str, Any] = {
        "iterations": iter,
        "lr": lr,
        "grad_samples": grad_samples,
        "outcomes": outcomes,
        "average": average,
        "eps_theta": eps_theta,
        "record_every": record_every,
        "threads": threads,
    }
    vi_seed, lcvi_seed = rng.integers(2**63, size=2)

    kind, estimator = utility.kind, utility.estimator

    def states(part: str, weight: float, scale: float) -> dict:
        if checkpoint is None:
            return {}
        identity = {"problem": program.name, "data": digest(program.data),
                    "loss": [loss.name, [float(p) for p in loss.params]], "kind": kind,
                    "estimator": estimator, "weight": weight, "scale": scale}
        return {"checkpoint": Path(checkpoint) / f"{part}.npz",
                "checkpoint_every": checkpoint_every, "signature": identity}

    vi = fit = None
    if parts != "lcvi":
        vi = optimise(
            vi_model, mu0, h0, rng=np.random.default_rng(vi_seed), **common,
            **states("vi", 0.0, 1.0)
        )
    if utility.scale is None:
        assert vi is not None  # parts="lcvi" needs the scale (checked above)
        y_rep = Predictive(model, vi.draws(eps_theta)).one_outcome(rng)
        utility = utility.scaled(loss.value(y_rep, vi.decisions))
    if parts != "vi":
        lcvi_model = joint_model(model, utility, 1.0)
        fit = optimise(
            lcvi_model, mu0, h0, rng=np.random.default_rng(lcvi_seed), **common,
            **states("lcvi", 1.0, utility.given_scale("LCVI"))
        )
    settings = {"iter": iter, "lr": lr, "grad_samples": grad_samples, "average": average,
                "seed": seed}
    return JointLoop(vi, fit, utility, eps_theta, loss, outcomes, settings)


def lcvi_joint(program: LcviProgram, loss: str | Path | BoundLoss, **options: Any) -> Results:
    """:func:`run_lcvi_joint`, its result in the installed ArviZ's format.

    See :func:`joint_to_idata`.
    """
    return joint_to_idata(program, run_lcvi_joint(program, loss, **options))


def joint_to_idata(program: LcviProgram, joint: JointLoop) -> Results:
    """The joint optimisation's result as the installed ArviZ's results, like the loop's.

    Parameters
    ----------
    program : LcviProgram
        The program it ran on.
    joint : JointLoop

    Returns
    -------
    Results
        ``posterior``: draws of the end state of LCVI (of plain VI if only it
        ran) from ``joint.eps_theta``, the parameters as declared (one chain);
        ``decisions`` over ``part`` (``vi``, ``lcvi``) and ``decision``:
        ``h``, ``decisions`` (Bayes decisions of the end state), ``risk``,
        ``risk_h``, ``seconds``, and the record over ``record``
        (``record_iteration``, ``record_objective``, ``record_risk``,
        ``record_risk_h``); attributes ``problem``, ``loss``, ``loss_params``,
        ``utility_kind``, ``scale``, ``estimator``, ``n_outcomes`` (of
        ``joint.utility``), ``outcomes`` and the settings.
    """
    parts = {name: fit for name, fit in (("vi", joint.vi), ("lcvi", joint.lcvi)) if fit}
    model = program.bind(joint.loss)
    last = parts.get("lcvi", parts.get("vi"))
    if last is None:
        raise ValueError("joint: neither part ran (vi and lcvi are None)")
    draws = model.constrain(last.draws(joint.eps_theta))
    posterior = xr.Dataset(
        {name: (("chain", "draw", *[f"{name}_dim_{i}" for i in range(v.ndim - 1)]), v[None])
         for name, v in draws.items()},
        coords={"chain": [0], "draw": np.arange(joint.eps_theta.shape[0])},
    )
    fits = list(parts.values())
    decisions = xr.Dataset(
        {
            "h": (("part", "decision"), np.stack([f.h for f in fits])),
            "decisions": (("part", "decision"), np.stack([f.decisions for f in fits])),
            "risk": ("part", [f.risk for f in fits]),
            "risk_h": ("part", [f.risk_h for f in fits]),
            "seconds": ("part", [f.seconds for f in fits]),
        }
        | {
            f"record_{key}": (("part", "record"), np.stack([f.record[key] for f in fits]))
            for key in RECORD
        },
        coords={"part": list(parts)},
        attrs={
            "problem": program.name,
            "loss": joint.loss.name,
            "loss_params": list(joint.loss.params),
            "utility_kind": joint.utility.kind,
            "scale": joint.utility.scale,
            "estimator": joint.utility.estimator,
            "n_outcomes": float(joint.utility.n_outcomes),
            "outcomes": joint.outcomes,
        }
        | {k: float(v) for k, v in joint.settings.items()},
    )
    return arviz_compat.build({"posterior": posterior, "decisions": decisions})
