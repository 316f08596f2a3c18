"""The utility term ``U(lambda, h) = sum_n E_q[log E_{y_n | theta} u(y_n, h_n)]`` in NumPy.

Estimated by double reparameterisation with fixed base samples: ``T`` draws
``theta_t = mu + sigma * eps_theta[t]`` from the mean-field normal ``q`` (in the
unconstrained space), and for each of them ``S`` outcomes
``y_{ts} = g(theta_t, eps_y[s])`` from the same base samples ``eps_y``. Two
estimators of the inner term per ``theta_t`` and data point ``n``:

- ``"naive"``: ``log (1/S) sum_s u(y_{tsn}, h_n)``; for ``u = exp(-gamma l)``
  this is a log-sum-exp; for ``u = M - l`` it is ``-inf`` when the mean
  utility is not positive;
- ``"linearised"``: ``-(1/S) sum_s l(y_{tsn}, h_n) / M`` for ``u = M - l``
  (``log(M - l) ~ log M - l / M`` without the constant), and
  ``-gamma (1/S) sum_s l`` for ``u = exp(-gamma l)``.

These are the checks of the Stan template ``stan/lcvi/eight_schools_lcvi.stan``,
whose target gains :func:`utility_per_theta` at ADVI's own draw of ``theta``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp, ndtri

from stanflow.lcvi.losses import Loss, check_utility, get_loss

ESTIMATORS = ("naive", "linearised")
"""Estimators of the utility term, in the order of the Stan data ``estimator`` (1, 2)."""


def theta_draws(mu: np.ndarray, sigma: np.ndarray, eps_theta: np.ndarray) -> np.ndarray:
    """Reparameterised draws ``mu + sigma * eps_theta`` of a mean-field normal.

    Parameters
    ----------
    mu : array_like, shape (D,)
    sigma : array_like, shape (D,)
        Positive.
    eps_theta : array_like, shape (T, D)
        Standard normal base samples.

    Returns
    -------
    ndarray, shape (T, D)
    """
    mu, sigma = np.asarray(mu, dtype=float), np.asarray(sigma, dtype=float)
    eps_theta = np.asarray(eps_theta, dtype=float)
    if mu.ndim != 1 or sigma.shape != mu.shape:
        raise ValueError(
            f"mu and sigma must be vectors of one length, got {mu.shape} and {sigma.shape}"
        )
    if np.any(sigma <= 0):
        raise ValueError("sigma must be positive")
    if eps_theta.ndim != 2 or eps_theta.shape[1] != mu.shape[0]:
        raise ValueError(
            f"eps_theta must have shape (T, {mu.shape[0]}), got {eps_theta.shape}"
        )
    return mu + sigma * eps_theta


def outcome_base_samples(
    S: int, N: int, rng: np.random.Generator, stratified: bool = True
) -> np.ndarray:
    """Fixed standard normal base samples ``eps_y`` of the outcomes, shape (S, N).

    Stratified (default): ``eps_y[s, n] = Phi^-1((s + u_n) / S)`` with one
    uniform ``u_n`` per data point, so each ``eps_y[:, n]`` has one draw in each
    of the ``S`` equal-probability strata of ``N(0, 1)``: every average over
    ``s`` is unbiased and has far less error than with ``S`` independent
    draws, which matters because the same samples are used in every gradient
    step (a fixed ``eps_y`` biases the optimum towards ``h - sd eps_y``; with
    ``S = 1`` independent draw LCVI can raise the risk). Otherwise independent
    draws.

    Parameters
    ----------
    S, N : int
        At least 1.
    rng : numpy.random.Generator
    stratified : bool, default True
    """
    if S < 1 or N < 1:
        raise ValueError(f"S and N must be >= 1, got {S!r}, {N!r}")
    if not stratified:
        return rng.standard_normal((S, N))
    return ndtri((np.arange(S)[:, None] + rng.uniform(size=N)) / S)


def normal_outcomes(
    loc: np.ndarray, scale: np.ndarray, eps_y: np.ndarray
) -> np.ndarray:
    """Outcomes ``y_{tsn} = loc[t, n] + scale[n] * eps_y[s, n]`` of a normal likelihood.

    Parameters
    ----------
    loc : array_like, shape (T, N)
        Location of ``y_n`` given each ``theta_t`` (for eight schools: ``theta_n``).
    scale : array_like, shape (N,)
        Positive standard deviations.
    eps_y : array_like, shape (S, N)
        Standard normal base samples, shared by all ``theta_t``.

    Returns
    -------
    ndarray, shape (T, S, N)
    """
    loc, scale = np.asarray(loc, dtype=float), np.asarray(scale, dtype=float)
    eps_y = np.asarray(eps_y, dtype=float)
    if loc.ndim != 2 or scale.shape != loc.shape[1:] or eps_y.shape[1:] != scale.shape:
        raise ValueError(
            "loc, scale, eps_y must have shapes (T, N), (N,), (S, N), got "
            f"{loc.shape}, {scale.shape}, {eps_y.shape}"
        )
    if np.any(scale <= 0):
        raise ValueError("scale must be positive")
    return loc[:, None, :] + scale * eps_y[None, :, :]


def utility_per_theta(
    y: np.ndarray,
    h: np.ndarray,
    loss: str | Loss,
    kind: str,
    scale: float,
    estimator: str = "linearised",
) -> np.ndarray:
    """The inner utility term per draw of ``theta``, summed over data points.

    Parameters
    ----------
    y : array_like, shape (T, S, N)
        ``S`` outcomes for each of ``T`` draws of ``theta``, ``N`` data points.
    h : array_like, shape (N,)
        Decisions.
    loss : str or Loss
        A :class:`Loss` or a parameter-free loss name.
    kind : {"linear", "exp"}
        Utility ``M - l`` or ``exp(-gamma l)``.
    scale : float
        ``M`` or ``gamma``, positive.
    estimator : {"naive", "linearised"}, default "linearised"

    Returns
    -------
    ndarray, shape (T,)
    """
    kind, scale = check_utility(kind, scale)
    if estimator not in ESTIMATORS:
        raise ValueError(
            f"estimator: unknown estimator {estimator!r}; known: {list(ESTIMATORS)}"
        )
    y, h = np.asarray(y, dtype=float), np.asarray(h, dtype=float)
    if y.ndim != 3 or y.shape[1] == 0:
        raise ValueError(f"y must have shape (T, S, N) with S >= 1, got {y.shape}")
    if h.shape != y.shape[2:]:
        raise ValueError(f"h (decisions) must have shape {y.shape[2:]}, got {h.shape}")
    losses = get_loss(loss).value(y, h)
    S = y.shape[1]
    if estimator == "linearised":
        mean_loss = losses.mean(axis=1)
        inner = -mean_loss / scale if kind == "linear" else -scale * mean_loss
    elif kind == "exp":
        inner = logsumexp(-scale * losses, axis=1) - math.log(S)
    else:
        mean_utility = scale - losses.mean(axis=1)
        with np.errstate(divide="ignore"):
            inner = np.where(
                mean_utility > 0, np.log(np.maximum(mean_utility, 0)), -np.inf
            )
    return inner.sum(axis=1)


def utility_term(
    y: np.ndarray,
    h: np.ndarray,
    loss: str | Loss,
    kind: str,
    scale: float,
    estimator: str = "linearised",
) -> float:
    """The utility term ``U``: :func:`utility_per_theta` averaged over the ``T`` draws.

    Parameters and shapes as :func:`utility_per_theta`.

    Returns
    -------
    float
    """
    return float(utility_per_theta(y, h, loss, kind, scale, estimator).mean())
