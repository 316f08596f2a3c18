"""The shipped LCVI programs: their utility term, read off log_prob, equals the NumPy estimate.

Three models are compiled (cached), each with the check loss in its slot:
eight schools, the normal mean and the matrix factorisation (small data). For
the matrix factorisation the likelihood at weight 0 is also checked against
NumPy, which checks the column-major cell indices.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import norm

from stanflow.advi import run_advi
from stanflow.lcvi.mf import matrix_factorisation, split_cells
from stanflow.lcvi.problem import eight_schools, normal_mean
from stanflow.lcvi.utility import normal_outcomes, utility_per_theta
from stanflow.losses import BoundLoss, bound_loss
from stanflow.workflows import DATA_DIR

pytestmark = pytest.mark.e2e

SCHOOLS = eight_schools(
    json.loads((DATA_DIR / "eight_schools.json").read_text())
)
PARAMS = {"mu": 4.0, "tau": 3.0, "theta": [9.0, 6.0, 2.0, 5.0, 1.0, 3.0, 10.0, 7.0]}
LOSS = bound_loss("check", tau=0.2)


def _exe(program, loss):
    return program.bind(bound_loss(loss) if isinstance(loss, str) else loss).executable()


def stan_data(program, h, eps_y, loss, kind, scale, estimator="linearised", weight=1.0):
    model = program.bind(loss)
    settings = model.settings(weight, kind, scale, estimator, eps_y.shape[0])
    return model.stan_data(h, eps_y, np.full(eps_y.shape, 0.5), settings)


def log_prob(model, params, data) -> float:
    return float(model.log_prob(params, data=data, sig_figs=12)["lp__"].iloc[0])


@pytest.mark.parametrize(
    "kind, scale, estimator",
    [("linear", 40.0, "linearised"), ("linear", 40.0, "naive"), ("exp", 0.1, "naive")],
)
def test_eight_schools_utility_term_matches_numpy(cmdstan, kind, scale, estimator):
    model = _exe(SCHOOLS, LOSS)
    rng = np.random.default_rng(11)
    eps_y = rng.standard_normal((6, 8))
    h = rng.normal(5.0, 5.0, size=8)

    def lp(weight):
        data = stan_data(SCHOOLS, h, eps_y, LOSS, kind, scale, estimator, weight)
        return log_prob(model, PARAMS, data)

    y = normal_outcomes(np.array([PARAMS["theta"]]), np.array(SCHOOLS.data["sigma"]), eps_y)
    expected = utility_per_theta(y, h, LOSS, kind, scale, estimator)[0]
    assert lp(1.0) - lp(0.0) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_normal_mean_utility_term_matches_numpy(cmdstan):
    problem = normal_mean(np.array([0.3, -0.5, 1.1]), 1.5)
    model = _exe(problem, LOSS)
    eps_y = np.random.default_rng(2).standard_normal((4, 3))
    h = np.array([-1.0, 0.2, 0.5])

    def lp(weight):
        data = stan_data(problem, h, eps_y, LOSS, "exp", 0.3, "naive", weight)
        return log_prob(model, {"theta": 0.7}, data)

    y = normal_outcomes(np.full((1, 3), 0.7), np.full(3, 1.5), eps_y)
    expected = utility_per_theta(y, h, LOSS, "exp", 0.3, "naive")[0]
    assert lp(1.0) - lp(0.0) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_matrix_factorisation_likelihood_and_utility_match_numpy(cmdstan):
    rng = np.random.default_rng(4)
    Y = rng.gamma(2.0, size=(5, 4))
    split = split_cells(Y.shape, rng)
    problem = matrix_factorisation(Y, split, K=2, prior_sd=3.0, noise_sd=0.7)
    model = _exe(problem, LOSS)
    U, V = rng.normal(size=(5, 2)), rng.normal(size=(4, 2))
    loc = (U @ V.T)[split.train_rows, split.train_cols]
    eps_y = rng.standard_normal((3, problem.n))
    h = rng.normal(size=problem.n)

    def lp(weight):
        data = stan_data(problem, h, eps_y, LOSS, "linear", 5.0, "linearised", weight)
        return log_prob(model, {"U": U, "V": V}, data)

    # Stan drops the constants of ~ statements: compare differences in U.
    log_density = (
        norm.logpdf(problem.y, loc, 0.7).sum()
        + norm.logpdf(U, 0, 3.0).sum()
        + norm.logpdf(V, 0, 3.0).sum()
    )
    constant = problem.n * norm.logpdf(0, 0, 0.7) + 18 * norm.logpdf(0, 0, 3.0)
    assert lp(0.0) == pytest.approx(log_density - constant, rel=1e-9)
    y = normal_outcomes(loc[None], np.full(problem.n, 0.7), eps_y)
    expected = utility_per_theta(y, h, LOSS, "linear", 5.0, "linearised")[0]
    assert lp(1.0) - lp(0.0) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_locations_from_advi_states_follow_stans_parameter_order(cmdstan, tmp_path):
    """The outcomes' locations read from a program at ADVI's state follow Stan's order."""
    rng = np.random.default_rng(8)
    Y = rng.gamma(2.0, size=(5, 4))
    split = split_cells(Y.shape, rng)
    problems = [
        (SCHOOLS, "theta"),
        (matrix_factorisation(Y, split, K=2), None),
        (normal_mean(np.array([0.3, -0.5]), 1.0), "theta"),
    ]
    for problem, name in problems:
        model = _exe(problem, LOSS)
        eps_y = np.zeros((1, problem.n))
        data = stan_data(problem, np.zeros(problem.n), eps_y, LOSS, "linear", 1.0, weight=0.0)
        fit, state = run_advi(
            model, data, tmp_path, problem.name, seed=1, args={"iter": 200, "sig_figs": 18}
        )
        loc = problem.bind(LOSS).normal_parts(state.mu[None])[0][0]
        if name is None:  # the cells of U V' at the mean of U and V
            U = fit.stan_variable("U", mean=True)
            V = fit.stan_variable("V", mean=True)
            expected = (U @ V.T)[split.train_rows, split.train_cols]
        else:
            expected = np.atleast_1d(fit.stan_variable(name, mean=True))
            expected = np.broadcast_to(expected, (problem.n,))
        assert loc == pytest.approx(expected, rel=1e-12, abs=1e-12), problem.name


def test_a_loss_of_your_own_is_one_stan_file_and_a_loss_object(cmdstan, tmp_path):
    """A scaled absolute loss 2 |y - h| (Bayes decision: the median), not shipped."""
    source = tmp_path / "double_absolute.stanfunctions"
    source.write_text(
        "// 2 |y - f|.\n"
        "// params: none\n"
        "real loss(real y, real f, vector loss_params) {\n"
        "  return 2 * abs(y - f);\n"
        "}\n"
    )
    median = bound_loss("absolute")
    loss = BoundLoss(
        name="double_absolute",
        params=(),
        value=lambda y, h: 2 * np.abs(np.asarray(y) - h),
        stan_file=source,
        decision=median.decision,
        mixture=median.mixture,
    )
    model = _exe(SCHOOLS, loss)
    rng = np.random.default_rng(3)
    eps_y, h = rng.standard_normal((4, 8)), rng.normal(5.0, 5.0, size=8)

    def lp(weight):
        data = stan_data(SCHOOLS, h, eps_y, loss, "linear", 40.0, "naive", weight)
        return log_prob(model, PARAMS, data)

    y = normal_outcomes(np.array([PARAMS["theta"]]), np.array(SCHOOLS.data["sigma"]), eps_y)
    expected = utility_per_theta(y, h, loss, "linear", 40.0, "naive")[0]
    assert lp(1.0) - lp(0.0) == pytest.approx(expected, rel=1e-9, abs=1e-9)
    with pytest.raises(Exception, match=r"missing.stanfunctions"):
        SCHOOLS.bind(replace(loss, stan_file=tmp_path / "missing.stanfunctions"))
