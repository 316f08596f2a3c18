"""GPC's bootstrap fixed point, exactly, for a location under absolute or squared loss.

Syring and Martin's calibration (:func:`stanflow.gibbs.gpc.calibrate_gpc`)
moves ``omega`` until the bootstrap coverage

    c_B(omega) = (1/B) #{b : the 100(1 - alpha)% interval of resample b's Gibbs
                         posterior at omega holds the full-data estimate}

equals ``1 - alpha``. With the resamples fixed (common random numbers),
``c_B`` is a step function of ``omega``; where it steps from ``(1 - alpha) B``
covering resamples to fewer, the algorithm has its fixed point, whatever its
step sizes. That point belongs to GPC itself, not to any implementation of
the steps: this module finds it exactly.

A resample's interval holds the estimate ``x`` when its posterior CDF at
``x`` lies in ``[alpha/2, 1 - alpha/2]`` (equal-tailed interval), and the CDF
is exact (:mod:`stanflow.gibbs.exact_location`: piecewise exponential for the
absolute loss with a uniform prior, normal for the squared loss with a flat
prior), so the count of covering resamples at any ``omega`` is exact. The
plateau on which the count equals the target ``(1 - alpha) B`` is found by
bisection in ``log omega`` for both of its ends:

- ``upper = sup {omega : count(omega) >= target}``,
- ``lower = sup {omega : count(omega) >= target + 1}``,

and the fixed point is the plateau's midpoint (Robbins-Monro with ``eps = 0``
stops anywhere on it). This assumes that the count falls through each level
once as ``omega`` grows; :func:`fixed_points` reports the count at the
midpoint, which equals the target when the plateau is not empty and the
assumption holds. The bisections run for many data sets at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from stanflow.gibbs.exact_location import absolute_cdf, absolute_segments, squared_cdf
from stanflow.gibbs.gpc.algorithm import bootstrap_indices
from stanflow.gibbs.gpc.reweighting import resample_counts
from stanflow.validation import check_int

LOSSES = ("absolute", "squared")
BRACKET = (1e-3, 1e3)
"""Default search range for ``omega``."""
ITERATIONS = 26
"""Bisection steps in ``log omega`` per plateau end (relative precision about
2e-7 on the default bracket)."""


class FixedPoints(NamedTuple):
    """GPC's fixed points of a batch of data sets.

    Attributes
    ----------
    omega : ndarray, shape (R,)
        The midpoint of the plateau where ``count == target``.
    lower, upper : ndarray, shape (R,)
        The plateau's ends.
    count : ndarray of int, shape (R,)
        Covering resamples at ``omega`` (``target`` unless the plateau is empty).
    """

    omega: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    # The field's name shadows tuple.count on purpose: it is the count this records.
    count: np.ndarray  # type: ignore[assignment]


def plateau_end(
    count: Callable[[np.ndarray], np.ndarray],
    level: int,
    low: np.ndarray,
    high: np.ndarray,
    iterations: int = ITERATIONS,
) -> np.ndarray:
    """``sup {omega : count(omega) >= level}`` by bisection in ``log omega``, per row.

    Parameters
    ----------
    count : callable
        ``omega (R,) -> covering resamples (R,)``, falling as ``omega`` grows.
    level : int
    low, high : ndarray, shape (R,)
        Brackets: ``count(low) >= level > count(high)`` (checked).
    iterations : int

    Returns
    -------
    ndarray, shape (R,)
        The bracket's upper end after the bisection (within ``(high / low)^(2^-iterations)``).
    """
    iterations = check_int(iterations, "iterations")
    low, high = np.array(low, dtype=float), np.array(high, dtype=float)
    if low.shape != high.shape or not np.all((low > 0) & (low < high)):
        raise ValueError("low and high must have one shape with 0 < low < high")
    if np.any(count(low) < level) or np.any(count(high) >= level):
        raise ValueError(
            f"the bracket does not hold the crossing of {level} covering resamples "
            "for every data set: widen bracket"
        )
    for _ in range(iterations):
        middle = np.sqrt(low * high)
        reached = count(middle) >= level
        low = np.where(reached, middle, low)
        high = np.where(reached, high, middle)
    return high


def fixed_points(
    count: Callable[[np.ndarray], np.ndarray],
    target: int,
    rows: int,
    bracket: tuple[float, float] = BRACKET,
) -> FixedPoints:
    """The plateaus ``count == target`` of ``rows`` count functions, and their midpoints.

    Parameters
    ----------
    count : callable
        ``omega (rows,) -> covering resamples (rows,)``.
    target : int
        ``(1 - alpha) B``.
    rows : int
        Number of data sets.
    bracket : (float, float)
        Search range for ``omega``.

    Returns
    -------
    FixedPoints
    """
    if not 0 < bracket[0] < bracket[1] < np.inf:
        raise ValueError(f"bracket must be (low, high) with 0 < low < high, got {bracket!r}")
    rows = check_int(rows, "rows")
    start = np.full(rows, float(bracket[0]))
    stop = np.full(rows, float(bracket[1]))
    upper = plateau_end(count, target, start, stop)
    lower = plateau_end(count, target + 1, start, stop)
    omega = 0.5 * (lower + upper)
    return FixedPoints(omega, lower, upper, count(omega))


def bootstrap_count(
    y: Any,
    estimate: Any,
    counts: np.ndarray,
    *,
    loss: str,
    alpha: float = 0.05,
    bounds: tuple[float, float] | None = None,
) -> Callable[[np.ndarray], np.ndarray]:
    """The exact count of covering resamples as a function of ``omega``, per data set.

    Parameters
    ----------
    y : array_like, shape (R, n)
        ``R`` data sets.
    estimate : array_like, shape (R,)
        Each data set's full-data estimate (its median or mean).
    counts : ndarray, shape (R, B, n)
        Bootstrap counts of each data set's resamples.
    loss : {"absolute", "squared"}
    alpha : float, default 0.05
        Equal-tailed ``100(1 - alpha)%`` intervals.
    bounds : (lower, upper), optional
        The uniform prior's support; required for the absolute loss (the
        squared loss uses a flat prior on the real line).

    Returns
    -------
    callable
        ``omega (R,) -> ndarray of int (R,)``.
    """
    y, estimate = _data(y, estimate)
    counts = np.asarray(counts, dtype=float)
    if counts.ndim != 3 or counts.shape[0] != y.shape[0] or counts.shape[2] != y.shape[1]:
        raise ValueError(
            f"counts must have shape (R, B, n) = ({y.shape[0]}, B, {y.shape[1]}), "
            f"got {counts.shape}"
        )
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if loss == "absolute":
        if bounds is None:
            raise ValueError("bounds are required with the absolute loss (the uniform prior's support)")
        segments = absolute_segments(y[:, None, :], estimate[:, None], bounds, counts)

        def cdf(omega: np.ndarray) -> np.ndarray:
            return absolute_cdf(segments, omega[:, None])
    elif loss == "squared":
        # the squared loss sees a resample through its weighted mean and total weight only
        total = counts.sum(axis=-1, keepdims=True)
        means = counts @ y[:, :, None] / total

        def cdf(omega: np.ndarray) -> np.ndarray:
            return squared_cdf(means, estimate[:, None], omega[:, None], total)
    else:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")

    def count(omega: np.ndarray) -> np.ndarray:
        value = cdf(np.asarray(omega, dtype=float))
        return np.sum((value >= alpha / 2) & (value <= 1 - alpha / 2), axis=-1)

    return count


def gpc_fixed_points(
    y: Any,
    *,
    loss: str,
    seeds: Any,
    B: int = 200,
    alpha: float = 0.05,
    bounds: tuple[float, float] | None = None,
    estimate: Any = None,
    bracket: tuple[float, float] = BRACKET,
) -> FixedPoints:
    """GPC's bootstrap fixed point for each of ``R`` data sets.

    Parameters
    ----------
    y : array_like, shape (R, n)
        Data sets, at least 2 observations each.
    loss : {"absolute", "squared"}
        Median (uniform prior on ``bounds``) or mean (flat prior).
    seeds : array_like of int, shape (R,)
        Data set ``r``'s resamples are ``bootstrap_indices(n, B,
        SeedSequence(seeds[r]))``, those of ``calibrate_gpc(y[r], seed=seeds[r])``.
    B : int, default 200
    alpha : float, default 0.05
        ``(1 - alpha) B`` must be a whole number of resamples.
    bounds : (lower, upper), optional
        Required for the absolute loss.
    estimate : array_like, shape (R,), optional
        Full-data estimates; default the sample median (the midpoint of the two
        middle values for even ``n``) or the mean.
    bracket : (float, float)
        Search range for ``omega``.

    Returns
    -------
    FixedPoints
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    y = np.asarray(y, dtype=float)
    if y.ndim != 2 or y.shape[1] < 2:
        raise ValueError(f"y must have shape (R, n) with n >= 2, got {y.shape}")
    seeds = np.asarray(seeds)
    if seeds.shape != (y.shape[0],) or not np.issubdtype(seeds.dtype, np.integer):
        raise ValueError(f"seeds must be {y.shape[0]} integers, one per data set, got {seeds!r}")
    B = check_int(B, "B", 2)
    target = (1 - alpha) * B
    if not 0 < alpha < 1 or abs(target - round(target)) > 1e-9:
        raise ValueError(f"alpha must be in (0, 1) with (1 - alpha) B whole, got alpha={alpha!r}, B={B}")
    if estimate is None:
        estimate = np.median(y, axis=1) if loss == "absolute" else np.mean(y, axis=1)
    counts = bootstrap_counts(y.shape[1], B, seeds)
    count = bootstrap_count(y, estimate, counts, loss=loss, alpha=alpha, bounds=bounds)
    return fixed_points(count, round(target), y.shape[0], bracket)


def bootstrap_counts(n: int, B: int, seeds: Any) -> np.ndarray:
    """Bootstrap counts of ``n`` observations, ``B`` resamples per seed.

    Parameters
    ----------
    n, B : int
    seeds : array_like of int, shape (R,)
        Resamples ``bootstrap_indices(n, B, SeedSequence(seed))``, as
        :func:`stanflow.gibbs.gpc.calibrate_gpc` draws them with ``seed=seed``.

    Returns
    -------
    ndarray, shape (R, B, n)
    """
    return np.stack(
        [resample_counts(bootstrap_indices(n, B, np.random.SeedSequence(int(s))), n) for s in seeds]
    )


def _data(y: Any, estimate: Any) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y, dtype=float)
    if y.ndim != 2 or y.shape[1] == 0 or not np.all(np.isfinite(y)):
        raise ValueError(f"y must be a finite (R, n) array, got shape {y.shape}")
    estimate = np.asarray(estimate, dtype=float)
    if estimate.shape != (y.shape[0],) or not np.all(np.isfinite(estimate)):
        raise ValueError(
            f"estimate must be {y.shape[0]} finite values, one per data set, "
            f"got shape {estimate.shape}"
        )
    return y, estimate
