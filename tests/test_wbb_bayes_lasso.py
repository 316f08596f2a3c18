"""The Bayesian lasso (known noise scale): density, Gibbs draws and marginal likelihood.

Independent truth: with orthogonal columns (``X'X = c I``) the posterior and
the marginal likelihood factorise over coordinates into one-dimensional
integrals of ``exp(-a b^2 / 2 + u b - r |b|)``, in closed form (a two-piece
truncated normal) and by quadrature.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import log_ndtr

from stanflow.wbb import solve_lasso
from stanflow.wbb.bayes_lasso import gibbs_lasso, lasso_log_density, lasso_log_marginal

SIGMA = 1.3


def _orthogonal(n: int = 60, p: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(n, p)))
    X = q * np.sqrt(n)
    y = X @ np.array([0.8, -0.05, 0.3])[:p] + rng.normal(scale=SIGMA, size=n)
    return X, y


def _pieces(X, y, lam):
    """Per coordinate ``a``, ``u`` and the prior rate ``r`` of ``exp(-a b^2 / 2 + u b - r |b|)``."""
    c = X[:, 0] @ X[:, 0]
    return c / SIGMA**2, X.T @ y / SIGMA**2, lam / SIGMA**2


def _exact_log_marginal(X, y, lam):
    n = len(y)
    a, u, r = _pieces(X, y, lam)
    plus = (u - r) ** 2 / (2 * a) + log_ndtr((u - r) / np.sqrt(a))
    minus = (u + r) ** 2 / (2 * a) + log_ndtr(-(u + r) / np.sqrt(a))
    per_coordinate = 0.5 * np.log(2 * np.pi / a) + np.logaddexp(plus, minus) + np.log(r / 2)
    return -y @ y / (2 * SIGMA**2) - n * np.log(SIGMA) - n / 2 * np.log(2 * np.pi) + per_coordinate.sum()


def _posterior_means(X, y, lam):
    a, u, r = _pieces(X, y, lam)
    return np.array([_one_mean(a, uj, r) for uj in u])


def _one_mean(a, u, r):
    """Mean of the density proportional to ``exp(-a b^2 / 2 + u b - r |b|)``, by quadrature."""
    mode = np.sign(u) * max(abs(u) - r, 0) / a
    log_top = -a * mode**2 / 2 + u * mode - r * abs(mode)

    def density(b):
        return np.exp(-a * b**2 / 2 + u * b - r * abs(b) - log_top)

    width = 12 / np.sqrt(a)
    lo, hi = mode - width, mode + width
    pieces = [(lo, 0.0), (0.0, hi)] if lo < 0 < hi else [(lo, hi)]
    mass = sum(integrate.quad(density, lo, hi, epsabs=0, epsrel=1e-11)[0] for lo, hi in pieces)
    first = sum(
        integrate.quad(lambda b: b * density(b), lo, hi, epsabs=0, epsrel=1e-11)[0] for lo, hi in pieces
    )
    return first / mass


def test_closed_form_agrees_with_quadrature():
    # The test's own truth, checked once by brute force in one coordinate.
    X, y = _orthogonal(p=1)
    lam = 20.0
    a, u, r = _pieces(X, y, lam)
    value = integrate.quad(lambda b: np.exp(-a[()] * b**2 / 2 + u[0] * b - r * abs(b)), -5, 5, points=[0])[0]
    direct = (
        np.log(value * r / 2)
        - y @ y / (2 * SIGMA**2)
        - len(y) * np.log(SIGMA)
        - len(y) / 2 * np.log(2 * np.pi)
    )
    assert _exact_log_marginal(X, y, lam) == pytest.approx(direct, abs=1e-8)


def test_log_density_is_normal_likelihood_plus_laplace_prior():
    X, y = _orthogonal()
    beta = np.random.default_rng(1).normal(size=(5, 3))
    lam = 7.0
    expected = (stats.norm.logpdf(y[None, :], beta @ X.T, SIGMA).sum(axis=1)
                + stats.laplace.logpdf(beta, scale=SIGMA**2 / lam).sum(axis=1))
    assert np.allclose(lasso_log_density(beta, X, y, lam, SIGMA), expected, rtol=0, atol=1e-9)


def test_posterior_mode_is_the_lasso():
    X, y = _orthogonal(n=80, p=3, seed=3)
    lam = 25.0
    mode = solve_lasso(X, y, lam).beta
    rng = np.random.default_rng(4)
    nearby = mode + 1e-3 * rng.normal(size=(200, 3))
    assert np.all(lasso_log_density(nearby, X, y, lam, SIGMA) < lasso_log_density(mode, X, y, lam, SIGMA))


def test_gibbs_means_match_the_exact_posterior_means():
    X, y = _orthogonal()
    lams = np.array([5.0, 60.0])
    draws = gibbs_lasso(X, y, lams, SIGMA, 3000, seed=5, chains=8, warmup=200)
    assert draws.shape == (2, 8, 3000, 3)
    for i, lam in enumerate(lams):
        chain_means = draws[i].mean(axis=1)
        se = chain_means.std(axis=0, ddof=1) / np.sqrt(chain_means.shape[0])
        exact = _posterior_means(X, y, lam)
        assert np.all(np.abs(chain_means.mean(axis=0) - exact) < 5 * se + 1e-4)
    # The penalty shrinks: the weak coefficient's posterior mean is closer to 0 at the larger lam.
    assert abs(draws[1, :, :, 1].mean()) < abs(draws[0, :, :, 1].mean())


def test_marginal_likelihood_matches_closed_form_and_peaks_where_it_should():
    X, y = _orthogonal()
    lams = np.geomspace(1.0, 300.0, 6)
    result = lasso_log_marginal(X, y, lams, SIGMA, 2000, seed=7, chains=4, warmup=200)
    exact = np.array([_exact_log_marginal(X, y, lam) for lam in lams])
    assert np.all(np.abs(result.log_marginal - exact) < np.maximum(5 * result.chain_se, 0.02))
    assert np.argmax(result.log_marginal) == np.argmax(exact)
    assert result.relative_error.shape == (6, 4) and np.all(result.relative_error < 0.05)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lams": [1.0, -1.0]}, "lams must be finite and > 0"),
        ({"lams": []}, "lams must be a scalar or a non-empty"),
        ({"sigma": 0.0}, "sigma must be finite and > 0"),
        ({"draws": 0}, "draws must be an integer >= 1"),
        ({"warmup": -1}, "warmup must be an integer >= 0"),
        ({"chains": 0}, "chains must be an integer >= 1"),
    ],
)
def test_gibbs_inputs_are_checked(kwargs, message):
    X, y = _orthogonal()
    args = {"lams": [1.0], "sigma": 1.0, "draws": 10} | kwargs
    with pytest.raises(ValueError, match=message):
        gibbs_lasso(X, y, args["lams"], args["sigma"], args["draws"], seed=0,
                    chains=kwargs.get("chains", 2), warmup=kwargs.get("warmup", 0))


def test_marginal_needs_enough_draws_for_bridge_sampling():
    X, y = _orthogonal()
    with pytest.raises(ValueError, match="draws must be >= 8"):
        lasso_log_marginal(X, y, [1.0], 1.0, 5, seed=0)


def test_density_inputs_are_checked():
    X, y = _orthogonal()
    with pytest.raises(ValueError, match=r"beta must have shape \(m, 3\)"):
        lasso_log_density(np.zeros(3), X, y, 1.0, 1.0)
    with pytest.raises(ValueError, match="lam must be finite and > 0"):
        lasso_log_density(np.zeros((1, 3)), X, y, 0.0, 1.0)
