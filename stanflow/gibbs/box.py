"""A template's box ``[lower, upper]``: exact shipped priors on it, and Stan's transform of it.

The shipped templates (:mod:`stanflow.gibbs.templates`) bound their parameters
to a box. Two things about it are used beyond the templates themselves:

- :class:`BoxPrior`: a shipped prior on the box (``uniform`` on a finite box,
  ``normal`` truncated to it) with exact draws and its density normalised on
  the box, where the learning-rate path starts
  (:class:`~stanflow.gibbs.path.target.PathTarget`);
- :func:`unconstrain`: Stan's unconstraining transform of box-bounded
  parameters, with :data:`LOGIT_LIMIT`, the clip that keeps a point on a bound
  finite (the path's particles and GPC's grid backend both map ``theta`` to
  the program's unconstrained scale by it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

LOGIT_LIMIT = 40.0
"""Unconstrained coordinates of bounded parameters are clipped to ``+-40``: a draw
on a bound (of probability zero, but possible in floating point) stays finite."""


@dataclass(frozen=True)
class BoxPrior:
    """A shipped prior on the box ``[lower, upper]``: exact draws, normalised density.

    Attributes
    ----------
    name : {"uniform", "normal"}
    params : tuple of float
        ``()`` or ``(mean, sd)``.
    lower, upper : ndarray, shape (K,)
    """

    name: str
    params: tuple[float, ...]
    lower: np.ndarray
    upper: np.ndarray

    def log_density(self, theta: np.ndarray) -> np.ndarray:
        """The prior's log density normalised on the box; ``-inf`` outside, shape ``(N,)``."""
        inside = np.all((theta >= self.lower) & (theta <= self.upper), axis=1)
        if self.name == "uniform":
            value = np.full(len(theta), -self.log_mass())
        else:
            mean, sd = self.params
            z = (theta - mean) / sd
            value = np.sum(-0.5 * z**2 - math.log(sd) - 0.5 * math.log(2 * math.pi), axis=1)
            value = value - self.log_mass()
        return np.where(inside, value, -np.inf)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` exact draws from the prior on the box, shape ``(n, K)``."""
        K = len(self.lower)
        if self.name == "uniform":
            return rng.uniform(self.lower, self.upper, size=(n, K))
        mean, sd = self.params
        a, b = (self.lower - mean) / sd, (self.upper - mean) / sd
        return stats.truncnorm.rvs(a, b, loc=mean, scale=sd, size=(n, K), random_state=rng)

    def log_mass(self) -> float:
        """``log`` of the prior's mass on the box (its normalising constant)."""
        if self.name == "uniform":
            return float(np.sum(np.log(self.upper - self.lower)))
        mean, sd = self.params
        a, b = (self.lower - mean) / sd, (self.upper - mean) / sd
        # log(Phi(b) - Phi(a)), accurate in either tail.
        upper_tail = a > 0
        lo = np.where(upper_tail, -b, a)
        hi = np.where(upper_tail, -a, b)
        return float(np.sum(special.log_ndtr(hi) + np.log1p(
            -np.exp(special.log_ndtr(lo) - special.log_ndtr(hi)))))


def unconstrain(theta: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Stan's unconstraining transform of box-bounded parameters, shape of ``theta``.

    Identity without bounds, ``log(theta - lower)`` / ``log(upper - theta)``
    with one, ``logit((theta - lower) / (upper - lower))`` with both.
    """
    low, high = np.isfinite(lower), np.isfinite(upper)
    with np.errstate(divide="ignore", invalid="ignore"):
        both = np.log(theta - lower) - np.log(upper - theta)
        only_low = np.log(theta - lower)
        only_high = np.log(upper - theta)
    return np.where(low & high, both, np.where(low, only_low, np.where(high, only_high, theta)))
