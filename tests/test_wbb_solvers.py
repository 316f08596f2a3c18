"""WBB solvers: weighted lasso and trend filtering against their optimality
conditions and against a general solver (scipy's L-BFGS-B on a smooth
box-constrained reformulation); ridge against the normal equations; bad input."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from stanflow.wbb import (
    bootstrap_weights,
    kkt_violation,
    lambda_max,
    lasso_path,
    solve_lasso,
    solve_ridge,
    trend_filter,
)

RNG = np.random.default_rng(20240601)


def _regression(n=60, p=6):
    X = RNG.normal(size=(n, p))
    X[:, 1] += 0.8 * X[:, 0]
    y = X @ np.r_[2.0, 0.0, -1.5, 0.0, 0.5, 0.0][:p] + 1.0 + RNG.normal(size=n)
    return X, y


def _lasso_objective(X, y, beta, a, lam, w, wp):
    return 0.5 * w @ (y - a - X @ beta) ** 2 + lam * wp * np.abs(beta).sum()


def _lbfgs_lasso(X, y, lam, w, wp):
    """beta = u - v with u, v >= 0: a smooth objective with bounds."""
    p = X.shape[1]

    def f(z):
        u, v = z[:p], z[p:]
        r = y - X @ (u - v)
        g = -X.T @ (w * r)
        return 0.5 * w @ r**2 + lam * wp * z.sum(), np.r_[g, -g] + lam * wp

    res = minimize(f, np.zeros(2 * p), jac=True, method="L-BFGS-B", bounds=[(0, None)] * (2 * p),
                   options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000})
    return res.x[:p] - res.x[p:]


@pytest.mark.parametrize("fraction", [0.02, 0.2, 0.6])
def test_weighted_lasso_meets_kkt_and_matches_a_general_solver(fraction):
    X, y = _regression()
    w, wp = bootstrap_weights(11, X.shape[0], 8)
    lam = fraction * np.median(lambda_max(X, y, weights=w, prior_weight=wp))
    fit = solve_lasso(X, y, lam, weights=w, prior_weight=wp)
    assert fit.converged.all()
    scale = np.abs(X.T @ (w * y).T).max()
    assert kkt_violation(X, y, lam, fit, weights=w, prior_weight=wp).max() <= 1e-6 * scale
    for b in range(w.shape[0]):
        reference = _lbfgs_lasso(X, y, lam, w[b], wp[b])
        ours = _lasso_objective(X, y, fit.beta[b], 0.0, lam, w[b], wp[b])
        theirs = _lasso_objective(X, y, reference, 0.0, lam, w[b], wp[b])
        assert ours <= theirs + 1e-9 * abs(theirs)
        np.testing.assert_allclose(fit.beta[b], reference, atol=1e-4)


def test_lasso_intercept_warm_starts_path_and_lambda_max():
    X, y = _regression()
    w, wp = bootstrap_weights(5, X.shape[0], 4)
    top = lambda_max(X, y, weights=w, prior_weight=wp, fit_intercept=True)
    at_top = solve_lasso(X, y, top.max(), weights=w, prior_weight=wp, fit_intercept=True)
    assert np.all(at_top.beta == 0)
    np.testing.assert_allclose(at_top.intercept, (w @ y) / w.sum(axis=1))
    lams = np.geomspace(top.min(), top.min() / 100, 8)
    path = lasso_path(X, y, lams, weights=w, prior_weight=wp, fit_intercept=True)
    cold = solve_lasso(X, y, lams[-1], weights=w, prior_weight=wp, fit_intercept=True)
    for fit, lam in zip(path, lams, strict=True):
        assert fit.converged.all()
        assert kkt_violation(X, y, lam, fit, weights=w, prior_weight=wp).max() < 1e-6 * top.max()
    np.testing.assert_allclose(path[-1].beta, cold.beta, atol=1e-6)
    assert path[-1].n_sweeps.sum() < cold.n_sweeps.sum()  # the warm start pays


def test_lasso_reports_non_convergence():
    # One sweep from a far-off start: draws flagged converged meet the KKT
    # conditions (the exact active-set solve can finish a draw early), the
    # others are flagged and do not.
    X, y = _regression()
    w, wp = bootstrap_weights(6, X.shape[0], 40)
    lam = 0.05 * np.median(lambda_max(X, y, weights=w, prior_weight=wp))
    fit = solve_lasso(X, y, lam, weights=w, prior_weight=wp, beta0=np.full(X.shape[1], 5.0), max_sweeps=1)
    violation = kkt_violation(X, y, lam, fit, weights=w, prior_weight=wp)
    scale = np.abs(X.T @ (w * y).T).max()
    assert np.all(fit.n_sweeps == 1) and (~fit.converged).any()
    assert np.all(violation[fit.converged] <= 1e-8 * scale)
    assert np.all(violation[~fit.converged] > 1e-6 * scale)


def test_ridge_solves_the_weighted_normal_equations():
    X, y = _regression()
    w, wp = bootstrap_weights(3, X.shape[0], 3)
    fit = solve_ridge(X, y, 2.0, weights=w, prior_weight=wp, fit_intercept=True)
    for b in range(3):
        Xa = np.c_[np.ones(len(y)), X]
        P = np.diag(np.r_[0.0, np.full(X.shape[1], 2.0 * wp[b])])
        coef = np.linalg.solve(Xa.T @ (w[b, :, None] * Xa) + P, Xa.T @ (w[b] * y))
        np.testing.assert_allclose(np.r_[fit.intercept[b], fit.beta[b]], coef, rtol=1e-10)
    singular = solve_ridge(np.ones((5, 2)), np.arange(5.0), 0.0)
    assert not singular.converged[0] and np.isnan(singular.beta).all()


def _difference_matrix(n, k):
    return np.diff(np.eye(n), k + 1, axis=0)


def _lbfgs_trend_filter(y, lam, k, w):
    """The dual box-constrained QP, by L-BFGS-B; theta = y - W^-1 D' nu."""
    D = _difference_matrix(len(y), k)
    A, b = D @ (D.T / w[:, None]), D @ y
    res = minimize(lambda nu: (0.5 * nu @ A @ nu - b @ nu, A @ nu - b), np.zeros(len(b)), jac=True,
                   method="L-BFGS-B", bounds=[(-lam, lam)] * len(b),
                   options={"ftol": 1e-16, "gtol": 1e-12, "maxiter": 50_000, "maxcor": 50})
    return y - (D.T @ res.x) / w


def _tf_objective(y, theta, lam, k, w):
    return 0.5 * w @ (y - theta) ** 2 + lam * np.abs(np.diff(theta, k + 1)).sum()


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_trend_filter_meets_kkt_and_matches_a_general_solver(k):
    n = 40
    x = np.linspace(0, 1, n)
    y = np.sin(3 * np.pi * x) + 0.3 * RNG.normal(size=n)
    w, wp = bootstrap_weights(k, n, 3)
    lam = 0.5 * 10.0 ** (-k)
    fit = trend_filter(y, lam, k, weights=w, prior_weight=wp)
    assert fit.converged.all()
    D = _difference_matrix(n, k)
    for b in range(3):
        bound, theta = lam * wp[b], fit.theta[b]
        # KKT from theta alone: W (y - theta) = D' nu for some nu with |nu| <= bound
        # and nu_i = bound sign((D theta)_i) wherever (D theta)_i is not zero.
        nu, *_ = np.linalg.lstsq(D.T, w[b] * (y - theta), rcond=None)
        assert np.abs(D.T @ nu - w[b] * (y - theta)).max() < 1e-8
        assert np.abs(nu).max() <= bound * (1 + 1e-4)
        Dtheta = D @ theta
        knots = np.abs(Dtheta) > 1e-5 * np.abs(Dtheta).max()
        np.testing.assert_allclose(nu[knots], bound * np.sign(Dtheta[knots]), rtol=1e-3)
        reference = _lbfgs_trend_filter(y, bound, k, w[b])
        ours = _tf_objective(y, theta, bound, k, w[b])
        assert ours <= _tf_objective(y, reference, bound, k, w[b]) + 1e-7 * ours
        np.testing.assert_allclose(theta, reference, atol=2e-3)


def test_trend_filter_order_zero_recovers_the_steps():
    levels, length, lam = np.array([0.0, 3.0, -1.0, 2.0]), 50, 10.0
    truth = np.repeat(levels, length)
    y = truth + 0.2 * RNG.normal(size=truth.size)
    fit = trend_filter(y, lam, 0)
    assert fit.converged[0]
    jumps = np.diff(fit.theta[0])
    np.testing.assert_array_equal(np.flatnonzero(np.abs(jumps) > 1e-3), np.arange(1, 4) * length - 1)
    # On the right segmentation the fused lasso's levels are the segment means
    # moved by lam (sign(right jump) - sign(left jump)) / length.
    signs = np.r_[0.0, np.sign(np.diff(levels)), 0.0]
    expected = y.reshape(4, length).mean(axis=1) + lam * (signs[1:] - signs[:-1]) / length
    np.testing.assert_allclose(
        fit.theta[0].reshape(4, length), np.repeat(expected[:, None], length, 1), atol=1e-5
    )
    np.testing.assert_allclose(expected, levels, atol=0.5)


def test_trend_filter_without_penalty_returns_the_data():
    y = RNG.normal(size=10)
    np.testing.assert_array_equal(trend_filter(y, 0.0, 2).theta[0], y)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda X, y: solve_lasso(X, y, -1.0), "lam must be finite and >= 0"),
        (lambda X, y: solve_lasso(X, y, 1.0, weights=np.ones(len(y) - 1)), "weights must have shape"),
        (lambda X, y: solve_lasso(X, y, 1.0, weights=-np.ones(len(y))), "weights must be finite and >= 0"),
        (lambda X, y: solve_lasso(X, y, 1.0, weights=np.ones((2, len(y))), prior_weight=np.ones(3)),
         "prior_weight must be a scalar or have shape"),
        (lambda X, y: solve_lasso(np.where(X > 1, np.nan, X), y, 1.0), "X contains NaN"),
        (lambda X, y: solve_lasso(X, np.r_[y[:-1], np.inf], 1.0), "y contains NaN"),
        (lambda X, y: solve_lasso(X, y[:-1], 1.0), "X has 60 rows but y has 59"),
        (lambda X, y: solve_lasso(X, y, 1.0, tol=0.0), "tol must be finite and > 0"),
        (lambda X, y: solve_lasso(X, y, 1.0, beta0=np.ones(2)), "beta0 must be finite"),
        (lambda X, y: solve_ridge(X[:, 0], y, 1.0), "X must be 2-dimensional"),
        (lambda X, y: trend_filter(y, -0.5, 1), "lam must be finite and >= 0"),
        (lambda X, y: trend_filter(y, 1.0, -1), "k must be an integer >= 0"),
        (lambda X, y: trend_filter(y[:3], 1.0, 2), "at least k \\+ 2"),
        (lambda X, y: trend_filter(y, 1.0, 1, weights=np.zeros(len(y))), "weights must be finite and > 0"),
        (lambda X, y: trend_filter(y, 1.0, 1, max_newton=0), "max_newton must be an integer >= 1"),
        (lambda X, y: bootstrap_weights(1, 5, 2, prior="flat"), "prior must be one of"),
        (lambda X, y: bootstrap_weights(-1, 5, 2), r"^seed must be an integer >= 0, got -1$"),
    ],
)
def test_bad_input_raises_errors_naming_the_argument(call, message):
    X, y = _regression()
    with pytest.raises(ValueError, match=message):
        call(X, y)


def test_trend_filter_falls_back_to_banded_lu(monkeypatch):
    # When rounding makes the banded Cholesky fail, the Newton step comes from a
    # banded LU of the same matrix: the solution must not change.
    import sys

    from scipy.linalg import LinAlgError

    module = sys.modules["stanflow.wbb.trend_filtering"]
    y = np.sin(np.linspace(0, 4, 80)) + 0.2 * RNG.normal(size=80)
    w, wp = bootstrap_weights(8, 80, 2)
    expected = trend_filter(y, 0.3, 2, weights=w, prior_weight=wp)

    def failing(*args, **kwargs):
        raise LinAlgError("not positive definite")

    monkeypatch.setattr(module, "solveh_banded", failing)
    fallback = trend_filter(y, 0.3, 2, weights=w, prior_weight=wp)
    assert fallback.converged.all()
    np.testing.assert_allclose(fallback.theta, expected.theta, atol=1e-6)
