"""Weighted ridge regression in closed form, all WBB draws at once.

Each draw solves ``minimise_beta sum_i w_i (y_i - a - x_i' beta)^2 / 2 + lam wp ||beta||^2 / 2``
(``a`` only with ``fit_intercept``): ``beta = (X'WX + lam wp I)^-1 X'Wy`` on
weighted-centred data. With unit weights this is the posterior mean of the
Gaussian linear model with noise variance ``sigma^2`` and prior
``beta ~ N(0, sigma^2 / lam I)``, which makes it the reference solver for tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stanflow.wbb._checks import check_lam, check_weights, check_X_y
from stanflow.wbb.lasso import _gram


@dataclass(frozen=True)
class RidgeResult:
    """Solutions of a batch of weighted ridge problems.

    Attributes
    ----------
    beta : ndarray, shape (B, p)
        Coefficients (NaN where the system was singular).
    intercept : ndarray, shape (B,)
        Intercepts (zeros without ``fit_intercept``).
    converged : ndarray of bool, shape (B,)
        False where ``X'WX + lam wp I`` was singular.
    """

    beta: np.ndarray
    intercept: np.ndarray
    converged: np.ndarray


def solve_ridge(
    X: np.ndarray,
    y: np.ndarray,
    lam: float,
    *,
    weights: np.ndarray | None = None,
    prior_weight: float | np.ndarray = 1.0,
    fit_intercept: bool = False,
) -> RidgeResult:
    """Solve ``B`` weighted ridge problems.

    Parameters
    ----------
    X : ndarray, shape (n, p)
    y : ndarray, shape (n,)
    lam : float
        Penalty level, ``>= 0``.
    weights : ndarray, shape (n,) or (B, n), optional
        Non-negative observation weights; unit weights if omitted.
    prior_weight : float or ndarray, shape (B,)
        Non-negative multiplier of the penalty per draw.
    fit_intercept : bool
        Fit an unpenalised intercept.

    Returns
    -------
    RidgeResult
    """
    X, y = check_X_y(X, y)
    lam = check_lam(lam)
    w, wp = check_weights(weights, prior_weight, X.shape[0])
    G, c, _, xm, ym = _gram(X, y, w, fit_intercept)
    G = G + (lam * wp)[:, None, None] * np.eye(X.shape[1])
    beta = np.full(c.shape, np.nan)
    converged = np.linalg.cond(G) < 1 / np.finfo(float).eps
    if converged.any():
        beta[converged] = np.linalg.solve(G[converged], c[converged][:, :, None])[:, :, 0]
    return RidgeResult(beta, ym - np.einsum("bj,bj->b", xm, beta), converged)
