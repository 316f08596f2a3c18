"""Reading the Gibbs posterior at any learning rate from a path's particles.

The ``path`` group of :func:`stanflow.gibbs.path.gibbs_path` holds equally
weighted particles at the schedule points ``omega_0 = 0 < ... < omega_K``. The
Gibbs posterior at any ``omega`` in ``[0, omega_K]`` is read from the last
schedule point ``k`` at or below it (a path that starts at ``omega_0 > 0``,
:mod:`stanflow.gibbs.path.start`, reads below ``omega_0`` from its first
point, with weights that grow in the tails: its ``ess`` says how well) by
self-normalised importance weights

    log w_i = -omega L_n(theta_i) - g_k(theta_i),

``g_k`` the level's log density relative to the prior
(:func:`log_level_density`; ``-omega_k L_n`` on the
geometric path, so ``w ∝ exp(-(omega - omega_k) L_n)``, bounded). On the
geometric path the adaptive schedule keeps the Kish effective sample size of
these weights at or above ``target_ess * N`` up to the next schedule point, so
no learning rate is read from fewer effective particles.

Stated errors are Monte Carlo standard errors from that effective sample size
``ESS = 1 / sum w_i^2`` (the same formula at the schedule points, where it is
``N``): a mean's ``sqrt(sum w_i^2 (x_i - mean)^2)``; a CDF value's
``sqrt(F (1 - F) / ESS)``; a quantile's band ``[Q(p - 2 se_p), Q(p + 2 se_p)]``
with ``se_p = sqrt(p (1 - p) / ESS)``; ``log Z_n``'s the level's accumulated
``sum (1/ESS_k - 1/N)`` plus the reweighting's ``1/ESS - 1/N``. They count the
particles as independent, which resampling and finitely many moves make them
only approximately.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import xarray as xr

from stanflow.qpaths.qmath import log_qpath


def log_level_density(
    loss: np.ndarray, omega: float, omega_max: float, q: float
) -> np.ndarray:
    """``g = log pi_{beta,q} - log pi`` of a level, up to its constant.

    With the prior ``pi`` as base and the Gibbs posterior at ``omega_max`` as
    target, the q-path density relative to the prior depends on the losses
    only: ``log_qpath(0, -omega_max L, omega / omega_max, q)``, which is
    ``-omega L`` at ``q = 1``.

    Parameters
    ----------
    loss : ndarray, shape (N,)
        Total losses ``L_n``.
    omega : float
        The level's position, in ``[0, omega_max]``.
    omega_max : float
    q : float

    Returns
    -------
    ndarray, shape (N,)
    """
    if q == 1:
        return -omega * loss
    beta = min(1.0, omega / omega_max)
    return log_qpath(np.zeros_like(loss), -omega_max * loss, beta, q)


class Reweighted(NamedTuple):
    """The Gibbs posterior at one ``omega`` as weighted particles.

    Attributes
    ----------
    step : int
        The schedule point read from.
    theta : ndarray, shape (N, K)
    weights : ndarray, shape (N,)
        Normalised.
    ess : float
        Kish effective sample size ``1 / sum w^2``.
    log_z : float
        ``log Z_n(omega)``.
    log_z_se : float
    """

    step: int
    theta: np.ndarray
    weights: np.ndarray
    ess: float
    log_z: float
    log_z_se: float


def reweight(path: xr.Dataset, omega: float) -> Reweighted:
    """The Gibbs posterior at ``omega`` from the path's particles.

    Parameters
    ----------
    path : xarray.Dataset
        The ``path`` group.
    omega : float
        In ``[0, omega_max]``; below the path's first schedule point (a path
        started at a Gaussian) read from that point.

    Returns
    -------
    Reweighted
    """
    omegas = path["omega"].values
    if not (math.isfinite(omega) and 0 <= omega <= omegas[-1] * (1 + 1e-12)):
        raise ValueError(
            f"omega must lie in [0, {omegas[-1]}] (the path's range), got {omega!r}"
        )
    k = max(0, int(np.searchsorted(omegas, omega, side="right") - 1))
    loss = path["total_loss"].values[k]
    q, omega_max = float(path.attrs["q"]), float(path.attrs["omega_max"])
    log_w = -omega * loss - log_level_density(loss, float(omegas[k]), omega_max, q)
    top = np.max(log_w)
    w = np.exp(log_w - top)
    total = w.sum()
    n = len(w)
    weights = w / total
    ess = float(1.0 / np.sum(weights**2))
    log_z = float(path["log_z"].values[k] + top + math.log(total / n))
    variance = float(path["log_z_se"].values[k]) ** 2 + max(0.0, 1 / ess - 1 / n)
    return Reweighted(k, path["theta"].values[k], weights, ess, log_z, math.sqrt(variance))


def weighted_quantile(
    x: np.ndarray, weights: np.ndarray, probs: np.ndarray, order: np.ndarray | None = None
) -> np.ndarray:
    """Quantiles of a weighted sample: the smallest ``x`` whose weighted CDF reaches ``p``.

    Parameters
    ----------
    x : ndarray, shape (N,)
    weights : ndarray, shape (N,)
        Normalised.
    probs : ndarray
        In ``[0, 1]``.
    order : ndarray of int, shape (N,), optional
        ``np.argsort(x)``, when the caller has it already.

    Returns
    -------
    ndarray, shape of ``probs``
    """
    if order is None:
        order = np.argsort(x)
    cdf = np.cumsum(weights[order])
    index = np.searchsorted(cdf, np.clip(probs, 0.0, 1.0) * cdf[-1] - 1e-12, side="left")
    return x[order][np.clip(index, 0, len(x) - 1)]


def cdf(reweighted: Reweighted, x: np.ndarray, param: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The weighted CDF of one parameter at points ``x``, and its standard error.

    Returns
    -------
    (ndarray, ndarray), shape of ``x`` each
        ``F(x) = sum_i w_i [theta_i <= x]`` and ``sqrt(F (1 - F) / ESS)``.
    """
    values = reweighted.theta[:, param]
    order = np.argsort(values)
    cumulative = np.concatenate([[0.0], np.cumsum(reweighted.weights[order])])
    F = np.clip(cumulative[np.searchsorted(values[order], np.asarray(x, float), side="right")], 0, 1)
    return F, np.sqrt(F * (1 - F) / reweighted.ess)


def default_omegas(path: xr.Dataset, points: int = 151) -> np.ndarray:
    """The schedule and ``points`` geometric points from ``omega_max / 1000`` (or
    the path's first ``omega``, if larger) to ``omega_max``."""
    omegas = path["omega"].values
    omega_max = float(omegas[-1])
    grid = np.geomspace(max(omega_max / 1000, float(omegas[0])), omega_max, points)
    return np.unique(np.concatenate([omegas, grid]))


def functionals(
    path: xr.Dataset, omegas: np.ndarray, probs: Sequence[float] = (0.025, 0.5, 0.975)
) -> xr.Dataset:
    """Posterior means, quantiles and ``log Z_n`` as functions of ``omega``.

    Parameters
    ----------
    path : xarray.Dataset
        The ``path`` group.
    omegas : array_like, shape (W,)
        Learning rates in ``[0, omega_max]``.
    probs : sequence of float
        Quantile levels in (0, 1).

    Returns
    -------
    xarray.Dataset
        Dims ``omega``, ``param``, ``prob``: ``mean``, ``mean_se``,
        ``quantile``, ``quantile_lower``, ``quantile_upper`` (the band of
        ``p -+ 2 se_p``), ``ess``, ``step`` (the schedule point read from),
        ``log_z``, ``log_z_se``.
    """
    omegas = np.asarray(omegas, dtype=float)
    levels = np.asarray(probs, dtype=float)
    if omegas.ndim != 1 or omegas.size == 0:
        raise ValueError(f"omegas must be a non-empty 1-D array, got shape {omegas.shape}")
    if levels.ndim != 1 or not np.all((levels > 0) & (levels < 1)):
        raise ValueError(f"probs must be levels in (0, 1), got {levels.tolist()}")
    K = path.sizes["param"]
    shape = (len(omegas), K)
    mean, mean_se = np.empty(shape), np.empty(shape)
    quantile, lower, upper = (np.empty((len(omegas), len(levels), K)) for _ in range(3))
    scalars = np.empty((len(omegas), 4))
    orders: dict[tuple[int, int], np.ndarray] = {}  # a schedule point's particles, sorted once
    for j, omega in enumerate(omegas):
        r = reweight(path, float(omega))
        se_p = 2 * np.sqrt(levels * (1 - levels) / r.ess)
        for p in range(K):
            x = r.theta[:, p]
            mean[j, p] = r.weights @ x
            mean_se[j, p] = math.sqrt(np.sum(r.weights**2 * (x - mean[j, p]) ** 2))
            if (r.step, p) not in orders:
                orders[r.step, p] = np.argsort(x)
            order = orders[r.step, p]
            bands = weighted_quantile(
                x, r.weights, np.concatenate([levels, levels - se_p, levels + se_p]), order)
            quantile[j, :, p], lower[j, :, p], upper[j, :, p] = np.split(bands, 3)
        scalars[j] = (r.ess, r.step, r.log_z, r.log_z_se)
    return xr.Dataset(
        {
            "mean": (("omega", "param"), mean),
            "mean_se": (("omega", "param"), mean_se),
            "quantile": (("omega", "prob", "param"), quantile),
            "quantile_lower": (("omega", "prob", "param"), lower),
            "quantile_upper": (("omega", "prob", "param"), upper),
            "ess": ("omega", scalars[:, 0]),
            "step": ("omega", scalars[:, 1].astype(int)),
            "log_z": ("omega", scalars[:, 2]),
            "log_z_se": ("omega", scalars[:, 3]),
        },
        coords={"omega": omegas, "prob": levels, "param": path["param"].values},
        attrs={
            "reading": "particles of the last schedule point at or below omega, "
            "weights exp(-omega L_n - g_k) normalised",
            "errors": "Monte Carlo standard errors from the Kish effective sample size; "
            "quantile bands at p -+ 2 sqrt(p (1 - p) / ESS)",
        },
    )
