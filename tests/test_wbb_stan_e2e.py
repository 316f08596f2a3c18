"""Smooth WBB problems through CmdStan optimize and the run layer, against
numpy/scipy solutions of the same weighted problems."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from stanflow.wbb import GlmProblem, bootstrap_weights, solve_ridge
from stanflow.wbb.stan_optimize import glm_model, optimize_draws, wbb_glm

pytestmark = pytest.mark.e2e

RNG = np.random.default_rng(31)
TIGHT = {"tol_rel_grad": 1.0, "tol_rel_obj": 1.0}


def _data(n=80, p=3):
    X = RNG.normal(size=(n, p))
    return X, X @ np.r_[1.0, 0.0, -0.5][:p] + 0.5 + RNG.normal(size=n)


def test_weighted_ridge_through_stan_matches_the_closed_form(tmp_path):
    X, y = _data()
    w, wp = bootstrap_weights(4, len(y), 6)
    problem = GlmProblem(X, y, 6.0, fit_intercept=True)
    draws = optimize_draws(glm_model("squared", "ridge"), problem, w, wp, args=TIGHT,
                           out_dir=tmp_path / "runs")
    # squared loss is (y - f)^2, not halved: lam = 6 here is lam = 3 in solve_ridge().
    exact = solve_ridge(X, y, 3.0, weights=w, prior_weight=wp, fit_intercept=True)
    assert draws.converged.all() and np.all(draws.stats["exit_code"] == 0)
    np.testing.assert_allclose(draws.params["beta"], exact.beta, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(draws.params["intercept"], exact.intercept, rtol=1e-4, atol=1e-5)
    assert (tmp_path / "runs" / "plan.json").is_file()


def _scipy_logistic(X, labels, lam, w, wp):
    def f(theta):
        a, beta = theta[0], theta[1:]
        margin = labels * (a + X @ beta)
        s = -labels * w / (1 + np.exp(margin))  # d/df of w log(1 + exp(-y f))
        value = w @ np.logaddexp(0, -margin) + lam * wp * beta @ beta / 2
        return value, np.r_[s.sum(), X.T @ s + lam * wp * beta]

    res = minimize(f, np.zeros(X.shape[1] + 1), jac=True, method="BFGS", options={"gtol": 1e-10})
    return res.x


def test_weighted_logistic_through_the_wbb_driver_matches_scipy():
    X, y = _data()
    labels = np.where(y > 0.5, 1.0, -1.0)
    problem = GlmProblem(X, labels, 2.0, loss="logistic", penalty="ridge", fit_intercept=True)
    idata = wbb_glm(problem, 5, seed=8, args=TIGHT)
    assert bool(idata.sample_stats.converged.all()) and idata.attrs["n_failed"] == 0
    w, wp = idata.weights.w.values[0], idata.weights.w_prior.values[0]
    for b in range(5):
        reference = _scipy_logistic(X, labels, 2.0, w[b], wp[b])
        ours = np.r_[idata.posterior.intercept.values[0, b], idata.posterior.beta.values[0, b]]
        np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-5)


def test_iteration_limit_is_reported_as_not_converged():
    X, y = _data()
    with pytest.warns(RuntimeWarning, match="did not converge"):
        idata = wbb_glm(GlmProblem(X, y, 1.0), 3, seed=2, args={"iter": 2})
    assert not idata.sample_stats.converged.values.any()
    assert np.isnan(idata.posterior.beta.values).all()
    assert np.all(idata.sample_stats.exit_code.values == 0)  # CmdStan exits 0 at the limit


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"weights": np.ones((2, 5))}, "weights must have shape"),
        ({"prior_weight": -1.0}, "prior_weight must be finite and >= 0"),
        ({"init": np.ones(2)}, "init must be finite with shape"),
    ],
)
def test_bad_input_fails_before_any_run(kwargs, message, tmp_path):
    X, y = _data()
    w, _ = bootstrap_weights(1, len(y), 2)
    call = {"weights": w, **kwargs}
    with pytest.raises(ValueError, match=message):
        optimize_draws(glm_model(), GlmProblem(X, y, 1.0), call.pop("weights"),
                       out_dir=tmp_path / "never", **call)
    assert not (tmp_path / "never").exists()


def test_pseudo_huber_penalty_matches_scipy(tmp_path):
    X, y = _data()
    w, wp = bootstrap_weights(6, len(y), 3)
    delta, lam = 0.5, 20.0
    problem = GlmProblem(X, y, lam, penalty="pseudo_huber", penalty_params=[delta])
    draws = optimize_draws(glm_model("squared", "pseudo_huber"), problem, w, wp, args=TIGHT)
    assert draws.converged.all()
    for b in range(3):
        def f(beta, b=b):
            r = y - X @ beta
            root = np.sqrt(1 + (beta / delta) ** 2)
            value = w[b] @ r**2 + lam * wp[b] * delta * np.sum(root - 1)
            return value, -2 * X.T @ (w[b] * r) + lam * wp[b] * beta / (delta * root)

        reference = minimize(f, np.zeros(3), jac=True, method="BFGS", options={"gtol": 1e-10}).x
        np.testing.assert_allclose(draws.params["beta"][b], reference, rtol=1e-4, atol=1e-5)
