"""L-BFGS on many independent smooth problems at once, in NumPy.

Each iteration is one batched evaluation of every problem still running, so
that the objective can be a Stan program evaluated in process for all problems
in one call (:func:`stanflow.models.log_density_gradient_rows`): WBB draws
(:mod:`stanflow.wbb.inprocess`, :mod:`stanflow.wbb.program`) and the risk
minimisers of loss programs (:mod:`stanflow.gibbs.estimate`). Two-loop
recursion with :data:`MEMORY` correction pairs, backtracking line search. The
problems do not interact: each has its own history, step and stopping test, so
one's result does not depend on the others (up to rounding in the matrix
products).

Convergence per problem (``status`` 0) follows L-BFGS-B's two rules: the largest
gradient component is at most ``gtol * max(1, |F(start)|)`` (relative: an
objective that is a weighted *sum* over observations has a gradient that grows
with ``n``), or a full step (one the line search did not shorten) decreased the
objective by at most ``ftol * max(|F|, 1)`` (no progress left beyond rounding).
``status`` 1 is the iteration limit, 2 a line search that found no acceptable
step (or only one below rounding). The line search treats a rejected point
(objective ``+inf``) as infinite and steps back from it, as CmdStan's optimiser
does; a problem whose optimum lies beyond such a border creeps up to it with
shortened steps and ends with status 2, never as converged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

CONVERGED, ITERATION_LIMIT, NO_STEP = 0, 1, 2
"""Per-draw ``status``, L-BFGS-B's codes: converged, iteration limit, no acceptable step."""
_RUNNING = -2

MEMORY = 10
"""Correction pairs of L-BFGS (scipy's default ``maxcor``)."""
ARMIJO = 1e-4
"""Sufficient-decrease constant of the line search."""
MAX_STEPS = 40
"""Trial steps per line search before it gives up (status 2)."""
NOISE = 1e-13
"""Relative change of the objective treated as rounding by the line search."""


Batch = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""``evaluate(x (k, d), rows (k,)) -> (values (k,), gradients (k, d))`` of problems ``rows``."""


@dataclass(frozen=True)
class Solutions:
    """The end of :func:`minimise_batch` for every problem.

    Attributes
    ----------
    theta : ndarray, shape (B, d)
    value : ndarray, shape (B,)
    grad_norm : ndarray, shape (B,)
        Largest gradient component.
    n_iter : ndarray of int, shape (B,)
    status : ndarray of int, shape (B,)
        :data:`CONVERGED`, :data:`ITERATION_LIMIT` or :data:`NO_STEP`.
    """

    theta: np.ndarray
    value: np.ndarray
    grad_norm: np.ndarray
    n_iter: np.ndarray
    status: np.ndarray


def minimise_batch(
    evaluate: Batch, x0: np.ndarray, *, gtol: float, ftol: float, max_iter: int
) -> Solutions:
    """L-BFGS on ``B`` independent objectives at once, one batched evaluation per trial step.

    Parameters
    ----------
    evaluate : callable
        ``evaluate(x (k, d), rows (k,)) -> (values (k,), gradients (k, d))``:
        objectives ``rows`` at their points; ``+inf`` (gradient NaN) where a
        point is rejected.
    x0 : ndarray, shape (B, d)
        Starting points.
    gtol : float
        A problem has converged when its largest gradient component is
        ``<= gtol * max(1, |F(start)|)``.
    ftol : float
        ... or when a full step decreased its objective by at most
        ``ftol * max(|F|, 1)``.
    max_iter : int
        Iterations per problem at most.

    Returns
    -------
    Solutions
    """
    B, d = x0.shape
    x = x0.copy()
    f, g = evaluate(x, np.arange(B))
    g_tol = gtol * np.maximum(1.0, np.abs(f))
    status = np.where(np.isfinite(f), _RUNNING, NO_STEP)
    status[np.isfinite(f) & (max_abs(g) <= g_tol)] = CONVERGED
    n_iter = np.zeros(B, dtype=int)
    S, Y, rho = np.zeros((B, MEMORY, d)), np.zeros((B, MEMORY, d)), np.zeros((B, MEMORY))
    for _ in range(max_iter):
        active = np.flatnonzero(status == _RUNNING)
        if active.size == 0:
            break
        p, dg = _descent_direction(g[active], S, Y, rho, active)
        has_history = rho[active, -1] > 0
        t0 = np.where(has_history, 1.0, np.minimum(1.0, 1.0 / np.linalg.norm(g[active], axis=1)))
        t, f_new, g_new, ok = _line_search(evaluate, active, x[active], f[active], p, dg, t0)
        step = t[:, None] * p
        ok &= np.any(x[active] + step != x[active], axis=1)  # a step below rounding is none
        status[active[~ok]] = NO_STEP
        moved, step, full = active[ok], step[ok], (t == t0)[ok]
        decrease = f[moved] - f_new[ok]
        scale = np.maximum(np.maximum(np.abs(f[moved]), np.abs(f_new[ok])), 1.0)
        _remember(S, Y, rho, moved, step, g_new[ok] - g[moved])
        x[moved] += step
        f[moved], g[moved] = f_new[ok], g_new[ok]
        n_iter[moved] += 1
        done = (max_abs(g[moved]) <= g_tol[moved]) | (full & (decrease <= ftol * scale))
        status[moved[done]] = CONVERGED
    status[status == _RUNNING] = ITERATION_LIMIT
    return Solutions(x, f, max_abs(g), n_iter, status)


def _descent_direction(
    g: np.ndarray, S: np.ndarray, Y: np.ndarray, rho: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """L-BFGS two-loop recursion for draws ``rows``; steepest descent where it fails.

    The pairs are stored oldest first; empty slots have ``rho = 0`` and add
    nothing. Returns the directions (k, d) and their slopes ``g'p`` (k,).
    """
    s, y, r = S[rows], Y[rows], rho[rows]
    q = g.copy()
    alpha = np.zeros(r.shape)
    for i in reversed(range(MEMORY)):
        alpha[:, i] = r[:, i] * np.einsum("kd,kd->k", s[:, i], q)
        q -= alpha[:, i, None] * y[:, i]
    yy = np.einsum("kd,kd->k", y[:, -1], y[:, -1])
    gamma = np.where(r[:, -1] > 0, 1.0 / np.where(r[:, -1] > 0, r[:, -1] * yy, 1.0), 1.0)
    q *= gamma[:, None]
    for i in range(MEMORY):
        b = r[:, i] * np.einsum("kd,kd->k", y[:, i], q)
        q += s[:, i] * (alpha[:, i] - b)[:, None]
    p = -q
    dg = np.einsum("kd,kd->k", p, g)
    uphill = ~(dg < 0)
    if uphill.any():  # rounding in a nearly singular history: restart from the gradient
        lost = rows[uphill]
        S[lost], Y[lost], rho[lost] = 0.0, 0.0, 0.0
        p[uphill] = -g[uphill]
        dg[uphill] = -np.einsum("kd,kd->k", g[uphill], g[uphill])
    return p, dg


def _line_search(
    evaluate: Batch, rows: np.ndarray, x: np.ndarray, f: np.ndarray, p: np.ndarray,
    dg: np.ndarray, t0: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Backtracking from ``t0`` for every draw at once; each round evaluates the pending draws.

    A step is accepted on sufficient decrease (Armijo), or, where the change
    of the objective is within rounding, on the approximate Wolfe condition of
    Hager and Zhang (2005) (the slope at the step is not steeply uphill): near
    the optimum the decrease is below rounding and only slopes are
    informative. A failed step is shortened by quadratic interpolation
    (within [0.1, 0.5] of it). Returns the steps, the new values and
    gradients, and which draws found a step.
    """
    k, d = x.shape
    t = t0.copy()
    f_new, g_new, ok = np.full(k, np.nan), np.full((k, d), np.nan), np.zeros(k, dtype=bool)
    noise = NOISE * np.maximum(1.0, np.abs(f))
    pending = np.arange(k)
    for _ in range(MAX_STEPS):
        tp = t[pending]
        values, grads = evaluate(x[pending] + tp[:, None] * p[pending], rows[pending])
        slope = np.einsum("kd,kd->k", grads, p[pending])
        rise = values - f[pending]
        armijo = rise <= ARMIJO * tp * dg[pending]
        wolfe = (rise <= noise[pending]) & (slope <= (2 * ARMIJO - 1) * dg[pending])
        good = np.isfinite(values) & (armijo | wolfe)
        accepted = pending[good]
        f_new[accepted], g_new[accepted], ok[accepted] = values[good], grads[good], True
        pending, tp, rise = pending[~good], tp[~good], rise[~good]
        if pending.size == 0:
            break
        curvature = 2 * (rise - dg[pending] * tp)
        quadratic = np.where(np.isfinite(rise) & (curvature > 0),
                             -dg[pending] * tp**2 / np.where(curvature > 0, curvature, 1.0), 0.1 * tp)
        t[pending] = np.clip(quadratic, 0.1 * tp, 0.5 * tp)
    return t, f_new, g_new, ok


def _remember(S: np.ndarray, Y: np.ndarray, rho: np.ndarray, rows: np.ndarray,
              s: np.ndarray, y: np.ndarray) -> None:
    """Append the pairs ``(s, y)`` of draws ``rows`` (dropping their oldest) where ``s'y > 0``."""
    sy = np.einsum("kd,kd->k", s, y)
    keep = sy > np.finfo(float).eps * np.einsum("kd,kd->k", y, y)
    rows, s, y, sy = rows[keep], s[keep], y[keep], sy[keep]
    S[rows] = np.concatenate([S[rows, 1:], s[:, None]], axis=1)
    Y[rows] = np.concatenate([Y[rows, 1:], y[:, None]], axis=1)
    rho[rows] = np.concatenate([rho[rows, 1:], (1.0 / sy)[:, None]], axis=1)


def max_abs(g: np.ndarray) -> np.ndarray:
    return np.abs(g).max(axis=-1, initial=0.0)
