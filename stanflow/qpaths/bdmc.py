"""The BDMC sandwich of ``log p(x)``: forward and reverse AIS along q-paths, per data point.

For the model ``z ~ N(0, I_d)``, ``x | z ~ p(x | z)`` of
:mod:`stanflow.qpaths.latent_ais` (AIS with HMC moves along a q-path, over
many chains at once):

- :func:`tune_step_size`: a pilot forward run that adapts one step size per
  temperature to an acceptance rate, giving the step size as a fixed function of
  ``beta`` (:class:`~stanflow.qpaths.latent_ais.StepSizes`) for the runs that
  count: their kernels are then fixed in advance, as AIS needs, and the same in
  both directions.
- :func:`forward_ais`, :func:`reverse_ais`, :func:`bdmc_sandwich`: the bounds per data
  point from ``chains`` chains each. Forward: ``log mean_c w_c``, a stochastic
  lower bound (``E[log Z_hat] <= log Z`` by Jensen). Reverse, on data simulated
  with its ``z*`` (an exact posterior draw): ``-log mean_c w_c``, a stochastic upper
  bound. The BDMC gap is upper minus lower (Grosse, Ghahramani and Adams 2015).

``q`` is a scalar or one value per data point (e.g. a heuristic fitted per data
point).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from stanflow.qpaths.kernels import log_mean_exp
from stanflow.qpaths.latent_ais import (
    TARGET_ACCEPT,
    LogLikelihood,
    StepSizes,
    ais_hmc,
    check_monotone_schedule,
    linear_schedule,
)
from stanflow.qpaths.qmath import check_q
from stanflow.validation import check_int


def tune_step_size(
    log_likelihood: LogLikelihood,
    x: ArrayLike,
    *,
    q: ArrayLike = 1.0,
    n_distributions: int = 200,
    chains: int = 8,
    n_leapfrog: int = 10,
    initial: float = 0.5,
    target_accept: float = TARGET_ACCEPT,
    seed: int | None = None,
) -> StepSizes:
    """Pilot forward AIS that adapts the step size, recorded as a function of ``beta``.

    Parameters
    ----------
    log_likelihood : callable
    x : array_like, shape (B, ...)
        Data points; ``chains`` chains each.
    q : float or array_like, shape (B,)
    n_distributions : int, default 200
        Linear pilot schedule.
    chains, n_leapfrog : int
    initial : float, default 0.5
        Step size at the first temperature.
    target_accept : float, default 0.65
    seed : int, optional

    Returns
    -------
    StepSizes
        Step sizes at the pilot's intermediate temperatures (and their ends
        extended to ``beta = 0`` and 1).
    """
    x, q_rows = _replicate(x, q, chains)
    rng = np.random.default_rng(seed)
    z0 = rng.standard_normal((x.shape[0], _latent_dim(log_likelihood)))
    schedule = linear_schedule(n_distributions)
    run = ais_hmc(log_likelihood, x, z0, schedule, q=q_rows, step_size=initial,
                  n_leapfrog=n_leapfrog, seed=rng, adapt=True, target_accept=target_accept)
    # The step size after a transition is the one adapted to its temperature.
    adapted = run.step_size * np.exp(np.clip(2.0 * (run.acceptance - target_accept), -1, 1))
    betas = schedule[1:-1]
    return StepSizes(np.concatenate([[0.0], betas, [1.0]]),
                     np.concatenate([[adapted[0]], adapted, [adapted[-1]]]))


class Bounds(NamedTuple):
    """Per-data-point AIS estimates.

    Attributes
    ----------
    log_z : ndarray, shape (B,)
        Forward: ``log mean_c w_c`` (lower bound on ``log p(x)`` in
        expectation); reverse: ``-log mean_c w_c`` (upper bound).
    log_weights : ndarray, shape (B, C)
        The chains' log weights (reverse: of ``1 / p(x)``).
    acceptance : float
        Mean HMC acceptance over temperatures and chains.
    """

    log_z: np.ndarray
    log_weights: np.ndarray
    acceptance: float


def forward_ais(
    log_likelihood: LogLikelihood,
    x: ArrayLike,
    schedule: ArrayLike,
    *,
    chains: int,
    q: ArrayLike = 1.0,
    step_size: float | Callable[[float], float] = 0.1,
    n_leapfrog: int = 10,
    seed: int | np.random.Generator | None = None,
) -> Bounds:
    """Forward AIS from the prior: stochastic lower bounds on ``log p(x)`` per data point.

    Parameters
    ----------
    log_likelihood : callable
    x : array_like, shape (B, ...)
    schedule : array_like
        Increasing from 0 to 1.
    chains : int
        Chains per data point (at least 1).
    q : float or array_like, shape (B,)
    step_size, n_leapfrog, seed
        As in :func:`~stanflow.qpaths.latent_ais.ais_hmc`.
    """
    return _bounds(log_likelihood, x, None, schedule, chains, q, step_size,
                   n_leapfrog, seed, reverse=False)


def reverse_ais(
    log_likelihood: LogLikelihood,
    x: ArrayLike,
    z_star: ArrayLike,
    schedule: ArrayLike,
    *,
    chains: int,
    q: ArrayLike = 1.0,
    step_size: float | Callable[[float], float] = 0.1,
    n_leapfrog: int = 10,
    seed: int | np.random.Generator | None = None,
) -> Bounds:
    """Reverse AIS from exact posterior draws: stochastic upper bounds on ``log p(x)``.

    Parameters
    ----------
    x : array_like, shape (B, ...)
        Data simulated from the model.
    z_star : array_like, shape (B, d)
        The latent draw each ``x`` was simulated from (an exact draw from
        ``p(z | x)``); every chain of a data point starts there.
    schedule : array_like
        The forward schedule, increasing from 0 to 1; it is run backwards.
    Other parameters as in :func:`forward_ais`.
    """
    return _bounds(log_likelihood, x, z_star, schedule, chains, q, step_size,
                   n_leapfrog, seed, reverse=True)


class BDMC(NamedTuple):
    """The BDMC sandwich on simulated data.

    Attributes
    ----------
    lower, upper : Bounds
        Forward and reverse AIS.
    gap : ndarray, shape (B,)
        ``upper.log_z - lower.log_z`` per data point.
    """

    lower: Bounds
    upper: Bounds
    gap: np.ndarray


def bdmc_sandwich(
    log_likelihood: LogLikelihood,
    x: ArrayLike,
    z_star: ArrayLike,
    schedule: ArrayLike,
    *,
    chains: int,
    q: ArrayLike = 1.0,
    step_size: float | Callable[[float], float] = 0.1,
    n_leapfrog: int = 10,
    seed: int | None = None,
) -> BDMC:
    """Forward and reverse AIS on the same simulated data, same path and kernels.

    Parameters as in :func:`reverse_ais`; the two directions use independent
    streams from ``seed``.
    """
    seeds = np.random.SeedSequence(seed).spawn(2)
    lower = forward_ais(log_likelihood, x, schedule, chains=chains, q=q,
                        step_size=step_size, n_leapfrog=n_leapfrog,
                        seed=np.random.default_rng(seeds[0]))
    upper = reverse_ais(log_likelihood, x, z_star, schedule, chains=chains, q=q,
                        step_size=step_size, n_leapfrog=n_leapfrog,
                        seed=np.random.default_rng(seeds[1]))
    return BDMC(lower, upper, upper.log_z - lower.log_z)


def _replicate(x: ArrayLike, q: ArrayLike, chains: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``(B * C, ...)`` data point by data point, and ``q`` per row."""
    check_int(chains, "chains")
    x = np.asarray(x, dtype=float)
    if x.ndim < 1 or x.shape[0] < 1:
        raise ValueError(f"x must hold at least one data point along axis 0, got {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("x must be finite")
    q = check_q(q)
    if q.ndim == 1 and q.shape != (x.shape[0],):
        raise ValueError(f"q must be a scalar or have one value per data point "
                         f"({x.shape[0]}), got {q.shape}")
    if q.ndim > 1:
        raise ValueError(f"q must be a scalar or 1-D, got shape {q.shape}")
    q_rows = np.repeat(q, chains) if q.ndim == 1 else q
    return np.repeat(x, chains, axis=0), q_rows


def _latent_dim(log_likelihood: LogLikelihood) -> int:
    dim = getattr(log_likelihood, "latent_dim", None)
    if dim is None:
        raise ValueError("log_likelihood must have a latent_dim attribute (see LatentModel)")
    return int(dim)


def _bounds(log_likelihood, x, z_star, schedule, chains, q, step_size, n_leapfrog,
            seed, *, reverse: bool) -> Bounds:
    rows, q_rows = _replicate(x, q, chains)
    betas = check_monotone_schedule(schedule)
    if betas[0] != 0.0:
        raise ValueError("schedule must increase from 0 to 1 (reverse AIS runs it backwards)")
    rng = np.random.default_rng(seed)
    b = rows.shape[0] // chains
    if reverse:
        z_star = np.asarray(z_star, dtype=float)
        if z_star.ndim != 2 or z_star.shape[0] != b:
            raise ValueError(f"z_star must have shape ({b}, d), one per data point, "
                             f"got {z_star.shape}")
        z0, betas = np.repeat(z_star, chains, axis=0), betas[::-1]
    else:
        z0 = rng.standard_normal((rows.shape[0], _latent_dim(log_likelihood)))
    run = ais_hmc(log_likelihood, rows, z0, betas, q=q_rows, step_size=step_size,
                  n_leapfrog=n_leapfrog, seed=rng)
    log_w = run.log_weights.reshape(b, chains)
    estimate = np.array([float(log_mean_exp(row)) for row in log_w])
    acceptance = float(run.acceptance.mean()) if run.acceptance.size else float("nan")
    return Bounds(-estimate if reverse else estimate, log_w, acceptance)


class LatentModel:
    """A likelihood callable with its latent dimension, for :func:`forward_ais` etc.

    Parameters
    ----------
    function : callable
        ``function(x_rows, z) -> (log_lik (N,), grad (N, d))``.
    latent_dim : int
    """

    def __init__(self, function: LogLikelihood, latent_dim: int):
        check_int(latent_dim, "latent_dim")
        self.function = function
        self.latent_dim = int(latent_dim)

    def __call__(self, x_rows: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.function(x_rows, z)
