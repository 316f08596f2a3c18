"""The Bayesian lasso with a known noise scale: Gibbs draws and the marginal likelihood.

Model (the lasso objective of :mod:`stanflow.wbb.lasso` as a posterior):

    y | beta ~ N(X beta, sigma^2 I),   beta_j iid Laplace(rate lam / sigma^2),

so ``-sigma^2 log p(beta | y) = |y - X beta|^2 / 2 + lam |beta|_1 + const``: the
posterior mode is the lasso at ``lam`` exactly (same scaling as
:func:`stanflow.wbb.solve_lasso`), and the marginal likelihood ``p(y | lam)``
is a function of the one penalty level ``lam`` the WBB uses. ``sigma`` is
fixed (a plug-in value), which keeps that correspondence exact.

Gibbs sampler (Park and Casella 2008, with ``sigma`` fixed): the Laplace prior
is a scale mixture of normals, ``beta_j | s_j ~ N(0, s_j)``,
``s_j ~ Exp(rate r^2 / 2)`` with ``r = lam / sigma^2`` (Andrews and Mallows
1974), and the full conditionals are

    beta | s, y ~ N(A^-1 X'y / sigma^2, A^-1),  A = X'X / sigma^2 + diag(1 / s),
    1 / s_j | beta_j ~ InverseGaussian(mean r / |beta_j|, shape r^2).

All penalty levels and chains run at once (a leading batch axis), each
iteration one batched Cholesky factorisation.

:func:`lasso_log_marginal` estimates ``log p(y | lam)`` from the Gibbs draws
by bridge sampling (:mod:`stanflow.bridge`) on the exact log
density :func:`lasso_log_density` (latent scales integrated out).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from stanflow.bridge import MIN_DRAWS, bridge_sampling
from stanflow.validation import check_int, check_positive
from stanflow.wbb._checks import check_X_y

TINY = 1e-12
"""Floor of ``|beta_j|`` in the inverse-Gaussian mean ``r / |beta_j|``, which keeps it finite."""


@dataclass(frozen=True)
class LassoMarginal:
    """Bridge-sampling estimates of ``log p(y | lam)`` on a grid of penalty levels.

    Attributes
    ----------
    lams : ndarray, shape (L,)
    log_marginal : ndarray, shape (L,)
        Mean over chains of each chain's estimate.
    chain_se : ndarray, shape (L,)
        Standard error of that mean from the spread between chains
        (``sd / sqrt(chains)``).
    relative_error : ndarray, shape (L, chains)
        Fruhwirth-Schnatter's error of each chain's estimate (draws treated as
        independent).
    draws : ndarray, shape (L, chains, draws, p)
        The Gibbs draws of ``beta``.
    """

    lams: np.ndarray
    log_marginal: np.ndarray
    chain_se: np.ndarray
    relative_error: np.ndarray
    draws: np.ndarray


def lasso_log_density(beta: np.ndarray, X: np.ndarray, y: np.ndarray, lam: float, sigma: float) -> np.ndarray:
    """``log p(y | beta) + log p(beta)`` of the Bayesian lasso, normalised in ``y`` and ``beta``.

    Parameters
    ----------
    beta : ndarray, shape (m, p)
        Points.
    X : ndarray, shape (n, p)
    y : ndarray, shape (n,)
    lam : float
        Penalty level, ``> 0``.
    sigma : float
        Noise standard deviation, ``> 0``.

    Returns
    -------
    ndarray, shape (m,)
    """
    X, y = check_X_y(X, y)
    lam, sigma = check_positive(lam, "lam"), check_positive(sigma, "sigma")
    beta = _check_beta(beta, X.shape[1])
    return _log_density(beta, X, y, lam, sigma)


def gibbs_lasso(
    X: np.ndarray,
    y: np.ndarray,
    lams: np.ndarray,
    sigma: float,
    draws: int,
    *,
    seed: int,
    chains: int = 4,
    warmup: int = 500,
    thin: int = 1,
) -> np.ndarray:
    """Gibbs draws of ``beta`` from the Bayesian lasso at every ``lam`` of ``lams``.

    Parameters
    ----------
    X : ndarray, shape (n, p)
    y : ndarray, shape (n,)
    lams : array_like, shape (L,)
        Penalty levels, each ``> 0``.
    sigma : float
        Noise standard deviation, ``> 0``.
    draws : int
        Draws kept per chain, ``>= 1``.
    seed : int
        Seed of the whole run (all levels and chains).
    chains : int
        Independent chains per level, each started at ``beta = 0``, ``s = 1``.
    warmup : int
        Iterations discarded at the start, ``>= 0``.
    thin : int
        Keep every ``thin``-th iteration after the warm-up.

    Returns
    -------
    ndarray, shape (L, chains, draws, p)
    """
    X, y = check_X_y(X, y)
    lams = _check_lams(lams)
    sigma = check_positive(sigma, "sigma")
    draws, chains, thin = (check_int(v, name) for v, name in
                             ((draws, "draws"), (chains, "chains"), (thin, "thin")))
    warmup = check_int(warmup, "warmup", 0)
    rng = np.random.default_rng(seed)
    p = X.shape[1]
    gram, xty = X.T @ X / sigma**2, X.T @ y / sigma**2
    rate = np.broadcast_to((lams / sigma**2)[:, None, None], (lams.size, chains, p))
    inv_s = np.ones((lams.size, chains, p))
    out = np.empty((lams.size, chains, draws, p))
    for it in range(warmup + draws * thin):
        precision = gram + inv_s[..., None] * np.eye(p)
        chol = np.linalg.cholesky(precision)
        mean = np.linalg.solve(precision, np.broadcast_to(xty, inv_s.shape)[..., None])[..., 0]
        z = rng.standard_normal(inv_s.shape)
        # beta = mean + L^-T z has covariance (L L')^-1 = A^-1
        beta = mean + np.linalg.solve(np.swapaxes(chol, -1, -2), z[..., None])[..., 0]
        inv_s = rng.wald(rate / np.maximum(np.abs(beta), TINY), rate**2)
        kept = it - warmup
        if kept >= 0 and kept % thin == 0:
            out[:, :, kept // thin] = beta
    return out


def lasso_log_marginal(
    X: np.ndarray,
    y: np.ndarray,
    lams: np.ndarray,
    sigma: float,
    draws: int,
    *,
    seed: int,
    chains: int = 4,
    warmup: int = 500,
    thin: int = 1,
) -> LassoMarginal:
    """``log p(y | lam)`` of the Bayesian lasso by bridge sampling on Gibbs draws.

    Each chain's draws give one bridge estimate (proposal fitted to the first
    half of that chain's draws); the result is their mean and spread.

    Parameters
    ----------
    Same as :func:`gibbs_lasso`; ``draws >= 8``.

    Returns
    -------
    LassoMarginal
    """
    X, y = check_X_y(X, y)
    lams = _check_lams(lams)
    sigma = check_positive(sigma, "sigma")
    if check_int(draws, "draws") < MIN_DRAWS:
        raise ValueError(f"draws must be >= {MIN_DRAWS} for bridge sampling, got {draws}")
    beta = gibbs_lasso(X, y, lams, sigma, draws, seed=seed, chains=chains, warmup=warmup, thin=thin)
    rng = np.random.default_rng([seed, 1])
    estimates = np.empty((lams.size, beta.shape[1]))
    errors = np.empty_like(estimates)
    for i, lam in enumerate(lams):
        for c in range(beta.shape[1]):
            log_q = partial(_log_density, X=X, y=y, lam=lam, sigma=sigma)
            fit = bridge_sampling(log_q, beta[i, c], seed=rng)
            if not fit.converged:
                raise RuntimeError(f"bridge sampling did not converge at lam = {lam}, chain {c}")
            estimates[i, c], errors[i, c] = fit.log_marginal, fit.relative_error
    spread = estimates.std(axis=1, ddof=1) / np.sqrt(estimates.shape[1]) if beta.shape[1] > 1 \
        else np.full(lams.size, np.nan)
    return LassoMarginal(lams, estimates.mean(axis=1), spread, errors, beta)


def _log_density(beta: np.ndarray, X: np.ndarray, y: np.ndarray, lam: float, sigma: float) -> np.ndarray:
    n, p = X.shape
    residual = y - beta @ X.T
    log_lik = -0.5 * np.sum(residual**2, axis=1) / sigma**2 - n * np.log(sigma) - 0.5 * n * np.log(2 * np.pi)
    rate = lam / sigma**2
    return log_lik + p * np.log(rate / 2) - rate * np.abs(beta).sum(axis=1)


def _check_beta(beta: np.ndarray, p: int) -> np.ndarray:
    beta = np.asarray(beta, dtype=float)
    if beta.ndim != 2 or beta.shape[1] != p:
        raise ValueError(f"beta must have shape (m, {p}), got {beta.shape}")
    if not np.all(np.isfinite(beta)):
        raise ValueError("beta contains NaN or infinite values")
    return beta


def _check_lams(lams: np.ndarray) -> np.ndarray:
    lams = np.atleast_1d(np.asarray(lams, dtype=float))
    if lams.ndim != 1 or lams.size == 0:
        raise ValueError(f"lams must be a scalar or a non-empty 1-d array, got shape {lams.shape}")
    if not np.all(np.isfinite(lams) & (lams > 0)):
        raise ValueError("lams must be finite and > 0")
    return lams
