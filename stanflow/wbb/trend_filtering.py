"""Weighted trend filtering of order ``k`` by a log-barrier method on the dual.

Each draw solves the generalised lasso

    minimise_theta  sum_i w_i (y_i - theta_i)^2 / 2  +  lam * wp * ||D theta||_1

with ``D = D^(k+1)`` the ``(m, n)``, ``m = n - k - 1``, matrix of ``(k+1)``-th
forward differences of evenly spaced points (``D theta = np.diff(theta, k + 1)``):
``k = 0`` is the fused lasso (piecewise constant fits), ``k = 1`` piecewise
linear, ``k = 3`` cubic. Weights must be positive.

Solver. The dual is a box-constrained quadratic programme (Kim, Koh, Boyd and
Gorinevsky 2009, "l1 trend filtering"; Tibshirani 2014)

    maximise_nu  g(nu) = nu'Dy - nu'A nu / 2   subject to  |nu_i| <= lam wp,
    A = D W^-1 D',  theta = y - W^-1 D' nu,

and ``A`` is banded (``k + 1`` super-diagonals). We run the barrier method
(Boyd and Vandenberghe 2004, section 11.3) on it: Newton steps on
``t (nu'A nu / 2 - nu'Dy) - sum log(lam wp - nu) - sum log(lam wp + nu)``,
each a banded Cholesky solve (``scipy.linalg.solveh_banded``, ``O(n k^2)``),
with a backtracking line search that keeps ``nu`` strictly feasible; ``t`` grows to
ten times ``2m / gap`` once a Newton step's decrement is small (long-step path
following), and a line search that cannot make progress ends the solve. Why this rather than ADMM: the
iteration count of an interior-point method hardly depends on ``n``, ``k`` or
``lam`` (some tens of Newton steps), whereas plain ADMM slows badly for ``k >= 2``
(Ramdas and Tibshirani 2016), and every iterate gives an *exact* duality gap

    gap = P(theta) - g(nu) = sum_i (lam wp |(D theta)_i| - nu_i (D theta)_i) >= 0,

a certificate of suboptimality. A draw has converged when
``gap <= tol * P(theta)`` within ``max_newton`` Newton steps. ``A`` is badly
conditioned for large ``k`` (roughly ``n^(2k+2)``), which limits the attainable
relative gap to about ``1e-9`` for ``k = 3``, ``n = 500``; hence the default
``tol = 1e-8``. As with any
interior-point method, entries of ``D theta`` that are zero at the optimum come
out small (of the order of the gap) rather than exactly zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np
from scipy.linalg import LinAlgError, solve_banded, solveh_banded

from stanflow.validation import check_finite_vector, check_int, check_positive
from stanflow.wbb._checks import (
    check_lam,
    check_weights,
)

ARMIJO = 0.01
BACKTRACK = 0.5
T_FACTOR = 10.0
CENTRED = 1.0
"""Half the squared Newton decrement below which ``t`` is increased (a loose
centring: the exact gap, checked at every step, decides convergence)."""


@dataclass(frozen=True)
class TrendFilterResult:
    """Solutions of a batch of weighted trend-filtering problems.

    Attributes
    ----------
    theta : ndarray, shape (B, n)
        Fitted values.
    dual : ndarray, shape (B, n - k - 1)
        Dual variables ``nu`` (``W (y - theta) = D' nu``, ``|nu| <= lam wp``).
    gap : ndarray, shape (B,)
        Duality gap of the returned pair.
    converged : ndarray of bool, shape (B,)
        Whether ``gap <= tol * P(theta)``.
    n_newton : ndarray of int, shape (B,)
        Newton steps used.
    """

    theta: np.ndarray
    dual: np.ndarray
    gap: np.ndarray
    converged: np.ndarray
    n_newton: np.ndarray


def difference_coefficients(order: int) -> np.ndarray:
    """Coefficients ``c`` of the ``order``-th forward difference, ``(D theta)_i = sum_j c_j theta_{i+j}``.

    Returns
    -------
    ndarray, shape (order + 1,)
    """
    return np.array([(-1.0) ** (order - j) * comb(order, j) for j in range(order + 1)])


def trend_filter(
    y: np.ndarray,
    lam: float,
    k: int,
    *,
    weights: np.ndarray | None = None,
    prior_weight: float | np.ndarray = 1.0,
    tol: float = 1e-8,
    max_newton: int = 300,
) -> TrendFilterResult:
    """Solve ``B`` weighted trend-filtering problems of order ``k``.

    Parameters
    ----------
    y : ndarray, shape (n,)
        Observations at evenly spaced points, finite; ``n >= k + 2``.
    lam : float
        Penalty level, ``>= 0``.
    k : int
        Order, ``>= 0`` (penalty on ``(k+1)``-th differences).
    weights : ndarray, shape (n,) or (B, n), optional
        Positive observation weights; unit weights if omitted.
    prior_weight : float or ndarray, shape (B,)
        Non-negative multiplier of the penalty per draw.
    tol : float
        Relative duality-gap tolerance, ``> 0``.
    max_newton : int
        Largest number of Newton steps per draw.

    Returns
    -------
    TrendFilterResult
    """
    y = check_finite_vector(y, "y")
    lam = check_lam(lam)
    k = check_int(k, "k", 0)
    if y.size < k + 2:
        raise ValueError(f"y must have at least k + 2 = {k + 2} entries, got {y.size}")
    w, wp = check_weights(weights, prior_weight, y.size, positive=True)
    tol = check_positive(tol, "tol")
    max_newton = check_int(max_newton, "max_newton")
    c = difference_coefficients(k + 1)
    fits = [_solve(y, 1.0 / w[b], lam * wp[b], c, tol, max_newton) for b in range(w.shape[0])]
    theta, dual, gap, converged, steps = (np.array(a) for a in zip(*fits, strict=True))
    return TrendFilterResult(theta, dual, gap, converged, steps)


def _solve(
    y: np.ndarray, v: np.ndarray, bound: float, c: np.ndarray, tol: float, max_newton: int
) -> tuple[np.ndarray, np.ndarray, float, bool, int]:
    """One problem with inverse weights ``v`` and ``|nu| <= bound``: (theta, nu, gap, converged, steps)."""
    order = c.size - 1
    b = np.diff(y, order)
    nu = np.zeros(b.size)
    if bound == 0:
        return y.copy(), nu, 0.0, True, 0
    band = _banded(v, c)
    t = 2 * b.size / max(bound * np.abs(b).sum(), np.finfo(float).tiny)
    for step in range(max_newton + 1):
        Anu = _apply(nu, v, c)
        gap, primal = _gap(b, Anu, nu, bound)
        if gap <= tol * primal:
            return y - v * np.convolve(nu, c), nu, gap, True, step
        if step == max_newton:
            break
        lo, hi = bound + nu, bound - nu
        grad = t * (Anu - b) + 1 / hi - 1 / lo
        hess = t * band
        hess[-1] += 1 / hi**2 + 1 / lo**2
        delta = _newton_direction(hess, grad)
        if delta is None:
            break
        decrement = -grad @ delta
        trial = _line_search(nu, delta, grad, t, b, v, c, bound)
        if trial is None:
            break
        nu = trial
        if decrement / 2 <= CENTRED:
            t = max(t * T_FACTOR, T_FACTOR * 2 * b.size / max(gap, np.finfo(float).tiny))
    return y - v * np.convolve(nu, c), nu, gap, False, step


def _newton_direction(hess: np.ndarray, grad: np.ndarray) -> np.ndarray | None:
    """``-hess^-1 grad`` by banded Cholesky; banded LU when rounding makes the
    (mathematically positive definite) Hessian fail Cholesky, as tiny weights
    can; None if both fail (the draw is then reported as not converged)."""
    try:
        return -solveh_banded(hess, grad, check_finite=False)
    except LinAlgError:
        pass
    order = hess.shape[0] - 1
    full = np.zeros((2 * order + 1, hess.shape[1]))
    full[: order + 1] = hess
    for lag in range(1, order + 1):  # lower diagonals mirror the upper ones
        full[order + lag, :-lag] = hess[order - lag, lag:]
    try:
        delta = -solve_banded((order, order), full, grad, check_finite=False)
    except (LinAlgError, ValueError):
        return None
    return delta if np.all(np.isfinite(delta)) else None


def _banded(v: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``A = D diag(v) D'`` in ``solveh_banded``'s upper form, shape (order + 1, m)."""
    order = c.size - 1
    m = v.size - order
    ab = np.zeros((order + 1, m))
    for lag in range(order + 1):
        # A[i, i + lag] = sum_{j = lag}^{order} c_j c_{j - lag} v_{i + j}, i < m - lag
        entries = sum(c[j] * c[j - lag] * v[j : j + m - lag] for j in range(lag, order + 1))
        ab[order - lag, lag:] = entries
    return ab


def _apply(nu: np.ndarray, v: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``A nu = D (v * D' nu)``."""
    return np.diff(v * np.convolve(nu, c), c.size - 1)


def _gap(b: np.ndarray, Anu: np.ndarray, nu: np.ndarray, bound: float) -> tuple[float, float]:
    """Duality gap and primal objective at ``theta = y - W^-1 D' nu`` (``D theta = b - A nu``)."""
    r = b - Anu
    penalty = bound * np.abs(r).sum()
    return penalty - nu @ r, nu @ Anu / 2 + penalty


def _line_search(
    nu: np.ndarray, delta: np.ndarray, grad: np.ndarray, t: float,
    b: np.ndarray, v: np.ndarray, c: np.ndarray, bound: float,
) -> np.ndarray | None:
    """Backtracking (Armijo) along ``delta`` from the largest strictly feasible step; None if it stalls."""
    with np.errstate(divide="ignore"):
        room = np.where(delta > 0, (bound - nu) / delta, np.where(delta < 0, -(bound + nu) / delta, np.inf))
    s = min(1.0, 0.99 * room.min())
    f0 = _barrier(nu, t, b, v, c, bound)
    slope = grad @ delta
    while s > 1e-16:
        trial = nu + s * delta
        if _barrier(trial, t, b, v, c, bound) <= f0 + ARMIJO * s * slope:
            return trial
        s *= BACKTRACK
    return None


def _barrier(nu: np.ndarray, t: float, b: np.ndarray, v: np.ndarray, c: np.ndarray, bound: float) -> float:
    return t * (nu @ _apply(nu, v, c) / 2 - b @ nu) - np.log(bound - nu).sum() - np.log(bound + nu).sum()
