"""The bootstrap's shape: the covariance of the resamples' posterior means.

``adjust="bootstrap"`` (:func:`~stanflow.gibbs.path.calibration.calibrate_path`,
:func:`~stanflow.gibbs.importance.calibrate_importance`) moves every posterior
to the shape of the sandwich ``H^-1 J H^-1`` as the shape fix does
(:mod:`stanflow.gibbs.shape`), with the shape read from GPC's own resamples
instead of ``H`` and ``J``: each resample's posterior mean varies about the
full data's as the estimate about the truth, to first order, so their
covariance estimates the sandwich up to its size (which ``omega`` sets). The
means are read by the weights GPC reads its regions with: particles shared by
all resamples (a path reweighted, an importance sample;
:func:`bootstrap_shape`) or particles moved to each resample
(:meth:`~stanflow.gibbs.path.transport.TransportCoverage.bootstrap_shape`).
"""

from __future__ import annotations

import warnings

import numpy as np

from stanflow.gibbs.gpc.reweighting import kish_ess, normalise

SHAPE_NOISE = 0.05
"""A warning when the resamples' means average ``1 / ESS`` above this."""


def bootstrap_shape(
    draws: np.ndarray, resample_loss: np.ndarray, log_base: np.ndarray, omega: float
) -> tuple[np.ndarray, np.ndarray]:
    """The bootstrap's shape: the covariance of the resamples' posterior means at ``omega``.

    The estimate varies as ``H^-1 J H^-1 / n`` and each resample's posterior
    mean about the full data's as the estimate about the truth, to first
    order: their covariance estimates the sandwich's shape without ``H`` (no
    kernel, no bandwidth, whatever the loss's smoothness). Each mean is read
    by weights ``exp(-omega resample_loss_b + log_base)``, as
    :func:`~stanflow.gibbs.path.coverage.region_statistic` reads the regions.

    Parameters
    ----------
    draws : ndarray, shape (S, K)
    resample_loss : ndarray, shape (B, S)
    log_base : ndarray, shape (S,)
    omega : float

    Returns
    -------
    shape : ndarray, shape (K, K)
        Positive definite.
    ess : ndarray, shape (B,)
        The effective draws each mean was read from.

    Raises
    ------
    ValueError
        With ``B <= K`` resamples (their covariance is singular), or when the
        means' covariance is not positive definite.
    """
    w = normalise(-omega * (resample_loss - resample_loss.min(axis=1, keepdims=True)) + log_base)
    return means_shape(w @ draws), kish_ess(w)


def means_shape(means: np.ndarray) -> np.ndarray:
    """The covariance of the ``B`` resamples' posterior means, checked.

    Parameters
    ----------
    means : ndarray, shape (B, K)

    Returns
    -------
    ndarray, shape (K, K)
        Positive definite.

    Raises
    ------
    ValueError
        With ``B <= K`` resamples (their covariance is singular), or when the
        means' covariance is not positive definite.
    """
    B, K = means.shape
    if B <= K:
        raise ValueError(f"adjust='bootstrap' reads a {K} x {K} shape from the B resamples' "
                         f"posterior means: B must exceed {K}, got {B}")
    shape = np.atleast_2d(np.cov(means, rowvar=False))
    if not np.all(np.isfinite(shape)) or np.linalg.eigvalsh(shape)[0] <= 0:
        raise ValueError("adjust='bootstrap': the resamples' posterior means do not vary "
                         "in every direction; use adjust='sandwich'")
    return shape


def warn_short_means(ess: np.ndarray) -> None:
    """Warn when the resamples' means behind ``adjust="bootstrap"``'s shape carry much
    Monte Carlo error: each adds about ``1 / ess_b`` of a posterior's covariance to
    their scatter, which near GPC's rate is the shape's own size; warned above
    :data:`SHAPE_NOISE` on average (``ess``, shape ``(B,)``)."""
    noise = float(np.mean(1.0 / ess))
    if noise > SHAPE_NOISE:
        warnings.warn(
            f"adjust='bootstrap': the resamples' posterior means were read from few effective "
            f"draws (median {np.median(ess):.0f}, fewest {np.min(ess):.0f}), so "
            f"about {100 * noise:.0f}% of the shape is Monte Carlo noise; adjust='sandwich' "
            "reads it from H and J", RuntimeWarning, stacklevel=3)
