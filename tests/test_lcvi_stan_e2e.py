"""The LCVI Stan templates: their utility term, read off log_prob, equals the NumPy estimate.

Three models are compiled (cached), each with the tilted loss in its slot:
eight schools, the normal mean and the matrix factorisation (small data). For
the matrix factorisation the likelihood at weight 0 is also checked against
NumPy, which checks the column-major cell indices.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import norm

from stanflow.lcvi.losses import get_loss
from stanflow.lcvi.mf import matrix_factorisation, split_cells
from stanflow.lcvi.problem import eight_schools, normal_mean
from stanflow.lcvi.stan import lcvi_model, stan_data
from stanflow.lcvi.utility import normal_outcomes, utility_per_theta
from stanflow.models import STAN_DIR

pytestmark = pytest.mark.e2e

SCHOOLS = eight_schools(
    json.loads((STAN_DIR.parent / "data" / "eight_schools.json").read_text())
)
PARAMS = {"mu": 4.0, "tau": 3.0, "theta": [9.0, 6.0, 2.0, 5.0, 1.0, 3.0, 10.0, 7.0]}
LOSS = get_loss("tilted", q=0.2)


def log_prob(model, params, data) -> float:
    return float(model.log_prob(params, data=data, sig_figs=12)["lp__"].iloc[0])


@pytest.mark.parametrize(
    "kind, scale, estimator",
    [("linear", 40.0, "linearised"), ("linear", 40.0, "naive"), ("exp", 0.1, "naive")],
)
def test_eight_schools_utility_term_matches_numpy(cmdstan, kind, scale, estimator):
    model = lcvi_model("tilted", SCHOOLS.template)
    rng = np.random.default_rng(11)
    eps_y = rng.standard_normal((6, 8))
    h = rng.normal(5.0, 5.0, size=8)

    def lp(weight):
        data = stan_data(SCHOOLS, h, eps_y, LOSS, kind, scale, estimator, weight)
        return log_prob(model, PARAMS, data)

    y = normal_outcomes(np.array([PARAMS["theta"]]), SCHOOLS.sd, eps_y)
    expected = utility_per_theta(y, h, LOSS, kind, scale, estimator)[0]
    assert lp(1.0) - lp(0.0) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_normal_mean_utility_term_matches_numpy(cmdstan):
    problem = normal_mean(np.array([0.3, -0.5, 1.1]), 1.5)
    model = lcvi_model("tilted", problem.template)
    eps_y = np.random.default_rng(2).standard_normal((4, 3))
    h = np.array([-1.0, 0.2, 0.5])

    def lp(weight):
        data = stan_data(problem, h, eps_y, LOSS, "exp", 0.3, "naive", weight)
        return log_prob(model, {"theta": 0.7}, data)

    y = normal_outcomes(np.full((1, 3), 0.7), problem.sd, eps_y)
    expected = utility_per_theta(y, h, LOSS, "exp", 0.3, "naive")[0]
    assert lp(1.0) - lp(0.0) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_matrix_factorisation_likelihood_and_utility_match_numpy(cmdstan):
    rng = np.random.default_rng(4)
    Y = rng.gamma(2.0, size=(5, 4))
    split = split_cells(Y.shape, rng)
    problem = matrix_factorisation(Y, split, K=2, prior_sd=3.0, noise_sd=0.7)
    model = lcvi_model("tilted", problem.template)
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
    y = normal_outcomes(loc[None], problem.sd, eps_y)
    expected = utility_per_theta(y, h, LOSS, "linear", 5.0, "linearised")[0]
    assert lp(1.0) - lp(0.0) == pytest.approx(expected, rel=1e-9, abs=1e-9)
