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
    check_schedule,
    initial_particles,
    proposal_chol,
    rwm_move,
    rwm_moves,
)
from stanflow.qpaths.qmath import check_q, dlog_qpath_dbeta
from stanflow.validation import check_int


def thermodynamic_integration(
    log_pi0: LogDensity,
    sample_pi0: Sampler,
    log_pi1: LogDensity,
    schedule: ArrayLike,
    *,
    q: float = 1.0,
    chains: int = 200,
    warmup: int = 50,
    draws: int = 100,
    seed: int | None = None,
) -> Results:
    """Thermodynamic integration ``log Z = int_0^1 E_beta[d/dbeta log pi_{beta,q}]``.

    ``chains`` RWM chains start from the base and move through the schedule;
    at each beta they make ``warmup`` steps, then ``draws`` steps whose
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
    chains, warmup, draws : int
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
    q = float(check_q(q))
    check_int(chains, "chains", 2)
    check_int(warmup, "warmup", 0)
    check_int(draws, "draws")
    betas = check_schedule(schedule)
    if len(betas) % 2 == 0:
        raise ValueError(f"schedule must have an odd number of betas, got {len(betas)}")
    rng = np.random.default_rng(seed)
    walkers = initial_particles(rng, sample_pi0, chains, log_pi0, log_pi1)
    means, mcse, rates = [], [], []
    for beta in betas:
        if warmup:
            walkers, _ = rwm_moves(rng, walkers, beta, q, log_pi0, log_pi1, warmup)
        chol = proposal_chol(walkers.z)
        values, accepted = np.zeros((draws, chains)), 0.0
        for i in range(draws):
            walkers, rate = rwm_move(rng, walkers, beta, q, log_pi0, log_pi1, chol)
            values[i] = dlog_qpath_dbeta(walkers.log_pi0, walkers.log_pi1, beta, q)
            accepted += rate / draws
        per_chain = values.mean(axis=0)
        means.append(per_chain.mean())
        mcse.append(per_chain.std(ddof=1) / np.sqrt(chains))
        rates.append(accepted)
    return ti_result(
        betas, np.array(means), np.array(mcse),
        {"acceptance": ("step", np.array(rates))},
        q=q, chains=chains, draws=draws, moves="random-walk Metropolis",
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
