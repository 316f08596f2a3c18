"""The building blocks of SMC, AIS and TI along q-paths: small pure functions of arrays.

The target is ``pi1`` (unnormalised, ``Z = integral pi1``) reached from a
normalised base ``pi0`` through ``pi_{beta,q}`` (:mod:`~stanflow.qpaths.qmath`).
The densities are vectorised callables on particles ``z`` of shape ``(N, d)``::

    log_pi0(z) -> (N,)    sample_pi0(rng, N) -> (N, d)    log_pi1(z) -> (N,)

Here: the particles and their checked evaluation, weights (:func:`log_mean_exp`,
:func:`ess`), :func:`resample`, the adaptive schedule (:func:`next_beta`) and
the random-walk Metropolis kernel (:func:`rwm_move`, :func:`rwm_moves`). The
loops over temperatures and runs are in :mod:`~stanflow.qpaths.annealing` (SMC, AIS)
and :mod:`~stanflow.qpaths.ti` (thermodynamic integration).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from stanflow.qpaths.qmath import (
    SMALL,
    _check_beta,
    _log_power_mean,
    log_incremental_weight,
    log_qpath,
)

LogDensity = Callable[[np.ndarray], np.ndarray]
Sampler = Callable[[np.random.Generator, int], np.ndarray]
MoveKernel = Callable[..., tuple["Particles", "MoveInfo"]]
"""``moves(rng, particles, beta, q, log_pi0, log_pi1, n_moves) -> (particles,
info)``: MCMC steps leaving ``pi_{beta,q}`` invariant, ``n_moves`` of them
(``None``: as many as the kernel finds it needs, where it can tell)."""

RESAMPLING = ("systematic", "multinomial")
RWM_SCALE = 2.38


class MoveInfo(NamedTuple):
    """What a move kernel reports about one temperature.

    Attributes
    ----------
    acceptance : float
        Mean acceptance rate (or probability) over the moves.
    n_moves : int
        Moves made.
    """

    acceptance: float
    n_moves: int


class Particles(NamedTuple):
    """Particles with their base and target log densities.

    Attributes
    ----------
    z : ndarray, shape (N, d)
    log_pi0, log_pi1 : ndarray, shape (N,)
    """

    z: np.ndarray
    log_pi0: np.ndarray
    log_pi1: np.ndarray


def evaluate(z: np.ndarray, log_pi0: LogDensity, log_pi1: LogDensity) -> Particles:
    """Evaluate both densities at ``z`` (shape ``(N, d)``), checking their output.

    Raises
    ------
    ValueError
        If a density returns the wrong shape, NaN or ``+inf``; the message
        names the density.
    """
    values = []
    for name, density in (("log_pi0", log_pi0), ("log_pi1", log_pi1)):
        value = np.asarray(density(z), dtype=float)
        if value.shape != (z.shape[0],):
            raise ValueError(
                f"{name} must return shape ({z.shape[0]},) for z of shape "
                f"{z.shape}, got {value.shape}"
            )
        bad = np.isnan(value) | np.isposinf(value)
        if bad.any():
            first = int(np.argmax(bad))
            raise ValueError(
                f"{name} returned NaN or +inf at {int(bad.sum())} of {len(value)} "
                f"particles (first z = {z[first].tolist()})"
            )
        values.append(value)
    return Particles(z, values[0], values[1])


def log_mean_exp(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    """``log(mean(exp(x)))`` without overflow; ``x`` of any shape."""
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    out = np.log(np.mean(np.exp(x - top), axis=axis, keepdims=True)) + top
    return np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


def ess(log_w: np.ndarray) -> float:
    """Effective sample size ``(sum w)^2 / sum w^2`` of log weights, shape (N,)."""
    w = np.exp(log_w - np.max(log_w))
    return float(w.sum() ** 2 / np.sum(w**2))


def resample(rng: np.random.Generator, log_w: np.ndarray, method: str) -> np.ndarray:
    """Ancestor indices, shape (N,), for normalised weights ``exp(log_w)``.

    ``"systematic"``: one uniform, ``N`` evenly spaced points on the CDF;
    ``"multinomial"``: ``N`` independent draws.
    """
    n = len(log_w)
    w = np.exp(log_w - np.max(log_w))
    cdf = np.cumsum(w / w.sum())
    cdf[-1] = 1.0
    u = (rng.uniform() + np.arange(n)) / n if method == "systematic" else rng.uniform(size=n)
    return np.searchsorted(cdf, u, side="right")


def next_beta(particles: Particles, beta: float, q: float, target_ess: float) -> float:
    """Largest ``beta' <= 1`` keeping the ESS of the incremental weights at target.

    Bisection on ``beta'`` in ``[beta, 1]`` for ``ESS(log w(beta -> beta')) =
    target_ess * N``, until the bracket is below ``1e-6`` of the step (at most
    60 halvings); returns 1 when even ``beta' = 1`` keeps the ESS above the
    target.

    Parameters
    ----------
    particles : Particles
        Equally weighted particles from ``pi_{beta,q}``.
    beta : float
    q : float
    target_ess : float
        Fraction of ``N`` in ``(0, 1)``.
    """
    n = len(particles.log_pi0)
    weights = _weights_from(particles, beta, q)

    def gap(b: float) -> float:
        return ess(weights(b)) - target_ess * n

    if gap(1.0) >= 0:
        return 1.0
    lo, hi = beta, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if gap(mid) >= 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-6 * (lo - beta):
            break
    return max(lo, np.nextafter(beta, 2.0))


def _weights_from(
    particles: Particles, beta: float, q: float
) -> Callable[[float], np.ndarray]:
    """``b -> log pi_{b,q} - log pi_{beta,q}`` at the particles, for bisection.

    Checks the particles once (:func:`log_incremental_weight` at ``b = 1``),
    then evaluates the same formula without re-checking: at ``q = 1``
    ``(b - beta) l``; otherwise ``(g(b) - g(beta)) / s`` with ``g`` the
    beta-dependent part of the log power mean (``_log_power_mean``).
    """
    log_incremental_weight(particles.log_pi0, particles.log_pi1, beta, 1.0, q)
    l = particles.log_pi1 - particles.log_pi0
    if q == 1:
        return lambda b: (b - beta) * l
    _, a, base_is_ref, g_beta, s = _log_power_mean(
        particles.log_pi0, particles.log_pi1, np.float64(beta), np.float64(q)
    )
    small = np.abs(a) < SMALL
    expm1_a = np.expm1(np.where(small, a, 0.0))

    def weights(b: float) -> np.ndarray:
        w_other = np.where(base_is_ref, b, 1 - b)
        with np.errstate(divide="ignore"):
            far = np.logaddexp(
                np.log(np.where(base_is_ref, 1 - b, b)), np.log(w_other) + a
            )
        return (np.where(small, np.log1p(w_other * expm1_a), far) - g_beta) / s

    return weights


def rwm_move(
    rng: np.random.Generator,
    particles: Particles,
    beta: float,
    q: float,
    log_pi0: LogDensity,
    log_pi1: LogDensity,
    chol: np.ndarray,
) -> tuple[Particles, float]:
    """One random-walk Metropolis step of every particle, targeting ``pi_{beta,q}``.

    Parameters
    ----------
    particles : Particles
        ``z`` of shape (N, d).
    chol : ndarray, shape (d, d)
        Cholesky factor of the proposal covariance.

    Returns
    -------
    (Particles, float)
        The moved particles and the acceptance rate.
    """
    z = particles.z
    proposal = evaluate(z + rng.standard_normal(z.shape) @ chol.T, log_pi0, log_pi1)
    log_ratio = log_qpath(proposal.log_pi0, proposal.log_pi1, beta, q) - log_qpath(
        particles.log_pi0, particles.log_pi1, beta, q
    )
    accept = np.log(rng.uniform(size=len(z))) < log_ratio
    moved = Particles(
        np.where(accept[:, None], proposal.z, z),
        np.where(accept, proposal.log_pi0, particles.log_pi0),
        np.where(accept, proposal.log_pi1, particles.log_pi1),
    )
    return moved, float(accept.mean())


def proposal_chol(z: np.ndarray, scale: float = RWM_SCALE) -> np.ndarray:
    """Cholesky factor of ``(scale^2 / d) Cov(z)`` (with a small ridge), shape (d, d)."""
    d = z.shape[1]
    cov = np.atleast_2d(np.cov(z, rowvar=False))
    cov = cov + 1e-10 * (np.trace(cov) / d + 1e-300) * np.eye(d)
    return np.linalg.cholesky(scale**2 / d * cov)


def rwm_moves(
    rng: np.random.Generator,
    particles: Particles,
    beta: float,
    q: float,
    log_pi0: LogDensity,
    log_pi1: LogDensity,
    n_moves: int,
) -> tuple[Particles, MoveInfo]:
    """``n_moves`` RWM steps targeting ``pi_{beta,q}`` (the paper's kernel).

    The proposal covariance is ``(2.38^2 / d)`` times the covariance of the
    particles before the first step. Any callable with this signature and
    return value (moved particles, mean acceptance) can be passed as
    ``moves`` to :func:`smc` and :func:`ais`, e.g.
    :class:`stanflow.qpaths.stan_moves.StanMoves`. ``n_moves`` is required.
    """
    if n_moves is None:
        raise ValueError("n_moves: random-walk moves need a fixed number of moves")
    chol = proposal_chol(particles.z)
    total = 0.0
    for _ in range(n_moves):
        particles, rate = rwm_move(rng, particles, beta, q, log_pi0, log_pi1, chol)
        total += rate
    return particles, MoveInfo(total / n_moves, n_moves)


def initial_particles(
    rng: np.random.Generator,
    sample_pi0: Sampler,
    n: int,
    log_pi0: LogDensity,
    log_pi1: LogDensity,
) -> Particles:
    """``n`` draws of the base, evaluated; checks that ``log_pi0`` agrees with the sampler."""
    z = np.asarray(sample_pi0(rng, n), dtype=float)
    if z.ndim != 2 or z.shape[0] != n:
        raise ValueError(f"sample_pi0 must return shape ({n}, d), got {z.shape}")
    particles = evaluate(z, log_pi0, log_pi1)
    if np.isneginf(particles.log_pi0).any():
        raise ValueError("log_pi0 is -inf at draws of sample_pi0; they disagree")
    return particles


def check_schedule(schedule: ArrayLike) -> np.ndarray:
    """A fixed schedule as a strictly increasing array from 0 to 1, or a ``ValueError``."""
    betas = _check_beta(np.asarray(schedule, dtype=float), "schedule")
    if betas.ndim != 1 or len(betas) < 2 or betas[0] != 0 or betas[-1] != 1:
        raise ValueError("schedule must be a 1-D array from 0 to 1")
    if np.any(np.diff(betas) <= 0):
        raise ValueError("schedule must be strictly increasing")
    return betas
