"""Thermodynamic integration along q-paths, in NumPy.

``log Z = integral_0^1 E_beta[d log pi_{beta,q} / d beta] d beta`` by the
trapezoid rule over a fixed schedule, with random-walk chains at every beta
(:mod:`~stanflow.qpaths.kernels`). The error reported is the Monte Carlo
standard error of the trapezoid sum (from the spread of the per-chain means)
combined with a discretisation error ``|T_K - T_{K/2}|`` (the trapezoid sum on
every other beta).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr
from numpy.typing import ArrayLike

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.qpaths.kernels import (
    LogDensity,
    Sampler,
    check_counts,
    check_schedule,
    initial_particles,
    proposal_chol,
    rwm_move,
    rwm_moves,
)
from stanflow.qpaths.qmath import _check_q, dlog_qpath_dbeta


def thermodynamic_integration(
    log_pi0: LogDensity,
    sample_pi0: Sampler,
    log_pi1: LogDensity,
    schedule: ArrayLike,
    *,
    q: float = 1.0,
    n_chains: int = 200,
    n_warmup: int = 50,
    n_draws: int = 100,
    seed: int | None = None,
) -> Results:
    """Thermodynamic integration ``log Z = int_0^1 E_beta[d/dbeta log pi_{beta,q}]``.

    ``n_chains`` RWM chains start from the base and move through the schedule;
    at each beta they make ``n_warmup`` steps, then ``n_draws`` steps whose
    integrand values (:func:`~stanflow.qpaths.qmath.dlog_qpath_dbeta`) are
    averaged. The proposal covariance is ``(2.38^2 / d)`` times the chains'
    covariance, refreshed after warm-up. The means are integrated by the
    trapezoid rule.

    Parameters
    ----------
    schedule : array_like
        Increasing betas from 0 to 1 with an odd number (at least 3) of
        points, so that every other one is a coarser schedule for the
        discretisation error.
    q : float, default 1.0
    n_chains, n_warmup, n_draws : int
    seed : int, optional

    Returns
    -------
    Results
        Group ``smc`` with ``beta``, ``integrand`` (mean), ``integrand_mcse``
        and ``acceptance`` (dim ``step``, one per beta). Attributes
        ``log_z`` (trapezoid sum), ``log_z_se`` (the Monte Carlo and
        discretisation errors combined in quadrature), ``log_z_mcse``,
        ``log_z_discretisation``, ``q``.
    """
    q = float(_check_q(q))
    check_counts(n_chains=(n_chains, 2), n_warmup=(n_warmup, 0), n_draws=(n_draws, 1))
    betas = check_schedule(schedule)
    if len(betas) % 2 == 0:
        raise ValueError(f"schedule must have an odd number of betas, got {len(betas)}")
    rng = np.random.default_rng(seed)
    chains = initial_particles(rng, sample_pi0, n_chains, log_pi0, log_pi1)
    means, mcse, rates = [], [], []
    for beta in betas:
        if n_warmup:
            chains, _ = rwm_moves(rng, chains, beta, q, log_pi0, log_pi1, n_warmup)
        chol = proposal_chol(chains.z)
        values, accepted = np.zeros((n_draws, n_chains)), 0.0
        for i in range(n_draws):
            chains, rate = rwm_move(rng, chains, beta, q, log_pi0, log_pi1, chol)
            values[i] = dlog_qpath_dbeta(chains.log_pi0, chains.log_pi1, beta, q)
            accepted += rate / n_draws
        per_chain = values.mean(axis=0)
        means.append(per_chain.mean())
        mcse.append(per_chain.std(ddof=1) / np.sqrt(n_chains))
        rates.append(accepted)
    return ti_result(
        betas, np.array(means), np.array(mcse),
        {"acceptance": ("step", np.array(rates))},
        q=q, n_chains=n_chains, n_draws=n_draws, moves="random-walk Metropolis",
    )


def ti_result(
    betas: np.ndarray,
    means: np.ndarray,
    mcse: np.ndarray,
    extra: dict[str, Any],
    **attrs: Any,
) -> Results:
    """Integrate TI integrand means by the trapezoid rule, with error estimates.

    Parameters
    ----------
    betas : ndarray, shape (K,)
        The schedule (odd K: every other beta is the coarser rule whose
        difference estimates the discretisation error).
    means, mcse : ndarray, shape (K,)
        Integrand means and their Monte Carlo standard errors.
    extra : dict
        More ``step`` variables for the group.
    **attrs
        More attributes (``q``, sampler settings).

    Returns
    -------
    Results
        Group ``smc`` as :func:`thermodynamic_integration` describes.
    """
    weights = _trapezoid_weights(betas)
    log_z = float(weights @ means)
    coarse = float(_trapezoid_weights(betas[::2]) @ means[::2])
    log_z_mcse = float(np.sqrt(np.sum((weights * mcse) ** 2)))
    discretisation = abs(log_z - coarse)
    group = xr.Dataset(
        {
            "beta": ("step", betas),
            "integrand": ("step", means),
            "integrand_mcse": ("step", mcse),
            **extra,
        },
        attrs={
            "algorithm": "ti",
            "log_z": log_z,
            "log_z_se": float(np.hypot(log_z_mcse, discretisation)),
            "log_z_mcse": log_z_mcse,
            "log_z_discretisation": discretisation,
            **attrs,
        },
    )
    return arviz_compat.build({"smc": group})


def _trapezoid_weights(x: np.ndarray) -> np.ndarray:
    steps = np.diff(x)
    return np.concatenate([[0.0], steps / 2]) + np.concatenate([steps / 2, [0.0]])
