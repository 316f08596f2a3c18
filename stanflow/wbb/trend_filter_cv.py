"""K-fold cross-validation of the trend-filtering penalty.

Fold ``j`` of ``K`` holds out the points ``i`` with ``i mod K = j`` (every
``K``-th point, so each fold's training points cover the whole interval; the
folds of Tibshirani's ``genlasso::cv.trendfilter`` are built the same way).
The held-out points stay in the problem with a tiny weight ``eps`` instead of
0: the solver of :mod:`stanflow.wbb.trend_filtering` needs positive weights,
and as ``eps -> 0`` the fit at a held-out point becomes the trend filter's own
continuation of the training fit there (the value that minimises the
penalty), the natural out-of-sample prediction of a piecewise polynomial.
All ``K`` folds of one ``lam`` are one batch of weighted solves. The CV error
of ``lam`` is the mean over folds of the mean squared error on the held-out
points; the chosen ``lam`` minimises it over the grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stanflow.validation import check_finite_vector, check_int, check_positive
from stanflow.wbb.trend_filtering import trend_filter


@dataclass(frozen=True)
class TrendFilterCV:
    """Cross-validation of trend filtering over a grid of penalties.

    Attributes
    ----------
    lam : float
        The grid value with the smallest CV error.
    lams : ndarray, shape (L,)
    cv_error : ndarray, shape (L,)
        Mean over folds of the held-out mean squared error.
    n_unconverged : ndarray of int, shape (L,)
        Fold solves that stopped before the duality-gap tolerance (their
        last iterate is used).
    max_relative_gap : float
        Largest duality gap relative to the objective over all fold solves
        (how far from optimal the iterates used are).
    """

    lam: float
    lams: np.ndarray
    cv_error: np.ndarray
    n_unconverged: np.ndarray
    max_relative_gap: float


def cv_trend_filter(
    y: np.ndarray,
    lams: np.ndarray,
    k: int,
    *,
    folds: int = 5,
    eps: float = 1e-2,
    tol: float = 1e-5,
    max_newton: int = 100,
) -> TrendFilterCV:
    """Choose the trend-filtering penalty by ``folds``-fold cross-validation.

    Parameters
    ----------
    y : ndarray, shape (n,)
        Observations at evenly spaced points, ``n >= 2 folds``.
    lams : array_like, shape (L,)
        Penalty levels to try, each ``> 0``.
    k : int
        Order of the trend filter.
    folds : int
        Number of folds, ``>= 2``.
    eps : float
        Weight of the held-out points, ``0 < eps < 1``.
    tol, max_newton
        As in :func:`stanflow.wbb.trend_filter`, per fold solve.

    Returns
    -------
    TrendFilterCV
    """
    y = check_finite_vector(y, "y")
    lams = np.atleast_1d(np.asarray(lams, dtype=float))
    if lams.ndim != 1 or lams.size == 0 or not np.all(np.isfinite(lams) & (lams > 0)):
        raise ValueError("lams must be a non-empty 1-d array of finite values > 0")
    folds = check_int(folds, "folds")
    if folds < 2 or y.size < 2 * folds:
        raise ValueError(f"folds must be >= 2 and at most n / 2 = {y.size // 2}, got {folds}")
    eps = check_positive(eps, "eps")
    if eps >= 1:
        raise ValueError(f"eps must be < 1, got {eps}")
    held = np.arange(y.size)[None, :] % folds == np.arange(folds)[:, None]
    weights = np.where(held, eps, 1.0)
    errors, unconverged = np.empty(lams.size), np.empty(lams.size, dtype=int)
    worst = 0.0
    for i, lam in enumerate(lams):
        fit = trend_filter(y, lam, k, weights=weights, tol=tol, max_newton=max_newton)
        errors[i] = np.mean(np.sum(held * (y - fit.theta) ** 2, axis=1) / held.sum(axis=1))
        unconverged[i] = int((~fit.converged).sum())
        objective = np.sum(weights * (y - fit.theta) ** 2, axis=1) / 2 \
            + lam * np.abs(np.diff(fit.theta, k + 1, axis=1)).sum(axis=1)
        worst = max(worst, float(np.max(fit.gap / objective)))
    return TrendFilterCV(float(lams[errors.argmin()]), lams, errors, unconverged, worst)
