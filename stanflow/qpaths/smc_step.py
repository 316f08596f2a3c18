"""One step of sequential Monte Carlo along a path: the kernel every annealing loop uses.

In the shape of BlackJAX's SMC kernels: :func:`init` makes the state,
:func:`step` advances it by one temperature and returns ``(state, info)``,
and the loop over temperatures lives outside (q-path SMC and AIS in
:mod:`~stanflow.qpaths.annealing`, the learning-rate path in
:mod:`stanflow.gibbs.path.sweep`).

A step from ``beta`` to ``beta'``: the particles' log weights gain the
incremental weights ``log pi_{beta',q} - log pi_{beta,q}``
(:func:`~stanflow.qpaths.qmath.log_incremental_weight`), ``log Z`` gains the
log of their weighted mean, the particles are resampled when ``resampling``
names a scheme (SMC; their weights become equal) or keep their weights when it
is ``None`` (AIS), and the move kernel makes MCMC moves targeting
``pi_{beta',q}``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from stanflow.qpaths.kernels import (
    RESAMPLING,
    LogDensity,
    MoveKernel,
    Particles,
    ess,
    log_mean_exp,
    resample,
)
from stanflow.qpaths.qmath import log_incremental_weight


class SMCState(NamedTuple):
    """Particles at ``beta`` with their log weights (zero after resampling).

    Attributes
    ----------
    particles : Particles
    log_weights : ndarray, shape (N,)
        Unnormalised; the weights the particles carry since the last resampling.
    beta : float
    """

    particles: Particles
    log_weights: np.ndarray
    beta: float


class StepInfo(NamedTuple):
    """What one step reports.

    Attributes
    ----------
    beta : float
        The new temperature.
    ess : float
        Effective sample size of the weights before resampling.
    acceptance : float
        Mean acceptance of the moves.
    n_moves : int
        Moves made.
    log_z_increment : float
        ``log Z_{beta'} - log Z_beta`` as estimated by the weighted particles.
    """

    beta: float
    ess: float
    acceptance: float
    n_moves: int
    log_z_increment: float


def init(particles: Particles) -> SMCState:
    """The state at ``beta = 0``: the base's draws, equally weighted."""
    return SMCState(particles, np.zeros(len(particles.z)), 0.0)


def step(
    rng: np.random.Generator,
    state: SMCState,
    beta_next: float,
    q: float,
    log_pi0: LogDensity,
    log_pi1: LogDensity,
    *,
    moves: MoveKernel,
    n_moves: int | None,
    resampling: str | None,
) -> tuple[SMCState, StepInfo]:
    """Reweight to ``beta_next``, resample (unless ``resampling`` is None), move.

    Parameters
    ----------
    rng : numpy.random.Generator
    state : SMCState
    beta_next : float
        In ``(state.beta, 1]``.
    q : float
        The path.
    log_pi0, log_pi1 : callable
        Base and target log densities (see :mod:`~stanflow.qpaths.kernels`).
    moves : callable
        A :data:`~stanflow.qpaths.kernels.MoveKernel`.
    n_moves : int or None
        Passed to ``moves``.
    resampling : {"systematic", "multinomial"} or None

    Returns
    -------
    (SMCState, StepInfo)

    Raises
    ------
    RuntimeError
        If every incremental weight is zero (a step too far for the particles).
    """
    if resampling is not None and resampling not in RESAMPLING:
        raise ValueError(f"resampling must be one of {RESAMPLING} or None, got {resampling!r}")
    particles = state.particles
    log_w = state.log_weights + log_incremental_weight(
        particles.log_pi0, particles.log_pi1, state.beta, beta_next, q
    )
    increment = float(log_mean_exp(log_w) - log_mean_exp(state.log_weights))
    if not np.isfinite(increment):
        raise RuntimeError(
            f"all incremental weights are zero from beta = {state.beta} to {beta_next}; "
            "use a finer schedule"
        )
    step_ess = ess(log_w)
    if resampling is not None:
        ancestors = resample(rng, log_w, resampling)
        particles = Particles(*(a[ancestors] for a in particles))
        log_w = np.zeros(len(log_w))
    moved, info = moves(rng, particles, beta_next, q, log_pi0, log_pi1, n_moves)
    return SMCState(moved, log_w, beta_next), StepInfo(
        beta_next, step_ess, info.acceptance, info.n_moves, increment
    )
