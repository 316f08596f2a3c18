"""Sensitivity ``H`` and variability ``J`` of a loss program, from Stan in process.

At the risk minimiser ``theta_hat`` (:mod:`stanflow.gibbs.estimate`), with
``l_i`` the program's per-observation losses:

    H = (1/n) d^2 sum_i l_i / d theta d theta'        (sensitivity)
    J = (1/n) sum_i (g_i - g_bar)(g_i - g_bar)',  g_i = d l_i / d theta   (variability)

What each needs of the program comes from its evaluation form
(:class:`~stanflow.gibbs.program.LossProgram`), so a program of the user's
needs nothing else:

- ``g_i`` for every observation at once: central differences along each
  unconstrained coordinate of the losses the target weights (``2 D`` gradient
  calls, whatever ``n``);
- ``H``: central differences of Stan's gradient of the total loss (``2 D``
  gradient calls). For a smooth loss the steps are
  ``cbrt(eps) (1 + |u_k|)`` (an exact Hessian, to about ``1e-8``). A kinked
  loss (absolute, check: its Hessian is zero almost everywhere) is detected by
  comparing that Hessian with the one at steps of one standard error of the
  estimate: they differ by more than :data:`KINK_TOLERANCE` (or the first is not
  positive definite). Its curvature is then the central difference of the
  empirical risk's gradient over a wider step, a uniform-kernel estimate
  smoothing the kinks, with steps ``h_k = STEP_FACTOR se_k`` found by
  fixed-point iteration (``se_k`` the sandwich's standard error at ``h``): the
  window holds of order ``sqrt(n)`` kinks, so the estimate is consistent, and
  stays where the risk is close to quadratic. (A density-optimal bandwidth,
  Silverman's ``n^(-1/5)`` on the data's scale, is about ``7 se`` at
  ``n = 200``: far enough to bend a nonlinear model's risk.)

Both are reported on the parameters' own scale (``H_theta = D^-T H_u D^-1``
with ``D = d theta / d u`` at the estimate), where a program's parameters have
as many values as unconstrained coordinates; otherwise (simplexes, correlation
matrices) on the unconstrained scale, and the result says which.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from stanflow.gibbs.loss_functions import LossFunctions

KINK_TOLERANCE = 0.1
"""Relative (Frobenius) difference between the exact and the one-standard-error
Hessian above which the loss is taken as kinked."""
STEP_FACTOR = 2.0
"""A kinked loss's curvature is smoothed over ``STEP_FACTOR`` standard errors either side."""
ITERATIONS = 30
_EPS_STEP = np.cbrt(np.finfo(float).eps)


class Sandwich(NamedTuple):
    """``H`` and ``J`` of a loss program at its estimate.

    Attributes
    ----------
    H, J : ndarray, shape (P, P)
    scale : {"constrained", "unconstrained"}
        The parametrisation they are on.
    curvature : {"exact", "smoothed", "given"}
        ``H`` as the Hessian of a smooth loss, smoothed over kinks by the
        rule's steps, or at the steps given.
    steps : ndarray, shape (D,)
        The central-difference steps of ``H`` on the unconstrained scale.
    gradients : ndarray, shape (n, P)
        The per-observation gradients ``g_i`` on the same scale as ``H``.
    """

    H: np.ndarray
    J: np.ndarray
    scale: str
    curvature: str
    steps: np.ndarray
    gradients: np.ndarray


def sandwich(program: LossFunctions, u: np.ndarray, *, steps: np.ndarray | None = None) -> Sandwich:
    """``H`` and ``J`` of ``program`` at the unconstrained point ``u`` (the estimate).

    Parameters
    ----------
    program : LossFunctions
    u : ndarray, shape (D,)
        The risk minimiser on Stan's unconstrained scale.
    steps : ndarray, shape (D,), optional
        Central-difference steps for ``H`` (a bandwidth on the unconstrained
        scale); default the rule of the module docstring.

    Returns
    -------
    Sandwich

    Raises
    ------
    ValueError
        If the curvature is not positive definite at any step (the loss does
        not curve up around the estimate).
    """
    u = np.asarray(u, dtype=float).reshape(-1)
    n = program.n
    tiny = _EPS_STEP * (1 + np.abs(u))
    G = loss_jacobian(program, u, tiny)
    centred = G - G.mean(axis=0)
    J = centred.T @ centred / n
    if steps is not None:
        h = np.broadcast_to(np.asarray(steps, dtype=float), u.shape).copy()
        if not np.all(np.isfinite(h) & (h > 0)):
            raise ValueError(f"steps must be positive and finite, got {steps!r}")
        H, curvature = hessian(program, u, h) / n, "given"
    else:
        H, h, curvature = _curvature(program, u, J, tiny)
    if not _positive_definite(H):
        raise ValueError(
            f"{program.source.path.name}: the risk's curvature at the estimate is not "
            "positive definite (the loss does not curve up there); the plug-in rules "
            "need it to"
        )
    jac = constrain_jacobian(program, u)
    if jac is None:
        return Sandwich(H, J, "unconstrained", curvature, h, G)
    inverse = np.linalg.inv(jac)
    H, J = inverse.T @ H @ inverse, inverse.T @ J @ inverse
    return Sandwich(0.5 * (H + H.T), J, "constrained", curvature, h, G @ inverse)


def loss_jacobian(program: LossFunctions, u: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """``d l_i / d u_k`` at ``u`` by central differences, shape ``(n, D)``."""
    D = len(u)
    points = np.concatenate([u + np.diag(steps), u - np.diag(steps)])
    losses = program.losses(points)
    return ((losses[:D] - losses[D:]) / (2 * steps[:, None])).T


def hessian(program: LossFunctions, u: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Central differences of the total loss's gradient at ``u``, symmetrised, shape ``(D, D)``."""
    D = len(u)
    points = np.concatenate([u + np.diag(steps), u - np.diag(steps)])
    _, grad = program.loss_gradient(points)
    H = ((grad[:D] - grad[D:]) / (2 * steps[:, None])).T
    return 0.5 * (H + H.T)


def constrain_jacobian(program: LossFunctions, u: np.ndarray) -> np.ndarray | None:
    """``d theta / d u`` at ``u`` by central differences, or None when the shapes differ."""
    if len(program.names) != program.dim:
        return None
    steps = _EPS_STEP * (1 + np.abs(u))
    theta = program.constrain(np.concatenate([u + np.diag(steps), u - np.diag(steps)]))
    D = len(u)
    return ((theta[:D] - theta[D:]) / (2 * steps[:, None])).T


def _curvature(
    program: LossFunctions, u: np.ndarray, J: np.ndarray, tiny: np.ndarray
) -> tuple[np.ndarray, np.ndarray, str]:
    n = program.n
    exact = hessian(program, u, tiny) / n
    start = np.ones_like(u)
    if _positive_definite(exact):
        se = _standard_errors(exact, J, n)
        wide = hessian(program, u, se) / n
        gap = np.linalg.norm(wide - exact) / np.linalg.norm(exact)
        if gap <= KINK_TOLERANCE:
            return exact, tiny, "exact"
        start = se
    h = start
    H = exact
    for _ in range(ITERATIONS):
        H = hessian(program, u, h) / n
        if not _positive_definite(H):
            h = 2 * h
            continue
        target = STEP_FACTOR * _standard_errors(H, J, n)
        if np.all(np.abs(target / h - 1) < 0.01):
            h = target
            break
        h = target
    return hessian(program, u, h) / n, h, "smoothed"


def _standard_errors(H: np.ndarray, J: np.ndarray, n: int) -> np.ndarray:
    inverse = np.linalg.inv(H)
    return np.sqrt(np.maximum(np.diag(inverse @ J @ inverse), 1e-300) / n)


def _positive_definite(H: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(H))) and bool(np.linalg.eigvalsh(0.5 * (H + H.T))[0] > 0)
