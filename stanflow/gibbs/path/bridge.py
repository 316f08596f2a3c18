"""Particles carried to a bootstrap resample's Gibbs posterior by SMC.

Where importance sampling from a fitted t cannot reach a resample's posterior
(:func:`~stanflow.gibbs.path.moving.move_block` leaves it below the keep share:
tens of coefficients with a few observations each, whose posteriors no t is
close enough to), its particles are carried there along the bridge

    pi_lambda(theta) ∝ pi(theta) exp(-((1 - lambda) w_0 + lambda omega c_b) . l(theta)),

``lambda`` from 0 to 1, from the start's loss weights ``w_0``: the full data's
posterior at the same ``omega`` (``w_0 = omega 1``; :func:`full_population`, one
population for every resample: the anchor's importance sample resampled, or,
where that keeps too few draws effective, draws of a Gaussian with the anchor's
moments carried to it by SMC; then moved by HMC), or, when a resample bridged
before is wanted at another ``omega``, its own particles there (``w_0 =
omega_then c_b``: a bridge along ``omega``). Each step is as long as keeps
:data:`STEP_ESS` of the particles effective, then the particles are resampled
and moved by :data:`MOVES_PER_STEP` HMC moves on the program's gradients in process
(:func:`stanflow.gibbs.hmc.hmc_moves`: the metric the full data's particles'
covariance, trajectories :data:`TRAJECTORY` long on its whitened scale, the
step size adapted to the acceptance). The SMC sampler of Del Moral, Doucet and
Jasra (2006), here between weightings of one data set (as Tanaka, arXiv
2404.16528, moves particles to each resample instead of running MCMC afresh).

**Effective size.** At ``lambda = 1`` the particles, equally weighted, are
families: the descendants of one particle of the start (and the start's own
families, carried). Their effective size is that of a clustered sample
(:func:`clustered_ess`), as the genealogy-based variance estimators of SMC
count it (Chan and Lai 2013; Lee and Whiteley 2018: the families of the first
ancestors, not of the last resampling, which would overstate it), and they are
moved on until it reaches ``target_ess * S`` or ``max_moves`` run out; never
the count of particles. A bridge along ``omega`` that leaves a resample short
(on a long one its families can collapse to a few) is followed by one from the
full data's posterior. Every resample draws from its own stream
(:class:`BridgeTask`): where a block runs never changes a number.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy.linalg import solve_triangular

from stanflow.gibbs.hmc import adapted_step_size, hmc_moves
from stanflow.gibbs.path.moving import (
    SCALE_FIT,
    Moved,
    Placement,
    Proposal,
    cholesky,
    concatenate,
    kish,
    moments,
    one_blas_thread,
    t_draws,
)
from stanflow.gibbs.path.resamples import prior_and_resample_loss
from stanflow.gibbs.path.target import PathTarget
from stanflow.gibbs.program import LossProgram
from stanflow.qpaths.kernels import resample

STEP_ESS = 0.5
"""Each bridge step keeps this share of the particles effective."""
MOVES_PER_STEP = 2
"""HMC moves after each resampling on the bridge."""
MAX_MOVES = 20
"""HMC moves at ``lambda = 1`` at most, while the clustered effective size is short."""
POPULATION_MOVES = 60
"""HMC moves of the full data's population at most (:func:`full_population`)."""
POPULATION_DRAWS = 20
"""The full data's population is resampled from at most this many importance draws per
particle (fewer once their effective size reaches the particles' count)."""
FOUNDERS = 0.25
"""Importance draws keeping fewer than this share of the population's particles effective
are not resampled to it: the population is carried from a Gaussian by SMC instead."""
POPULATION_ESS = 0.9
"""The full data's population is moved until its clustered effective size reaches this
share of its particles (one population serves every resample's bridge: its families
are every bridge's first ones)."""
TRAJECTORY = 1.5
"""Length of an HMC trajectory on the metric's whitened scale (leapfrog steps times step size)."""
MAX_LEAPFROG = 50

Density = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


class BridgeStart(NamedTuple):
    """Where each resample's bridge starts: weighted particles of ``pi exp(-weights . l)``.

    Attributes
    ----------
    u : ndarray, shape (R, S, D)
        The particles on Stan's unconstrained scale.
    log_w : ndarray, shape (R, S)
        Their log weights there (0 for equally weighted particles).
    families : ndarray of int, shape (R, S)
        The family each particle belongs to (:func:`clustered_ess`).
    weights : ndarray, shape (R, n)
        The start's loss weights, ``omega`` included: ``omega 1`` for the full
        data's posterior, ``omega_then c_b`` for the resample's own particles at
        an earlier ``omega``.
    """

    u: np.ndarray
    log_w: np.ndarray
    families: np.ndarray
    weights: np.ndarray


class BridgeTask(NamedTuple):
    """One block of resamples to bridge to their posteriors at ``omega``.

    Attributes
    ----------
    omega : float
    counts : ndarray, shape (R, n)
    start : BridgeStart
    chol : ndarray, shape (D, D)
        The HMC metric's Cholesky factor (the full data's particles' covariance).
    proposal : Proposal
        Each resample's last proposal, kept where its bridged particles are too
        few to fit a covariance of their own.
    entropy : int
    streams : ndarray of int, shape (R, 3)
        Each resample's index ``b``, how often it was moved before, ``k``, and
        the attempt ``a`` (1 from its own particles, 2 from the full data's):
        its draws come from ``SeedSequence(entropy, spawn_key=(b, k, a))``.
    target_ess : float
    max_moves : int
    """

    omega: float
    counts: np.ndarray
    start: BridgeStart
    chol: np.ndarray
    proposal: Proposal
    entropy: int
    streams: np.ndarray
    target_ess: float
    max_moves: int


class _Hmc:
    """HMC moves on one density with a step size adapted across calls."""

    def __init__(self, chol: np.ndarray) -> None:
        self.chol = chol
        self.step = chol.shape[0] ** -0.25
        self.moves = 0
        self.accepted = 0.0

    def move(self, rng: np.random.Generator, u: np.ndarray, density: Density,
             times: int) -> tuple[np.ndarray, np.ndarray]:
        """``times`` moves of every particle; the particles and their log densities."""
        lp, grad = density(u)
        for _ in range(times):
            leapfrog = int(np.clip(round(TRAJECTORY / self.step), 1, MAX_LEAPFROG))
            u, lp, grad, rate = hmc_moves(rng, u, lp, grad, density, chol=self.chol,
                                          step_size=self.step, n_leapfrog=leapfrog, n_moves=1)
            self.step = adapted_step_size(self.step, rate)
            self.moves += 1
            self.accepted += rate
        return u, lp


def bridge_block(target: PathTarget, task: BridgeTask) -> Moved:
    """Bridge the block's resamples to their Gibbs posteriors at ``task.omega`` (module docstring)."""
    with one_blas_thread():
        return _bridge_block(target, task)


def _bridge_block(target: PathTarget, task: BridgeTask) -> Moved:
    placements, proposals = [], []
    moves, accepted = 0, 0.0
    for j, (b, k, attempt) in enumerate(task.streams):
        rng = np.random.default_rng(np.random.SeedSequence(
            task.entropy, spawn_key=(int(b), int(k), int(attempt))))
        hmc = _Hmc(task.chol)
        start = BridgeStart(*(field[j] for field in task.start))
        u, families, ess = _bridge(target.program, rng, hmc, start, task.omega * task.counts[j],
                                   task.target_ess, task.max_moves)
        moves, accepted = moves + hmc.moves, accepted + hmc.accepted
        z = u if target.space == "unconstrained" else target.program.constrain(u)
        prior, loss = prior_and_resample_loss(target, z[None], task.counts[j:j + 1])
        log_rest = np.where(np.isfinite(prior), task.omega * loss, -np.inf)
        placements.append(Placement(z[None], loss, log_rest, np.array([ess / len(z)]),
                                    families[None]))
        mean, cov = moments(z, np.zeros(len(z)))
        scale = cholesky(cov) if ess >= SCALE_FIT * z.shape[1] else task.proposal.scale[j]
        proposals.append(Proposal(mean[None], scale[None]))
    return Moved(concatenate(placements), concatenate(proposals), 0, 0.0,
                 hmc_steps=moves, hmc_accepted=accepted)


def _bridge(
    program: LossProgram, rng: np.random.Generator, hmc: _Hmc, start: BridgeStart, end: np.ndarray,
    target_ess: float, max_moves: int,
) -> tuple[np.ndarray, np.ndarray, float]:
    """One resample's particles at the bridge's end (loss weights ``end``), shuffled, their
    families and their clustered effective size."""
    def log_ratio(u: np.ndarray) -> np.ndarray:
        return program.total_loss(u, start.weights) - program.total_loss(u, end)

    def density(lam: float) -> Density:
        return _density(program, (1.0 - lam) * start.weights + lam * end)

    u, lp, families = _carry(rng, hmc, start.u, start.log_w, start.families, log_ratio, density)
    u, _, ess = _moved_on(rng, hmc, u, lp, families, density(1.0), target_ess * len(u), max_moves)
    order = rng.permutation(len(u))
    return u[order], families[order], ess


def _carry(
    rng: np.random.Generator, hmc: _Hmc, u: np.ndarray, log_w0: np.ndarray,
    families: np.ndarray, log_ratio: Callable[[np.ndarray], np.ndarray],
    density: Callable[[float], Density],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted particles ``(u, log_w0)`` of ``density(0)`` carried by SMC to ``density(1)``
    (``log_ratio``: the end's log density minus the start's): each step as long as keeps
    :data:`STEP_ESS` of them effective, then resampling and :data:`MOVES_PER_STEP` HMC moves.
    The particles, their log densities at the end and their families."""
    S = len(u)
    lam, lp = 0.0, np.zeros(S)
    while lam < 1.0:
        difference = -log_ratio(u)
        difference = np.where(np.isfinite(difference), difference, np.inf)
        new = next_lambda(difference, lam, STEP_ESS * S, log_w0)
        log_w = log_w0 - (new - lam) * difference
        if not np.isfinite(log_w).any():
            raise FloatingPointError("bridge: no particle has a finite weight")
        ancestors = resample(rng, log_w, "systematic")
        families, lam, log_w0 = families[ancestors], new, np.zeros(S)
        u, lp = hmc.move(rng, u[ancestors], density(lam), MOVES_PER_STEP)
    return u, lp, families


def _moved_on(
    rng: np.random.Generator, hmc: _Hmc, u: np.ndarray, lp: np.ndarray, families: np.ndarray,
    density: Density, wanted: float, max_moves: int,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Equally weighted particles moved by HMC until their clustered effective size (on the
    metric's whitened scale) reaches ``wanted`` or ``max_moves`` more moves are made."""
    ess = clustered_ess(solve_triangular(hmc.chol, u.T, lower=True).T, lp, families)
    extra = 0
    while ess < wanted and extra < max_moves:
        u, lp = hmc.move(rng, u, density, MOVES_PER_STEP)
        extra += MOVES_PER_STEP
        ess = clustered_ess(solve_triangular(hmc.chol, u.T, lower=True).T, lp, families)
    return u, lp, ess


def _density(program: LossProgram, weights: np.ndarray) -> Density:
    """``log pi - weights . l`` and its gradient; ``-inf`` off the real line."""
    def density(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lp, grad = np.full(len(x), -np.inf), np.zeros_like(x)
        ok = np.isfinite(x).all(axis=1)
        if ok.any():
            lp[ok], grad[ok] = program.log_density_gradient(x[ok], 1.0, weights)
        return lp, grad

    return density


def next_lambda(difference: np.ndarray, lam: float, wanted: float,
                log_w: np.ndarray | None = None) -> float:
    """The largest ``lambda' <= 1`` whose weights ``w exp(-(lambda' - lam) difference)``
    keep ``wanted`` effective particles (bisection; at least a step of 1e-6). ``log_w``:
    the particles' own log weights ``log w`` (default equal)."""
    base = np.zeros(len(difference)) if log_w is None else log_w

    def ess(to: float) -> float:
        return float(kish((base - (to - lam) * difference)[None])[0])

    if ess(1.0) >= wanted:
        return 1.0
    low, high = lam, 1.0
    for _ in range(50):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if ess(mid) >= wanted else (low, mid)
    return min(1.0, max(low, lam + 1e-6))


def full_population(
    target: PathTarget, rng: np.random.Generator, mean: np.ndarray, cov: np.ndarray,
    omega: float, draws: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The full data's Gibbs posterior at ``omega`` as ``draws`` particles on Stan's
    unconstrained scale, their families (the independent draws they descend from) and
    the Cholesky factor of their covariance (the bridges' metric).

    Importance draws from a t at the anchor's ``mean`` and ``cov`` (the particles'
    scale), ``draws`` at a time until their effective size reaches ``draws`` (at most
    :data:`POPULATION_DRAWS` times as many: in tens of dimensions a t keeps a few percent
    of its draws effective, and every family the population starts with is one more for
    every bridge), resampled by their weights. Where even those keep fewer than
    :data:`FOUNDERS` ``* draws`` effective (one draw can carry most of the weight, and a
    population of one large family measures its own and its bridges' effective size too
    noisily to be trusted either way), ``draws`` independent draws of the Gaussian with
    the anchor's moments are carried to the posterior by SMC instead
    (:func:`_tempered_population`). Then moved by HMC until their clustered effective
    size reaches :data:`POPULATION_ESS` of them (at most :data:`POPULATION_MOVES` moves).
    """
    scale = cholesky(cov)[None]
    batches: list[tuple[np.ndarray, np.ndarray]] = []
    while len(batches) < POPULATION_DRAWS:
        z, log_q = t_draws([rng], mean[None], scale, draws)
        prior, loss = prior_and_resample_loss(target, z, np.ones((1, target.n)))
        u = target.unconstrained(z[0])
        finite = np.isfinite(u).all(axis=1)
        batches.append((u, np.where(finite, prior[0] - omega * loss[0] - log_q[0], -np.inf)))
        if kish(np.concatenate([w for _, w in batches])[None])[0] >= draws:
            break
    u = np.concatenate([b[0] for b in batches])
    log_w = np.concatenate([b[1] for b in batches])
    finite = np.isfinite(log_w)
    posterior = _density(target.program, np.full(target.n, omega))
    if finite.sum() < 2 or kish(log_w[None])[0] < FOUNDERS * draws:
        hmc, (u, lp, families) = _tempered_population(target, rng, mean, cov, posterior, draws)
    else:
        hmc = _Hmc(cholesky(np.atleast_2d(np.cov(u[finite], rowvar=False))))
        families = resample(rng, log_w, "systematic")[:: len(batches)]
        u, lp = hmc.move(rng, u[families], posterior, MOVES_PER_STEP)
    u = _moved_on(rng, hmc, u, lp, families, posterior, POPULATION_ESS * draws,
                  POPULATION_MOVES - hmc.moves)[0]
    return u, families, cholesky(np.atleast_2d(np.cov(u, rowvar=False)))


def _tempered_population(
    target: PathTarget, rng: np.random.Generator, mean: np.ndarray, cov: np.ndarray,
    posterior: Density, draws: int,
) -> tuple[_Hmc, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``draws`` independent draws of the Gaussian ``g`` with the anchor's moments (on the
    unconstrained scale, :func:`_unconstrained_gaussian`) carried by SMC along ``g^(1 -
    lambda) posterior^lambda`` (:func:`_carry`, HMC on ``g``'s metric); the HMC kernel, and
    the particles, their log densities and their families (the Gaussian's draws)."""
    center, chol = _unconstrained_gaussian(target, rng, mean, cov, draws)

    def log_gaussian(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        e = solve_triangular(chol, (x - center).T, lower=True)
        return -0.5 * np.sum(e**2, axis=0), -solve_triangular(chol, e, lower=True, trans="T").T

    def density(lam: float) -> Density:
        def tempered(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            (lp, grad), (lg, gg) = posterior(x), log_gaussian(x)
            return lam * lp + (1.0 - lam) * lg, lam * grad + (1.0 - lam) * gg
        return tempered

    hmc = _Hmc(chol)
    u0 = center + rng.standard_normal((draws, len(center))) @ chol.T
    return hmc, _carry(rng, hmc, u0, np.zeros(draws), np.arange(draws),
                       lambda x: posterior(x)[0] - log_gaussian(x)[0], density)


def _unconstrained_gaussian(
    target: PathTarget, rng: np.random.Generator, mean: np.ndarray, cov: np.ndarray, draws: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The mean and Cholesky factor of the Gaussian ``N(mean, cov)`` on Stan's unconstrained
    scale: itself for particles on that scale, else the moments of ``draws`` of its
    draws mapped there (those inside the box)."""
    if target.space == "unconstrained":
        return mean, cholesky(cov)
    z = mean + rng.standard_normal((draws, len(mean))) @ cholesky(cov).T
    u = target.unconstrained(z)
    u = u[np.isfinite(u).all(axis=1)]
    if len(u) < 2:
        raise FloatingPointError("the full data's posterior: no draw of the anchor is in the box")
    return u.mean(axis=0), cholesky(np.atleast_2d(np.cov(u, rowvar=False)))


def clustered_ess(x: np.ndarray, log_density: np.ndarray, families: np.ndarray) -> float:
    """Effective size of particles in families (copies of one resampled draw, moved since).

    Kish's design effect of a clustered sample, ``1 + (m - 1) rho``: ``m`` the
    families' size-weighted mean size ``sum m_f^2 / S``, ``rho`` the one-way
    analysis-of-variance estimate of the intraclass correlation, taken as the
    larger of its mean over the particles' whitened coordinates ``x`` and its
    value for their log density (the slowest function for HMC to mix). One
    family is one draw; ``S`` families of one are ``S`` draws. Each correlation
    is taken one standard error above its estimate (:func:`_upper`), so that a
    few families never count as many draws: independent particles in 50
    families of eight count as about 0.75 ``S``, and the size errs low, never
    high.

    Parameters
    ----------
    x : ndarray, shape (S, d)
        The particles, whitened by the metric.
    log_density : ndarray, shape (S,)
    families : ndarray of int, shape (S,)
        Each particle's ancestor.

    Returns
    -------
    float
        In ``[1, S]``.
    """
    S = len(x)
    _, family, sizes = np.unique(families, return_inverse=True, return_counts=True)
    k = len(sizes)
    if k == 1:
        return 1.0
    if k == S:
        return float(S)
    values = np.column_stack([x, log_density])
    means = np.zeros((k, values.shape[1]))
    np.add.at(means, family, values)
    means /= sizes[:, None]
    within = np.sum((values - means[family]) ** 2, axis=0) / (S - k)
    between = np.sum(sizes[:, None] * (means - values.mean(axis=0)) ** 2, axis=0) / (k - 1)
    m0 = (S - np.sum(sizes**2) / S) / (k - 1)
    between_variance = (between - within) / m0
    total = np.maximum(between_variance, 0.0) + within
    rho = np.divide(between_variance, total, out=np.ones_like(total), where=total > 0)
    coordinates = _upper(float(np.mean(rho[:-1])), m0, k, len(rho) - 1)
    icc = max(coordinates, _upper(float(rho[-1]), m0, k, 1))
    m = float(np.sum(sizes**2)) / S
    return float(np.clip(S / (1.0 + (m - 1.0) * icc), 1.0, S))


def _upper(rho: float, m: float, k: int, averaged: int) -> float:
    """One standard error above an intraclass correlation estimated from ``k`` families of
    about ``m`` (Fisher's large-sample variance ``2 (1 - rho)^2 (1 + (m - 1) rho)^2 /
    (m (m - 1) (k - 1))``, over ``averaged`` statistics), within ``[0, 1]``: with a
    few families the estimate is too noisy to be taken at its value."""
    r = min(max(rho, 0.0), 1.0)
    variance = 2 * (1 - r) ** 2 * (1 + (m - 1) * r) ** 2 / (max(m * (m - 1), 1e-12) * (k - 1))
    return min(max(rho + np.sqrt(variance / averaged), 0.0), 1.0)
