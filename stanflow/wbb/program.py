"""WBB draws of a loss program: its weighted optimisations, in process, all draws batched.

Each draw ``b`` of the weighted Bayesian bootstrap (:mod:`stanflow.wbb.bootstrap`)
minimises the program's randomly weighted losses plus its prior as a penalty,

    theta_b = argmin_theta  sum_i w_bi loss_i(theta) - wp_b log prior(theta),

``w_b ~ Exp(1)^n`` and ``wp_b ~ Exp(1)`` (or 1; :mod:`stanflow.wbb.weights`).
With ``omega`` and the weights as parameters of the program's evaluation form
(:class:`~stanflow.gibbs.program.LossProgram`), that objective is
``-wp_b * target(theta; omega = 1 / wp_b, weights = w_b)``: one batched gradient
call of the loaded program serves every draw, whatever its weights, and the
draws run in lockstep through :func:`stanflow.lbfgs.minimise_batch` on Stan's
unconstrained scale (without the Jacobian, so the optima are those of the
parameters as declared). A new draw is a new point, never a new model.

For a loss whose optimum is unique the start does not matter; by default every
draw starts from the unit-weight optimum (one solve from the risk minimiser),
so the draws need fewer iterations and do not depend on batching or order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from stanflow.arviz_compat import Results
from stanflow.gibbs.program import LossProgram
from stanflow.lbfgs import CONVERGED, Solutions, minimise_batch
from stanflow.validation import check_int
from stanflow.wbb.bootstrap import Draws, check_draws, wbb

_BLAS = ThreadpoolController()


def weighted_optima(
    program: LossProgram,
    weights: np.ndarray,
    prior_weight: np.ndarray,
    start: np.ndarray,
    *,
    gtol: float = 1e-10,
    ftol: float = 1e-16,
    max_iter: int = 10_000,
) -> Draws:
    """Minimise ``sum_i w_bi loss_i - wp_b log prior`` for every row ``b``, in one batch.

    Parameters
    ----------
    program : LossProgram
    weights : ndarray, shape (B, n)
        Non-negative observation weights.
    prior_weight : ndarray, shape (B,)
        Positive prior weights.
    start : ndarray, shape (D,)
        Every draw's starting point on the unconstrained scale.
    gtol, ftol, max_iter
        As :func:`stanflow.lbfgs.minimise_batch`.

    Returns
    -------
    Draws
        ``params``: the program's parameters by variable, shape ``(B, ...)``;
        ``converged``; ``stats``: ``objective``, ``grad_norm``, ``n_iter``,
        ``status``.
    """
    found = _minimise(program, weights, prior_weight, start, gtol, ftol, max_iter)
    converged = (found.status == CONVERGED) & np.isfinite(found.theta).all(axis=1)
    theta = program.constrain(np.where(np.isfinite(found.theta), found.theta, 0.0))
    stats = {"objective": found.value, "grad_norm": found.grad_norm,
             "n_iter": found.n_iter, "status": found.status}
    return Draws(program.unflatten(theta), converged, stats)


def _minimise(
    program: LossProgram, weights: np.ndarray, prior_weight: np.ndarray, start: np.ndarray,
    gtol: float, ftol: float, max_iter: int,
) -> Solutions:
    weights = program.check_weights(weights, len(weights))
    prior_weight = np.asarray(prior_weight, dtype=float)
    if prior_weight.shape != (len(weights),) or not np.all(prior_weight > 0):
        raise ValueError(
            f"prior_weight must be positive with shape ({len(weights)},), got {prior_weight!r}"
        )

    def evaluate(u: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scale = prior_weight[rows]
        lp, grad = program.log_density_gradient(u, 1.0 / scale, weights[rows], jacobian=False)
        value, gradient = -scale * lp, -scale[:, None] * grad
        bad = ~(np.isfinite(value) & np.isfinite(gradient).all(axis=1))
        value[bad], gradient[bad] = np.inf, np.nan
        return value, gradient

    x0 = np.tile(np.asarray(start, dtype=float), (len(weights), 1))
    with _BLAS.limit(limits=1, user_api="blas"):
        return minimise_batch(evaluate, x0, gtol=gtol, ftol=ftol, max_iter=max_iter)


def wbb_program(
    program: LossProgram,
    B: int,
    *,
    seed: int,
    prior: str = "random",
    warm_start: bool = True,
    gtol: float = 1e-10,
    ftol: float = 1e-16,
    max_iter: int = 10_000,
    batch_size: int | None = None,
    on_failure: str = "warn",
) -> Results:
    """``B`` WBB draws of a loss program, optimised in process.

    Parameters
    ----------
    program : LossProgram
        Any loss program (a template's or a user's).
    B : int
        Number of draws.
    seed : int
        Draw ``i``'s weights depend on it and ``i`` only (:mod:`stanflow.wbb.weights`).
    prior : {"random", "fixed"}, default "random"
        The prior's weight per draw, ``Exp(1)`` or 1.
    warm_start : bool, default True
        Start every draw from the unit-weight optimum; else from the risk
        minimiser (:meth:`LossProgram.estimate`), itself the start of the
        unit-weight solve.
    gtol, ftol, max_iter
        As :func:`stanflow.lbfgs.minimise_batch`.
    batch_size : int, optional
        Draws per batch (all at once if omitted): each batched call holds
        ``batch_size * (D + 1 + n)`` doubles.
    on_failure : {"warn", "raise"}
        As :func:`stanflow.wbb.bootstrap.wbb`.

    Returns
    -------
    Results
        ``posterior`` (the program's parameters, ``chain`` of length 1, ``draw``
        the WBB index), ``sample_stats`` (``converged``, ``objective``,
        ``grad_norm``, ``n_iter``, ``status``) and ``weights``; the root
        attributes add the solver's settings and the program's record.

    Raises
    ------
    ValueError, TypeError
        Naming the argument, before anything is optimised.
    """
    if not isinstance(program, LossProgram):
        raise TypeError(f"program must be a LossProgram, got {type(program).__name__}")
    check_draws(B, seed=seed, prior=prior, batch_size=batch_size,
                on_failure=on_failure)
    check_int(max_iter, "max_iter")
    for name, value in (("gtol", gtol), ("ftol", ftol)):
        if not (isinstance(value, (int, float)) and np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    options: dict[str, Any] = {"gtol": gtol, "ftol": ftol, "max_iter": max_iter}
    start = program.estimate().u
    if warm_start:
        unit = _minimise(program, np.ones((1, program.n)), np.ones(1), start, gtol, ftol, max_iter)
        if unit.status[0] == CONVERGED:
            start = unit.theta[0]

    def solve(w: np.ndarray, wp: np.ndarray) -> Draws:
        return weighted_optima(program, w, wp, start, **options)

    dims = _dims(program)
    return wbb(
        solve, program.n, B, seed=seed, prior=prior, batch_size=batch_size,
        dims=dims, on_failure=on_failure,
        attrs={"solver": "inprocess_lbfgs", "warm_start": int(warm_start), "gtol": gtol,
               "ftol": ftol, **program.describe()},
    )


def _dims(program: LossProgram) -> dict[str, list[str]]:
    """ArviZ dims of the program's vector and array parameters: ``<name>_dim_<k>``."""
    dims: dict[str, list[str]] = {}
    for label in program.names:
        base, _, index = label.partition("[")
        if index:
            dims[base] = [f"{base}_dim_{k}" for k in range(len(index.split(",")))]
    return dims
