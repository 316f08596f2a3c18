"""Sequential Gibbs posteriors over the data, by SMC with 0/1 weights.

SafeBayes (:mod:`stanflow.gibbs.safebayes`) scores each observation ``i`` under the
Gibbs posterior given the observations before it,

    pi_{eta, i-1}(theta) ∝ exp(-eta sum_{j < i} l_j(theta)) pi(theta),

the loss program at learning rate ``eta`` with weights 1 for ``j < i`` and 0
after. One SMC sweep per ``eta`` reaches all of them: particles from the prior
(:class:`~stanflow.gibbs.path.target.PathTarget`) are reweighted by
``exp(-eta l_i)`` as each observation arrives, resampled (systematic) when the
effective sample size falls below ``target_ess * N``, and then moved targeting
the current posterior: by HMC on the program's gradients in process
(:mod:`stanflow.gibbs.hmc`, :data:`LEAPFROG` steps, the mass matrix from the
particles, the step size adapted to the acceptance) where the particles live
on Stan's unconstrained scale, by random-walk Metropolis
(:func:`stanflow.qpaths.kernels.rwm_moves`) for a template's box. The
per-observation losses at the particles come from the program in process, once
per set of particles.

:func:`sequential_scores` returns, for every ``eta`` and ``i``, the two SafeBayes
scores of observation ``i`` before it is seen: the posterior-expected loss
(R-log) and the loss at the posterior mean of the parameters (I-log), with the
sweep's diagnostics.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from threadpoolctl import ThreadpoolController

from stanflow.gibbs.hmc import adapted_step_size, hmc_moves, particle_chol
from stanflow.gibbs.path.target import PathTarget
from stanflow.qpaths.kernels import Particles, ess, resample, rwm_moves

LEAPFROG = 8
"""Leapfrog steps per HMC move."""
_BLAS = ThreadpoolController()


class Scores(NamedTuple):
    """Sequential scores of every observation at every learning rate.

    Attributes
    ----------
    r_log : ndarray, shape (E, n)
        ``E_{pi_{eta, i-1}}[l_i]``.
    r_log_se : ndarray, shape (E, n)
        The Monte Carlo standard error of each ``r_log`` term, the weighted
        particles' ``sqrt(sum_j w_j^2 (l_ij - r_log_i)^2)`` (self-normalised
        importance sampling; it does not count the correlation that resampling
        leaves between particles, so it is a lower bound in spirit).
    i_log : ndarray, shape (E, n)
        ``l_i`` at the posterior mean of the parameters given ``1..i-1``.
    resamplings : ndarray of int, shape (E,)
        How often each sweep resampled and moved.
    min_ess : ndarray, shape (E,)
        The smallest effective sample size before a resampling.
    acceptance : ndarray, shape (E,)
        Mean acceptance of the moves.
    """

    r_log: np.ndarray
    r_log_se: np.ndarray
    i_log: np.ndarray
    resamplings: np.ndarray
    min_ess: np.ndarray
    acceptance: np.ndarray


def sequential_scores(
    target: PathTarget,
    etas: np.ndarray,
    *,
    n_particles: int,
    n_moves: int,
    target_ess: float,
    seed: int,
) -> Scores:
    """One SMC sweep over the data per learning rate; the scores of every observation.

    Parameters
    ----------
    target : PathTarget
        The program's losses and prior at particles.
    etas : ndarray, shape (E,)
        Learning rates.
    n_particles, n_moves : int
        Particles, and random-walk moves after each resampling.
    target_ess : float
        Resample when the effective sample size falls below this fraction of ``N``.
    seed : int
        The prior's draws are shared by every ``eta``; each sweep then has its
        own stream.

    Returns
    -------
    Scores
    """
    root = np.random.SeedSequence(seed)
    prior_stream, *streams = root.spawn(1 + len(etas))
    z0 = target.sample_prior(np.random.default_rng(prior_stream), n_particles)
    losses0 = target.pointwise_loss(z0)
    log_prior0 = target.log_prior(z0)
    n, E = target.n, len(etas)
    r_log, r_log_se, i_log = np.empty((E, n)), np.empty((E, n)), np.empty((E, n))
    resamplings, min_ess, acceptance = np.zeros(E, int), np.full(E, float(n_particles)), np.zeros(E)
    with _BLAS.limit(limits=1, user_api="blas"):
        for e, eta in enumerate(etas):
            rng = np.random.default_rng(streams[e])
            z, losses, log_prior = z0, losses0, log_prior0
            log_w = np.zeros(n_particles)
            theta = target.theta(z)
            means = np.empty((n, theta.shape[1]))
            accepted: list[float] = []
            step = [target.dim**-0.25]
            for i in range(n):
                w = np.exp(log_w - log_w.max())
                w /= w.sum()
                r_log[e, i] = w @ losses[:, i]
                r_log_se[e, i] = math.sqrt(w**2 @ (losses[:, i] - r_log[e, i]) ** 2)
                means[i] = w @ theta
                log_w = log_w - eta * losses[:, i]
                step_ess = ess(log_w)
                if i < n - 1 and step_ess < target_ess * n_particles:
                    min_ess[e] = min(min_ess[e], step_ess)
                    z, log_prior, rate = _resample_move(
                        rng, target, z, log_prior, losses, log_w, eta, i, n_moves, step)
                    losses = target.pointwise_loss(z)
                    theta = target.theta(z)
                    log_w = np.zeros(n_particles)
                    resamplings[e] += 1
                    accepted.append(rate)
            acceptance[e] = float(np.mean(accepted)) if accepted else np.nan
            i_log[e] = _losses_at_means(target, means)
    return Scores(r_log, r_log_se, i_log, resamplings, min_ess, acceptance)


def _losses_at_means(target: PathTarget, means: np.ndarray, block: int = 256) -> np.ndarray:
    """``l_i`` at ``means[i]`` for every ``i``, shape ``(n,)``, in blocks of rows."""
    program = target.program
    out = np.empty(len(means))
    for start in range(0, len(means), block):
        rows = slice(start, start + block)
        losses = program.losses(program.unconstrain(means[rows]))
        out[rows] = losses[np.arange(len(losses)), np.arange(start, start + len(losses))]
    return out


def _resample_move(
    rng: np.random.Generator,
    target: PathTarget,
    z: np.ndarray,
    log_prior: np.ndarray,
    losses: np.ndarray,
    log_w: np.ndarray,
    eta: float,
    i: int,
    n_moves: int,
    step: list[float],
) -> tuple[np.ndarray, np.ndarray, float]:
    """Resample the particles and move them ``n_moves`` times at ``pi_{eta, i}``.

    ``step`` holds the HMC step size, adapted in place.
    """
    weights = np.zeros(target.n)
    weights[: i + 1] = 1.0
    ancestors = resample(rng, log_w, "systematic")
    if target.space == "unconstrained":
        program = target.program
        z = z[ancestors]

        def density(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return program.log_density_gradient(points, eta, weights)

        lp, grad = density(z)
        z, _, _, rate = hmc_moves(rng, z, lp, grad, density, chol=particle_chol(z),
                                  step_size=step[0], n_leapfrog=LEAPFROG, n_moves=n_moves)
        step[0] = adapted_step_size(step[0], rate)
        return z, target.log_prior(z), rate
    seen = losses[ancestors, : i + 1].sum(axis=1)
    particles = Particles(z[ancestors], log_prior[ancestors],
                          log_prior[ancestors] - eta * seen)

    def log_posterior(points: np.ndarray) -> np.ndarray:
        prior = target.log_prior(points)
        inside = np.isfinite(prior)
        total = np.zeros(len(points))
        if inside.any():
            total[inside] = target.total_loss(points[inside], weights)
        return prior - eta * total

    moved, info = rwm_moves(rng, particles, 1.0, 1.0, target.log_prior, log_posterior, n_moves)
    return moved.z, moved.log_pi0, info.acceptance
