"""The weighted Bayesian bootstrap driver (Newton, Polson and Xu 2021, "Weighted
Bayesian bootstrap for scalable posterior distributions"; Polson and Taddy).

Draw ``b`` samples ``w_b ~ Exp(1)^n`` and ``wp_b`` (:mod:`stanflow.wbb.weights`)
and solves ``argmin_theta sum_i w_bi l_i(theta) + lam wp_b phi(theta)``; the
solutions are the posterior draws. :func:`wbb` takes any batch solver
``solve(w (B, n), wp (B,)) -> Draws``; :func:`wbb_lasso`, :func:`wbb_ridge` and
:func:`wbb_trend_filter` wire in the shipped solvers.

Result: one ``InferenceData`` with

- ``posterior``: the draws, ``chain`` of length 1 and ``draw`` the WBB index;
- ``sample_stats``: ``converged`` per draw plus the solver's own statistics;
- ``weights``: ``w`` (dims ``chain, draw, obs``) and ``w_prior`` (``chain, draw``).

A draw whose solve did not converge is not kept: its posterior values become
NaN, ``converged`` is False and a ``RuntimeWarning`` gives the count (or,
with ``on_failure="raise"``, a ``RuntimeError``). The root attributes record
``root_seed`` (the ``seed`` argument), ``prior``, ``n_failed`` and the solver's settings.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.validation import check_int
from stanflow.wbb.lasso import solve_lasso
from stanflow.wbb.ridge import solve_ridge
from stanflow.wbb.trend_filtering import trend_filter
from stanflow.wbb.weights import (
    PRIORS,
    bootstrap_weights,
)

ON_FAILURE = ("warn", "raise")


@dataclass(frozen=True)
class Draws:
    """What a batch solver returns for ``B`` weight draws.

    Attributes
    ----------
    params : dict of str to ndarray, shape (B, ...)
        The solutions, one array per parameter.
    converged : ndarray of bool, shape (B,)
    stats : dict of str to ndarray, shape (B,)
        Per-draw solver statistics (sweeps, gaps, ...).
    """

    params: dict[str, np.ndarray]
    converged: np.ndarray
    stats: dict[str, np.ndarray] = field(default_factory=dict)


def check_draws(
    B: int, *, seed: int, prior: str, batch_size: int | None, on_failure: str
) -> None:
    """Check the driver's settings, before any solve or compile; errors name the argument.

    Parameters
    ----------
    B, seed, prior, batch_size, on_failure
        As in :func:`wbb`: ``B`` and ``batch_size`` ints ``>= 1``, ``seed``
        an int ``>= 0``.

    Raises
    ------
    TypeError
        If ``B``, ``batch_size`` or ``seed`` is not an int.
    ValueError
        If one is out of range, or ``prior`` or ``on_failure`` is unknown.
    """
    check_int(B, "B")
    check_int(seed, "seed", 0)
    if prior not in PRIORS:
        raise ValueError(f"prior must be one of {PRIORS}, got {prior!r}")
    if batch_size is not None:
        check_int(batch_size, "batch_size")
    if on_failure not in ON_FAILURE:
        raise ValueError(f"on_failure must be one of {ON_FAILURE}, got {on_failure!r}")


def wbb(
    solve: Callable[[np.ndarray, np.ndarray], Draws],
    n: int,
    B: int,
    *,
    seed: int,
    prior: str = "random",
    batch_size: int | None = None,
    coords: Mapping[str, Sequence[Any] | np.ndarray] | None = None,
    dims: Mapping[str, Sequence[str]] | None = None,
    on_failure: str = "warn",
    attrs: Mapping[str, Any] | None = None,
) -> Results:
    """Run ``B`` WBB draws of a batch solver.

    Parameters
    ----------
    solve : callable
        ``solve(w, wp) -> Draws`` with ``w`` of shape (b, n) and ``wp`` (b,).
    n : int
        Number of observations.
    B : int
        Number of draws.
    seed : int
        Root seed; draw ``i``'s weights depend on it and ``i`` only.
    prior : {"random", "fixed"}
        Prior weight ``wp ~ Exp(1)`` or ``wp = 1``.
    batch_size : int, optional
        Draws per call of ``solve`` (all at once if omitted).
    coords, dims : mapping, optional
        ArviZ coords and dims of the parameters.
    on_failure : {"warn", "raise"}
        What to do about draws whose solve did not converge.
    attrs : mapping, optional
        Extra root attributes (solver settings).

    Returns
    -------
    Results
        Groups ``posterior``, ``sample_stats`` and ``weights``.
    """
    check_draws(B, seed=seed, prior=prior, batch_size=batch_size,
                on_failure=on_failure)
    n = check_int(n, "n")
    batch_size = B if batch_size is None else batch_size
    batches = []
    for start in range(0, B, batch_size):
        w, wp = bootstrap_weights(seed, n, min(batch_size, B - start), prior=prior, start=start)
        batches.append((w, wp, solve(w, wp)))
    w = np.concatenate([batch[0] for batch in batches])
    wp = np.concatenate([batch[1] for batch in batches])
    draws = [batch[2] for batch in batches]
    converged = np.concatenate([d.converged for d in draws]).astype(bool)
    params = {name: np.concatenate([d.params[name] for d in draws]) for name in draws[0].params}
    stats = {name: np.concatenate([d.stats[name] for d in draws]) for name in draws[0].stats}
    n_failed = int((~converged).sum())
    if n_failed:
        message = f"{n_failed} of {B} WBB solves did not converge; their draws are NaN"
        if on_failure == "raise":
            raise RuntimeError(message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        for value in params.values():
            value[~converged] = np.nan
    root = {"root_seed": int(seed), "prior": prior, "n_failed": n_failed, **dict(attrs or {})}
    posterior = arviz_compat.dict_to_dataset(
        {k: v[None] for k, v in params.items()}, coords=coords, dims=dims, attrs=root
    )
    sample_stats = arviz_compat.dict_to_dataset(
        {"converged": converged[None], **{k: v[None] for k, v in stats.items()}}, attrs=root
    )
    weight_group = arviz_compat.dict_to_dataset(
        {"w": w[None], "w_prior": wp[None]}, coords={"obs": np.arange(n)}, dims={"w": ["obs"]}, attrs=root
    )
    return arviz_compat.build(
        {"posterior": posterior, "sample_stats": sample_stats, "weights": weight_group},
        attrs=root,
    )


def wbb_lasso(
    X: np.ndarray,
    y: np.ndarray,
    lam: float,
    B: int,
    *,
    seed: int,
    prior: str = "random",
    fit_intercept: bool = False,
    feature_names: Sequence[str] | None = None,
    tol: float = 1e-12,
    max_sweeps: int = 10_000,
    batch_size: int | None = None,
    on_failure: str = "warn",
) -> Results:
    """WBB draws of the weighted lasso (:func:`stanflow.wbb.lasso.solve_lasso`).

    All draws are warm-started from the unit-weight solution. Posterior
    variables ``beta`` (dims ``feature``) and, with ``fit_intercept``,
    ``intercept``; ``sample_stats.n_sweeps``.

    Parameters
    ----------
    X : ndarray, shape (n, p)
    y : ndarray, shape (n,)
    lam : float
        Penalty level (scaling in :mod:`stanflow.wbb.lasso`).
    B : int
        Number of draws.
    feature_names : sequence of str, optional
        Coordinates of ``feature`` (0..p-1 if omitted).
    Other parameters
        As in :func:`wbb` and :func:`stanflow.wbb.lasso.solve_lasso`.

    Returns
    -------
    Results
    """
    check_draws(B, seed=seed, prior=prior, batch_size=batch_size,
                on_failure=on_failure)
    start = solve_lasso(X, y, lam, fit_intercept=fit_intercept, tol=tol, max_sweeps=max_sweeps)

    def solve(w: np.ndarray, wp: np.ndarray) -> Draws:
        fit = solve_lasso(
            X, y, lam, weights=w, prior_weight=wp, fit_intercept=fit_intercept,
            beta0=start.beta, tol=tol, max_sweeps=max_sweeps,
        )
        params = _linear(fit.beta, fit.intercept, fit_intercept)
        return Draws(params, fit.converged, {"n_sweeps": fit.n_sweeps})

    return _linear_wbb(solve, X, B, seed, prior, feature_names, batch_size, on_failure,
                       {"solver": "lasso", "lam": float(lam), "tol": tol})


def wbb_ridge(
    X: np.ndarray,
    y: np.ndarray,
    lam: float,
    B: int,
    *,
    seed: int,
    prior: str = "random",
    fit_intercept: bool = False,
    feature_names: Sequence[str] | None = None,
    batch_size: int | None = None,
    on_failure: str = "warn",
) -> Results:
    """WBB draws of weighted ridge regression (:func:`stanflow.wbb.ridge.solve_ridge`).

    Same arguments and groups as :func:`wbb_lasso`, without solver statistics.
    """
    check_draws(B, seed=seed, prior=prior, batch_size=batch_size,
                on_failure=on_failure)
    solve_ridge(X, y, lam, fit_intercept=fit_intercept)  # validate once, up front

    def solve(w: np.ndarray, wp: np.ndarray) -> Draws:
        fit = solve_ridge(X, y, lam, weights=w, prior_weight=wp, fit_intercept=fit_intercept)
        return Draws(_linear(fit.beta, fit.intercept, fit_intercept), fit.converged)

    return _linear_wbb(solve, X, B, seed, prior, feature_names, batch_size, on_failure,
                       {"solver": "ridge", "lam": float(lam)})


def wbb_trend_filter(
    y: np.ndarray,
    lam: float,
    k: int,
    B: int,
    *,
    seed: int,
    prior: str = "random",
    tol: float = 1e-8,
    max_newton: int = 300,
    batch_size: int | None = None,
    on_failure: str = "warn",
) -> Results:
    """WBB draws of trend filtering (:func:`stanflow.wbb.trend_filtering.trend_filter`).

    Posterior variable ``theta`` (dims ``obs``); ``sample_stats.gap`` and
    ``sample_stats.n_newton``.

    Parameters
    ----------
    y : ndarray, shape (n,)
    lam : float
    k : int
        Order of the trend filter.
    B : int
        Number of draws.
    Other parameters
        As in :func:`wbb` and :func:`stanflow.wbb.trend_filtering.trend_filter`.

    Returns
    -------
    Results
    """
    check_draws(B, seed=seed, prior=prior, batch_size=batch_size,
                on_failure=on_failure)
    trend_filter(y, lam, k, tol=tol, max_newton=1)  # validate once, up front
    n = np.asarray(y).shape[0]

    def solve(w: np.ndarray, wp: np.ndarray) -> Draws:
        fit = trend_filter(y, lam, k, weights=w, prior_weight=wp, tol=tol, max_newton=max_newton)
        return Draws({"theta": fit.theta}, fit.converged, {"gap": fit.gap, "n_newton": fit.n_newton})

    return wbb(
        solve, n, B, seed=seed, prior=prior, batch_size=batch_size,
        coords={"obs": np.arange(n)}, dims={"theta": ["obs"]}, on_failure=on_failure,
        attrs={"solver": "trend_filter", "lam": float(lam), "k": int(k), "tol": tol},
    )


def _linear(beta: np.ndarray, intercept: np.ndarray, fit_intercept: bool) -> dict[str, np.ndarray]:
    return {"beta": beta, "intercept": intercept} if fit_intercept else {"beta": beta}


def _linear_wbb(
    solve: Callable[[np.ndarray, np.ndarray], Draws],
    X: np.ndarray,
    B: int,
    seed: int,
    prior: str,
    feature_names: Sequence[str] | None,
    batch_size: int | None,
    on_failure: str,
    attrs: dict[str, Any],
) -> Results:
    n, p = np.shape(X)
    names = list(range(p)) if feature_names is None else list(feature_names)
    if len(names) != p:
        raise ValueError(f"feature_names must have {p} entries, got {len(names)}")
    return wbb(
        solve, n, B, seed=seed, prior=prior, batch_size=batch_size,
        coords={"feature": names}, dims={"beta": ["feature"]}, on_failure=on_failure, attrs=attrs,
    )
