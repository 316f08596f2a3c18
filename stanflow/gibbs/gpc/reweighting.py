"""Importance reweighting of one Gibbs posterior sample into many.

A bootstrap resample ``b`` of the data is a vector of counts ``c_b`` (how often
each observation was drawn), so its Gibbs posterior at learning rate ``omega`` is

    pi_b,omega(theta) ∝ exp(-omega * sum_i c_bi l_i(theta)) * prior(theta),

with ``l_i(theta)`` the loss of observation ``i``. Draws ``theta_s`` from one
proposal, the full-data Gibbs posterior at a smaller rate ``omega_ref``
(``∝ exp(-omega_ref * sum_i l_i(theta)) * prior(theta)``), serve every resample
and every rate through the self-normalised importance weights

    log w_bs = -omega * sum_i c_bi l_i(theta_s) + omega_ref * sum_i l_i(theta_s);

the prior cancels. A tempered proposal (``omega_ref < omega``) is wider than
the targets, so the weights are bounded and have finite variance. The pointwise
losses ``l_i(theta_s)`` come from the templates' generated quantity
``pointwise_loss`` (data ``save_pointwise_loss = 1``), so a user's own loss
file works unchanged. The Kish effective sample size of each resample's
weights measures how well the proposal serves it.

All functions are pure NumPy kernels.
"""

from __future__ import annotations

import numpy as np

from stanflow.gibbs.gpc.regions import span_coordinates


def resample_counts(indices: np.ndarray, n: int) -> np.ndarray:
    """Counts of each observation in each bootstrap resample.

    Parameters
    ----------
    indices : ndarray of int, shape (B, m)
        Row ``b`` holds the observation indices of resample ``b``.
    n : int
        Number of observations.

    Returns
    -------
    ndarray of float, shape (B, n)
    """
    indices = np.asarray(indices)
    if indices.ndim != 2 or indices.size == 0:
        raise ValueError(f"indices must be a non-empty 2-D array, got shape {indices.shape}")
    if indices.min() < 0 or indices.max() >= n:
        raise ValueError(f"indices must lie in [0, {n}), got range [{indices.min()}, {indices.max()}]")
    counts = np.zeros((indices.shape[0], n))
    np.add.at(counts, (np.arange(indices.shape[0])[:, None], indices), 1.0)
    return counts


def log_weights(
    pointwise_loss: np.ndarray, counts: np.ndarray, omega: float, omega_ref: float
) -> np.ndarray:
    """Unnormalised log importance weights of every draw for every resample.

    Parameters
    ----------
    pointwise_loss : ndarray, shape (S, n)
        ``l_i(theta_s)`` for the ``S`` proposal draws.
    counts : ndarray, shape (B, n)
        Resample counts (:func:`resample_counts`); a row of ones is the full data.
    omega : float
        Target learning rate.
    omega_ref : float
        The proposal's learning rate (on the full data).

    Returns
    -------
    ndarray, shape (B, S)
    """
    pointwise_loss = np.asarray(pointwise_loss, dtype=float)
    counts = np.asarray(counts, dtype=float)
    if pointwise_loss.ndim != 2 or counts.ndim != 2 or pointwise_loss.shape[1] != counts.shape[1]:
        raise ValueError(
            "pointwise_loss (S, n) and counts (B, n) must share n, got shapes "
            f"{pointwise_loss.shape} and {counts.shape}"
        )
    if not np.all(np.isfinite(pointwise_loss)):
        raise ValueError("pointwise_loss must be finite")
    total = pointwise_loss.sum(axis=1)
    return -omega * (counts @ pointwise_loss.T) + omega_ref * total[None, :]


def normalise(log_w: np.ndarray) -> np.ndarray:
    """Self-normalised weights along the last axis (stable in log space)."""
    log_w = np.asarray(log_w, dtype=float)
    w = np.exp(log_w - log_w.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True)


def kish_ess(weights: np.ndarray) -> np.ndarray:
    """Kish's effective sample size ``1 / sum w^2`` of normalised weights (last axis)."""
    weights = np.asarray(weights, dtype=float)
    return 1.0 / np.sum(weights**2, axis=-1)


def interval_coverage(
    draws: np.ndarray, weights: np.ndarray, estimate: float, alpha: float
) -> np.ndarray:
    """Whether each weighted sample's equal-tailed interval holds ``estimate``.

    The ``100(1 - alpha)%`` equal-tailed interval of a weighted sample holds a
    point ``e`` exactly when its weighted CDF at ``e`` lies in
    ``[alpha/2, 1 - alpha/2]``, so no quantile needs to be computed.

    Parameters
    ----------
    draws : ndarray, shape (S,)
        Scalar draws shared by all weightings.
    weights : ndarray, shape (B, S)
        Normalised weights, one row per sample.
    estimate : float
    alpha : float

    Returns
    -------
    ndarray of bool, shape (B,)
    """
    cdf = weights @ (np.asarray(draws, dtype=float) <= estimate)
    return (cdf >= alpha / 2) & (cdf <= 1 - alpha / 2)


def ellipsoid_coverage(
    draws: np.ndarray, weights: np.ndarray, estimate: np.ndarray, alpha: float
) -> np.ndarray:
    """Whether each weighted sample's Mahalanobis ellipsoid holds ``estimate``.

    The weighted counterpart of :func:`stanflow.gibbs.gpc.regions.draws_coverage` for
    vectors: the ellipsoid of the weighted mean ``m_b`` and covariance ``C_b``
    whose radius is the weighted ``1 - alpha`` quantile of the draws' own
    distances ``(theta_s - m_b)' C_b^-1 (theta_s - m_b)``; it holds ``estimate``
    when the weight of draws strictly closer than ``estimate`` is at most
    ``1 - alpha``. Draws confined to a subspace (a simplex's values) are taken
    in coordinates of their span (:func:`~stanflow.gibbs.gpc.regions.span_coordinates`).

    Parameters
    ----------
    draws : ndarray, shape (S, K)
    weights : ndarray, shape (B, S)
    estimate : ndarray, shape (K,)
    alpha : float

    Returns
    -------
    ndarray of bool, shape (B,)
    """
    draws, estimate = span_coordinates(np.asarray(draws, dtype=float),
                                       np.asarray(estimate, dtype=float))
    S, K = draws.shape
    # Quadratic forms as matrix products over the flattened outer products, so
    # that no (B, S, K) array is formed.
    outer = (draws[:, :, None] * draws[:, None, :]).reshape(S, K * K)
    mean = weights @ draws  # (B, K)
    cov = (weights @ outer).reshape(-1, K, K) - mean[:, :, None] * mean[:, None, :]
    inverse = np.linalg.inv(cov)
    linear = np.einsum("bkl,bl->bk", inverse, mean)
    offset = np.einsum("bk,bk->b", mean, linear)
    d_draws = inverse.reshape(-1, K * K) @ outer.T - 2 * linear @ draws.T + offset[:, None]
    gap = estimate[None, :] - mean
    d_estimate = np.einsum("bk,bkl,bl->b", gap, inverse, gap)
    closer = np.sum(weights * (d_draws < d_estimate[:, None]), axis=1)
    return closer <= 1 - alpha
