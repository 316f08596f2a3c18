"""Exact Gibbs posteriors of a scalar parameter on a grid.

For data ``y`` (``n`` observations), a loss and a prior density ``pi`` on
``[theta[0], theta[-1]]``, the Gibbs posterior with learning rate ``omega`` is

    pi_n(theta) = exp(-omega L_n(theta)) pi(theta) / Z_n(omega),
    L_n(theta) = sum_i loss(y_i, theta),
    Z_n(omega) = integral of exp(-omega L_n(theta)) pi(theta) dtheta.

Everything is computed at the grid points with quadrature weights (trapezoid,
or Simpson on an evenly spaced grid with an odd number of points), in log space
(log-sum-exp), and vectorised: many data sets at once (leading axes of ``y``)
and many learning rates at once (the shape of ``omega``). Typical use::

    theta = np.linspace(0, 8, 2001)
    sums = loss_sums(theta, y, loss_function("absolute"))   # (..., G), once
    post = posterior(theta, sums, omega=[0.5, 1.0, 2.0])   # batch (..., 3)
    interval(post, 0.95)                                   # (..., 3, 2)

The prior is normalised on the grid, so ``log_z`` is ``log Z_n(omega)`` for the
prior truncated to the grid's range.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

RULES = ("trapezoid", "simpson")
"""Quadrature rules for :func:`quadrature_weights`."""


class GridPosterior(NamedTuple):
    """Gibbs posteriors on one grid, for a batch of data sets and learning rates.

    Attributes
    ----------
    theta : ndarray, shape (G,)
        The grid, strictly increasing.
    weights : ndarray, shape (G,)
        Quadrature weights: ``integral g ~ sum(weights * g(theta))``.
    log_density : ndarray, shape (*batch, G)
        Normalised log density at the grid points:
        ``sum(weights * exp(log_density), -1) == 1``.
    log_z : ndarray, shape batch
        ``log Z_n(omega)``.
    """

    theta: np.ndarray
    weights: np.ndarray
    log_density: np.ndarray
    log_z: np.ndarray


def quadrature_weights(theta: np.ndarray, rule: str = "trapezoid") -> np.ndarray:
    """Quadrature weights for integrating over the grid ``theta``.

    Parameters
    ----------
    theta : array_like, shape (G,)
        Strictly increasing, finite, at least 3 points.
    rule : {"trapezoid", "simpson"}, default "trapezoid"
        Trapezoid works on any grid (exact for piecewise linear integrands);
        composite Simpson needs evenly spaced points and an odd ``G`` (exact
        for cubics).

    Returns
    -------
    ndarray, shape (G,)
    """
    theta = _check_grid(theta)
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    steps = np.diff(theta)
    if rule == "trapezoid":
        return np.concatenate([[0.0], steps / 2]) + np.concatenate([steps / 2, [0.0]])
    if len(theta) % 2 == 0 or not np.allclose(steps, steps[0], rtol=1e-9, atol=0):
        raise ValueError(
            "theta: Simpson's rule needs evenly spaced points and an odd number of "
            f"them, got {len(theta)} points"
        )
    weights = np.full(len(theta), 2.0)
    weights[1::2] = 4.0
    weights[[0, -1]] = 1.0
    return weights * steps[0] / 3


def loss_sums(
    theta: np.ndarray,
    y: np.ndarray,
    loss: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    max_elements: int = 2**23,
) -> np.ndarray:
    """Total losses ``L_n(theta_g) = sum_i loss(y_i, theta_g)`` at the grid points.

    Parameters
    ----------
    theta : array_like, shape (G,)
        The grid.
    y : array_like, shape (..., n)
        Data sets along the leading axes, observations along the last.
    loss : callable
        ``(y, f) -> ndarray`` broadcasting its arguments, e.g.
        ``stanflow.losses.loss_function("absolute")``.
    max_elements : int, default 2**23
        Data sets are processed in chunks of at most this many ``(i, g)``
        loss evaluations, to bound memory.

    Returns
    -------
    ndarray, shape (..., G)
    """
    theta = _check_grid(theta)
    y = np.asarray(y, dtype=float)
    if y.ndim == 0 or y.shape[-1] == 0:
        raise ValueError(
            f"y must have observations along its last axis, got shape {y.shape}"
        )
    if not np.all(np.isfinite(y)):
        raise ValueError("y must be finite")
    if not callable(loss):
        raise TypeError(f"loss must be callable (y, f) -> losses, got {loss!r}")
    rows = y.reshape(-1, y.shape[-1])
    chunk = max(1, max_elements // (rows.shape[1] * len(theta)))
    sums = np.concatenate(
        [
            np.sum(loss(part[:, :, None], theta[None, None, :]), axis=1)
            for part in np.split(rows, range(chunk, len(rows), chunk))
        ]
    )
    if not np.all(np.isfinite(sums)):
        raise ValueError("loss returned values that are not finite on the grid")
    return sums.reshape(y.shape[:-1] + theta.shape)


def posterior(
    theta: np.ndarray,
    sums: np.ndarray,
    omega: float | np.ndarray,
    *,
    log_prior: np.ndarray | None = None,
    rule: str = "trapezoid",
) -> GridPosterior:
    """Gibbs posteriors ``exp(-omega L_n) pi / Z_n(omega)`` on the grid.

    Parameters
    ----------
    theta : array_like, shape (G,)
        The grid.
    sums : array_like, shape (..., G)
        Total losses ``L_n`` at the grid points, from :func:`loss_sums`.
    omega : float or array_like of float, shape W
        Learning rates, positive and finite.
    log_prior : array_like, shape (G,), optional
        Prior log density at the grid points, up to a constant (see
        :func:`stanflow.gibbs.priors.log_prior_on_grid`); it is normalised on
        the grid. Default: uniform on ``[theta[0], theta[-1]]``.
    rule : {"trapezoid", "simpson"}, default "trapezoid"
        Quadrature rule, see :func:`quadrature_weights`.

    Returns
    -------
    GridPosterior
        With batch shape ``sums.shape[:-1] + W``: every data set with every
        learning rate.
    """
    weights = quadrature_weights(theta, rule)
    theta = np.asarray(theta, dtype=float)
    sums = np.asarray(sums, dtype=float)
    if sums.ndim == 0 or sums.shape[-1] != len(theta):
        raise ValueError(
            f"sums must have shape (..., {len(theta)}) to match theta, "
            f"got shape {sums.shape}"
        )
    if not np.all(np.isfinite(sums)):
        raise ValueError("sums must be finite")
    omega = np.asarray(omega, dtype=float)
    if not np.all(np.isfinite(omega) & (omega > 0)):
        raise ValueError(f"omega must be positive and finite, got {omega}")
    if log_prior is None:
        log_prior = np.zeros(len(theta))
    log_prior = np.asarray(log_prior, dtype=float)
    if log_prior.shape != theta.shape or np.any(np.isnan(log_prior)):
        raise ValueError(
            f"log_prior must be a shape ({len(theta)},) array without NaN, "
            f"got shape {log_prior.shape}"
        )
    if np.all(log_prior == -np.inf) or np.any(log_prior == np.inf):
        raise ValueError("log_prior must be finite somewhere and never +inf")
    log_prior = log_prior - _log_integral(log_prior, weights)
    scaled = -omega.reshape((*omega.shape, 1)) * sums.reshape(
        sums.shape[:-1] + (1,) * omega.ndim + theta.shape
    )
    log_unnormalised = scaled + log_prior
    log_z = _log_integral(log_unnormalised, weights)
    return GridPosterior(
        theta=theta,
        weights=weights,
        log_density=log_unnormalised - log_z[..., None],
        log_z=log_z,
    )


def density(post: GridPosterior) -> np.ndarray:
    """The normalised density at the grid points, shape ``(*batch, G)``."""
    return np.exp(post.log_density)


def cdf(post: GridPosterior) -> np.ndarray:
    """The CDF at the grid points, shape ``(*batch, G)``.

    The density is integrated by the trapezoid rule, so the CDF is 0 at
    ``theta[0]`` and, with trapezoid weights, exactly 1 at ``theta[-1]``
    (with Simpson's weights, 1 up to the trapezoid rule's error).
    """
    values = density(post)
    pieces = 0.5 * (values[..., 1:] + values[..., :-1]) * np.diff(post.theta)
    return np.concatenate(
        [np.zeros((*values.shape[:-1], 1)), np.cumsum(pieces, axis=-1)], axis=-1
    )


def cdf_at(post: GridPosterior, x: float | np.ndarray) -> np.ndarray:
    """The CDF at ``x``, interpolated linearly between grid points.

    Parameters
    ----------
    post : GridPosterior
    x : float or array_like
        Points, broadcast against the batch shape (e.g. one true value per
        data set, or shape ``(P, *batch)`` for ``P`` points each).

    Returns
    -------
    ndarray, shape ``broadcast(x.shape, batch)``
        0 below ``theta[0]``, the CDF's last value above ``theta[-1]``.
    """
    values = cdf(post)
    x = np.asarray(x, dtype=float)
    shape = np.broadcast_shapes(x.shape, values.shape[:-1])
    values = np.broadcast_to(values, shape + values.shape[-1:])
    x = np.broadcast_to(x, shape)
    theta = post.theta
    k = np.clip(np.searchsorted(theta, x, side="right") - 1, 0, len(theta) - 2)
    t = np.clip((x - theta[k]) / (theta[k + 1] - theta[k]), 0.0, 1.0)
    low = np.take_along_axis(values, k[..., None], -1)[..., 0]
    high = np.take_along_axis(values, k[..., None] + 1, -1)[..., 0]
    return low + t * (high - low)


def quantile(post: GridPosterior, q: float | np.ndarray) -> np.ndarray:
    """Quantiles, by linear interpolation of the CDF between grid points.

    Parameters
    ----------
    post : GridPosterior
    q : float or array_like, shape Q
        Probabilities in (0, 1).

    Returns
    -------
    ndarray, shape ``batch + Q``
    """
    q = np.asarray(q, dtype=float)
    if not np.all((q > 0) & (q < 1)):
        raise ValueError(f"q must be in (0, 1), got {q}")
    values = cdf(post)
    values = values.reshape(values.shape[:-1] + (1,) * q.ndim + values.shape[-1:])
    # First grid point whose CDF reaches q: F[k - 1] < q <= F[k].
    k = np.clip(np.sum(values < q[..., None], axis=-1), 1, len(post.theta) - 1)
    low = np.take_along_axis(values, (k - 1)[..., None], -1)[..., 0]
    high = np.take_along_axis(values, k[..., None], -1)[..., 0]
    t = np.clip((q - low) / np.where(high > low, high - low, 1.0), 0.0, 1.0)
    return post.theta[k - 1] + t * (post.theta[k] - post.theta[k - 1])


def interval(post: GridPosterior, level: float = 0.95) -> np.ndarray:
    """Equal-tailed credible intervals.

    Parameters
    ----------
    post : GridPosterior
    level : float, default 0.95
        Probability in (0, 1); the tails hold ``(1 - level) / 2`` each.

    Returns
    -------
    ndarray, shape ``(*batch, 2)``
        Lower and upper ends.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    tail = (1 - level) / 2
    return quantile(post, np.array([tail, 1 - tail]))


def _check_grid(theta: np.ndarray) -> np.ndarray:
    theta = np.asarray(theta, dtype=float)
    if theta.ndim != 1 or len(theta) < 3:
        raise ValueError(
            f"theta must be a 1-D grid of at least 3 points, got shape {theta.shape}"
        )
    if not np.all(np.isfinite(theta)) or np.any(np.diff(theta) <= 0):
        raise ValueError("theta must be finite and strictly increasing")
    return theta


def _log_integral(log_values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``log sum(weights * exp(log_values), -1)`` without overflow (log-sum-exp)."""
    top = np.max(log_values, axis=-1, keepdims=True)
    return top[..., 0] + np.log(np.sum(weights * np.exp(log_values - top), axis=-1))
