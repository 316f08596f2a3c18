"""Independence Metropolis-Hastings moves from a Gaussian fitted to the particles.

A move kernel for :func:`stanflow.qpaths.annealing.smc` and :func:`~stanflow.qpaths.annealing.ais`
(the :data:`~stanflow.qpaths.kernels.MoveKernel` signature). Before the moves,
the particles' mean ``m`` and covariance ``C`` give the proposal
``g = N(m, scale^2 C)``; every particle proposes an independent draw ``y ~ g``
and accepts it with probability
``min(1, pi_{beta,q}(y) g(x) / (pi_{beta,q}(x) g(y)))``, which leaves
``pi_{beta,q}`` invariant. When ``pi_{beta,q}`` is close to a Gaussian (a
logistic-regression posterior tempered from a Gaussian prior) an accepted
proposal forgets its start entirely, so the duplicates left by resampling
separate after a few moves, in any dimension, where random-walk moves need
of the order of ``d`` steps. The SMC ``log Z`` estimates of the ``qpaths-smc``
reference runs use it.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular

from stanflow.qpaths.kernels import LogDensity, MoveInfo, Particles, evaluate
from stanflow.qpaths.qmath import log_qpath
from stanflow.validation import check_int

SCALE = 1.1
"""Proposal scale relative to the particle covariance (heavier than the target)."""


def gaussian_independence_moves(
    rng: np.random.Generator,
    particles: Particles,
    beta: float,
    q: float,
    log_pi0: LogDensity,
    log_pi1: LogDensity,
    n_moves: int,
) -> tuple[Particles, MoveInfo]:
    """``n_moves`` independence MH steps targeting ``pi_{beta,q}``; see the module docstring.

    Parameters
    ----------
    rng : numpy.random.Generator
    particles : Particles
        ``z`` of shape ``(N, d)`` with ``N > d`` (the fitted covariance must
        be positive definite).
    beta, q : float
        The target ``pi_{beta,q}``.
    log_pi0, log_pi1 : callable
        As for :func:`stanflow.qpaths.annealing.smc`.
    n_moves : int
        At least 1.

    Returns
    -------
    (Particles, MoveInfo)
        The moved particles, the mean acceptance rate over the moves and their number.
    """
    z = particles.z
    n, d = z.shape
    if n <= d:
        raise ValueError(
            f"particles: need more particles than dimensions, got {n} x {d}"
        )
    n_moves = check_int(n_moves, "n_moves")
    mean = z.mean(axis=0)
    cov = np.atleast_2d(np.cov(z, rowvar=False))
    chol = np.linalg.cholesky(SCALE**2 * cov + 1e-12 * np.trace(cov) / d * np.eye(d))
    log_det = float(np.sum(np.log(np.diag(chol))))

    def log_g(x: np.ndarray) -> np.ndarray:
        white = solve_triangular(chol, (x - mean).T, lower=True)
        return -0.5 * np.sum(white**2, axis=0) - log_det

    current, log_g_current = particles, log_g(z)
    log_target = log_qpath(current.log_pi0, current.log_pi1, beta, q)
    total = 0.0
    for _ in range(n_moves):
        y = mean + rng.standard_normal((n, d)) @ chol.T
        proposal = evaluate(y, log_pi0, log_pi1)
        log_target_y = log_qpath(proposal.log_pi0, proposal.log_pi1, beta, q)
        log_g_y = log_g(y)
        log_ratio = log_target_y - log_target + log_g_current - log_g_y
        accept = np.log(rng.uniform(size=n)) < log_ratio
        current = Particles(
            np.where(accept[:, None], y, current.z),
            np.where(accept, proposal.log_pi0, current.log_pi0),
            np.where(accept, proposal.log_pi1, current.log_pi1),
        )
        log_target = np.where(accept, log_target_y, log_target)
        log_g_current = np.where(accept, log_g_y, log_g_current)
        total += float(accept.mean())
    return current, MoveInfo(total / n_moves, n_moves)
