"""Smooth WBB problems optimised in process (batched L-BFGS on Stan's gradients,
``stanflow.wbb.inprocess``) against the run-layer path (one CmdStan ``optimize``
run per draw) on the same weights, against the closed form of weighted ridge,
against scipy's L-BFGS-B per draw, and against stationarity checked in NumPy."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize

from stanflow.wbb import GlmProblem, bootstrap_weights, solve_ridge
from stanflow.wbb.inprocess import WeightedGlm, lbfgs_draws, wbb_glm_inprocess
from stanflow.wbb.stan_optimize import glm_model, optimize_draws, wbb_glm

pytestmark = pytest.mark.e2e

# CmdStan's L-BFGS with its relative tolerances at machine precision, as in
# test_wbb_stan_e2e.py: its optima then agree with ours to about 1e-7 relative
# (bench/wbb_inprocess.py); CmdStan's stopping rules set the tolerance here.
TIGHT = {"tol_rel_grad": 1.0, "tol_rel_obj": 1.0}
RUNS_RTOL, RUNS_ATOL = 1e-5, 1e-6

PSEUDO_HUBER_LOSS = """
// Pseudo-Huber loss delta^2 (sqrt(1 + ((y - f) / delta)^2) - 1), delta = loss_params[1].
real loss(real y, real f, vector loss_params) {
  real delta = loss_params[1];
  return square(delta) * (sqrt(1 + square((y - f) / delta)) - 1);
}
"""

LOG_COSH_PENALTY = """
// sum_j log(cosh(beta_j / s)) * s, s = penalty_params[1]: smooth, lasso-like tails.
real penalty(vector beta, vector penalty_params) {
  real s = penalty_params[1];
  return s * sum(log(cosh(beta / s)));
}
"""

BOUNDED_LOSS = """
// Squared loss that rejects predictions above 3.
real loss(real y, real f, vector loss_params) {
  if (f > 3) {
    reject("prediction above 3: ", f);
  }
  return square(y - f);
}
"""


def _data(n: int = 80, p: int = 3, seed: int = 47) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    return X, X @ np.r_[1.0, 0.0, -0.5][:p] + 0.5 + rng.normal(size=n)


def _write(folder, name: str, code: str):
    path = folder / f"{name}.stanfunctions"
    path.write_text(code)
    return path


def _theta(draws) -> np.ndarray:
    """(intercept, beta) or beta of every draw, shape (B, n_params)."""
    if "intercept" in draws.params:
        return np.column_stack([draws.params["intercept"], draws.params["beta"]])
    return draws.params["beta"]


def _assert_runs_agree(problem: GlmProblem, w: np.ndarray, wp: np.ndarray, tmp_path) -> None:
    """In-process optima equal the run layer's on the same weights."""
    ours = lbfgs_draws(WeightedGlm(problem), w, wp)
    model = glm_model(problem.loss_file, problem.penalty_file)
    theirs = optimize_draws(model, problem, w, wp, args=TIGHT, out_dir=tmp_path / "runs")
    assert ours.converged.all() and np.all(ours.stats["status"] == 0)
    both = _runs_converged(theirs.converged)
    np.testing.assert_allclose(_theta(ours)[both], _theta(theirs)[both], rtol=RUNS_RTOL, atol=RUNS_ATOL)
    np.testing.assert_allclose(ours.stats["objective"][both], theirs.stats["objective"][both], rtol=1e-10)
    assert np.all(ours.stats["objective"][both] <= theirs.stats["objective"][both] * (1 + 1e-12))


def _runs_converged(converged: np.ndarray) -> np.ndarray:
    """The run layer's converged draws; at tolerances this tight CmdStan's line
    search sometimes gives up a hair from the optimum ("no more progress can be
    made"), which it reports as an error: at most one such draw is allowed."""
    converged = np.asarray(converged).reshape(-1)
    assert converged.sum() >= converged.size - 1
    return converged


def test_squared_ridge_equals_the_closed_form_and_the_run_layer(cmdstan, tmp_path):
    X, y = _data()
    w, wp = bootstrap_weights(4, len(y), 4)
    problem = GlmProblem(X, y, 6.0, loss="squared", penalty="ridge", fit_intercept=True)
    draws = lbfgs_draws(WeightedGlm(problem), w, wp)
    # squared loss is (y - f)^2, not halved: lam = 6 here is lam = 3 in solve_ridge().
    exact = solve_ridge(X, y, 3.0, weights=w, prior_weight=wp, fit_intercept=True)
    assert draws.converged.all()
    np.testing.assert_allclose(draws.params["beta"], exact.beta, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(draws.params["intercept"], exact.intercept, rtol=1e-8, atol=1e-10)
    _assert_runs_agree(problem, w, wp, tmp_path)


def _logistic_gradient(X: np.ndarray, labels: np.ndarray, lam: float, w: np.ndarray, wp: float,
                       theta: np.ndarray) -> np.ndarray:
    """NumPy gradient of sum_i w_i log(1 + exp(-y_i f_i)) + lam wp |beta|^2 / 2 in (alpha, beta)."""
    margin = labels * (theta[0] + X @ theta[1:])
    s = -labels * w / (1 + np.exp(margin))
    return np.r_[s.sum(), X.T @ s + lam * wp * theta[1:]]


def test_logistic_ridge_drivers_agree_with_the_run_layer_and_are_stationary(cmdstan):
    X, y = _data(n=120, seed=8)
    labels = np.where(y > 0.5, 1.0, -1.0)
    problem = GlmProblem(X, labels, 2.0, loss="logistic", penalty="ridge", fit_intercept=True,
                         feature_names=["a", "b", "c"])
    ours = wbb_glm_inprocess(problem, 5, seed=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a run layer draw may stop early
        theirs = wbb_glm(problem, 5, seed=8, args=TIGHT)
    assert bool(ours.sample_stats.converged.all()) and ours.attrs["n_failed"] == 0
    both = _runs_converged(theirs.sample_stats.converged.values)
    np.testing.assert_array_equal(ours.weights.w.values, theirs.weights.w.values)
    assert list(ours.posterior.feature.values) == ["a", "b", "c"]
    assert ours.attrs["solver"] == "inprocess_lbfgs"
    for name in ("beta", "intercept"):
        np.testing.assert_allclose(
            ours.posterior[name].values[0, both],
            theirs.posterior[name].values[0, both],
            rtol=RUNS_RTOL,
            atol=RUNS_ATOL,
        )
    w, wp = ours.weights.w.values[0], ours.weights.w_prior.values[0]
    theta = np.column_stack([ours.posterior.intercept.values[0], ours.posterior.beta.values[0]])
    for b in range(5):
        grad = _logistic_gradient(X, labels, 2.0, w[b], wp[b], theta[b])
        assert np.abs(grad).max() < 1e-7 * w[b].sum()
    cold = wbb_glm_inprocess(problem, 5, seed=8, warm_start=False)
    np.testing.assert_allclose(cold.posterior.beta.values, ours.posterior.beta.values,
                               rtol=1e-7, atol=1e-8)
    assert cold.sample_stats.n_iter.values.sum() > ours.sample_stats.n_iter.values.sum()


def test_pseudo_huber_penalty_agrees_with_the_run_layer(cmdstan, tmp_path):
    X, y = _data()
    w, wp = bootstrap_weights(6, len(y), 3)
    problem = GlmProblem(X, y, 20.0, loss="squared", penalty="pseudo_huber", penalty_params=[0.5])
    _assert_runs_agree(problem, w, wp, tmp_path)


def _pseudo_huber_gradient(X, y, w, alpha, beta, penalty_grad):
    """NumPy gradient in (alpha, beta) of sum_i w_i pseudo-Huber(y_i - f_i) (delta = 1) + a penalty."""
    r = y - alpha - X @ beta
    g = -w * r / np.sqrt(1 + r**2)  # w_i d loss / d f_i
    return np.r_[g.sum(), X.T @ g + penalty_grad]


def test_a_users_loss_file_with_ridge_agrees_with_the_run_layer(cmdstan, tmp_path):
    X, y = _data(n=100, seed=5)
    y[:5] += 8.0  # outliers, where the pseudo-Huber loss is linear
    loss = _write(tmp_path, "my_pseudo_huber", PSEUDO_HUBER_LOSS)
    w, wp = bootstrap_weights(9, len(y), 3)
    problem = GlmProblem(X, y, 5.0, loss=loss, penalty="ridge", fit_intercept=True, loss_params=[1.0])
    _assert_runs_agree(problem, w, wp, tmp_path)
    draws = lbfgs_draws(WeightedGlm(problem), w, wp)
    for b in range(3):
        beta = draws.params["beta"][b]
        grad = _pseudo_huber_gradient(X, y, w[b], draws.params["intercept"][b], beta, 5.0 * wp[b] * beta)
        assert np.abs(grad).max() < 1e-7 * w[b].sum()


def test_a_users_penalty_file_gives_stationary_points(cmdstan, tmp_path):
    X, y = _data(n=100, seed=6)
    loss = _write(tmp_path, "my_pseudo_huber", PSEUDO_HUBER_LOSS)
    penalty = _write(tmp_path, "my_log_cosh", LOG_COSH_PENALTY)
    w, wp = bootstrap_weights(10, len(y), 3)
    problem = GlmProblem(X, y, 5.0, loss=loss, penalty=penalty, fit_intercept=True,
                         loss_params=[1.0], penalty_params=[0.1])
    draws = lbfgs_draws(WeightedGlm(problem), w, wp)
    assert draws.converged.all()
    for b in range(3):
        beta = draws.params["beta"][b]
        penalty_grad = 5.0 * wp[b] * np.tanh(beta / 0.1)  # d/d beta of 0.1 log cosh(beta / 0.1)
        grad = _pseudo_huber_gradient(X, y, w[b], draws.params["intercept"][b], beta, penalty_grad)
        assert np.abs(grad).max() < 1e-7 * w[b].sum()
        value = w[b] @ (np.sqrt(1 + (y - draws.params["intercept"][b] - X @ beta) ** 2) - 1)
        value += 5.0 * wp[b] * 0.1 * np.sum(np.log(np.cosh(beta / 0.1)))
        np.testing.assert_allclose(draws.stats["objective"][b], value, rtol=1e-12)


def test_iteration_limit_is_reported_as_not_converged(cmdstan):
    X, y = _data()
    problem = GlmProblem(X, y, 1.0)
    draws = lbfgs_draws(WeightedGlm(problem), bootstrap_weights(2, len(y), 3)[0], max_iter=1)
    assert not draws.converged.any() and np.all(draws.stats["status"] == 1)
    assert np.all(draws.stats["n_iter"] == 1)
    with pytest.warns(RuntimeWarning, match="3 of 3 WBB solves did not converge"):
        idata = wbb_glm_inprocess(problem, 3, seed=2, max_iter=1, warm_start=False)
    assert np.isnan(idata.posterior.beta.values).all()
    assert np.all(idata.sample_stats.status.values == 1)


def test_a_rejected_region_is_stepped_back_from_and_its_draws_fail(cmdstan, tmp_path):
    X = np.ones((30, 1))
    y = np.full(30, 10.0)  # the optimum f = 10 lies where the loss rejects
    problem = GlmProblem(X, y, 1.0, loss=_write(tmp_path, "bounded", BOUNDED_LOSS))
    draws = lbfgs_draws(WeightedGlm(problem), bootstrap_weights(3, 30, 2)[0])
    assert not draws.converged.any() and np.all(draws.stats["status"] > 0)
    assert np.all(draws.params["beta"] <= 3.0)  # never accepted a rejected point
    assert np.all(draws.params["beta"] > 2.9)  # but went up to the border
    with pytest.raises(RuntimeError, match="2 of 2 WBB solves did not converge"):
        wbb_glm_inprocess(problem, 2, seed=1, on_failure="raise")


def test_draws_do_not_depend_on_their_batch_and_equal_scipy_per_draw(cmdstan):
    X, y = _data(n=150, seed=3)
    labels = np.where(y > 0.5, 1.0, -1.0)
    problem = GlmProblem(X, labels, 1.5, loss="logistic", penalty="ridge", fit_intercept=True)
    together = wbb_glm_inprocess(problem, 6, seed=3)
    in_pairs = wbb_glm_inprocess(problem, 6, seed=3, batch_size=2)
    np.testing.assert_allclose(in_pairs.posterior.beta.values, together.posterior.beta.values,
                               rtol=1e-12, atol=1e-14)
    glm = WeightedGlm(problem)
    w, wp = together.weights.w.values[0], together.weights.w_prior.values[0]
    for b in range(6):
        reference = minimize(glm.objective, np.zeros(4), args=(w[b], wp[b]), jac=True,
                             method="L-BFGS-B", options={"gtol": 1e-12, "ftol": 1e-15})
        ours = np.r_[together.posterior.intercept.values[0, b], together.posterior.beta.values[0, b]]
        np.testing.assert_allclose(ours, reference.x, rtol=1e-6, atol=1e-7)
        assert together.sample_stats.objective.values[0, b] <= reference.fun + 1e-10


@pytest.fixture(scope="module")
def squared_ridge(cmdstan) -> WeightedGlm:
    X, y = _data()
    return WeightedGlm(GlmProblem(X, y, 1.0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"weights": np.ones((2, 5))}, "weights must have shape"),
        ({"weights": -np.ones(80)}, "weights must be finite and >= 0"),
        ({"prior_weight": np.ones(3)}, "prior_weight must be a scalar or have shape"),
        ({"init": np.ones(2)}, r"init must be finite with shape \(3,\)"),
        ({"init_intercept": np.nan}, "init_intercept must be finite"),
        ({"gtol": 0.0}, "gtol must be finite and > 0"),
        ({"ftol": -1.0}, "ftol must be finite and > 0"),
        ({"max_iter": 0}, "max_iter must be an integer >= 1"),
    ],
)
def test_bad_draw_arguments_are_named(squared_ridge, kwargs, message):
    call = {"weights": np.ones(80), **kwargs}
    with pytest.raises(ValueError, match=message):
        lbfgs_draws(squared_ridge, call.pop("weights"), **call)


def test_a_glm_that_is_not_a_weighted_glm_is_refused():
    with pytest.raises(TypeError, match="glm must be a WeightedGlm, got dict"):
        lbfgs_draws({}, np.ones(80))
    with pytest.raises(TypeError, match="problem must be a GlmProblem, got dict"):
        WeightedGlm({})


def test_threads_are_checked_before_anything_loads():
    X, y = _data()
    with pytest.raises(ValueError, match="threads must be an integer >= 1, got 0"):
        WeightedGlm(GlmProblem(X, y, 1.0), threads=0)


def test_a_slot_missing_its_parameters_is_named_before_any_solve(cmdstan, tmp_path):
    X, y = _data()
    with pytest.raises(
        ValueError,
        match=r"penalty_params: pseudo_huber.stanfunctions takes 1 parameter\(s\) \['delta'\], got 0",
    ):
        GlmProblem(X, y, 1.0, penalty="pseudo_huber")
    loss = _write(tmp_path, "my_pseudo_huber", PSEUDO_HUBER_LOSS)
    with pytest.raises(ValueError, match=r"loss: my_pseudo_huber.stanfunctions fails .* loss_params = \[\]"):
        wbb_glm_inprocess(GlmProblem(X, y, 1.0, loss=loss), 2, seed=0)
