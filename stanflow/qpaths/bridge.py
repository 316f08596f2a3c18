"""``log Z`` of an unnormalised density from its posterior draws, by bridge sampling.

The iterative optimal bridge of Meng & Wong (1996), as set out in Gronau et
al. (2017), "A tutorial on bridge sampling" (J. Math. Psych. 81): the draws
are split in two halves; a multivariate normal proposal ``g`` is fitted to the
first half (mean and covariance); the unnormalised density ``q`` is evaluated
at the second half (``N1`` draws) and at ``N2`` draws from ``g``. With
``l = log q - log g``, ``s1 = N1 / (N1 + N2)`` and ``s2 = N2 / (N1 + N2)``,
the estimate is the fixed point of

``Z <- mean_g[q / (s1 q + s2 Z g)] / mean_post[g / (s1 q + s2 Z g)]``,

iterated in log space (log-sum-exp), so no ratio of densities over- or
underflows. Its relative mean-squared error is Frühwirth-Schnatter's (2004)
approximation (Gronau et al., eq. 17) with the iid formula for both halves:
MCMC draws are autocorrelated, which the spectral-density correction of the
posterior half would account for, so for correlated draws the error is
somewhat optimistic. Unlike importance sampling from ``g`` alone, the bridge
stays finite when ``g`` has lighter tails than the target.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.special import logsumexp

LogDensity = Callable[[np.ndarray], np.ndarray]
"""``z (M, d) -> (M,)``: an unnormalised log density, e.g. a :class:`StanLogDensity`."""


def bridge_log_z(
    log_density: LogDensity,
    draws: np.ndarray,
    *,
    seed: int | np.random.Generator | None = None,
    n_proposal: int | None = None,
    max_iter: int = 1000,
    tol: float = 1e-10,
) -> dict:
    """``log Z`` of ``exp(log_density)`` by the iterative optimal bridge, normal proposal.

    Parameters
    ----------
    log_density : callable
        ``z (M, d) -> (M,)``, the unnormalised log density whose integral
        ``Z`` is wanted, e.g. a
        :class:`~stanflow.qpaths.stan_density.StanLogDensity` (every constant
        and the Jacobian, on the unconstrained scale). ``-inf`` is allowed at
        proposal draws (outside the support), not at the posterior draws.
    draws : ndarray, shape (N, d)
        Draws from the normalised density, on the scale ``log_density``
        takes; rows ``[0, N // 2)`` fit the proposal, the others enter the
        bridge. At least ``2 d + 2`` rows, so that each half has more rows
        than dimensions.
    seed : int or numpy.random.Generator, optional
        For the proposal draws.
    n_proposal : int, optional
        Proposal draws ``N2``; default the size of the second half.
    max_iter : int, default 1000
        Fixed-point iterations at most.
    tol : float, default 1e-10
        Stop when ``log Z`` changes by less than this.

    Returns
    -------
    dict
        ``log_z``; ``re2``, the relative mean-squared error of ``Z`` (iid
        formula, see the module docstring); ``se``, ``sqrt(re2)``, the
        approximate standard error of ``log Z``; ``n_iter``; ``converged``
        (False if ``max_iter`` ran out, ``log_z`` is then the last iterate);
        ``n_posterior`` and ``n_proposal``, the sizes ``N1`` and ``N2``.

    Raises
    ------
    ValueError
        If ``draws`` is not a finite ``(N, d)`` array with ``N >= 2 d + 2``
        or the first half's covariance is singular; if ``n_proposal``,
        ``max_iter`` or ``tol`` is out of range; if ``log_density`` returns
        the wrong shape, a value that is not finite at a posterior draw, or
        NaN or ``+inf`` at a proposal draw.
    """
    draws = _checked_draws(draws)
    _check_settings(n_proposal, max_iter, tol)
    fit_half, bridge_half = np.array_split(draws, [len(draws) // 2])
    n2 = len(bridge_half) if n_proposal is None else int(n_proposal)
    mean, chol = _normal_fit(fit_half)
    proposal = mean + np.random.default_rng(seed).standard_normal((n2, len(mean))) @ chol.T
    log_q = _evaluate(log_density, np.vstack([bridge_half, proposal]))
    _check_log_q(log_q[: len(bridge_half)], log_q[len(bridge_half):])
    l1 = log_q[: len(bridge_half)] - _normal_logpdf(bridge_half, mean, chol)
    l2 = log_q[len(bridge_half):] - _normal_logpdf(proposal, mean, chol)
    log_z, n_iter, converged = _iterate(l1, l2, max_iter, tol)
    re2 = _relative_mse(l1, l2, log_z)
    return {
        "log_z": log_z, "re2": re2, "se": float(np.sqrt(re2)), "n_iter": n_iter,
        "converged": converged, "n_posterior": len(l1), "n_proposal": len(l2),
    }


def _checked_draws(draws: np.ndarray) -> np.ndarray:
    """``draws`` as a float ``(N, d)`` array, refused if not finite or too few."""
    draws = np.asarray(draws, dtype=float)
    if draws.ndim != 2 or draws.shape[1] < 1:
        raise ValueError(f"draws must be a 2-d array (N, d), got shape {draws.shape}")
    bad = ~np.isfinite(draws).all(axis=1)
    if bad.any():
        raise ValueError(
            f"draws: {int(bad.sum())} row(s) hold a non-finite value "
            f"(first row {int(np.argmax(bad))})"
        )
    n, d = draws.shape
    if n < 2 * d + 2:
        raise ValueError(
            f"draws: {n} draws in d = {d} dimensions, need at least 2 d + 2 = {2 * d + 2}"
        )
    return draws


def _check_settings(n_proposal: int | None, max_iter: int, tol: float) -> None:
    """Refuse a non-positive ``n_proposal`` or ``max_iter`` or ``tol``."""
    if n_proposal is not None:
        _check_count("n_proposal", n_proposal)
    _check_count("max_iter", max_iter)
    if not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be positive and finite, got {tol!r}")


def _check_count(name: str, value: int) -> None:
    """Refuse ``value`` unless it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _normal_fit(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and Cholesky factor of the covariance of ``draws``."""
    covariance = np.atleast_2d(np.cov(draws, rowvar=False))
    try:
        chol = np.linalg.cholesky(covariance)
    except np.linalg.LinAlgError:
        raise ValueError(
            "draws: the covariance of the first half is singular (a constant or "
            "collinear parameter); drop it or pass more draws"
        ) from None
    return draws.mean(axis=0), chol


def _normal_logpdf(z: np.ndarray, mean: np.ndarray, chol: np.ndarray) -> np.ndarray:
    """Log density of ``N(mean, chol chol')`` at the rows of ``z``."""
    white = np.linalg.solve(chol, (z - mean).T)
    log_det = 2 * np.sum(np.log(np.diag(chol)))
    return -0.5 * (np.sum(white**2, axis=0) + log_det + len(mean) * np.log(2 * np.pi))


def _evaluate(log_density: LogDensity, z: np.ndarray) -> np.ndarray:
    """``log_density(z)`` as a float ``(M,)`` array, refused if of another shape."""
    values = np.asarray(log_density(z), dtype=float)
    if values.shape != (len(z),):
        raise ValueError(
            f"log_density must return shape ({len(z)},) for {len(z)} points, "
            f"got {values.shape}"
        )
    return values


def _check_log_q(at_draws: np.ndarray, at_proposal: np.ndarray) -> None:
    """Refuse a non-finite value at a posterior draw; NaN, ``+inf`` or all ``-inf`` at proposals."""
    bad = ~np.isfinite(at_draws)
    if bad.any():
        raise ValueError(
            f"log_density is not finite at {int(bad.sum())} of the {len(at_draws)} posterior "
            f"draws of the second half (first: {at_draws[np.argmax(bad)]}); the draws must "
            "come from the density, on the scale it takes"
        )
    bad = np.isnan(at_proposal) | (at_proposal == np.inf)
    if bad.any():
        raise ValueError(
            f"log_density is NaN or +inf at {int(bad.sum())} of the {len(at_proposal)} "
            "proposal draws"
        )
    if not np.isfinite(at_proposal).any():
        raise ValueError(
            f"log_density is -inf at all {len(at_proposal)} proposal draws; the draws do "
            "not describe the density's support"
        )


def _iterate(l1: np.ndarray, l2: np.ndarray, max_iter: int, tol: float
             ) -> tuple[float, int, bool]:
    """Fixed point of the optimal bridge in log space; ``(log Z, iterations, converged)``.

    ``l1 = log q - log g`` at the posterior draws, ``l2`` at the proposal draws.
    Starts from the median of ``l1`` (finite, as ``l1`` is).
    """
    log_s1 = np.log(len(l1) / (len(l1) + len(l2)))
    log_s2 = np.log(len(l2) / (len(l1) + len(l2)))
    log_z = float(np.median(l1))
    for n_iter in range(1, max_iter + 1):
        numerator = logsumexp(l2 - np.logaddexp(log_s1 + l2, log_s2 + log_z)) - np.log(len(l2))
        denominator = logsumexp(-np.logaddexp(log_s1 + l1, log_s2 + log_z)) - np.log(len(l1))
        updated = float(numerator - denominator)
        if abs(updated - log_z) < tol:
            return updated, n_iter, True
        log_z = updated
    return log_z, max_iter, False


def _relative_mse(l1: np.ndarray, l2: np.ndarray, log_z: float) -> float:
    """Relative MSE of ``Z`` (Frühwirth-Schnatter 2004, iid form for both halves).

    ``Var_g(f2) / (N2 E_g(f2)^2) + Var_post(f1) / (N1 E_post(f1)^2)`` with
    ``f1 = g / (s1 p + s2 g)`` at the posterior draws and ``f2 = p / (s1 p +
    s2 g)`` at the proposal draws, ``p = q / Z`` the normalised density; both
    are bounded (by ``1 / s2`` and ``1 / s1``).
    """
    log_s1 = np.log(len(l1) / (len(l1) + len(l2)))
    log_s2 = np.log(len(l2) / (len(l1) + len(l2)))
    f1 = np.exp(-np.logaddexp(log_s1 + l1 - log_z, log_s2))
    f2 = np.exp(l2 - log_z - np.logaddexp(log_s1 + l2 - log_z, log_s2))
    return float(f2.var() / (len(f2) * f2.mean() ** 2) + f1.var() / (len(f1) * f1.mean() ** 2))
