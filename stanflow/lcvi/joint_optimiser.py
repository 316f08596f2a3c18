"""The optimiser of the paper's LCVI: Adam on a mean-field normal and the decisions, in process.

One optimisation (:func:`optimise`) of :mod:`stanflow.lcvi.joint`: the
program's evaluation form (:func:`joint_model`) gives in one batched gradient
call (:func:`stanflow.models.log_density_gradient_rows`) ``d/dtheta`` and
``d/dh`` of ``log p(theta, y) + weight * U_t`` at ``T`` draws ``theta_t = mu +
exp(omega) eta_t``; the reparameterised gradient of the mean-field normal
``q = N(mu, diag(exp(omega))^2)`` is ``grad_mu = mean_t g_t``, ``grad_omega =
mean_t g_t eta_t exp(omega) + 1`` (the entropy's) and ``grad_h = mean_t d/dh``,
and Adam (ascent) with a constant learning rate steps ``(mu, omega, h)``. The
state can be saved and resumed bit for bit (:mod:`stanflow.optimiser_state`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, NamedTuple, cast

import bridgestan
import numpy as np

from stanflow.adam import adam_update
from stanflow.lcvi.decision_step import empirical_risk
from stanflow.lcvi.predictive import Predictive
from stanflow.lcvi.program import LcviModel
from stanflow.lcvi.utility import Utility, outcome_base_samples, uniform_base_samples
from stanflow.models import log_density_gradient_rows
from stanflow.optimiser_state import (
    OptimiserState,
    check_every,
    digest,
    load_state,
    save_state,
)

ADAM_BETAS = (0.9, 0.999)
"""Adam's decay rates of the first and second moments (Kingma and Ba's, PyTorch's defaults)."""

ADAM_EPS = 1e-8
"""Adam's guard against division by zero."""

RECORD = ("iteration", "objective", "risk", "risk_h")
"""What :func:`optimise` records every ``record_every`` steps."""


class JointFit(NamedTuple):
    """One joint optimisation's end state and record.

    Attributes
    ----------
    mu, omega : ndarray, shape (D,)
        The mean-field normal on the unconstrained parameters: means and log
        standard deviations.
    h : ndarray, shape (N,)
        The optimised decisions (for plain VI, weight 0: their start, unmoved).
    decisions : ndarray, shape (N,)
        Bayes decisions of the end state's predictive (the loop's
        :func:`~stanflow.lcvi.decision_step.predictive_decisions` over draws
        from ``eps_theta``).
    risk : float
        Empirical risk on the problem's ``y`` at ``decisions``.
    risk_h : float
        Empirical risk on the problem's ``y`` at ``h``.
    record : dict of ndarray
        Every ``record_every`` steps and at the end: ``iteration``,
        ``objective`` (mean log density of the step's draws, ``weight U``
        included, plus the entropy of the recorded state), ``risk`` (at the
        Bayes decisions) and ``risk_h`` (at ``h``); the last entry is the end
        state's (averaged, if so).
    seconds : float
        Wall time of the optimisation (the record's decisions excluded), over
        all runs of a resumed one.
    """

    mu: np.ndarray
    omega: np.ndarray
    h: np.ndarray
    decisions: np.ndarray
    risk: float
    risk_h: float
    record: dict[str, np.ndarray]
    seconds: float

    def draws(self, eps_theta: np.ndarray) -> np.ndarray:
        """Draws ``mu + exp(omega) eps_theta`` (T, D) of the end state."""
        return self.mu + np.exp(self.omega) * np.asarray(eps_theta, dtype=float)


class JointModel(NamedTuple):
    """The evaluation form loaded for the joint optimisation, and where its rows put what.

    Attributes
    ----------
    model : LcviModel
    utility : Utility
        The utility term, its scale set; ``S`` is its ``n_outcomes``.
    library : bridgestan.StanModel
        Loaded with ``lcvi_S = S`` and no probe.
    settings : ndarray
        The settings vector ``lcvi`` of every row (weight, utility, scale, ...).
    parts : dict of slice
        :meth:`LcviModel.layout`: ``theta``, ``z``, ``u``, ``h``, ``lcvi``.
    """

    model: LcviModel
    utility: Utility
    library: bridgestan.StanModel
    settings: np.ndarray
    parts: dict[str, slice]


def joint_model(model: LcviModel, utility: Utility, weight: float) -> JointModel:
    """The program's evaluation form with the term ``utility`` (its scale given) at ``weight``.

    Loaded with ``S = utility.n_outcomes``.
    """
    S, scale = utility.n_outcomes, utility.given_scale("joint_model")
    settings = model.settings(weight, utility.kind, scale, utility.estimator, S)
    parts = model.layout(S, settings.size)
    return JointModel(model, utility, model.evaluator(S, 0), settings, parts)


def optimise(
    joint: JointModel,
    mu: np.ndarray,
    h: np.ndarray,
    *,
    iterations: int,
    lr: float,
    grad_samples: int,
    outcomes: str,
    average: float,
    eps_theta: np.ndarray,
    record_every: int,
    rng: np.random.Generator,
    threads: int | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 1000,
    signature: Mapping[str, Any] | None = None,
) -> JointFit:
    """Adam on ``(mu, omega, h)`` from ``(mu, omega = 0, h)`` for ``iterations`` steps.

    Parameters
    ----------
    joint : JointModel
        From :func:`joint_model`.
    mu : ndarray, shape (D,)
        Initial means; the initial log standard deviations are 0.
    h : ndarray, shape (N,)
        Initial decisions.
    iterations, grad_samples, record_every : int
        At least 1.
    lr : float
        Adam's learning rate, positive.
    outcomes : {"fresh", "fixed"}
    average : float
        In ``[0, 1)``: the end state is the mean of the iterates of this last
        fraction of the steps (0: the last iterate).
    eps_theta : ndarray, shape (n_draws, D)
        Base samples of the draws for decisions and risks.
    rng : numpy.random.Generator
        Spawns two streams: one for ``eta``, one for ``eps_y`` (fresh, or the
        one fixed set), so that runs from one seed with fresh and with fixed
        outcomes take the same draws of ``theta``.
    threads : int, optional
        For :func:`stanflow.models.log_density_gradient_rows`.
    checkpoint : path-like, optional
        A file (``.npz``) for the optimiser's state, saved every
        ``checkpoint_every`` steps and at the end: a rerun with the same
        arguments continues from it with exactly the numbers of an
        uninterrupted run (:mod:`stanflow.optimiser_state`).
    checkpoint_every : int, default 1000
    signature : mapping, optional
        With ``checkpoint``: what the run depends on that the arguments do
        not show (the model, its data, loss and weight), JSON-like; a state
        saved under another signature is an error naming the file.

    Returns
    -------
    JointFit
    """
    model, parts = joint.model, joint.parts
    N, S, D = model.program.n, joint.utility.n_outcomes, model.dim
    loss = model.loss
    mu = np.array(mu, dtype=float)
    if mu.shape != (D,):
        raise ValueError(f"mu must have shape ({D},), got {mu.shape}")
    h = np.array(h, dtype=float)
    # separate streams: fresh and fixed outcomes (and plain VI) see the same draws of theta
    # (a third for the uniform base samples, of a program that uses them)
    rngs = rng.spawn(3)
    state = None
    saved_signature: dict[str, Any] = {}
    if checkpoint is not None:
        if signature is None:
            raise ValueError(
                "signature: a checkpoint needs the signature of the model and its data"
            )
        check_every(checkpoint_every)
        saved_signature = dict(signature) | {
            "start": digest({"mu": mu, "h": h, "eps_theta": eps_theta}),
            "rngs": [r.bit_generator.state for r in rngs],
            "n_outcomes": S, "iterations": int(iterations), "lr": float(lr),
            "grad_samples": int(grad_samples), "outcomes": outcomes, "average": float(average),
            "record_every": int(record_every),
        }
        state = load_state(checkpoint, saved_signature)
    if state is None:
        state = _first_state(mu, h, S, outcomes, grad_samples, rngs)
    points = np.empty((grad_samples, parts["lcvi"].stop))
    points[:, parts["lcvi"]] = joint.settings
    # Generators spawned from a Generator carry a SeedSequence.
    uniform_seed_seq = cast(np.random.SeedSequence, rngs[2].bit_generator.seed_seq)
    fixed_u_seed = int(np.random.default_rng(uniform_seed_seq).integers(2**31))
    points[:, parts["u"]] = uniform_base_samples(
        S, N, fixed_u_seed, used=model.uses_uniform).ravel(order="F")
    mu, omega, h, *moments = state.arrays[:9]
    sums, (eps_y, decisions), history = state.arrays[9:12], state.arrays[12:14], state.arrays[14:]
    points[:, parts["z"]] = eps_y  # the fixed outcome samples, if fixed
    params = [mu, omega, h]
    rng_theta, rng_outcomes, rng_uniform = state.rngs
    n_average = round(average * iterations)
    record = {k: v.tolist() for k, v in zip(RECORD, history, strict=True)}
    seconds = state.seconds
    started = time.perf_counter()
    for step in range(state.step + 1, iterations + 1):
        eta = rng_theta.standard_normal((grad_samples, D))
        sd = np.exp(omega)
        points[:, :D] = mu + sd * eta
        points[:, parts["h"]] = h
        if outcomes == "fresh":
            points[:, parts["z"]] = rng_outcomes.standard_normal((grad_samples, S * N))
            if model.uses_uniform:
                points[:, parts["u"]] = rng_uniform.uniform(size=(grad_samples, S * N))
        lp, grad = log_density_gradient_rows(joint.library, points, threads=threads)
        g_theta = grad[:, :D]
        gradients = (
            g_theta.mean(axis=0),
            (g_theta * eta).mean(axis=0) * sd + 1.0,
            grad[:, parts["h"]].mean(axis=0),
        )
        for p, g, m, v in zip(params, gradients, moments[0::2], moments[1::2], strict=True):
            adam_update(p, g, m, v, step, lr, betas=ADAM_BETAS, eps=ADAM_EPS, ascent=True)
        if step > iterations - n_average:
            for total, p in zip(sums, params, strict=True):
                np.add(total, p, out=total)
        if step % record_every == 0 or step == iterations:
            seconds += time.perf_counter() - started
            if step == iterations and n_average:
                mu, omega, h = (total / n_average for total in sums)
            decisions = Predictive(model, mu + np.exp(omega) * eps_theta).bayes_decisions()
            entropy = float(np.sum(omega)) + 0.5 * D * (1 + np.log(2 * np.pi))
            record["iteration"].append(step)
            record["objective"].append(float(np.mean(lp)) + entropy)
            record["risk"].append(empirical_risk(model.program.y, decisions, loss))
            record["risk_h"].append(empirical_risk(model.program.y, h, loss))
            started = time.perf_counter()
        if checkpoint is not None and (step % checkpoint_every == 0 or step == iterations):
            arrays = [mu, omega, h, *moments, *sums, points[:, parts["z"]], decisions]
            save_state(checkpoint, saved_signature, OptimiserState(
                step, arrays + [np.asarray(record[k]) for k in RECORD],
                [rng_theta, rng_outcomes, rng_uniform], seconds + time.perf_counter() - started))
    return JointFit(
        mu,
        omega,
        h,
        decisions,
        record["risk"][-1],
        record["risk_h"][-1],
        {k: np.asarray(v) for k, v in record.items()},
        seconds,
    )


def _first_state(mu: np.ndarray, h: np.ndarray, S: int, outcomes: str, grad_samples: int,
                 rngs: list[np.random.Generator]) -> OptimiserState:
    """Log standard deviations 0, Adam's moments 0, the streams; fixed outcome samples drawn."""
    _rng_theta, rng_outcomes, _ = rngs
    N = h.size
    eps_y = np.zeros((grad_samples, S * N))
    if outcomes == "fixed":  # the loop's kind: stratified, antithetic; column-major
        eps_y[:] = outcome_base_samples(S, N, rng_outcomes).ravel(order="F")
    params = [mu, np.zeros_like(mu), h]
    moments = [np.zeros_like(p) for p in params for _ in range(2)]  # m, v of each
    sums = [np.zeros_like(p) for p in params]
    history = [np.zeros(0, dtype=int)] + [np.zeros(0)] * (len(RECORD) - 1)
    return OptimiserState(0, [*params, *moments, *sums, eps_y, np.full(N, np.nan), *history],
                          rngs, 0.0)
