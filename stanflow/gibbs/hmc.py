"""Hamiltonian Monte Carlo moves of many particles at once, on Stan's gradients in process.

A small pure kernel for the SMC sweeps over loss programs (the data sweeps of
SafeBayes, :mod:`stanflow.gibbs.sequential`): every particle takes
``n_leapfrog`` leapfrog steps at once, each step one batched gradient call of
the program (:meth:`stanflow.gibbs.program.LossProgram.log_density_gradient`),
then a Metropolis correction. The mass matrix is the inverse of the particles'
covariance (the move runs on the particles whitened by its Cholesky factor
``L``: ``z = L x``, so ``grad_x = L' grad_z``), which the particles of an SMC
step estimate well; the step size is ``step_size``, adapted by the caller from
the acceptance (:func:`adapted_step_size`). Rejected or non-finite proposals
keep their particle.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

GradientDensity = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""``z (N, d) -> (log density (N,), gradient (N, d))``; ``-inf`` where rejected."""
TARGET_ACCEPT = 0.75


def hmc_moves(
    rng: np.random.Generator,
    z: np.ndarray,
    lp: np.ndarray,
    grad: np.ndarray,
    density: GradientDensity,
    *,
    chol: np.ndarray,
    step_size: float,
    n_leapfrog: int,
    n_moves: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """``n_moves`` HMC transitions of every particle.

    Parameters
    ----------
    rng : numpy.random.Generator
    z : ndarray, shape (N, d)
        Particles, with their log densities ``lp`` (N,) and gradients ``grad`` (N, d).
    density : callable
        :data:`GradientDensity` of the target.
    chol : ndarray, shape (d, d)
        Lower Cholesky factor of the particles' covariance (the inverse mass).
    step_size : float
        Leapfrog step on the whitened scale.
    n_leapfrog, n_moves : int

    Returns
    -------
    z, lp, grad : ndarray
        The moved particles and their densities and gradients.
    acceptance : float
        Mean Metropolis acceptance probability over particles and moves.
    """
    total = 0.0
    for _ in range(n_moves):
        p0 = rng.standard_normal(z.shape)
        x, g = z, grad @ chol  # grad_x = L' grad_z, rows
        p = p0 + 0.5 * step_size * g
        new_lp = lp
        for step in range(n_leapfrog):
            x = x + step_size * p @ chol.T
            new_lp, new_grad = density(x)
            g = np.where(np.isfinite(new_grad), new_grad, 0.0) @ chol
            p = p + (step_size if step < n_leapfrog - 1 else 0.5 * step_size) * g
        log_ratio = new_lp - lp - 0.5 * np.sum(p**2, axis=1) + 0.5 * np.sum(p0**2, axis=1)
        log_ratio = np.where(np.isfinite(log_ratio), log_ratio, -np.inf)
        accept = np.log(rng.uniform(size=len(z))) < log_ratio
        total += float(np.mean(np.exp(np.minimum(log_ratio, 0.0))))
        z = np.where(accept[:, None], x, z)
        lp = np.where(accept, new_lp, lp)
        grad = np.where(accept[:, None], new_grad, grad)
    return z, lp, grad, total / n_moves


def adapted_step_size(step_size: float, acceptance: float, target: float = TARGET_ACCEPT) -> float:
    """The next step size: ``step_size * exp(2 (acceptance - target))``, within a factor 2."""
    return float(step_size * np.clip(np.exp(2 * (acceptance - target)), 0.5, 2.0))


def particle_chol(z: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of the particles' covariance, with a small ridge, shape (d, d)."""
    d = z.shape[1]
    cov = np.atleast_2d(np.cov(z, rowvar=False))
    cov = cov + 1e-10 * (np.trace(cov) / d + 1e-300) * np.eye(d)
    return np.linalg.cholesky(cov)
