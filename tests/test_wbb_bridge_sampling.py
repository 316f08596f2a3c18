"""Bridge sampling against marginal likelihoods known in closed form."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.special import gammaln

from stanflow.bridge import bridge_sampling


def _regression(n: int, p: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = X @ rng.normal(size=p) + rng.normal(scale=1.5, size=n)
    return X, y


def test_conjugate_normal_regression_known_variance():
    # y ~ N(X b, s^2 I), b ~ N(0, t^2 I): p(y) = N(y | 0, s^2 I + t^2 X X').
    X, y = _regression(30, 3, 1)
    s, t = 1.5, 2.0
    exact = stats.multivariate_normal(np.zeros(30), s**2 * np.eye(30) + t**2 * X @ X.T).logpdf(y)
    precision = X.T @ X / s**2 + np.eye(3) / t**2
    cov = np.linalg.inv(precision)
    mean = cov @ X.T @ y / s**2
    draws = np.random.default_rng(2).multivariate_normal(mean, cov, size=4000)

    def log_q(b):
        log_lik = stats.norm.logpdf(y[None, :], b @ X.T, s).sum(axis=1)
        return log_lik + stats.norm.logpdf(b, 0, t).sum(axis=1)

    fit = bridge_sampling(log_q, draws, seed=3)
    assert fit.converged
    assert fit.log_marginal == pytest.approx(exact, abs=max(5 * fit.relative_error, 1e-3))
    assert fit.relative_error < 0.01


def test_normal_inverse_gamma_regression_unknown_variance():
    # b | v ~ N(0, v V0), v ~ InvGamma(a0, b0); draws of (b, log v), a skewed posterior (n = 12).
    X, y = _regression(12, 2, 4)
    n, p = X.shape
    V0, a0, b0 = 4.0 * np.eye(p), 2.0, 3.0
    Vn = np.linalg.inv(X.T @ X + np.linalg.inv(V0))
    mn = Vn @ X.T @ y
    an, bn = a0 + n / 2, b0 + (y @ y - mn @ np.linalg.solve(Vn, mn)) / 2
    exact = (gammaln(an) - gammaln(a0) + a0 * np.log(b0) - an * np.log(bn)
             + 0.5 * (np.linalg.slogdet(Vn)[1] - np.linalg.slogdet(V0)[1]) - n / 2 * np.log(2 * np.pi))
    rng = np.random.default_rng(5)
    v = stats.invgamma(an, scale=bn).rvs(size=6000, random_state=rng)
    b = mn + np.sqrt(v)[:, None] * rng.multivariate_normal(np.zeros(p), Vn, size=v.size)
    draws = np.column_stack([b, np.log(v)])

    def log_q(theta):
        beta, log_v = theta[:, :p], theta[:, p]
        sd = np.exp(log_v / 2)
        log_lik = stats.norm.logpdf(y[None, :], beta @ X.T, sd[:, None]).sum(axis=1)
        prior_b = stats.multivariate_normal(np.zeros(p), V0).logpdf(beta / sd[:, None]) - p * log_v / 2
        prior_v = stats.invgamma(a0, scale=b0).logpdf(np.exp(log_v)) + log_v  # Jacobian of log v
        return log_lik + prior_b + prior_v

    fit = bridge_sampling(log_q, draws, seed=6)
    assert fit.converged and fit.n_iter > 1
    assert fit.log_marginal == pytest.approx(exact, abs=5 * fit.relative_error)
    assert fit.relative_error < 0.02


def test_wrong_posterior_draws_are_detected_by_the_estimate():
    # Draws from a normal that is not the posterior shift the estimate: the test above can fail.
    X, y = _regression(30, 3, 1)
    s, t = 1.5, 2.0
    exact = stats.multivariate_normal(np.zeros(30), s**2 * np.eye(30) + t**2 * X @ X.T).logpdf(y)
    cov = np.linalg.inv(X.T @ X / s**2 + np.eye(3) / t**2)
    mean = cov @ X.T @ y / s**2
    wrong = np.random.default_rng(2).multivariate_normal(mean + 3 * np.sqrt(np.diag(cov)), cov, size=4000)

    def log_q(b):
        return stats.norm.logpdf(y[None, :], b @ X.T, s).sum(axis=1) + stats.norm.logpdf(b, 0, t).sum(axis=1)

    fit = bridge_sampling(log_q, wrong, seed=3)
    assert abs(fit.log_marginal - exact) > 5 * fit.relative_error


@pytest.mark.parametrize(
    ("draws", "log_q", "message"),
    [
        (np.zeros((5, 2)), lambda b: np.zeros(len(b)), "draws must have shape"),
        (np.full((20, 2), np.nan), lambda b: np.zeros(len(b)), "draws contains NaN"),
        (np.ones((20, 2)), lambda b: np.zeros(len(b)), "singular"),
        (np.random.default_rng(0).normal(size=(20, 2)), lambda b: np.zeros(3), "log_q must return shape"),
        (
            np.random.default_rng(0).normal(size=(20, 2)),
            lambda b: np.full(len(b), np.nan),
            "log_q returned NaN",
        ),
    ],
)
def test_inputs_are_checked(draws, log_q, message):
    with pytest.raises(ValueError, match=message):
        bridge_sampling(log_q, draws, seed=0)


def test_tolerance_is_checked():
    draws = np.random.default_rng(0).normal(size=(20, 2))
    with pytest.raises(ValueError, match="tol"):
        bridge_sampling(lambda b: np.zeros(len(b)), draws, seed=0, tol=0)
