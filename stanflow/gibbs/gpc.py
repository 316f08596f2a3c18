"""Syring and Martin's bootstrap calibration of the learning rate (GPC).

Syring, N. and Martin, R. (2019), "Calibrating general posterior credible
regions", *Biometrika* 106(2), 479-486. The learning rate ``omega`` is chosen so
that the ``100(1 - alpha)%`` credible regions of the Gibbs posterior cover at the
nominal rate, with the bootstrap standing in for the unknown data distribution:

1. draw ``B`` bootstrap resamples of the data (once: the same resamples at every
   step, common random numbers, so the coverage is a smooth-ish function of
   ``omega`` and the iteration does not chase resampling noise);
2. at step ``t`` compute the Gibbs posterior with learning rate ``omega_t`` on
   every resample and the fraction ``c_t`` of resamples whose credible region
   contains the full-data estimate ``theta_hat`` (the empirical risk
   minimiser);
3. stop if ``|c_t - (1 - alpha)| <= eps``; otherwise the stochastic-approximation
   step ``omega_{t+1} = omega_t + (1 + t)^-0.51 (c_t - (1 - alpha))`` (regions
   that cover too often are too wide: raise ``omega``), at most ``max_steps``
   times.

Credible regions: for a scalar parameter the equal-tailed interval; for a
vector, the ellipsoid ``{theta: (theta - m)' S^-1 (theta - m) <= q}`` of the
posterior draws' mean ``m`` and covariance ``S``, with ``q`` the
``1 - alpha`` quantile of the draws' own Mahalanobis distances (an
elliptical stand-in for the highest-density region).

Two backends evaluate step 2:

- ``"grid"`` (:func:`grid_evaluator`): exact grid posteriors
  (:mod:`stanflow.gibbs.grid`), scalar parameter only; the ``B`` total-loss curves are computed once, each step costs
  one vectorised normalisation;
- ``"stan"`` (:mod:`stanflow.gibbs.gpc_stan`): the template compiled once, run
  through the run layer, in one of two designs.
  ``"reweight"`` (default): one proposal sample, the full-data Gibbs posterior
  at a quarter of the current ``omega``, serves all ``B`` resamples at every
  step through importance weights (:mod:`stanflow.gibbs.reweighting`: a
  resample is a vector of counts, so its loss is a weighted sum of the
  pointwise losses the template saves). A step costs a matrix product instead
  of ``B`` posterior runs; resamples the proposal serves poorly (small
  effective sample size) are sampled directly, and the proposal is redrawn
  when many are. ``"resample"``: one :class:`stanflow.runs.RunSet` per step
  whose runs are the ``B`` resamples at that step's ``omega`` (batch mode
  packs them into a few processes); exact MCMC for every resample, about
  ``B`` times the cost. All run sets use one root seed.

The pieces are pure functions (:func:`bootstrap_indices`, :func:`update`,
:func:`converged`, :func:`grid_coverage`, :func:`draws_coverage`,
:func:`draws_inside`); :func:`calibrate_gpc` runs the loop and returns the
``calibration`` group.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs import grid
from stanflow.gibbs.loss_terms import check_stan_loss
from stanflow.gibbs.plugin import location_estimate
from stanflow.gibbs.priors import log_prior_on_grid
from stanflow.losses import Loss, get_loss, loss_function
from stanflow.slots import is_slot_file

BACKENDS = ("grid", "stan")
DESIGNS = ("reweight", "resample")
STEP_EXPONENT = 0.51

Evaluator = Callable[[float, int], dict[str, float]]
"""A backend's step: ``(omega, t) ->`` the coverage at ``omega`` (key
``coverage``) and the backend's diagnostics of step ``t``."""


def bootstrap_indices(n: int, B: int, seed: int | np.random.SeedSequence) -> np.ndarray:
    """Indices of ``B`` bootstrap resamples of ``n`` observations.

    Parameters
    ----------
    n : int
        Number of observations, at least 1.
    B : int
        Number of resamples, at least 1.
    seed : int or numpy.random.SeedSequence
        The resamples depend on it alone.

    Returns
    -------
    ndarray of int, shape (B, n)
    """
    n, B = _positive_int(n, "n"), _positive_int(B, "B")
    return np.random.default_rng(seed).integers(0, n, size=(B, n))


def update(omega: float, coverage: float, t: int, alpha: float) -> float:
    """One stochastic-approximation step ``omega + (1 + t)^-0.51 (coverage - (1 - alpha))``.

    Parameters
    ----------
    omega : float
        Current learning rate, positive.
    coverage : float
        Bootstrap coverage at ``omega``, in [0, 1].
    t : int
        Step number, from 0.
    alpha : float
        Nominal non-coverage, in (0, 1).

    Returns
    -------
    float
        The next learning rate. A step that would make it non-positive is cut to
        halve ``omega`` instead (the rate must stay positive; the paper's
        examples never get there).
    """
    if not (math.isfinite(omega) and omega > 0):
        raise ValueError(f"omega must be positive and finite, got {omega!r}")
    if not 0 <= coverage <= 1:
        raise ValueError(f"coverage must be in [0, 1], got {coverage!r}")
    if t < 0:
        raise ValueError(f"t must be >= 0, got {t!r}")
    _check_alpha(alpha)
    proposed = omega + (1 + t) ** -STEP_EXPONENT * (coverage - (1 - alpha))
    return proposed if proposed > 0 else omega / 2


def converged(coverage: float, alpha: float, eps: float) -> bool:
    """Whether ``|coverage - (1 - alpha)| <= eps``."""
    return abs(coverage - (1 - alpha)) <= eps + 1e-12


def grid_coverage(
    theta: np.ndarray,
    sums: np.ndarray,
    omega: float,
    estimate: float,
    alpha: float,
    log_prior: np.ndarray | None = None,
) -> tuple[float, np.ndarray]:
    """Fraction of grid posteriors whose equal-tailed interval holds ``estimate``.

    Parameters
    ----------
    theta : ndarray, shape (G,)
        The grid.
    sums : ndarray, shape (B, G)
        Total losses of each resample on the grid (:func:`grid.loss_sums`).
    omega : float
        Learning rate.
    estimate : float
        The full-data estimate.
    alpha : float
        The intervals are ``100(1 - alpha)%``.
    log_prior : ndarray, shape (G,), optional
        Prior log density on the grid; default uniform.

    Returns
    -------
    coverage : float
    intervals : ndarray, shape (B, 2)
    """
    post = grid.posterior(theta, sums, omega, log_prior=log_prior)
    intervals = grid.interval(post, 1 - alpha)
    inside = (intervals[:, 0] <= estimate) & (estimate <= intervals[:, 1])
    return float(np.mean(inside)), intervals


def grid_evaluator(
    y: np.ndarray,
    indices: np.ndarray,
    value: Callable[[np.ndarray, np.ndarray], np.ndarray],
    estimate: float,
    alpha: float,
    bounds: tuple[Any, Any],
    grid_points: int,
    prior: str,
    prior_params: Mapping[str, Any] | None,
) -> Evaluator:
    """The grid backend's step: the exact coverage of the resamples' grid posteriors.

    The ``B`` total-loss curves are computed once, here; each step is then one
    vectorised normalisation (:func:`grid_coverage`).

    Parameters
    ----------
    y : ndarray, shape (n,)
        The data.
    indices : ndarray of int, shape (B, n)
        The bootstrap resamples (:func:`bootstrap_indices`).
    value : callable ``(y, f) -> losses``
        The loss, elementwise.
    estimate : float
        The full-data estimate.
    alpha : float
        Intervals of level ``1 - alpha``.
    bounds : (lower, upper)
        The grid's range.
    grid_points : int
        The grid's size, at least 1.
    prior, prior_params
        A shipped prior (:func:`stanflow.gibbs.priors.log_prior_on_grid`).

    Returns
    -------
    callable ``(omega, t) -> dict``
        ``{"coverage": c}``.
    """
    lower, upper = (float(b) for b in bounds)
    theta = np.linspace(lower, upper, _positive_int(grid_points, "grid_points"))
    sums = grid.loss_sums(theta, y[indices], value)
    log_prior = log_prior_on_grid(theta, prior, prior_params)

    def evaluate(omega: float, t: int) -> dict[str, float]:
        return {"coverage": grid_coverage(theta, sums, omega, estimate, alpha, log_prior)[0]}

    return evaluate


def draws_coverage(draws: np.ndarray, estimate: np.ndarray, alpha: float) -> float:
    """Fraction of posteriors (given by draws) whose credible region holds ``estimate``.

    Parameters
    ----------
    draws : ndarray, shape (B, S) or (B, S, K)
        ``S`` posterior draws for each of ``B`` resamples, of a scalar or of a
        ``K``-vector.
    estimate : float or ndarray, shape (K,)
        The full-data estimate.
    alpha : float
        Regions of level ``1 - alpha``: equal-tailed intervals for a scalar,
        Mahalanobis ellipsoids of the draws for a vector (module docstring).

    Returns
    -------
    float
    """
    return float(np.mean(draws_inside(draws, estimate, alpha)))


def draws_inside(draws: np.ndarray, estimate: np.ndarray, alpha: float) -> np.ndarray:
    """Whether each posterior's credible region holds ``estimate``.

    Parameters as :func:`draws_coverage`.

    Returns
    -------
    ndarray of bool, shape (B,)
    """
    _check_alpha(alpha)
    draws = np.asarray(draws, dtype=float)
    if draws.ndim == 2:
        low, high = np.quantile(draws, [alpha / 2, 1 - alpha / 2], axis=1)
        return (low <= estimate) & (estimate <= high)
    if draws.ndim != 3:
        raise ValueError(f"draws must have shape (B, S) or (B, S, K), got {draws.shape}")
    estimate = np.asarray(estimate, dtype=float).reshape(-1)
    if estimate.shape != draws.shape[2:]:
        raise ValueError(
            f"estimate must have shape {draws.shape[2:]}, got {estimate.shape}"
        )
    mean = draws.mean(axis=1, keepdims=True)
    centred = draws - mean
    cov = np.einsum("bsk,bsl->bkl", centred, centred) / (draws.shape[1] - 1)
    inverse = np.linalg.inv(cov)
    d_draws = np.einsum("bsk,bkl,bsl->bs", centred, inverse, centred)
    gap = estimate - mean[:, 0, :]
    d_estimate = np.einsum("bk,bkl,bl->b", gap, inverse, gap)
    radius = np.quantile(d_draws, 1 - alpha, axis=1)
    return d_estimate <= radius


def risk_minimiser(
    y: np.ndarray,
    X: np.ndarray,
    loss: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """The empirical risk minimiser ``argmin_beta sum_i loss(y_i, x_i' beta)``.

    Nelder-Mead (derivative-free, so kinked losses are fine) from the least
    squares fit, restarted once from its own optimum; adequate for the few
    coefficients of the examples. Pass your own estimate for anything harder.
    """
    from scipy.optimize import minimize

    start = np.linalg.lstsq(X, y, rcond=None)[0]

    def objective(beta: np.ndarray) -> float:
        return float(np.sum(loss(y, X @ beta)))

    for _ in range(2):
        start = minimize(
            objective,
            start,
            method="Nelder-Mead",
            options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 20000},
        ).x
    return start


def calibrate_gpc(
    y: np.ndarray,
    *,
    loss: str | os.PathLike | Loss = "absolute",
    loss_params: Mapping[str, Any] | None = None,
    prior: str = "uniform",
    prior_params: Mapping[str, Any] | None = None,
    X: np.ndarray | None = None,
    bounds: tuple[Any, Any] | None = None,
    estimate: float | np.ndarray | None = None,
    backend: str = "grid",
    design: str = "reweight",
    B: int = 200,
    alpha: float = 0.05,
    eps: float = 0.01,
    max_steps: int = 16,
    omega0: float = 1.0,
    seed: int = 0,
    grid_points: int = 801,
    draws: int = 1000,
    warmup: int = 300,
    proposal_draws: int = 20000,
    proposal_chains: int = 4,
    proposal_scale: float = 0.25,
    min_ess: float = 1000.0,
    out_dir: str | os.PathLike | None = None,
    executor: Any = None,
    progress: bool = False,
) -> Results:
    """Calibrate ``omega`` by Syring and Martin's bootstrap algorithm.

    Parameters
    ----------
    y : array_like, shape (n,)
        The data.
    loss, loss_params, prior, prior_params
        As in :func:`stanflow.gibbs.posterior`: a shipped loss, a ``Loss`` or a
        loss's ``.stanfunctions`` file with its parameters as a sequence (its
        values then come from Stan in process, :func:`stanflow.losses.loss_function`,
        for the estimate and the grid). The grid backend needs a shipped prior
        for :func:`log_prior_on_grid`.
    X : array_like, shape (n, K), optional
        Predictors (``linear.stan``); Stan backend only.
    bounds : (lower, upper), optional
        Parameter support. Required for the grid backend (it is the grid's
        range); default unbounded for Stan.
    estimate : float or array_like, optional
        The full-data estimate ``theta_hat``. Default: the empirical risk
        minimiser (golden-section search over ``bounds`` for a location,
        :func:`risk_minimiser` with ``X``).
    backend : {"grid", "stan"}, default "grid"
        Exact grid posteriors (:func:`grid_evaluator`), or Stan through the run
        layer (:func:`stanflow.gibbs.gpc_stan.stan_evaluator`).
    design : {"reweight", "resample"}, default "reweight"
        How the Stan backend gets the ``B`` posteriors of a step.
        ``"reweight"``: one proposal sample (the full-data posterior at
        ``proposal_scale * omega``) serves every resample and every step by
        importance weights (:mod:`stanflow.gibbs.reweighting`); it is drawn
        again when the smallest effective sample size over the resamples drops
        below ``min_ess`` for many resamples, and resamples it serves poorly
        are sampled directly. ``"resample"``: every step samples every resample
        (``B`` runs of ``draws`` draws).
    B : int, default 200
        Bootstrap resamples.
    alpha : float, default 0.05
        Target coverage ``1 - alpha``.
    eps : float, default 0.01
        Stop when ``|coverage - (1 - alpha)| <= eps``.
    max_steps : int, default 16
        At most this many coverage evaluations.
    omega0 : float, default 1.0
        Starting learning rate.
    seed : int, default 0
        Root seed: the resamples (``SeedSequence(seed)``) and, for Stan, the run
        sets' ``root_seed``.
    grid_points : int, default 801
        Grid size (grid backend).
    draws, warmup : int, default 1000, 300
        Posterior draws per directly sampled resample (one chain each: every
        resample in the ``resample`` design, the poorly served ones in
        ``reweight``) and warm-up iterations of every chain (Stan backend).
    proposal_draws, proposal_chains : int, default 20000, 4
        ``reweight`` design: draws of the proposal, split over this many runs of
        one chain.
    proposal_scale : float, default 0.25
        ``reweight`` design: the proposal's learning rate relative to the
        current ``omega`` (below 1, so the proposal is wider than the targets
        and the weights are bounded).
    min_ess : float, default 1000
        ``reweight`` design: a resample whose weights have a smaller Kish
        effective sample size is sampled directly; when more than 10% are, the
        proposal is redrawn at the current ``omega`` first.
    out_dir : path, optional
        Stan backend: the run sets go to ``out_dir/step-XX``; default a
        temporary folder, removed afterwards.
    executor : stanflow.runs executor, optional
        Stan backend; default ``LocalExecutor()``.
    progress : bool, default False
        Stan backend: the run layer's progress bar.

    Returns
    -------
    Results
        Group ``calibration``: ``omega`` (the calibrated rate: the last
        updated value, or the rate that met the tolerance), ``estimate`` (dim
        ``param``), per step (dim ``step``) ``omega_path`` and ``coverage_path``
        and, for Stan, ``step_wall_time`` and ``step_sampling_time`` (sum of the
        runs' CSV times; for ``reweight`` also ``ess_min``, ``ess_median``,
        ``n_direct`` (resamples sampled directly) and ``omega_ref``, the
        proposal's rate); ``converged`` and ``steps``.
        Attributes: method, backend, design, B, alpha, eps, seed, loss,
        loss_params, region.
    """
    _check_alpha(alpha)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
    proposal_draws = _positive_int(proposal_draws, "proposal_draws")
    proposal_chains = _positive_int(proposal_chains, "proposal_chains")
    if not (isinstance(proposal_scale, (int, float)) and 0 < proposal_scale <= 1):
        raise ValueError(f"proposal_scale must be in (0, 1], got {proposal_scale!r}")
    if not (isinstance(min_ess, (int, float)) and min_ess >= 0):
        raise ValueError(f"min_ess must be a number >= 0, got {min_ess!r}")
    B = _positive_int(B, "B")
    max_steps = _positive_int(max_steps, "max_steps")
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    if not (isinstance(omega0, (int, float)) and math.isfinite(omega0) and omega0 > 0):
        raise ValueError(f"omega0 must be positive and finite, got {omega0!r}")
    if is_slot_file(loss):  # a loss given only as its Stan file: values from Stan
        loss_file, stan_params = check_stan_loss(loss, loss_params)
        value = loss_function(loss_file, stan_params)
        loss_params = stan_params.tolist()
        loss_record = (loss_file, json.dumps(loss_params))
    else:
        loss_obj = get_loss(loss)
        params = loss_obj.bind(loss_params)
        value = loss_function(loss_obj, loss_params)
        loss_record = (
            loss_obj.name,
            json.dumps(dict(zip([p.name for p in loss_obj.params], params))),
        )
    y = np.asarray(y, dtype=float)
    if y.ndim != 1 or len(y) < 2:
        raise ValueError(f"y must be a 1-D array of at least 2 observations, got shape {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError("y must be finite")
    n = len(y)
    if X is not None:
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[0] != n or not np.all(np.isfinite(X)):
            raise ValueError(f"X must be a finite ({n}, K) array matching y, got shape {X.shape}")
        if backend == "grid":
            raise ValueError("backend 'grid' is for a scalar location: X needs backend='stan'")
    if backend == "grid" and bounds is None:
        raise ValueError("bounds are required with backend 'grid' (they are the grid's range)")
    estimate = _estimate(y, X, value, bounds, estimate)
    indices = bootstrap_indices(n, B, np.random.SeedSequence(seed))

    cleanup: Callable[[], None] | None = None
    if backend == "grid":
        evaluate = grid_evaluator(
            y, indices, value, float(estimate[0]), alpha, bounds, grid_points,
            prior, prior_params,
        )
    else:
        from stanflow.gibbs.gpc_stan import stan_evaluator

        evaluate, cleanup = stan_evaluator(
            y, X, estimate, indices, alpha,
            loss=loss, loss_params=loss_params, prior=prior, prior_params=prior_params,
            bounds=bounds, design=design, draws=_positive_int(draws, "draws"),
            warmup=_warmup(warmup), seed=seed, proposal_draws=proposal_draws,
            proposal_chains=proposal_chains, proposal_scale=float(proposal_scale),
            min_ess=float(min_ess), out_dir=out_dir, executor=executor, progress=progress,
        )

    omegas: list[float] = []
    records: list[dict[str, float]] = []
    omega, done = float(omega0), False
    try:
        for t in range(max_steps):
            record = evaluate(omega, t)
            omegas.append(omega)
            records.append(record)
            if converged(record["coverage"], alpha, eps):
                done = True
                break
            omega = update(omega, record["coverage"], t, alpha)
    finally:
        if cleanup is not None:
            cleanup()

    names = ["theta"] if X is None else [f"beta[{k + 1}]" for k in range(X.shape[1])]
    variables: dict[str, Any] = {
        "omega": ((), omega),
        "estimate": (("param",), estimate),
        "omega_path": (("step",), np.array(omegas)),
        "converged": ((), done),
        "steps": ((), len(omegas)),
    }
    for key in records[0]:
        name = "coverage_path" if key == "coverage" else key
        variables[name] = (("step",), np.array([r[key] for r in records]))
    group = xr.Dataset(
        variables,
        coords={"param": names, "step": np.arange(len(omegas))},
        attrs={
            "method": "gpc",
            "reference": "Syring and Martin (2019), Biometrika 106(2) 479-486",
            "backend": backend,
            "design": design if backend == "stan" else "exact grid",
            "B": B,
            "alpha": alpha,
            "eps": eps,
            "max_steps": max_steps,
            "omega0": float(omega0),
            "seed": seed,
            "loss": loss_record[0],
            "loss_params": loss_record[1],
            "region": "equal-tailed interval" if X is None else "Mahalanobis ellipsoid of the draws",
            "update": "omega + (1 + t)^-0.51 (coverage - (1 - alpha))",
        },
    )
    return arviz_compat.build({"calibration": group})


def _estimate(y, X, value, bounds, estimate) -> np.ndarray:
    if estimate is not None:
        estimate = np.atleast_1d(np.asarray(estimate, dtype=float))
        size = 1 if X is None else X.shape[1]
        if estimate.shape != (size,) or not np.all(np.isfinite(estimate)):
            raise ValueError(f"estimate must be finite with {size} value(s), got {estimate!r}")
        return estimate
    if X is None:
        lower, upper = (y.min(), y.max()) if bounds is None else (float(bounds[0]), float(bounds[1]))
        return np.atleast_1d(location_estimate(y, value, np.asarray(lower), np.asarray(upper)))
    return risk_minimiser(y, X, value)


def _warmup(warmup: Any) -> int:
    if isinstance(warmup, bool) or not isinstance(warmup, (int, np.integer)) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    return int(warmup)


def _check_alpha(alpha: float) -> None:
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)
