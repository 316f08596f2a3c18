"""Marginal likelihood by bridge sampling: the iterative estimator of Meng and Wong.

For an unnormalised posterior density ``q(theta) = p(y | theta) p(theta)`` the
marginal likelihood is ``p(y) = integral q``. Bridge sampling (Meng and Wong
1996, "Simulating ratios of normalizing constants via a simple identity";
Gelman and Meng 1998) estimates it from ``N1`` draws of the posterior and
``N2`` draws of a normalised proposal density ``g``. With
``l(theta) = q(theta) / g(theta)``, ``s1 = N1 / (N1 + N2)``, ``s2 = N2 / (N1 + N2)``,
the optimal bridge function gives the fixed-point iteration

    r <- [mean_j l(t_j) / (s1 l(t_j) + s2 r)] / [mean_i 1 / (s1 l(theta_i) + s2 r)],

``t_j`` the proposal draws and ``theta_i`` the posterior draws; its limit is
the estimate of ``p(y)``. Here (as Meng and Schilling 2002 and Overstall and
Forster 2010 advise) the proposal is a multivariate normal with the mean and
covariance of the first half of the posterior draws, and the second half
enters the estimator (draws used to fit ``g`` are not reused). Computations
are on the log scale, shifted by the median of ``log l`` over the posterior
draws, so that densities far below the floating-point range do not underflow.

Error: the relative mean squared error of Fruhwirth-Schnatter (2004),

    RE^2 = Var_g(f2) / (N2 E_g(f2)^2) + Var_post(f1) / (N1 E_post(f1)^2),
    f1 = g / (s1 q / p + s2 g),  f2 = (q / p) / (s1 q / p + s2 g),

with the posterior draws treated as independent (for a Markov chain thin it,
or compare independent chains). ``log_marginal`` is accurate to about ``RE``
(absolute, on the log scale).

Used by WBB's choice of the lasso penalty (:mod:`stanflow.wbb.bayes_lasso`) and
by SMC's final bridge on its particles (:func:`stanflow.qpaths.annealing.smc`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from stanflow.validation import check_int, check_positive

MIN_DRAWS = 8
"""Fewest posterior draws: half fit the proposal, half enter the estimator."""


@dataclass(frozen=True)
class BridgeResult:
    """A bridge-sampling estimate of a log marginal likelihood.

    Attributes
    ----------
    log_marginal : float
        Estimate of ``log integral q``.
    relative_error : float
        Fruhwirth-Schnatter's relative root mean squared error of
        ``exp(log_marginal)`` (independent draws assumed).
    n_iter : int
        Fixed-point iterations used.
    converged : bool
        Whether successive ``log r`` differed by at most ``tol``.
    """

    log_marginal: float
    relative_error: float
    n_iter: int
    converged: bool


def bridge_sampling(
    log_q: Callable[[np.ndarray], np.ndarray],
    draws: np.ndarray,
    *,
    seed: int | np.random.Generator,
    tol: float = 1e-10,
    max_iter: int = 1000,
) -> BridgeResult:
    """Estimate ``log integral q`` from posterior draws.

    Parameters
    ----------
    log_q : callable
        ``log_q(theta)`` for ``theta`` of shape (m, d) returns the log
        unnormalised posterior density, shape (m,), in the coordinates of
        ``draws`` (Jacobians of any transformation included).
    draws : ndarray, shape (N, d)
        Posterior draws, ``N >= 8``, finite; the first ``N // 2`` fit the
        normal proposal, the rest enter the estimator.
    seed : int or numpy.random.Generator
        Source of the ``N - N // 2`` proposal draws.
    tol : float
        Convergence tolerance on ``log r`` between iterations, ``> 0``.
    max_iter : int
        Largest number of fixed-point iterations.

    Returns
    -------
    BridgeResult
    """
    draws = np.asarray(draws, dtype=float)
    if draws.ndim != 2 or draws.shape[0] < MIN_DRAWS or draws.shape[1] < 1:
        raise ValueError(
            f"draws must have shape (N, d) with N >= {MIN_DRAWS} and d >= 1, got {draws.shape}"
        )
    if not np.all(np.isfinite(draws)):
        raise ValueError("draws contains NaN or infinite values")
    tol = check_positive(tol, "tol")
    max_iter = check_int(max_iter, "max_iter")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    fit, post = draws[: draws.shape[0] // 2], draws[draws.shape[0] // 2 :]
    mean, chol = _normal_fit(fit)
    proposal = mean + rng.standard_normal(post.shape) @ chol.T
    log_l1 = _log_q(log_q, post, "posterior") - _normal_logpdf(post, mean, chol)
    log_l2 = _log_q(log_q, proposal, "proposal") - _normal_logpdf(proposal, mean, chol)
    shift = float(np.median(log_l1))
    a, b = log_l1 - shift, log_l2 - shift
    n1, n2 = a.size, b.size
    log_s1, log_s2 = np.log(n1 / (n1 + n2)), np.log(n2 / (n1 + n2))
    rho, converged, it = 0.0, False, 0
    for it in range(1, max_iter + 1):  # noqa: B007 (the count is returned after the loop)
        numerator = logsumexp(-np.logaddexp(log_s1, log_s2 + rho - b)) - np.log(n2)
        denominator = logsumexp(-np.logaddexp(log_s1 + a, log_s2 + rho)) - np.log(n1)
        new = float(numerator - denominator)
        if not np.isfinite(new):
            raise FloatingPointError("bridge sampling iteration gave a non-finite estimate")
        converged = abs(new - rho) <= tol
        rho = new
        if converged:
            break
    return BridgeResult(rho + shift, _relative_error(a, b, rho, log_s1, log_s2), it, converged)


def _normal_fit(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and Cholesky factor of the sample covariance of ``x`` (m, d)."""
    cov = np.atleast_2d(np.cov(x, rowvar=False))
    try:
        return x.mean(axis=0), np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        raise ValueError(
            "draws: the covariance of the first half is singular; the proposal needs "
            "draws that vary in every coordinate"
        ) from None


def _normal_logpdf(x: np.ndarray, mean: np.ndarray, chol: np.ndarray) -> np.ndarray:
    z = np.linalg.solve(chol, (x - mean).T)
    d = x.shape[1]
    return -0.5 * np.sum(z**2, axis=0) - np.log(np.diag(chol)).sum() - 0.5 * d * np.log(2 * np.pi)


def _log_q(log_q: Callable[[np.ndarray], np.ndarray], theta: np.ndarray, which: str) -> np.ndarray:
    values = np.asarray(log_q(theta), dtype=float)
    if values.shape != (theta.shape[0],):
        raise ValueError(
            f"log_q must return shape ({theta.shape[0]},) for {theta.shape[0]} points, got {values.shape}"
        )
    if np.any(np.isnan(values)) or np.any(values == np.inf):
        raise ValueError(f"log_q returned NaN or +inf at {which} draws")
    return values


def _relative_error(a: np.ndarray, b: np.ndarray, rho: float, log_s1: float, log_s2: float) -> float:
    """Fruhwirth-Schnatter's relative RMSE at the estimate (``rho`` = shifted log estimate)."""
    f1 = np.exp(-np.logaddexp(log_s1 + a - rho, log_s2))
    f2 = np.exp(b - rho - np.logaddexp(log_s1 + b - rho, log_s2))
    variance = f2.var(ddof=1) / (f2.size * f2.mean() ** 2) + f1.var(ddof=1) / (f1.size * f1.mean() ** 2)
    return float(np.sqrt(variance))
