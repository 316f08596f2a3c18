"""SafeBayes with model averaging over nested normal linear models, against independent truths."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.polynomial import legendre
from scipy import integrate, stats
from scipy.special import softmax

from stanflow.gibbs.safebayes import sequential_losses
from stanflow.gibbs.safebayes_averaging import (
    calibrate_safebayes_averaged,
    mean_degree,
    mixture_losses,
    mixture_means,
    power_log_marginal,
    sequential_models,
)

PRIOR = {"prior_scale": 1.5, "a0": 2.0, "b0": 0.5}


def _design(rng, n, degree):
    u = rng.uniform(-1, 1, n)
    return legendre.legvander(u, degree), u


def _batch_posterior(y, X, eta, prior_scale, a0, b0):
    """The conjugate power posterior (P, m, a, b) by its batch formulas."""
    K = X.shape[1]
    precision = np.eye(K) / prior_scale**2 + eta * X.T @ X
    mean = np.linalg.solve(precision, eta * X.T @ y)
    return precision, mean, a0 + eta * len(y) / 2, b0 + (eta * y @ y - mean @ precision @ mean) / 2


def test_power_marginal_matches_numerical_integration():
    # one coefficient: f^eta times the prior, summed on a fine grid of (beta, log sigma^2)
    rng = np.random.default_rng(1)
    x, y, eta, s0, a0, b0 = rng.normal(size=6), rng.normal(0.5, 1.0, 6), 0.6, 1.5, 2.0, 0.5
    beta = np.linspace(-8.0, 8.0, 3001)[:, None]
    log_sigma2 = np.linspace(-9.0, 6.0, 3001)[None, :]
    sigma2 = np.exp(log_sigma2)
    residual2 = np.sum((y[None, None, :] - x * beta[..., None]) ** 2, axis=-1)
    log_integrand = (
        eta * (-0.5 * len(y) * np.log(2 * math.pi * sigma2) - residual2 / (2 * sigma2))
        + stats.norm.logpdf(beta, 0, s0 * np.sqrt(sigma2))
        + stats.invgamma.logpdf(sigma2, a0, scale=b0)
        + log_sigma2  # d sigma^2 = sigma^2 d log sigma^2
    )
    value = integrate.trapezoid(integrate.trapezoid(np.exp(log_integrand), log_sigma2[0], axis=1), beta[:, 0])
    got = power_log_marginal(y, x[:, None], eta, prior_scale=s0, a0=a0, b0=b0)
    assert got == pytest.approx(math.log(value), abs=1e-6)


def test_power_marginal_at_eta_one_is_the_student_t_marginal():
    # y ~ t_{2 a0}(0, (b0 / a0) (I + s0^2 X X')) for the conjugate normal model
    rng = np.random.default_rng(2)
    X, _ = _design(rng, 8, 2)
    y = rng.normal(size=8)
    scale = PRIOR["b0"] / PRIOR["a0"] * (np.eye(8) + PRIOR["prior_scale"] ** 2 * X @ X.T)
    expected = stats.multivariate_t(np.zeros(8), scale, df=2 * PRIOR["a0"]).logpdf(y)
    assert power_log_marginal(y, X, 1.0, **PRIOR) == pytest.approx(expected, rel=1e-10)


def test_sequential_marginals_match_the_batch_formula_for_every_nested_model():
    rng = np.random.default_rng(3)
    X, u = _design(rng, 40, 5)
    y = 0.3 * u + rng.normal(0, 0.3, 40)
    etas = np.array([0.25, 0.6, 1.0])
    sequences = sequential_models(y, X, etas, checkpoints=[15, 40], **PRIOR)
    for e, eta in enumerate(etas):
        for p in range(6):
            for i in (0, 15, 40):
                expected = power_log_marginal(y[:i], X[:i, : p + 1], eta, **PRIOR) if i else 0.0
                assert sequences.log_z[e, p, i] == pytest.approx(expected, abs=1e-8)
            for c, i in enumerate((15, 40)):
                mean = _batch_posterior(y[:i], X[:i, : p + 1], eta, **PRIOR)[1]
                np.testing.assert_allclose(sequences.checkpoint_means[c, e, p, : p + 1], mean, atol=1e-10)
                assert np.all(sequences.checkpoint_means[c, e, p, p + 1 :] == 0)


def test_one_model_mixture_is_the_fixed_model_sequential_loss():
    rng = np.random.default_rng(4)
    X, u = _design(rng, 30, 4)
    y = u**2 + rng.normal(0, 0.2, 30)
    etas = np.array([0.3, 1.0])
    only_degree_2 = np.full(5, -np.inf)
    only_degree_2[2] = 0.0
    mixed = mixture_losses(sequential_models(y, X, etas, **PRIOR), y, only_degree_2)
    fixed = sequential_losses(y, X[:, :3], etas, **PRIOR)
    for variant in ("r-log", "i-log"):
        np.testing.assert_allclose(mixed[variant], fixed[variant], rtol=1e-10)


def test_mixture_r_log_and_means_match_monte_carlo_and_batch_weights():
    # R-log of point i: E over (p, sigma^2, beta) ~ the eta-posterior given points < i of -log f(y_i)
    rng = np.random.default_rng(5)
    X, u = _design(rng, 25, 3)
    y = 0.5 * u + rng.normal(0, 0.4, 25)
    eta, i = 0.5, 20
    log_prior = np.array([0.0, -0.5, -1.0, -1.5])
    sequences = sequential_models(y, X, [eta], checkpoints=[i], **PRIOR)
    weights = softmax(
        [log_prior[p] + power_log_marginal(y[:i], X[:i, : p + 1], eta, **PRIOR) for p in range(4)]
    )
    draws = np.random.default_rng(6)
    models = draws.choice(4, size=200_000, p=weights)
    losses = np.empty(models.size)
    for p in range(4):
        pick = models == p
        P, m, a, b = _batch_posterior(y[:i], X[:i, : p + 1], eta, **PRIOR)
        sigma2 = stats.invgamma.rvs(a, scale=b, size=pick.sum(), random_state=draws)
        z = draws.standard_normal((pick.sum(), p + 1))
        beta = m + np.sqrt(sigma2)[:, None] * np.linalg.solve(np.linalg.cholesky(P).T, z.T).T
        losses[pick] = -stats.norm.logpdf(y[i], beta @ X[i, : p + 1], np.sqrt(sigma2))
    got = mixture_losses(sequences, y, log_prior)["r-log"][0, i]
    assert got == pytest.approx(losses.mean(), abs=4 * losses.std() / math.sqrt(losses.size))
    means = [
        np.r_[_batch_posterior(y[:i], X[:i, : p + 1], eta, **PRIOR)[1], np.zeros(3 - p)] for p in range(4)
    ]
    np.testing.assert_allclose(
        mixture_means(sequences, log_prior)[0, 0], weights @ np.array(means), atol=1e-10
    )
    assert mean_degree(sequences, log_prior)[0, 0] == pytest.approx(weights @ np.arange(4))


def test_safebayes_picks_one_when_the_models_are_right():
    # well-specified normal data, few nested models: R-log keeps the Bayes posterior
    for seed in range(3):
        rng = np.random.default_rng(seed)
        X, u = _design(rng, 300, 5)
        y = 0.5 + 0.3 * u + rng.normal(0, 0.5, 300)
        chosen = calibrate_safebayes_averaged(y, X, b0=0.25).calibration["omega"]
        assert float(chosen.sel(variant="r-log")) == 1.0


def test_safebayes_repairs_averaging_on_wrong_model_data():
    # Grunwald and van Ommen's claim, small: half the points are (0, 0), degrees
    # 0..50; SafeBayes picks eta < 1 and its posterior mean predicts better
    beta_true = np.r_[0.0, 0.1, 0.1, 0.1, 0.1, np.zeros(46)]
    nodes, weights = legendre.leggauss(102)
    basis = legendre.legvander(nodes, 50)
    chosen, bayes_risk, safe_risk = [], [], []
    for seed in range(3):
        rng = np.random.default_rng(10 + seed)
        X, _ = _design(rng, 150, 50)
        y = X @ beta_true + rng.normal(0, math.sqrt(1 / 40), 150)
        easy = rng.random(150) < 0.5
        X[easy, 1:], y[easy] = 0.0, 0.0
        c = calibrate_safebayes_averaged(y, X, prior_scale=1.0, a0=1.0, b0=1 / 40).calibration
        eta = float(c["omega"].sel(variant="r-log"))
        chosen.append(eta)
        risk = [
            0.5 * float(c["beta_mean"].sel(eta=e)[0]) ** 2
            + 0.25 * np.sum(weights * ((c["beta_mean"].sel(eta=e).values - beta_true) @ basis.T) ** 2)
            for e in (1.0, eta)
        ]
        bayes_risk.append(risk[0])
        safe_risk.append(risk[1])
    assert max(chosen) < 1.0
    assert np.mean(safe_risk) < np.mean(bayes_risk)


def test_averaging_inputs_are_checked():
    X = np.ones((3, 2))
    with pytest.raises(ValueError, match="X must be a finite"):
        sequential_models([1.0, 2.0], X, [1.0])
    with pytest.raises(ValueError, match="etas must be"):
        sequential_models([1.0, 2.0, 3.0], X, [0.0])
    with pytest.raises(ValueError, match="checkpoints must be sample sizes"):
        sequential_models([1.0, 2.0, 3.0], X, [1.0], checkpoints=[4])
    with pytest.raises(ValueError, match="b0 must be positive"):
        power_log_marginal([1.0, 2.0, 3.0], X, 1.0, b0=0.0)
    sequences = sequential_models([1.0, 2.0, 3.0], X, [1.0])
    with pytest.raises(ValueError, match="log_prior must have shape"):
        mixture_losses(sequences, [1.0, 2.0, 3.0], [0.0])
