"""The learning-rate path's kernels: one schedule point and the step to the next.

In the shape of BlackJAX's SMC kernels: a :class:`PathLevel` is the state (equally
weighted particles at one ``omega``), :func:`initial_level` and :func:`start_level`
make the first (at the prior, or bridged from a Gaussian,
:mod:`stanflow.gibbs.path.start`), :func:`next_omega` chooses the next schedule
point and :func:`advance` steps to it. The loop is
:class:`~stanflow.gibbs.path.sweep.LearningRatePath`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from stanflow.gibbs.path.start import GaussianStart, bridge
from stanflow.gibbs.path.target import PathTarget
from stanflow.qpaths import smc_step
from stanflow.qpaths.kernels import MoveKernel, Particles, next_beta


class PathLevel(NamedTuple):
    """One schedule point of the path: equally weighted particles.

    Attributes
    ----------
    omega : float
        The learning rate (``beta * omega_max``).
    z : ndarray, shape (N, d)
        Particles after resampling and moves, where the target's particles
        live (:class:`~stanflow.gibbs.path.target.PathTarget`).
    loss : ndarray, shape (N,)
        Their total losses ``L_n(theta)``.
    log_prior : ndarray, shape (N,)
        Their prior log densities (normalised on the box).
    log_z : float
        ``log`` of the level's normalising constant relative to the prior,
        ``log int pi exp(g_k)``, with ``g_k`` from
        :func:`~stanflow.gibbs.path.read.log_level_density`;
        ``log Z_n(omega)`` on the geometric path.
    log_z_var : float
        Its variance estimate, ``sum_k (1/ESS_k - 1/N)`` over the steps so far
        (exact for perfectly mixing moves).
    ess : float
        Effective sample size of the incremental weights into this level
        (``N`` at the prior).
    acceptance : float
        Mean acceptance of the moves at this level (``nan`` at the prior).
    """

    omega: float
    z: np.ndarray
    loss: np.ndarray
    log_prior: np.ndarray
    log_z: float
    log_z_var: float
    ess: float
    acceptance: float


def initial_level(rng: np.random.Generator, target: PathTarget, n_particles: int) -> PathLevel:
    """The path at ``omega = 0``: ``n_particles`` draws from the prior."""
    z = np.asarray(target.sample_prior(rng, n_particles), dtype=float)
    return PathLevel(
        omega=0.0,
        z=z,
        loss=target.total_loss(z),
        log_prior=target.log_prior(z),
        log_z=0.0,
        log_z_var=0.0,
        ess=float(n_particles),
        acceptance=math.nan,
    )


def start_level(
    rng: np.random.Generator, target: PathTarget, start: GaussianStart, n_particles: int,
    **bridge_settings: Any,
) -> PathLevel:
    """The path at ``start.omega``: particles bridged from the start's Gaussian
    (:func:`stanflow.gibbs.path.start.bridge`, which takes ``bridge_settings``)."""
    found = bridge(rng, start, _densities(target, start.omega)[1], n_particles,
                   **bridge_settings)
    return PathLevel(
        omega=start.omega,
        z=found.z,
        loss=target.total_loss(found.z),
        log_prior=target.log_prior(found.z),
        log_z=found.log_z,
        log_z_var=found.log_z_var,
        ess=found.ess,
        acceptance=found.acceptance,
    )


def next_omega(level: PathLevel, omega_max: float, q: float, target_ess: float) -> float:
    """The next schedule point: the largest ``omega <= omega_max`` keeping the
    effective sample size of the incremental weights at ``target_ess * N``
    (bisection, :func:`stanflow.qpaths.kernels.next_beta`)."""
    beta = next_beta(_particles(level, omega_max), level.omega / omega_max, q, target_ess)
    return omega_max if beta >= 1.0 else beta * omega_max


def advance(
    rng: np.random.Generator,
    level: PathLevel,
    omega: float,
    target: PathTarget,
    *,
    omega_max: float,
    q: float,
    n_moves: int | None,
    resampling: str,
    moves: MoveKernel,
) -> PathLevel:
    """One SMC step: reweight to ``omega``, resample, move ``n_moves`` times.

    Parameters
    ----------
    rng : numpy.random.Generator
    level : PathLevel
        The current schedule point.
    omega : float
        The next one, in ``(level.omega, omega_max]``.
    target : PathTarget
    omega_max, q : float
        The path's end and its ``q``.
    n_moves : int or None
        None: as many as the kernel finds needed (self-tuning moves).
    resampling : {"systematic", "multinomial"}
    moves : callable
        A :data:`stanflow.qpaths.kernels.MoveKernel` targeting ``pi_{beta,q}``
        between the prior and the Gibbs posterior at ``omega_max``.

    Returns
    -------
    PathLevel
    """
    particles = _particles(level, omega_max)
    beta, beta_next = level.omega / omega_max, min(1.0, omega / omega_max)
    log_pi0, log_pi1 = _densities(target, omega_max)
    try:
        state, info = smc_step.step(
            rng, smc_step.SMCState(particles, np.zeros(len(particles.z)), beta), beta_next, q,
            log_pi0, log_pi1, moves=moves, n_moves=n_moves, resampling=resampling,
        )
    except RuntimeError as err:
        raise RuntimeError(f"gibbs path, omega = {level.omega} to {omega}: {err}") from None
    moved, step_ess, n = state.particles, info.ess, len(particles.z)
    return PathLevel(
        omega=float(omega),
        z=moved.z,
        loss=(moved.log_pi0 - moved.log_pi1) / omega_max,
        log_prior=moved.log_pi0,
        log_z=level.log_z + info.log_z_increment,
        log_z_var=level.log_z_var + max(0.0, 1.0 / step_ess - 1.0 / n),
        ess=step_ess,
        acceptance=float(info.acceptance),
    )


def _particles(level: PathLevel, omega_max: float) -> Particles:
    return Particles(level.z, level.log_prior, level.log_prior - omega_max * level.loss)


def _densities(target: PathTarget, omega_max: float):
    """``log pi0`` (the prior) and ``log pi1`` (the Gibbs posterior at
    ``omega_max``, unnormalised) as the callables of the q-path kernels; the
    loss is evaluated only inside the prior's support."""

    def log_pi1(z: np.ndarray) -> np.ndarray:
        log_prior = target.log_prior(z)
        inside = np.isfinite(log_prior)
        if inside.all():
            return log_prior - omega_max * target.total_loss(z)
        loss = np.zeros(len(z))
        if inside.any():
            loss[inside] = target.total_loss(z[inside])
        return log_prior - omega_max * loss

    return target.log_prior, log_pi1
