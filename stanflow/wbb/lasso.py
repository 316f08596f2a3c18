"""Weighted lasso by cyclic coordinate descent, all WBB draws at once.

Each draw ``b`` solves

    minimise_beta  sum_i w_bi (y_i - a - x_i' beta)^2 / 2  +  lam * wp_b * sum_j |beta_j|

with observation weights ``w_b`` (n,) and prior weight ``wp_b``; the intercept
``a`` is unpenalised and present only with ``fit_intercept=True`` (otherwise
``a = 0``). Scaling: the loss is the weighted *sum* (not the mean) of half
squared errors, so with unit weights ``lam`` here is ``n`` times scikit-learn's
``Lasso(alpha)`` / glmnet's ``lambda``.

Algorithm (Friedman, Hastie and Tibshirani 2010, "Regularization paths for
generalized linear models via coordinate descent", covariance updates): per draw
the weighted Gram matrix ``G = X'WX`` and ``c = X'Wy`` (weighted-centred with an
intercept) are formed once with BLAS, then coordinate ``j`` is updated by the
soft-threshold ``beta_j = S(c_j - sum_{k != j} G_jk beta_k, lam wp) / G_jj``
while the vector ``q = c - G beta`` is kept current (``O(p)`` per update, not
``O(n)``). The draws are the vectorised axis: every coordinate update is one
NumPy operation on all ``B`` draws, so the Python loop runs over coordinates and
sweeps only. This suits ``n >> p`` (the diabetes data: 442 x 10).

Iteration: a full sweep over all coordinates, then up to ``INNER_SWEEPS`` sweeps
over the active set (non-zero coefficients), then another full sweep; a draw
has converged when a full sweep changes no coefficient by more than the
tolerance, measured as ``max_j G_jj (delta beta_j)^2 <= tol * y'Wy`` (glmnet's
criterion: the largest change in the weighted residual sum of squares, relative
to the null one). Coordinate descent converges only linearly on correlated
columns (the diabetes data's s1..s4), so after every sweep the exact solution on
the current active set and signs is tried (``_polish``: one small linear solve
per draw, batched); where it meets the optimality conditions exactly, the draw
is done. Draws still running once most have finished continue on their own
copies, so a few slow ones do not cost sweeps over all ``B``. Warm starts:
``beta0`` (e.g. the unit-weight solution for all WBB draws); :func:`lasso_path`
warm-starts each ``lam`` from the previous one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stanflow.validation import check_int, check_positive
from stanflow.wbb._checks import (
    check_lam,
    check_weights,
    check_X_y,
)

COMPACT = 0.25
"""Fraction of draws still running below which they continue on their own copies."""
INNER_SWEEPS = 10
"""Largest number of active-set sweeps between two full sweeps."""


@dataclass(frozen=True)
class LassoResult:
    """Solutions of a batch of weighted lasso problems.

    Attributes
    ----------
    beta : ndarray, shape (B, p)
        Coefficients.
    intercept : ndarray, shape (B,)
        Unpenalised intercepts (zeros without ``fit_intercept``).
    converged : ndarray of bool, shape (B,)
        Whether a full sweep met the tolerance within ``max_sweeps``.
    n_sweeps : ndarray of int, shape (B,)
        Coordinate sweeps used (full and active-set).
    fit_intercept : bool
        Whether the intercept was fitted.
    """

    beta: np.ndarray
    intercept: np.ndarray
    converged: np.ndarray
    n_sweeps: np.ndarray
    fit_intercept: bool


def solve_lasso(
    X: np.ndarray,
    y: np.ndarray,
    lam: float,
    *,
    weights: np.ndarray | None = None,
    prior_weight: float | np.ndarray = 1.0,
    fit_intercept: bool = False,
    beta0: np.ndarray | None = None,
    tol: float = 1e-12,
    max_sweeps: int = 10_000,
) -> LassoResult:
    """Solve ``B`` weighted lasso problems by coordinate descent.

    Parameters
    ----------
    X : ndarray, shape (n, p)
        Design matrix, finite.
    y : ndarray, shape (n,)
        Response, finite.
    lam : float
        Penalty level, ``>= 0`` (scaling in the module docstring).
    weights : ndarray, shape (n,) or (B, n), optional
        Non-negative observation weights; unit weights if omitted.
    prior_weight : float or ndarray, shape (B,)
        Non-negative multiplier of the penalty per draw.
    fit_intercept : bool
        Fit an unpenalised intercept (weighted centring per draw).
    beta0 : ndarray, shape (p,), (1, p) or (B, p), optional
        Warm start; zeros if omitted.
    tol : float
        Convergence tolerance, ``> 0``.
    max_sweeps : int
        Largest number of coordinate sweeps per draw.

    Returns
    -------
    LassoResult
    """
    X, y = check_X_y(X, y)
    lam = check_lam(lam)
    w, wp = check_weights(weights, prior_weight, X.shape[0])
    tol = check_positive(tol, "tol")
    max_sweeps = check_int(max_sweeps, "max_sweeps")
    G, c, yy, xm, ym = _gram(X, y, w, fit_intercept)
    beta = _start(beta0, w.shape[0], X.shape[1])
    beta, converged, sweeps = _descend(G, c, lam * wp, beta, tol * np.where(yy > 0, yy, 1.0), max_sweeps)
    return LassoResult(beta, ym - np.einsum("bj,bj->b", xm, beta), converged, sweeps, fit_intercept)


def lasso_path(
    X: np.ndarray,
    y: np.ndarray,
    lams: np.ndarray,
    *,
    weights: np.ndarray | None = None,
    prior_weight: float | np.ndarray = 1.0,
    fit_intercept: bool = False,
    tol: float = 1e-12,
    max_sweeps: int = 10_000,
) -> list[LassoResult]:
    """Solutions along ``lams``, each warm-started from the previous one.

    Parameters
    ----------
    lams : ndarray, shape (L,)
        Penalty levels, ``>= 0``; best given in decreasing order (the warm
        starts then follow the path from sparse to dense).
    Other parameters
        As in :func:`solve_lasso`.

    Returns
    -------
    list of LassoResult, length L
        In the order of ``lams``.
    """
    lams = np.atleast_1d(np.asarray(lams, dtype=float))
    if lams.ndim != 1 or lams.size == 0:
        raise ValueError(f"lams must be a non-empty 1-d array, got shape {lams.shape}")
    results: list[LassoResult] = []
    beta0 = None
    for lam in lams:
        fit = solve_lasso(
            X, y, lam, weights=weights, prior_weight=prior_weight, fit_intercept=fit_intercept,
            beta0=beta0, tol=tol, max_sweeps=max_sweeps,
        )
        results.append(fit)
        beta0 = fit.beta
    return results


def lambda_max(
    X: np.ndarray,
    y: np.ndarray,
    *,
    weights: np.ndarray | None = None,
    prior_weight: float | np.ndarray = 1.0,
    fit_intercept: bool = False,
) -> np.ndarray:
    """Smallest ``lam`` at which every coefficient is zero, per draw.

    Returns
    -------
    ndarray, shape (B,)
        ``max_j |x_j' W y| / wp`` (weighted-centred with an intercept);
        ``inf`` where ``wp = 0``.
    """
    X, y = check_X_y(X, y)
    w, wp = check_weights(weights, prior_weight, X.shape[0])
    _, c, _, _, _ = _gram(X, y, w, fit_intercept)
    with np.errstate(divide="ignore"):
        return np.abs(c).max(axis=1) / wp


def kkt_violation(
    X: np.ndarray,
    y: np.ndarray,
    lam: float,
    fit: LassoResult,
    *,
    weights: np.ndarray | None = None,
    prior_weight: float | np.ndarray = 1.0,
) -> np.ndarray:
    """Largest violation of the lasso optimality conditions, per draw.

    With ``g = X'W(y - a - X beta)`` and ``t = lam wp``: ``g_j = t sign(beta_j)``
    where ``beta_j != 0``, ``|g_j| <= t`` where ``beta_j = 0``, and (with an
    intercept) ``sum_i w_i r_i = 0``.

    Returns
    -------
    ndarray, shape (B,)
        The largest absolute violation, in the units of ``g``.
    """
    X, y = check_X_y(X, y)
    w, wp = check_weights(weights, prior_weight, X.shape[0])
    r = w * (y[None, :] - fit.intercept[:, None] - fit.beta @ X.T)
    g = r @ X
    t = (check_lam(lam) * wp)[:, None]
    nonzero = fit.beta != 0
    viol = np.where(nonzero, np.abs(g - t * np.sign(fit.beta)), np.maximum(np.abs(g) - t, 0.0))
    worst = viol.max(axis=1)
    return np.maximum(worst, np.abs(r.sum(axis=1))) if fit.fit_intercept else worst


def _gram(
    X: np.ndarray, y: np.ndarray, w: np.ndarray, fit_intercept: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per draw: ``G`` (B, p, p), ``c`` (B, p), ``y'Wy`` (B,), weighted means of X (B, p) and y (B,)."""
    B, p = w.shape[0], X.shape[1]
    G = np.matmul(X.T[None, :, :] * w[:, None, :], X)
    c = w * y[None, :] @ X
    yy = w @ (y * y)
    if not fit_intercept:
        return G, c, yy, np.zeros((B, p)), np.zeros(B)
    sw = w.sum(axis=1)
    if np.any(sw <= 0):
        raise ValueError("weights must have a positive sum in every draw to fit an intercept")
    xm, ym = (w @ X) / sw[:, None], (w @ y) / sw
    G = G - sw[:, None, None] * xm[:, :, None] * xm[:, None, :]
    c = c - (sw * ym)[:, None] * xm
    return G, c, yy - sw * ym**2, xm, ym


def _start(beta0: np.ndarray | None, B: int, p: int) -> np.ndarray:
    if beta0 is None:
        return np.zeros((B, p))
    beta0 = np.asarray(beta0, dtype=float)
    if beta0.shape not in ((p,), (1, p), (B, p)) or not np.all(np.isfinite(beta0)):
        raise ValueError(
            f"beta0 must be finite with shape ({p},), (1, {p}) or ({B}, {p}), got {beta0.shape}"
        )
    return np.array(np.broadcast_to(beta0, (B, p)))


def _descend(
    G: np.ndarray, c: np.ndarray, thr: np.ndarray, beta: np.ndarray, limit: np.ndarray,
    budget: int | np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Full / active-set sweeps until a full sweep changes nothing beyond ``limit`` (B,).

    ``budget`` is the largest number of sweeps, per draw or shared. Once fewer
    than ``COMPACT`` of the draws still run, the rest continue on their own
    copies (one recursive call), so a few slow draws do not cost a sweep of all.
    """
    B, p = beta.shape
    budget = np.broadcast_to(np.asarray(budget), (B,))
    diag = np.diagonal(G, axis1=1, axis2=2).copy()
    inv = np.divide(1.0, diag, out=np.zeros_like(diag), where=diag > 0)
    q = c - np.einsum("bjk,bk->bj", G, beta)
    all_coords = np.ones((B, p), dtype=bool)
    converged = np.zeros(B, dtype=bool)
    sweeps = np.zeros(B, dtype=int)
    while True:
        running = ~converged & (sweeps < budget)
        if not running.any():
            return beta, converged, sweeps
        if B > 1 and running.mean() < COMPACT:
            idx = np.flatnonzero(running)
            sub = _descend(G[idx], c[idx], thr[idx], beta[idx], limit[idx], budget[idx] - sweeps[idx])
            beta[idx], converged[idx] = sub[0], sub[1]
            sweeps[idx] += sub[2]
            return beta, converged, sweeps
        change = _sweep(G, q, thr, inv, diag, beta, all_coords & running[:, None])
        sweeps += running
        converged |= running & (change <= limit)
        converged |= _polish(G, c, thr, beta, q, running & ~converged)
        inner = running & ~converged & (sweeps < budget)
        for _ in range(INNER_SWEEPS):
            if not inner.any():
                break
            change = _sweep(G, q, thr, inv, diag, beta, (beta != 0) & inner[:, None])
            sweeps += inner
            polished = _polish(G, c, thr, beta, q, inner)
            converged |= polished
            inner &= (change > limit) & ~polished & (sweeps < budget)


def _polish(
    G: np.ndarray, c: np.ndarray, thr: np.ndarray, beta: np.ndarray, q: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """Exact solution on the current active set and signs, kept where it is optimal.

    For draws ``rows`` with active set ``A`` and signs ``s`` of ``beta``, solve
    ``G_AA b_A = c_A - t s_A`` (``b = 0`` off ``A``). If ``sign(b_A) = s_A`` and
    ``|c_j - G_jA b_A| <= t`` off ``A``, ``b`` meets the lasso's optimality
    conditions exactly: ``beta`` and ``q`` are updated in place and the draw is
    marked in the returned mask. Coefficients whose sign the solve flips are
    dropped from ``A`` and the solve repeated (at most ``p`` times). Where the
    result is not optimal coordinate descent goes on. This
    ends the slow linear convergence of coordinate descent on correlated
    columns once the active set is found.
    """
    done = np.zeros(beta.shape[0], dtype=bool)
    idx = np.flatnonzero(rows)
    if idx.size == 0:
        return done
    signs = np.sign(beta[idx])
    active = signs != 0
    eye = np.eye(beta.shape[1])
    for _ in range(beta.shape[1]):
        system = np.where(active[:, :, None] & active[:, None, :], G[idx], eye * ~active[:, :, None])
        rhs = np.where(active, c[idx] - thr[idx, None] * signs, 0.0)
        try:
            candidate = np.linalg.solve(system, rhs[:, :, None])[:, :, 0]
        except np.linalg.LinAlgError:
            return done
        flipped = active & (np.sign(candidate) != signs)
        if not flipped.any():
            break
        active &= ~flipped  # drop coefficients whose sign the solve cannot keep
    residual = c[idx] - np.einsum("bjk,bk->bj", G[idx], candidate)
    slack = 1e-12 * np.maximum(np.abs(c[idx]).max(axis=1), 1.0)
    ok = (np.all(np.where(active, np.sign(candidate) == signs, candidate == 0), axis=1)
          & np.all(np.where(active, True, np.abs(residual) <= thr[idx, None] + slack[:, None]), axis=1)
          & np.all(np.isfinite(candidate), axis=1))
    beta[idx[ok]] = candidate[ok]
    q[idx[ok]] = residual[ok]
    done[idx[ok]] = True
    return done


def _sweep(
    G: np.ndarray, q: np.ndarray, thr: np.ndarray, inv: np.ndarray, diag: np.ndarray,
    beta: np.ndarray, mask: np.ndarray,
) -> np.ndarray:
    """One cyclic pass updating ``beta[b, j]`` where ``mask[b, j]``; returns ``max_j G_jj dbeta_j^2``."""
    change = np.zeros(beta.shape[0])
    for j in np.flatnonzero(mask.any(axis=0)):
        z = q[:, j] + diag[:, j] * beta[:, j]
        new = np.sign(z) * np.maximum(np.abs(z) - thr, 0.0) * inv[:, j]
        delta = np.where(mask[:, j], new - beta[:, j], 0.0)
        q -= G[:, :, j] * delta[:, None]
        beta[:, j] += delta
        np.maximum(change, diag[:, j] * delta**2, out=change)
    return change
