"""Smooth weighted problems optimised in process, on Stan's gradients.

Each WBB draw ``b`` solves the problem of a :class:`~stanflow.wbb.glm.GlmProblem`,
as :mod:`stanflow.wbb.stan_optimize` does,

    minimise_{alpha, beta}  sum_i w_bi loss(y_i, alpha + x_i' beta)  +  lam * wp_b * penalty(beta),

from the same slot files (``real loss(real y, real f, vector loss_params)``:
``stan/losses`` or a file of yours; ``real penalty(vector beta, vector
penalty_params)``: ``stan/wbb/penalties`` or a file of yours), without a
CmdStan process per draw. Two small programs are loaded once per problem,
with data that never change between draws:

- ``stan/wbb/weighted_loss.stan``: parameters the predictions ``f`` *and the
  weights* ``w``, target ``-sum_i w_i loss(y_i, f_i)``. One gradient call gives
  the weighted loss, the weighted derivatives ``w_i loss'(y_i, f_i)`` (in
  ``f``) and every observation's loss (in ``w``), for whatever weights the
  point carries; the gradient in ``(alpha, beta)`` is ``X' (w * loss')`` in
  NumPy;
- ``stan/wbb/penalty_only.stan``: parameters ``beta``, target
  ``-penalty(beta)``: the penalty and its gradient.

A new draw is therefore a new point, never a new or reloaded model, and many
draws are one batch of points evaluated in C++ threads
(:func:`stanflow.models.log_density_gradient_rows`).

The optimiser is :func:`stanflow.lbfgs.minimise_batch`: L-BFGS on all draws of a
batch in lockstep, one batched Stan call per trial step for all draws still
running; each draw has its own history and stopping test (``status`` 0 converged,
1 iteration limit, 2 no acceptable step). Why not one
``scipy.optimize.minimize(method="L-BFGS-B")`` per draw: its Python and scipy
overhead per draw is larger than Stan's gradients (``bench/wbb_inprocess.py``
measures both).

Scaling is that of :mod:`stanflow.wbb.stan_optimize`: ``loss="squared"`` is
``(y - f)^2``, so with ``penalty="ridge"`` at ``lam`` it is
:func:`stanflow.wbb.ridge.solve_ridge` at ``lam / 2``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import bridgestan
import numpy as np
from threadpoolctl import ThreadpoolController

from stanflow.arviz_compat import Results
from stanflow.lbfgs import CONVERGED, Solutions, minimise_batch
from stanflow.models import load, log_density_gradient_rows, program_path
from stanflow.validation import check_int, check_positive
from stanflow.wbb._checks import check_weights
from stanflow.wbb.bootstrap import Draws, check_draws, wbb
from stanflow.wbb.glm import GlmProblem, check_problem

LOSS_PROGRAM = "wbb/weighted_loss"
PENALTY_PROGRAM = "wbb/penalty_only"

_BLAS = ThreadpoolController()

class WeightedGlm:
    """The weighted penalised objective of a :class:`~stanflow.wbb.glm.GlmProblem`.

    The Stan models are loaded when the object is made; weights are given per
    evaluation, so one object serves every WBB draw.

    Parameters
    ----------
    problem : GlmProblem
        The data, ``lam``, loss, penalty, their parameters and the intercept.
        With an intercept a parameter vector is ``(alpha, beta)``, else ``beta``.
    threads : int, optional
        Threads of the batched Stan calls (default: the cores this process may
        use; see :func:`stanflow.models.log_density_gradient_rows`).

    Attributes
    ----------
    problem, threads
        As given.
    loss_model, penalty_model : bridgestan.StanModel
        ``stan/wbb/weighted_loss.stan`` and ``stan/wbb/penalty_only.stan``
        with ``problem``'s slot files bound.

    Raises
    ------
    TypeError
        If ``problem`` is not a :class:`GlmProblem`.
    ValueError
        If ``threads`` is not an int ``>= 1``, before anything loads.
    """

    def __init__(self, problem: GlmProblem, *, threads: int | None = None) -> None:
        check_problem(problem)
        if threads is not None:
            check_int(threads, "threads")
        self.problem = problem
        self.threads = threads
        loss_params = np.array(problem.loss_params, dtype=float)
        penalty_params = np.array(problem.penalty_params, dtype=float)
        self.loss_model: bridgestan.StanModel = load(
            program_path(LOSS_PROGRAM),
            {"N": problem.n, "y": problem.y, "n_loss_params": loss_params.size,
             "loss_params": loss_params},
            slots={"loss.stanfunctions": problem.loss_file},
            name="wbb_weighted_loss",
        )
        self.penalty_model: bridgestan.StanModel = load(
            program_path(PENALTY_PROGRAM),
            {"K": problem.n_features, "n_penalty_params": penalty_params.size,
             "penalty_params": penalty_params},
            slots={"penalty.stanfunctions": problem.penalty_file},
            name="wbb_penalty",
        )

    @property
    def n_params(self) -> int:
        """Length of a parameter vector: ``p``, plus 1 with an intercept."""
        return self.problem.n_features + int(self.problem.fit_intercept)

    def pack(self, beta: np.ndarray, intercept: float = 0.0) -> np.ndarray:
        """The parameter vector ``(alpha, beta)`` or ``beta``, shape (n_params,)."""
        beta = np.asarray(beta, dtype=float)
        return np.r_[float(intercept), beta] if self.problem.fit_intercept else beta.copy()

    def unpack(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``alpha`` (k,) and ``beta`` (k, p) of parameter vectors (k, n_params).

        ``alpha`` is 0 without an intercept.
        """
        if self.problem.fit_intercept:
            return theta[:, 0], theta[:, 1:]
        return np.zeros(theta.shape[0]), theta

    def evaluate(
        self, theta: np.ndarray, w: np.ndarray, wp: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Objectives and gradients of ``k`` draws, each at its own point.

        Parameters
        ----------
        theta : ndarray, shape (k, n_params)
        w : ndarray, shape (k, n)
            Each draw's observation weights.
        wp : ndarray, shape (k,)
            Each draw's prior weight, multiplying ``lam * penalty(beta)``.

        Returns
        -------
        values : ndarray, shape (k,)
            ``+inf`` where the loss or penalty rejects the point (``reject``,
            a failed argument check) or is not finite there.
        gradients : ndarray, shape (k, n_params)
            NaN where ``values`` is infinite.
        """
        X, y = self.problem.X, self.problem.y
        alpha, beta = self.unpack(theta)
        f = beta @ X.T + alpha[:, None]
        values = np.full(theta.shape[0], np.inf)
        grads = np.full(theta.shape, np.nan)
        ok = np.isfinite(f).all(axis=1)
        if not ok.any():
            return values, grads
        loss_lp, loss_grad = self._rows(self.loss_model, np.hstack([f[ok], w[ok]]))
        weighted = -loss_grad[:, : y.size]  # w_i loss'(y_i, f_i)
        grad_beta = weighted @ X
        scale = self.problem.lam * wp[ok]
        penalty_lp, penalty_grad = self._rows(self.penalty_model, beta[ok])
        penalised = scale > 0  # 0 * inf would be NaN for a rejected beta
        values[ok] = -loss_lp - np.where(penalised, scale * penalty_lp, 0.0)
        grad_beta -= np.where(penalised[:, None], scale[:, None] * penalty_grad, 0.0)
        grads[ok] = (np.column_stack([weighted.sum(axis=1), grad_beta]) if self.problem.fit_intercept
                     else grad_beta)
        bad = ~(np.isfinite(values) & np.isfinite(grads).all(axis=1))
        values[bad], grads[bad] = np.inf, np.nan
        return values, grads

    def objective(self, theta: np.ndarray, w: np.ndarray, wp: float) -> tuple[float, np.ndarray]:
        """Objective and gradient of one draw at ``theta`` (n_params,); see :meth:`evaluate`."""
        values, grads = self.evaluate(np.asarray(theta, dtype=float)[None],
                                      np.asarray(w, dtype=float)[None], np.array([float(wp)]))
        return float(values[0]), grads[0]

    def check_start(self, theta: np.ndarray) -> None:
        """Evaluate the loss and the penalty at ``theta`` (unit weights); errors name the slot.

        Raises
        ------
        ValueError
            If the loss or the penalty raises or is not finite there (a
            missing parameter, a point outside its domain).
        """
        problem = self.problem
        alpha, beta = self.unpack(np.asarray(theta, dtype=float)[None])
        f = beta @ problem.X.T + alpha[:, None]
        _check_slot(self.loss_model, np.hstack([f, np.ones_like(f)]), "loss", problem.loss_file,
                    "loss_params", problem.loss_params, "f = alpha + X beta")
        _check_slot(self.penalty_model, beta, "penalty", problem.penalty_file,
                    "penalty_params", problem.penalty_params, "beta")

    def _rows(self, model: bridgestan.StanModel, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return log_density_gradient_rows(model, points, propto=False, jacobian=False,
                                         threads=self.threads, reject_as_neg_inf=True)


def lbfgs_draws(
    glm: WeightedGlm,
    weights: np.ndarray | None,
    prior_weight: float | np.ndarray = 1.0,
    *,
    init: np.ndarray | None = None,
    init_intercept: float = 0.0,
    gtol: float = 1e-10,
    ftol: float = 1e-16,
    max_iter: int = 10_000,
) -> Draws:
    """Solve ``B`` weighted problems in process, by L-BFGS on all draws at once.

    Parameters
    ----------
    glm : WeightedGlm
        The loaded objective of a :class:`GlmProblem`.
    weights : ndarray, shape (n,) or (B, n), or None
        Non-negative observation weights (None: one draw of unit weights).
    prior_weight : float or ndarray, shape (B,)
        Non-negative multiplier of the penalty per draw.
    init : ndarray, shape (p,), optional
        Starting ``beta`` of every draw (zeros if omitted).
    init_intercept : float
        Starting intercept (with ``glm.problem.fit_intercept``).
    gtol : float
        Relative gradient tolerance: a draw has converged when its largest
        gradient component is ``<= gtol * max(1, |F(start)|)``.
    ftol : float
        A draw has also converged when a full step (not shortened by the line
        search) decreased its objective by at most ``ftol * max(|F|, 1)``
        (scipy's ``ftol``, on full steps only).
    max_iter : int
        Iteration limit per draw.

    Returns
    -------
    Draws
        ``params``: ``beta`` (B, p) and, with an intercept, ``intercept`` (B,);
        ``converged`` (``status`` 0); ``stats``: ``objective`` (the minimised
        value), ``grad_norm`` (largest gradient component at the solution),
        ``n_iter`` and ``status`` (0 converged, 1 iteration limit, 2 no
        acceptable step).

    Raises
    ------
    TypeError
        If ``glm`` is not a :class:`WeightedGlm`.
    ValueError
        For bad weights, tolerances or ``init``, or when the loss or
        penalty fails at the start (the message names the slot and its
        parameters).
    """
    if not isinstance(glm, WeightedGlm):
        raise TypeError(f"glm must be a WeightedGlm, got {type(glm).__name__}")
    w, wp = check_weights(weights, prior_weight, glm.problem.n)
    gtol, ftol = check_positive(gtol, "gtol"), check_positive(ftol, "ftol")
    max_iter = check_int(max_iter, "max_iter")
    start = _start(glm, init, init_intercept)
    glm.check_start(start)
    x0 = np.tile(start, (w.shape[0], 1))
    # One BLAS thread: the products are small, and OpenBLAS threads woken for
    # them cost more than the work (measured: a 9-parameter scipy L-BFGS-B
    # solve took 13-24 ms with two threads, 1 ms with one).
    with _BLAS.limit(limits=1, user_api="blas"):
        found = minimise_batch(lambda theta, rows: glm.evaluate(theta, w[rows], wp[rows]),
                             x0, gtol=gtol, ftol=ftol, max_iter=max_iter)
    return _collect(glm.problem, found)


def _start(glm: WeightedGlm, init: np.ndarray | None, init_intercept: float) -> np.ndarray:
    p = glm.problem.n_features
    beta = np.zeros(p) if init is None else np.asarray(init, dtype=float)
    if beta.shape != (p,) or not np.all(np.isfinite(beta)):
        raise ValueError(f"init must be finite with shape ({p},), got {beta.shape}")
    if not np.isfinite(init_intercept):
        raise ValueError(f"init_intercept must be finite, got {init_intercept!r}")
    return glm.pack(beta, init_intercept)


def _collect(problem: GlmProblem, found: Solutions) -> Draws:
    theta = found.theta.copy()
    converged = (found.status == CONVERGED) & np.isfinite(theta).all(axis=1)
    params = {"beta": theta[:, int(problem.fit_intercept):]}
    if problem.fit_intercept:
        params["intercept"] = theta[:, 0]
    stats = {"objective": found.value, "grad_norm": found.grad_norm,
             "n_iter": found.n_iter, "status": found.status}
    return Draws(params, converged, stats)


def wbb_glm_inprocess(
    problem: GlmProblem,
    B: int,
    *,
    seed: int,
    prior: str = "random",
    warm_start: bool = True,
    gtol: float = 1e-10,
    ftol: float = 1e-16,
    max_iter: int = 10_000,
    threads: int | None = None,
    batch_size: int | None = None,
    on_failure: str = "warn",
) -> Results:
    """WBB draws of a smooth penalised problem, optimised in process.

    The in-process counterpart of :func:`stanflow.wbb.stan_optimize.wbb_glm`:
    same problem, slot files, weights (same ``seed``: same draws) and
    result layout; ``sample_stats`` holds ``converged``, ``objective``,
    ``grad_norm``, ``n_iter`` and ``status`` (see :func:`lbfgs_draws`).

    With ``warm_start`` (default) every draw starts from the unit-weight
    optimum (solved once from 0; from 0 if that solve fails). The weighted
    optima scatter around it, so the draws need fewer iterations, and every
    draw has the same start, so its result does not depend on batching or
    order. For the shipped losses and penalties the objective is convex and
    its optimum unique, so the start changes nothing beyond the tolerance; for
    a non-convex loss of your own, ``warm_start=False`` starts every draw from
    0, as the run-layer path does.

    Parameters
    ----------
    problem : GlmProblem
        The data, ``lam``, loss, penalty, their parameters, the intercept and
        the feature names.
    B, seed, prior, batch_size, on_failure
        As in :func:`stanflow.wbb.bootstrap.wbb`.
    warm_start : bool
        Start the draws from the unit-weight optimum rather than from 0.
    gtol, ftol, max_iter
        As in :func:`lbfgs_draws`.
    threads : int, optional
        As in :class:`WeightedGlm`.

    Each Stan call holds the points of a whole batch, ``(draws, 2 n)``
    doubles: for large ``n`` bound it with ``batch_size``.

    Every argument is checked before the programs compile (``B``, ``prior``,
    ``batch_size``, ``on_failure`` as :func:`stanflow.wbb.bootstrap.check_draws`).

    Returns
    -------
    Results
        Root attributes: ``solver`` (``inprocess_lbfgs``), ``problem``'s
        :meth:`~GlmProblem.describe`, ``warm_start``, ``gtol`` and ``ftol``.

    Raises
    ------
    TypeError
        If ``problem`` is not a :class:`GlmProblem`.
    """
    check_problem(problem)
    check_draws(B, seed=seed, prior=prior, batch_size=batch_size,
                on_failure=on_failure)
    options: dict[str, Any] = {
        "gtol": check_positive(gtol, "gtol"), "ftol": check_positive(ftol, "ftol"),
        "max_iter": check_int(max_iter, "max_iter"),
    }
    glm = WeightedGlm(problem, threads=threads)
    beta0, alpha0 = np.zeros(problem.n_features), 0.0
    if warm_start:
        unit = lbfgs_draws(glm, None, 1.0, **options)
        if unit.converged[0]:
            beta0 = unit.params["beta"][0]
            alpha0 = float(unit.params["intercept"][0]) if problem.fit_intercept else 0.0

    def solve(w: np.ndarray, wp: np.ndarray) -> Draws:
        return lbfgs_draws(glm, w, wp, init=beta0, init_intercept=alpha0, **options)

    return wbb(
        solve, problem.n, B, seed=seed, prior=prior, batch_size=batch_size,
        coords={"feature": problem.features}, dims={"beta": ["feature"]}, on_failure=on_failure,
        attrs={"solver": "inprocess_lbfgs", **problem.describe(),
               "warm_start": int(warm_start), "gtol": gtol, "ftol": ftol},
    )


def _check_slot(
    model: bridgestan.StanModel, point: np.ndarray, what: str, path: Path,
    params_name: str, params: tuple[float, ...], where: str,
) -> None:
    try:
        lp, grad = log_density_gradient_rows(model, point, propto=False, jacobian=False, threads=1)
    except ValueError as err:
        raise ValueError(
            f"{what}: {path.name} fails at the start ({where}) with "
            f"{params_name} = {list(params)}: {err}"
        ) from None
    if not (np.all(np.isfinite(lp)) and np.all(np.isfinite(grad))):
        raise ValueError(
            f"{what}: {path.name} is not finite at the start ({where}) with "
            f"{params_name} = {list(params)}"
        )
