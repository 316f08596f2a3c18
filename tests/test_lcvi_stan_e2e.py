"""The LCVI Stan template: its utility term, read off log_prob, equals the NumPy estimate.

One model is compiled (cached): eight schools with the tilted loss in its slot.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from stanflow.lcvi.losses import get_loss
from stanflow.lcvi.stan import lcvi_model, stan_data
from stanflow.lcvi.utility import normal_outcomes, utility_per_theta
from stanflow.models import STAN_DIR

pytestmark = pytest.mark.e2e

SCHOOLS = json.loads((STAN_DIR.parent / "data" / "eight_schools.json").read_text())
PARAMS = {"mu": 4.0, "tau": 3.0, "theta": [9.0, 6.0, 2.0, 5.0, 1.0, 3.0, 10.0, 7.0]}


@pytest.fixture(scope="module")
def model(cmdstan):
    return lcvi_model("tilted")


@pytest.mark.parametrize(
    "kind, scale, estimator",
    [("linear", 40.0, "linearised"), ("linear", 40.0, "naive"), ("exp", 0.1, "naive")],
)
def test_utility_term_in_the_target_matches_numpy(model, kind, scale, estimator):
    rng = np.random.default_rng(11)
    eps_y = rng.standard_normal((6, 8))
    h = rng.normal(5.0, 5.0, size=8)
    loss = get_loss("tilted", q=0.2)

    def lp(weight):
        data = stan_data(SCHOOLS, h, eps_y, loss, kind, scale, estimator, weight)
        return float(model.log_prob(PARAMS, data=data, sig_figs=12)["lp__"].iloc[0])

    y = normal_outcomes(np.array([PARAMS["theta"]]), np.array(SCHOOLS["sigma"]), eps_y)
    expected = utility_per_theta(y, h, loss, kind, scale, estimator)[0]
    assert lp(1.0) - lp(0.0) == pytest.approx(expected, rel=1e-9, abs=1e-9)
