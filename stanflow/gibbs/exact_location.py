"""Gibbs posteriors of a location in closed form: absolute and squared loss.

For observations ``y_i`` with weights ``c_i`` (1 for the data, the counts of a
bootstrap resample) the Gibbs posterior of a location ``theta`` is
``pi(theta) ∝ exp(-omega sum_i c_i loss(y_i, theta)) prior(theta)``. Two
losses have exact posteriors, computed here without a grid:

- **absolute loss** ``|y - theta|`` with a uniform prior on ``[lower, upper]``:
  the total loss ``L(theta) = sum_i c_i |y_i - theta|`` is linear between the
  sorted observations (slope ``s = 2 C(theta) - C``, ``C(theta)`` the weight
  of the observations at or below ``theta``), so the posterior is piecewise
  exponential and its mass on a piece of length ``d`` is
  ``exp(-omega L_low) (1 - exp(-omega |s| d)) / (omega |s|)`` (``d`` when
  ``s = 0``), ``L_low`` the smaller of the piece's end values. Measuring
  ``L_low`` from the row's smallest ``L`` keeps every term in ``[0, d]``: no
  overflow, and the pieces that underflow carry no mass. The CDF at a point is
  the mass of the pieces left of it over the total. Observations outside the
  prior's support are moved to its nearer end, which changes ``L`` on the
  support by a constant only;
- **squared loss** ``(y - theta)^2`` with a flat prior on the real line: the
  posterior is ``N(ybar_c, 1 / (2 omega C))``, ``ybar_c`` the weighted mean and
  ``C = sum_i c_i``.

Both are vectorised over data sets (leading axes) and learning rates
(broadcasting). :func:`absolute_segments` does the sorting once per data set,
so that :func:`absolute_cdf` costs one pass over the pieces per learning rate.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from scipy.special import ndtr


class AbsoluteSegments(NamedTuple):
    """The total absolute loss on the prior's support as linear pieces.

    One row (last axis) per data set: the pieces between consecutive knots
    (the support's ends, the observations inside it, and the point ``x``
    whose CDF is wanted).

    Attributes
    ----------
    excess : ndarray, shape (..., K)
        The smaller of ``L`` at the piece's two ends, minus the row's smallest ``L``.
    abs_slope : ndarray, shape (..., K)
        ``|dL / dtheta|`` on the piece.
    width : ndarray, shape (..., K)
        The piece's length (0 for tied knots).
    below : ndarray of bool, shape (..., K)
        Whether the piece lies left of ``x``.
    """

    excess: np.ndarray
    abs_slope: np.ndarray
    width: np.ndarray
    below: np.ndarray


def absolute_segments(
    y: Any,
    x: Any,
    bounds: tuple[float, float],
    weights: Any = None,
) -> AbsoluteSegments:
    """The pieces of ``sum_i c_i |y_i - theta|`` on ``bounds``, split at ``x``.

    Parameters
    ----------
    y : array_like, shape (..., n)
        Data sets along the leading axes, observations along the last.
    x : float or array_like, broadcasting against ``y[..., 0]``
        The point whose posterior CDF is wanted, inside ``bounds``.
    bounds : (lower, upper)
        Support of the uniform prior, finite, ``lower < upper``.
    weights : array_like, broadcasting against ``y``, optional
        Non-negative weights ``c_i`` (bootstrap counts); default 1.

    Returns
    -------
    AbsoluteSegments
        Arrays of shape ``batch + (n + 2,)``, ``batch`` the broadcast shape of
        ``y[..., 0]``, ``weights[..., 0]`` and ``x``.
    """
    y = np.asarray(y, dtype=float)
    if y.ndim == 0 or y.shape[-1] == 0 or not np.all(np.isfinite(y)):
        raise ValueError(f"y must be finite with observations along its last axis, got shape {y.shape}")
    lower, upper = _bounds(bounds)
    c = np.ones_like(y) if weights is None else np.asarray(weights, dtype=float)
    if not np.all(np.isfinite(c) & (c >= 0)):
        raise ValueError("weights must be finite and non-negative")
    x = np.asarray(x, dtype=float)
    if not np.all((x >= lower) & (x <= upper)):
        raise ValueError(f"x must lie in bounds [{lower}, {upper}], got {x!r}")
    y, c = np.broadcast_arrays(y, c)
    batch = np.broadcast_shapes(y.shape[:-1], x.shape)
    y = np.broadcast_to(y, batch + y.shape[-1:])
    c = np.broadcast_to(c, batch + c.shape[-1:])
    ends = np.broadcast_to(np.array([lower, upper]), (*batch, 2))
    knots = np.concatenate([np.clip(y, lower, upper), ends, np.broadcast_to(x, batch)[..., None]], -1)
    mass = np.concatenate([c, np.zeros((*batch, 3))], -1)
    is_x = np.zeros(knots.shape, dtype=bool)
    is_x[..., -1] = True
    order = np.argsort(knots, axis=-1, kind="stable")
    knots, mass, is_x = (np.take_along_axis(a, order, -1) for a in (knots, mass, is_x))
    cum_mass = np.cumsum(mass, -1)
    cum_moment = np.cumsum(mass * knots, -1)
    total_mass, total_moment = cum_mass[..., -1:], cum_moment[..., -1:]
    loss_at_knots = (
        knots * cum_mass - cum_moment + (total_moment - cum_moment) - knots * (total_mass - cum_mass)
    )
    position = np.argmax(is_x, axis=-1)[..., None]
    piece = np.arange(knots.shape[-1] - 1)
    low_end = np.minimum(loss_at_knots[..., :-1], loss_at_knots[..., 1:])
    return AbsoluteSegments(
        excess=low_end - loss_at_knots.min(axis=-1, keepdims=True),
        abs_slope=np.abs(2 * cum_mass - total_mass)[..., :-1],
        width=np.diff(knots, axis=-1),
        below=piece + 1 <= position,
    )


def absolute_cdf(segments: AbsoluteSegments, omega: Any) -> np.ndarray:
    """Posterior CDF at the segments' point ``x``, absolute loss, uniform prior.

    Parameters
    ----------
    segments : AbsoluteSegments
        From :func:`absolute_segments`, batch shape ``batch``.
    omega : float or array_like
        Learning rates, positive, broadcasting against ``batch``.

    Returns
    -------
    ndarray
        ``P(theta <= x)``, shape ``broadcast(batch, omega.shape)``.
    """
    omega = _omega(omega)[..., None]
    rate = omega * segments.abs_slope
    flat = rate == 0
    shape = np.where(flat, segments.width, -np.expm1(-rate * segments.width) / np.where(flat, 1.0, rate))
    mass = np.exp(-omega * segments.excess) * shape
    return np.sum(np.where(segments.below, mass, 0.0), axis=-1) / np.sum(mass, axis=-1)


def squared_cdf(y: Any, x: Any, omega: Any, weights: Any = None) -> np.ndarray:
    """Posterior CDF at ``x``, squared loss, flat prior on the real line.

    Parameters
    ----------
    y : array_like, shape (..., n)
        Data sets along the leading axes, observations along the last.
    x : float or array_like
        Points, broadcasting against ``y[..., 0]``.
    omega : float or array_like
        Learning rates, positive, broadcasting against ``y[..., 0]``.
    weights : array_like, broadcasting against ``y``, optional
        Non-negative weights, not all zero; default 1.

    Returns
    -------
    ndarray
        ``Phi((x - ybar_c) sqrt(2 omega C))``, broadcast shape.
    """
    y = np.asarray(y, dtype=float)
    if y.ndim == 0 or y.shape[-1] == 0 or not np.all(np.isfinite(y)):
        raise ValueError(f"y must be finite with observations along its last axis, got shape {y.shape}")
    c = np.ones_like(y) if weights is None else np.asarray(weights, dtype=float)
    if not np.all(np.isfinite(c) & (c >= 0)):
        raise ValueError("weights must be finite and non-negative")
    total = np.sum(np.broadcast_to(c, np.broadcast_shapes(c.shape, y.shape)), -1)
    if np.any(total <= 0):
        raise ValueError("weights must not be all zero in a data set")
    mean = np.sum(c * y, -1) / total
    x = np.asarray(x, dtype=float)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"x must be finite, got {x!r}")
    return ndtr((x - mean) * np.sqrt(2 * _omega(omega) * total))


def _omega(omega: Any) -> np.ndarray:
    omega = np.asarray(omega, dtype=float)
    if not np.all(np.isfinite(omega) & (omega > 0)):
        raise ValueError(f"omega must be positive and finite, got {omega!r}")
    return omega


def _bounds(bounds: Any) -> tuple[float, float]:
    try:
        lower, upper = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"bounds must be (lower, upper), got {bounds!r}") from None
    if not (np.isfinite(lower) and np.isfinite(upper) and lower < upper):
        raise ValueError(f"bounds must be finite with lower < upper, got {bounds!r}")
    return lower, upper
