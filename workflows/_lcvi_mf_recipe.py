"""The authors' own LCVI optimisation for matrix factorisation, on a NumPy twin of its Stan file.

Kusmierczyk, Sakaya and Klami's script for the Last.fm experiment optimises
differently from both of stanflow's ways (:func:`stanflow.lcvi.run_lcvi`, the
loop; :func:`stanflow.lcvi.run_lcvi_joint`, the paper's joint gradient steps
with one draw per step). At every step of their :class:`Recipe`:

- a minibatch of ``batch_rows`` users (rows), in a fresh random order every
  epoch, whose likelihood, prior on ``U`` and entropy of ``q(U)`` are scaled by
  ``I / B`` (``B`` the rows in the batch);
- ``elbo_draws`` draws of ``(U, V)`` for the ELBO and, separately,
  ``utility_draws`` draws with one outcome each for the utility term;
- Adam on the means, the softplus-parameterised scales
  (``sd = log(1 + exp(rho))``) and the decisions ``h`` of every cell, all
  started at standard normal values;
- float32 arithmetic.

The model and the utility term are those of
``stan/lcvi/matrix_factorisation.stan`` with the linearised estimator
(``-c sum_n mean_s l(y_s, h_n)``, ``c = gamma`` or ``1/M``), written out in
NumPy so that 300 draws per step cost milliseconds: :func:`log_density_gradient`
is that file's log density and gradient for one draw, checked against the
Stan file through bridgestan (``tests/test_lcvi_mf_recipe.py``), and
:func:`fit` runs the recipe from it. The twin covers losses of ``y - h``
(check, absolute, squared), whose derivative in ``y`` is minus that in ``h``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from stanflow.adam import adam_update
from stanflow.lcvi.program import LcviProgram
from stanflow.losses import BoundLoss, get_loss
from stanflow.optimiser_state import (
    OptimiserState,
    check_every,
    digest,
    load_state,
    save_state,
)

DIFFERENCE_LOSSES = ("check", "absolute", "squared")
"""Losses of ``y - h``: the ones the twin's outcome gradient covers."""


class Recipe(NamedTuple):
    """The authors' optimisation settings for Last.fm (their Fig. 2 script)."""

    iterations: int = 30_001
    lr: float = 0.01
    batch_rows: int = 100
    elbo_draws: int = 11
    utility_draws: int = 300
    dtype: str = "float32"


AUTHORS = Recipe()
"""The authors' settings for Last.fm."""


class MinibatchFit(NamedTuple):
    """The end state of :func:`fit`: a mean-field normal on ``U`` and ``V``, and ``h``.

    Attributes
    ----------
    mu_U, sd_U : ndarray, shape (I, K)
    mu_V, sd_V : ndarray, shape (J, K)
    h : ndarray, shape (N,)
        The decisions of the training cells (the problem's order).
    seconds : float
        Wall time of the steps, over all runs of a resumed fit.
    """

    mu_U: np.ndarray
    sd_U: np.ndarray
    mu_V: np.ndarray
    sd_V: np.ndarray
    h: np.ndarray
    seconds: float

    def draws(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws of the unconstrained parameters, shape (n, I K + J K), in Stan's order."""
        U = self.mu_U + self.sd_U * rng.standard_normal((n, *self.mu_U.shape))
        V = self.mu_V + self.sd_V * rng.standard_normal((n, *self.mu_V.shape))
        column_major = [x.transpose(0, 2, 1).reshape(n, -1) for x in (U, V)]
        return np.hstack(column_major).astype(float)


class _Cells(NamedTuple):
    """The training cells as dense ``I x J`` arrays."""

    mask: np.ndarray  # bool: a training cell
    y: np.ndarray  # observed value on training cells, 0 elsewhere
    rows: np.ndarray
    cols: np.ndarray


def _cells(problem: LcviProgram, dtype: np.dtype) -> _Cells:
    data = problem.data
    I, J = data["I"], data["J"]
    index = np.asarray(data["cell"]) - 1  # column-major
    rows, cols = index % I, index // I
    mask = np.zeros((I, J), dtype=bool)
    mask[rows, cols] = True
    y = np.zeros((I, J), dtype=dtype)
    y[rows, cols] = data["y"]
    return _Cells(mask, y, rows, cols)


def _loss_gradient(
    loss: BoundLoss, dtype: str = "float64"
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``(y, h) -> d loss / d h`` of a loss of ``y - h`` in ``dtype``; an error naming any other loss."""
    if loss.name not in DIFFERENCE_LOSSES:
        raise ValueError(
            f"loss: the NumPy twin covers losses of y - h {list(DIFFERENCE_LOSSES)}, "
            f"not {loss.name!r}"
        )
    gradient = get_loss(loss.name).gradient
    params = [np.dtype(dtype).type(p) for p in loss.params]  # keeps float32 arrays float32
    return lambda y, h: gradient(y, h, *params)


def log_density_gradient(
    problem: LcviProgram,
    loss: BoundLoss,
    coefficient: float,
    U: np.ndarray,
    V: np.ndarray,
    h: np.ndarray,
    eps_y: np.ndarray,
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """The joint template's log density and its gradient in ``U``, ``V``, ``h``, one draw.

    ``log p(U, V, y) - coefficient * sum_n l(loc_n + noise_sd eps_y[n], h_n)``
    with all normalising constants, where ``loc = (U V')`` at the training
    cells: the Stan file's target with one outcome sample (``S = 1``), the
    linearised estimator and ``weight * scale`` (exp utility) or
    ``weight / scale`` (``M - l``) as ``coefficient``.

    Parameters
    ----------
    problem : LcviProgram
        From :func:`stanflow.lcvi.mf.matrix_factorisation`.
    loss : BoundLoss
        A loss of ``y - h`` (:data:`DIFFERENCE_LOSSES`).
    coefficient : float
    U : ndarray, shape (I, K)
    V : ndarray, shape (J, K)
    h, eps_y : ndarray, shape (N,)

    Returns
    -------
    (float, ndarray, ndarray, ndarray)
        The log density and its gradient in ``U``, ``V`` and ``h``.
    """
    data = problem.data
    cells = _cells(problem, np.dtype(float))
    noise_sd, prior_sd = data["noise_sd"], data["prior_sd"]
    loc = (U @ V.T)[cells.rows, cells.cols]
    residual = (np.asarray(data["y"]) - loc) / noise_sd**2
    y_out = loc + noise_sd * np.asarray(eps_y)
    dl_dh = _loss_gradient(loss)(y_out, h)
    lp = (
        _normal_lpdf(residual * noise_sd, noise_sd)
        + _normal_lpdf(U, prior_sd)
        + _normal_lpdf(V, prior_sd)
        - coefficient * np.sum(loss.value(y_out, h))
    )
    d_loc = np.zeros((data["I"], data["J"]))
    d_loc[cells.rows, cells.cols] = residual + coefficient * dl_dh  # each cell once
    return (
        float(lp),
        d_loc @ V - U / prior_sd**2,
        d_loc.T @ U - V / prior_sd**2,
        -coefficient * dl_dh,
    )


def _normal_lpdf(x: np.ndarray, sd: float) -> float:
    """``sum log N(x | 0, sd^2)``, with the constant."""
    return float(np.sum(-0.5 * np.log(2 * np.pi) - np.log(sd) - 0.5 * (x / sd) ** 2))


def fit(
    problem: LcviProgram,
    loss: BoundLoss,
    coefficient: float,
    *,
    recipe: Recipe = AUTHORS,
    seed: int = 0,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 1000,
) -> MinibatchFit:
    """Plain VI (``coefficient = 0``) or LCVI by the authors' recipe (module docstring).

    Parameters
    ----------
    problem : LcviProgram
        From :func:`stanflow.lcvi.mf.matrix_factorisation`.
    loss : BoundLoss
        A loss of ``y - h`` (:data:`DIFFERENCE_LOSSES`).
    coefficient : float
        Of the linearised utility term, ``>= 0``: ``gamma`` for ``exp(-gamma
        l)``, ``1 / M`` for ``M - l``; 0 is plain VI.
    recipe : Recipe
    seed : int
    checkpoint : path-like, optional
        A file (``.npz``) for the optimiser's state, saved every
        ``checkpoint_every`` steps and at the end: a rerun with the same
        arguments continues from it with exactly the numbers of an
        uninterrupted run (:mod:`stanflow.optimiser_state`); a state of other
        arguments is an error naming the file. Remove it once the result is kept.
    checkpoint_every : int, default 1000

    Returns
    -------
    MinibatchFit
    """
    dloss = _checked(loss, coefficient, recipe, checkpoint_every)
    dtype = np.dtype(recipe.dtype)
    data = problem.data
    I, J, K = data["I"], data["J"], data["K"]
    cells = _cells(problem, dtype)
    noise_sd, prior_var = dtype.type(data["noise_sd"]), dtype.type(data["prior_sd"] ** 2)
    state = None
    if checkpoint is not None:
        signature = _signature(problem, loss, coefficient, recipe, seed)
        state = load_state(checkpoint, signature)
    if state is None:
        state = _first_state((I, J, K), dtype, seed)
    params, moments, order = state.arrays[:5], state.arrays[5:15], state.arrays[15]
    rng = state.rngs[0]
    batches = -(-I // recipe.batch_rows)
    started = time.perf_counter() - state.seconds
    for step in range(state.step, recipe.iterations):
        batch = step % batches
        if batch == 0:
            order = rng.permutation(I)
        rows = order[batch * recipe.batch_rows : (batch + 1) * recipe.batch_rows]
        batch_cells = BatchCells(cells.mask[rows], cells.y[rows], dtype.type(I / rows.size))
        mu_U, rho_U, mu_V, rho_V, H = params
        factors = (mu_U[rows], rho_U[rows], mu_V, rho_V)
        eps = _base_samples(rng, recipe.elbo_draws, rows.size, J, K, dtype)
        grads = elbo_gradient(batch_cells, factors, eps, noise_sd, prior_var)
        g_H = np.zeros((rows.size, J), dtype=dtype)
        if coefficient > 0:  # the utility term on draws of its own, one outcome each
            eps = _base_samples(rng, recipe.utility_draws, rows.size, J, K, dtype)
            n_cells = int(batch_cells.mask.sum())
            eps_y = rng.standard_normal((recipe.utility_draws, n_cells), dtype=dtype)
            utility, g_H = utility_gradient(
                batch_cells, factors, eps, eps_y, H[rows], dloss, coefficient, noise_sd
            )
            grads = [g + u for g, u in zip(grads, utility, strict=True)]
        full = [np.zeros_like(p) for p in params]
        full[0][rows], full[1][rows], full[2], full[3] = grads
        full[4][rows] = g_H
        for p, g, m, v in zip(params, full, moments[0::2], moments[1::2], strict=True):
            adam_update(p, g, m, v, step + 1, recipe.lr, ascent=True)
        done = step + 1
        if checkpoint is not None and (done % checkpoint_every == 0 or done == recipe.iterations):
            save_state(checkpoint, signature,
                       OptimiserState(done, [*params, *moments, order], [rng],
                                      time.perf_counter() - started))
    seconds = time.perf_counter() - started
    mu_U, rho_U, mu_V, rho_V, H = params
    return MinibatchFit(
        mu_U.astype(float),
        np.logaddexp(0, rho_U).astype(float),
        mu_V.astype(float),
        np.logaddexp(0, rho_V).astype(float),
        H[cells.rows, cells.cols].astype(float),
        seconds,
    )


def _checked(
    loss: BoundLoss, coefficient: float, recipe: Recipe, checkpoint_every: int
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``d loss / d h`` (:func:`_loss_gradient`) once :func:`fit`'s other arguments are checked."""
    dloss = _loss_gradient(loss, recipe.dtype)
    if not (np.isfinite(coefficient) and coefficient >= 0):
        raise ValueError(f"coefficient must be finite and >= 0, got {coefficient!r}")
    for name in ("iterations", "batch_rows", "elbo_draws", "utility_draws"):
        value = getattr(recipe, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"recipe.{name} must be an integer >= 1, got {value!r}")
    if not recipe.lr > 0:
        raise ValueError(f"recipe.lr must be positive, got {recipe.lr!r}")
    check_every(checkpoint_every)
    return dloss


def _signature(problem: LcviProgram, loss: BoundLoss, coefficient: float, recipe: Recipe,
               seed: int) -> dict:
    """Everything :func:`fit`'s steps depend on, the data as a digest."""
    return {
        "data_sha256": digest(problem.data),
        "loss": [loss.name, [float(p) for p in loss.params]],
        "coefficient": float(coefficient),
        "recipe": recipe._asdict(),
        "seed": int(seed),
    }


def _first_state(shape: tuple[int, int, int], dtype: np.dtype, seed: int) -> OptimiserState:
    """Standard normal means, scales' ``rho`` and decisions; Adam's moments at zero."""
    I, J, K = shape
    rng = np.random.default_rng(seed)
    # mu_U, rho_U, mu_V, rho_V and h of every cell
    params = [rng.standard_normal(s).astype(dtype) for s in [(I, K), (I, K), (J, K), (J, K), (I, J)]]
    moments = [np.zeros_like(p) for p in params for _ in range(2)]  # m, v of each
    return OptimiserState(0, [*params, *moments, np.arange(I)], [rng], 0.0)


class BatchCells(NamedTuple):
    """The training cells of a minibatch of rows, and the factor ``I / B`` of its terms."""

    mask: np.ndarray  # (B, J) bool
    y: np.ndarray  # (B, J)
    scale: float


def _base_samples(
    rng: np.random.Generator, n: int, B: int, J: int, K: int, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    return (rng.standard_normal((n, B, K), dtype=dtype), rng.standard_normal((n, J, K), dtype=dtype))


def _draws(
    factors: tuple[np.ndarray, ...], eps: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    mu_U, rho_U, mu_V, rho_V = factors
    return mu_U + np.logaddexp(0, rho_U) * eps[0], mu_V + np.logaddexp(0, rho_V) * eps[1]


def elbo_gradient(
    cells: BatchCells,
    factors: tuple[np.ndarray, ...],
    eps: tuple[np.ndarray, np.ndarray],
    noise_sd: float,
    prior_var: float,
) -> list[np.ndarray]:
    """The minibatch ELBO's gradient in ``(mu_U, rho_U, mu_V, rho_V)``, from draws ``eps``.

    The ELBO is the mean over the draws of ``scale`` x (the batch's
    log-likelihood and the prior of its rows of ``U``) plus the prior of ``V``,
    plus the entropies (``q(U)``'s of the batch rows scaled by ``scale``), as
    in the authors' script; the entropy enters in closed form.

    Parameters
    ----------
    cells : BatchCells
    factors : (mu_U, rho_U, mu_V, rho_V)
        ``mu_U``, ``rho_U`` of the batch rows (B, K); ``mu_V``, ``rho_V`` (J, K).
    eps : (ndarray (T, B, K), ndarray (T, J, K))
        Standard normal base samples of the draws.
    noise_sd, prior_var : float

    Returns
    -------
    list of ndarray
        ``[d/dmu_U, d/drho_U, d/dmu_V, d/drho_V]``.
    """
    U, V = _draws(factors, eps)
    n = U.shape[0]
    d_loc = cells.mask * (cells.y - U @ V.transpose(0, 2, 1)) * (cells.scale / noise_sd**2)
    g_U = (d_loc @ V - cells.scale * U / prior_var) / n
    g_V = (d_loc.transpose(0, 2, 1) @ U - V / prior_var) / n
    grads = _reparameterised(g_U, g_V, eps, factors)
    grads[1] += cells.scale * _entropy_gradient(factors[1])
    grads[3] += _entropy_gradient(factors[3])
    return grads


def utility_gradient(
    cells: BatchCells,
    factors: tuple[np.ndarray, ...],
    eps: tuple[np.ndarray, np.ndarray],
    eps_y: np.ndarray,
    h: np.ndarray,
    dloss: Callable[[np.ndarray, np.ndarray], np.ndarray],
    coefficient: float,
    noise_sd: float,
) -> tuple[list[np.ndarray], np.ndarray]:
    """The gradient of ``-coefficient scale mean_t sum_cells l(y_t, h)``, one outcome per draw.

    Parameters
    ----------
    cells, factors, eps
        As for :func:`elbo_gradient` (draws of their own).
    eps_y : ndarray, shape (T, M)
        Base samples of the outcomes ``y_t = (U_t V_t') + noise_sd eps_y[t]`` of
        the batch's ``M`` training cells, in the row-major order of ``cells.mask``.
    h : ndarray, shape (B, J)
        The batch rows' decisions.
    dloss : callable
        ``(y, h) -> d l / d h`` of a loss of ``y - h``.
    coefficient, noise_sd : float

    Returns
    -------
    (list of ndarray, ndarray)
        The gradients in ``(mu_U, rho_U, mu_V, rho_V)``, and in ``h`` (B, J; 0
        off the training cells).
    """
    U, V = _draws(factors, eps)
    T, B, J = U.shape[0], U.shape[1], V.shape[1]
    index = np.flatnonzero(cells.mask)  # row-major, as eps_y
    loc = (U @ V.transpose(0, 2, 1)).reshape(T, B * J)
    dl_dh = dloss(np.take(loc, index, axis=1) + noise_sd * eps_y, h.ravel()[index])
    weight = U.dtype.type(coefficient * cells.scale / T)
    d_loc = np.zeros_like(loc)
    d_loc[:, index] = weight * dl_dh  # the term is -l, and d l / d y = -d l / d h
    d_loc = d_loc.reshape(T, B, J)
    grads = _reparameterised(d_loc @ V, d_loc.transpose(0, 2, 1) @ U, eps, factors)
    g_h = np.zeros(B * J, dtype=h.dtype)
    g_h[index] = -weight * dl_dh.sum(axis=0)
    return grads, g_h.reshape(B, J)


def _reparameterised(
    g_U: np.ndarray,
    g_V: np.ndarray,
    eps: tuple[np.ndarray, np.ndarray],
    factors: tuple[np.ndarray, ...],
) -> list[np.ndarray]:
    """Gradients in ``(mu_U, rho_U, mu_V, rho_V)`` from per-draw gradients in ``U``, ``V``.

    ``U = mu + softplus(rho) eps``: ``d/dmu = sum_t g_t``, ``d/drho = sum_t g_t
    eps_t sigmoid(rho)`` (the per-draw gradients are already weighted).
    """
    rho_U, rho_V = factors[1], factors[3]
    return [
        g_U.sum(axis=0),
        (g_U * eps[0]).sum(axis=0) / (1 + np.exp(-rho_U)),
        g_V.sum(axis=0),
        (g_V * eps[1]).sum(axis=0) / (1 + np.exp(-rho_V)),
    ]


def _entropy_gradient(rho: np.ndarray) -> np.ndarray:
    """``d/drho log softplus(rho)``: the gradient of a normal's entropy in its softplus scale."""
    return 1 / ((1 + np.exp(-rho)) * np.logaddexp(0, rho))
