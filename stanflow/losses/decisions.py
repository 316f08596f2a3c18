"""Bayes decisions in closed form: from predictive draws, and from normal mixtures.

A Bayes decision minimises the expected loss ``E[loss(y, h)]`` over ``h``.
For the shipped losses that have one in closed form it is a mean, a quantile
or LinEx's ``-(1/c) log E[exp(-c y)]``. Each rule comes in two forms:

- from draws of ``y`` (shape ``(S, *shape)``, draws along axis 0);
- for the predictive ``(1/T) sum_t N(loc[t], sd^2)``, a normal likelihood
  averaged over draws of its location, exact up to round-off (no
  outcome-sampling noise), as the LCVI loop's decision step uses it.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp, ndtr, ndtri

CHUNK_ELEMENTS = 2**20
"""Array elements (8 MB of doubles) per chunk of the larger computations on
draws x outcomes: all of them at once (160 MB on Last.fm) would cost more in
fresh memory (page faults) than in arithmetic."""


def mean(draws: np.ndarray, *params: float) -> np.ndarray:
    """The mean of the draws: squared loss's decision."""
    return draws.mean(axis=0)


def mixture_mean(loc: np.ndarray, sd: np.ndarray, *params: float) -> np.ndarray:
    """The mean of ``(1/T) sum_t N(loc[t], sd^2)``."""
    return loc.mean(axis=0)


def median(draws: np.ndarray) -> np.ndarray:
    """The median of the draws: absolute loss's decision."""
    return np.median(draws, axis=0)


def mixture_median(loc: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """The median of ``(1/T) sum_t N(loc[t], sd^2)``."""
    return mixture_quantile(loc, sd, 0.5)


def quantile(draws: np.ndarray, tau: float) -> np.ndarray:
    """The ``tau``-quantile of the draws: the check loss's decision."""
    return np.quantile(draws, tau, axis=0)


def linex(draws: np.ndarray, c: float) -> np.ndarray:
    """``-(1/c) log mean_s exp(-c y_s)``, with log-sum-exp: LinEx's decision."""
    log_mean = logsumexp(-c * draws, axis=0) - math.log(draws.shape[0])
    return -log_mean / c


def mixture_linex(loc: np.ndarray, sd: np.ndarray, c: float) -> np.ndarray:
    """LinEx's decision for the mixture: ``E[exp(-c y)] = mean_t exp(-c loc_t + c^2 sd^2 / 2)``."""
    return linex(loc, c) - c * np.square(sd) / 2


def mixture_quantile(loc: np.ndarray, sd: np.ndarray, q: float) -> np.ndarray:
    """The ``q``-quantile of ``(1/T) sum_t N(loc[t], sd^2)``, elementwise.

    Solves ``F(h) = mean_t Phi((h - loc[t]) / sd) = q`` by Newton's method
    kept inside a bracket: the root lies between the smallest and largest
    ``loc[t] + sd Phi^-1(q)``, every evaluation of ``F`` shrinks the bracket,
    and a Newton step that leaves it is replaced by bisection.

    Parameters
    ----------
    loc : ndarray, shape (T, *shape)
    sd : ndarray, broadcasting against ``shape``, positive
    q : float in (0, 1)

    Returns
    -------
    ndarray, shape shape
    """
    shape = loc.shape[1:]
    loc = loc.reshape(loc.shape[0], -1)
    sd = np.broadcast_to(sd, shape).reshape(-1)
    shift = sd * ndtri(q)
    lo, hi = loc.min(axis=0) + shift, loc.max(axis=0) + shift
    tol = 1e-10 * (1.0 + np.max(np.abs(lo)) + np.max(np.abs(hi)))
    # a few thousand elements at a time (CHUNK_ELEMENTS)
    chunk = max(1, CHUNK_ELEMENTS // loc.shape[0])
    h = np.empty_like(lo)
    for i in range(0, loc.shape[1], chunk):
        part = slice(i, i + chunk)
        h[part] = _bracketed_newton(loc[:, part], sd[part], q, lo[part], hi[part], tol)
    return h.reshape(shape)


def _bracketed_newton(
    loc: np.ndarray,
    sd: np.ndarray,
    q: float,
    lo: np.ndarray,
    hi: np.ndarray,
    tol: float,
) -> np.ndarray:
    """:func:`mixture_quantile` of ``loc`` (T, M), ``sd`` (M,) in its bracket ``[lo, hi]``.

    ``lo`` and ``hi`` are narrowed in place.
    """
    h = loc.mean(axis=0) + np.sqrt(loc.var(axis=0) + np.square(sd)) * ndtri(q)
    h = np.clip(h, lo, hi)
    active = np.arange(h.size)  # elements not yet converged
    for _ in range(200):
        a, s_a = active, sd[active]
        z = (h[a] - loc[:, a]) / s_a
        excess = ndtr(z).mean(axis=0) - q
        density = np.exp(-np.square(z) / 2).mean(axis=0) / (s_a * np.sqrt(2 * np.pi))
        lo[a] = np.where(excess < 0, h[a], lo[a])
        hi[a] = np.where(excess < 0, hi[a], h[a])
        with np.errstate(divide="ignore", invalid="ignore"):
            newton = h[a] - excess / density
        inside = (newton > lo[a]) & (newton < hi[a])
        new = np.where(inside, newton, (lo[a] + hi[a]) / 2)
        moving = (np.abs(new - h[a]) > tol) & (hi[a] - lo[a] > tol)
        h[a] = new
        active = a[moving]
        if active.size == 0:
            break
    return h
