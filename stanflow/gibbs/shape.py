"""The shape fix: a Gibbs posterior's draws moved to the sandwich's shape.

A Gibbs posterior at learning rate ``omega`` is close to ``N(theta_hat,
(omega n H)^-1)`` while the estimate ``theta_hat`` varies as ``N(theta*,
H^-1 J H^-1 / n)`` (:mod:`stanflow.gibbs.plugin`). One ``omega`` scales the
first; it matches the second only when ``J`` is proportional to ``H``. Where
it is not (noise that depends on the predictors, quantiles away from the
median), no learning rate gives every coefficient's interval its level: the
joint region can cover at ``1 - alpha`` while single coefficients over- and
under-cover.

The shape fix moves each draw by an affine map about the posterior mean ``m``,

    theta_adj = m + A (theta - m),

with ``A`` the symmetric positive definite matrix taking the posterior's
covariance ``C`` to ``c S``, ``S = H^-1 J H^-1`` the sandwich's shape and
``c = (det C / det S)^(1/K)`` keeping the posterior's volume:

    A = C^-1/2 (C^1/2 (c S) C^1/2)^1/2 C^-1/2     (A C A = c S).

It is the map of least mean squared displacement between the two Gaussians
(the optimal-transport map), so draws move as little as the shape allows. The
learning rate keeps its meaning: it alone sets the posterior's spread (the
geometric mean of its variances), the sandwich its shape; in one dimension
the map is the identity. Calibrating ``omega`` with the fix applied (GPC on the
path, :func:`stanflow.gibbs.calibrate_path` with ``adjust="sandwich"``) makes
the joint region's coverage right, and with the shape right each
coefficient's interval then covers at its level too. This is the curvature
(magnitude and shape) adjustment of composite-likelihood posteriors (Ribatet,
Cooley and Davison 2012; Shaby 2014's open-faced sandwich) with the magnitude
left to the learning rate.

The shape need not come from ``H`` and ``J``: ``adjust="bootstrap"`` takes it
from the covariance of GPC's resamples' posterior means
(:func:`stanflow.gibbs.path.resample_means.bootstrap_shape`), which estimates the
sandwich without a kernel estimate of ``H`` for non-smooth losses.

The map is taken on the parameters' own scale, so ``H`` and ``J`` must be on
it (:class:`~stanflow.gibbs.sandwich.Sandwich` with ``scale="constrained"``).
An affine map does not know a parameter's bounds: a draw near a bound may be
moved across it; the fix is meant for the unbounded coefficients of a
regression.
"""

from __future__ import annotations

import numpy as np


class SingularDrawsError(ValueError):
    """The draws' weighted covariance is singular: fewer distinct draws carry the
    weight than there are parameters, so no affine map moves them to a shape."""


def sandwich_shape(H: np.ndarray, J: np.ndarray) -> np.ndarray:
    """The sandwich ``H^-1 J H^-1``, symmetrised.

    Parameters
    ----------
    H : array_like, shape (K, K)
        Sensitivity, positive definite.
    J : array_like, shape (K, K)
        Variability, positive definite.

    Returns
    -------
    ndarray, shape (K, K)

    Raises
    ------
    ValueError
        If the matrices are not square of one size, or the sandwich is not
        positive definite.
    """
    H, J = np.asarray(H, dtype=float), np.asarray(J, dtype=float)
    if H.ndim != 2 or H.shape[0] != H.shape[1] or J.shape != H.shape:
        raise ValueError(
            f"H and J must be square matrices of one size, got {H.shape} and {J.shape}")
    inverse = np.linalg.inv(H)
    shape = inverse @ J @ inverse.T
    shape = 0.5 * (shape + shape.T)
    check_shape(shape)
    return shape


def check_shape(shape: np.ndarray, size: int | None = None) -> np.ndarray:
    """``shape`` as a finite symmetric positive definite ``(K, K)`` float array.

    Parameters
    ----------
    shape : array_like
    size : int, optional
        The ``K`` it must have.

    Returns
    -------
    ndarray, shape (K, K)
    """
    shape = np.asarray(shape, dtype=float)
    if shape.ndim != 2 or shape.shape[0] != shape.shape[1]:
        raise ValueError(f"shape must be a square matrix, got shape {shape.shape}")
    if size is not None and shape.shape[0] != size:
        raise ValueError(f"shape must be {size} x {size} (one row per parameter), got "
                         f"{shape.shape[0]} x {shape.shape[1]}")
    if not np.all(np.isfinite(shape)) or not np.allclose(shape, shape.T, rtol=1e-8, atol=0):
        raise ValueError("shape must be a finite symmetric matrix")
    if np.linalg.eigvalsh(shape)[0] <= 0:
        raise ValueError("shape must be positive definite (the sandwich H^-1 J H^-1 "
                         "is not: J is singular, the loss gradient does not vary)")
    return shape


def volume_scale(cov: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """``c = (det C / det S)^(1/K)``: the multiple of ``S`` with ``C``'s volume.

    Parameters
    ----------
    cov : ndarray, shape (..., K, K)
        Posterior covariances, positive definite.
    shape : ndarray, shape (K, K)

    Returns
    -------
    ndarray, shape (...)
    """
    K = shape.shape[0]
    _, log_det_cov = np.linalg.slogdet(cov)
    _, log_det_shape = np.linalg.slogdet(shape)
    return np.exp((log_det_cov - log_det_shape) / K)


def transport_map(cov: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The symmetric positive definite ``A`` with ``A C A = T``.

    ``A = C^-1/2 (C^1/2 T C^1/2)^1/2 C^-1/2``: the optimal-transport map from
    ``N(0, C)`` to ``N(0, T)``.

    Parameters
    ----------
    cov, target : ndarray, shape (K, K)
        Positive definite.

    Returns
    -------
    ndarray, shape (K, K)
    """
    root, inverse_root = _roots(cov)
    middle = root @ target @ root
    values, vectors = np.linalg.eigh(0.5 * (middle + middle.T))
    middle_root = (vectors * np.sqrt(np.maximum(values, 0.0))) @ vectors.T
    A = inverse_root @ middle_root @ inverse_root
    return 0.5 * (A + A.T)


def adjust_draws(
    draws: np.ndarray, shape: np.ndarray, weights: np.ndarray | None = None
) -> np.ndarray:
    """Draws of a Gibbs posterior moved to the sandwich's shape (module docstring).

    Parameters
    ----------
    draws : array_like, shape (S, K)
        Posterior draws (or particles), ``K >= 1``.
    shape : array_like, shape (K, K)
        The target shape, e.g. :func:`sandwich_shape` of the plug-in's
        ``sensitivity`` and ``variability``; only its shape counts, not its size.
    weights : array_like, shape (S,), optional
        Normalised or not importance weights of the draws; default equal.

    Returns
    -------
    ndarray, shape (S, K)
        ``m + A (theta - m)``: the same weighted mean, covariance ``c S`` with
        the draws' own generalised variance.

    Raises
    ------
    ValueError
        On shapes that do not match or non-positive weights;
        :class:`SingularDrawsError` on a singular covariance of the draws
        (fewer distinct draws than parameters).
    """
    draws = np.asarray(draws, dtype=float)
    if draws.ndim != 2:
        raise ValueError(f"draws must have shape (S, K), got {draws.shape}")
    S, K = draws.shape
    shape = check_shape(shape, K)
    if weights is None:
        w = np.full(S, 1.0 / S)
    else:
        w = np.asarray(weights, dtype=float)
        if w.shape != (S,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(
                f"weights must be {S} finite non-negative numbers with a positive sum")
        w = w / w.sum()
    mean, cov = weighted_moments(draws, w)
    centred = draws - mean
    if np.linalg.matrix_rank(cov) < K:
        raise SingularDrawsError(
            "the draws' covariance is singular: they cannot be moved to a shape")
    target = volume_scale(cov, shape) * shape
    return mean + centred @ transport_map(cov, target)


def weighted_moments(draws: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of ``draws`` (shape ``(S, K)``) under normalised ``weights`` (``(S,)``)."""
    mean = weights @ draws
    centred = draws - mean
    return mean, (centred * weights[:, None]).T @ centred


def _roots(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values, vectors = np.linalg.eigh(0.5 * (matrix + matrix.T))
    if values[0] <= 0:
        raise ValueError("the covariance must be positive definite")
    return (vectors * np.sqrt(values)) @ vectors.T, (vectors / np.sqrt(values)) @ vectors.T
