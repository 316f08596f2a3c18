"""Credible regions of posteriors given by draws, and whether they hold a point.

GPC counts the bootstrap resamples whose ``100(1 - alpha)%`` credible region
holds the full-data estimate. For a scalar parameter the region is the
equal-tailed interval; for a vector, the ellipsoid ``{theta: (theta - m)' S^-1
(theta - m) <= q}`` of the draws' mean ``m`` and covariance ``S``, with ``q`` the
``1 - alpha`` quantile of the draws' own Mahalanobis distances (an elliptical
stand-in for the highest-density region). Values confined to a subspace (a
simplex's, which sum to one) have a singular covariance; their ellipsoids are
taken in coordinates of the draws' span (:func:`span_coordinates`). The
weighted counterparts, for draws shared by many posteriors through importance
weights, are in :mod:`stanflow.gibbs.gpc.reweighting`.
"""

from __future__ import annotations

import numpy as np

SPAN_TOLERANCE = 1e-10
"""A direction of the draws' scatter whose variance is below this share of the
largest is rounding, not spread. At full precision a simplex's sum varies by
about 1e-32 of its values' variance; draws read from CSV files must be written
at full precision too (CmdStan's ``sig_figs=18``), as stanflow's are."""


def draws_coverage(draws: np.ndarray, estimate: np.ndarray, alpha: float) -> float:
    """Fraction of posteriors (given by draws) whose credible region holds ``estimate``.

    Parameters
    ----------
    draws : ndarray, shape (B, S) or (B, S, K)
        ``S`` posterior draws for each of ``B`` resamples, of a scalar or of a
        ``K``-vector.
    estimate : float or ndarray, shape (K,)
        The full-data estimate.
    alpha : float
        Regions of level ``1 - alpha``: equal-tailed intervals for a scalar,
        Mahalanobis ellipsoids of the draws for a vector (module docstring).

    Returns
    -------
    float
    """
    return float(np.mean(draws_inside(draws, estimate, alpha)))


def draws_inside(draws: np.ndarray, estimate: np.ndarray, alpha: float) -> np.ndarray:
    """Whether each posterior's credible region holds ``estimate``.

    Parameters as :func:`draws_coverage`.

    Returns
    -------
    ndarray of bool, shape (B,)
    """
    check_alpha(alpha)
    draws = np.asarray(draws, dtype=float)
    if draws.ndim == 2:
        low, high = np.quantile(draws, [alpha / 2, 1 - alpha / 2], axis=1)
        return (low <= estimate) & (estimate <= high)
    if draws.ndim != 3:
        raise ValueError(f"draws must have shape (B, S) or (B, S, K), got {draws.shape}")
    estimate = np.asarray(estimate, dtype=float).reshape(-1)
    if estimate.shape != draws.shape[2:]:
        raise ValueError(
            f"estimate must have shape {draws.shape[2:]}, got {estimate.shape}"
        )
    draws, estimate = span_coordinates(draws, estimate)
    mean = draws.mean(axis=1, keepdims=True)
    centred = draws - mean
    cov = np.einsum("bsk,bsl->bkl", centred, centred) / (draws.shape[1] - 1)
    inverse = np.linalg.inv(cov)
    d_draws = np.einsum("bsk,bkl,bsl->bs", centred, inverse, centred)
    gap = estimate - mean[:, 0, :]
    d_estimate = np.einsum("bk,bkl,bl->b", gap, inverse, gap)
    radius = np.quantile(d_draws, 1 - alpha, axis=1)
    return d_estimate <= radius


def check_alpha(alpha: float) -> None:
    """``alpha`` must be a number in (0, 1)."""
    if isinstance(alpha, bool) or not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


def span_coordinates(draws: np.ndarray, estimate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Draws and estimate in coordinates of the affine span of the draws.

    A simplex's values sum to one, so their covariance is singular and no
    Mahalanobis distance exists in them; in any coordinates of the plane the
    draws span it does, and it is the same in all of them. The estimate's
    component off that plane is dropped. When the draws span all ``K``
    dimensions the inputs are returned as they are.

    Parameters
    ----------
    draws : ndarray, shape (..., K)
    estimate : ndarray, shape (K,)

    Returns
    -------
    draws : ndarray, shape (..., R)
    estimate : ndarray, shape (R,)
        ``R <= K`` the dimension of the span (:func:`span_basis`).
    """
    basis = span_basis(draws)
    return (draws, estimate) if basis is None else (draws @ basis, estimate @ basis)


def span_basis(draws: np.ndarray) -> np.ndarray | None:
    """An orthonormal basis of the directions the draws vary in, or None if all do.

    Directions whose variance is below :data:`SPAN_TOLERANCE` of the largest
    are rounding, not spread.

    Parameters
    ----------
    draws : ndarray, shape (..., K)

    Returns
    -------
    ndarray, shape (K, R), or None
    """
    flat = draws.reshape(-1, draws.shape[-1])
    centred = flat - flat.mean(axis=0)
    variances, directions = np.linalg.eigh(centred.T @ centred)
    kept = variances > SPAN_TOLERANCE * variances[-1]
    return None if kept.all() else directions[:, kept]
