"""The LCVI loop on eight schools (the model of test_lcvi_stan_e2e, cached): it records
plain VI and LCVI iterations, its decisions settle, LCVI does not raise the
empirical risk of plain VI, and bad input fails before any run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from stanflow.lcvi import eight_schools, lcvi, normal_mean, stan_data
from stanflow.lcvi.loop import empirical_risk, settled
from stanflow.lcvi.losses import get_loss
from stanflow.models import STAN_DIR

SCHOOLS = eight_schools(
    json.loads((STAN_DIR.parent / "data" / "eight_schools.json").read_text())
)


def test_empirical_risk_and_settling():
    loss = get_loss("tilted", q=0.2)
    assert empirical_risk(np.array([1.0, -1.0]), np.zeros(2), loss) == pytest.approx(
        0.5
    )
    with pytest.raises(ValueError, match=r"h \(decisions\) must have shape \(2,\)"):
        empirical_risk(np.zeros(2), np.zeros(3), loss)
    assert settled(np.zeros(3), np.full(3, 0.01), 0.05)
    assert not settled(np.zeros(3), np.array([0.0, 0.1, 0.0]), 0.05)


@pytest.mark.e2e
def test_loop_records_vi_and_lcvi_iterations_and_settles(cmdstan):
    idata = lcvi(
        SCHOOLS, "tilted", q=0.2, max_iter=6, seed=3, variational_args={"iter": 3000}
    )
    dec = idata.decisions
    assert dec.h.shape[1] == 8 and 2 <= dec.sizes["iteration"] <= 7
    assert dec.attrs["settled"] == 1
    assert np.max(np.abs(dec.h[-1] - dec.h[-2])) <= 0.05
    assert np.all(np.isfinite(dec.elbo)) and np.all(np.isfinite(dec.utility))
    assert dec.attrs["scale"] > 0 and dec.attrs["loss_params"] == [0.2]
    assert dec.attrs["advi_eta"] > 0 and dec.attrs["advi_grad_samples"] == 10
    assert float(dec.risk[-1]) < float(dec.risk[0])
    # The ELBO gives way a little to the utility term, never much.
    assert float(dec.elbo[0]) - 1.0 < float(dec.elbo[-1]) <= float(dec.elbo[0]) + 0.1
    assert idata.posterior.theta.shape[-1] == 8


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: lcvi(SCHOOLS, "tilted", q=1.5), "q must be in"),
        (lambda: lcvi(SCHOOLS, "tilted", q=0.0), "q must be in"),
        (lambda: lcvi(SCHOOLS, "huber"), "loss: unknown loss 'huber'"),
        (lambda: lcvi(SCHOOLS, "squared", scale=-1.0), r"scale \(M\) must be positive"),
        (lambda: lcvi(SCHOOLS, "squared", kind="exp", scale=0.0), r"scale \(gamma\)"),
        (
            lambda: lcvi(SCHOOLS, "squared", kind="log"),
            "utility: unknown utility 'log'",
        ),
        (lambda: lcvi(SCHOOLS, "squared", n_outcomes=0), "n_outcomes and max_iter"),
        (lambda: lcvi(SCHOOLS, "squared", tol=0), "tol must be positive"),
        (lambda: lcvi(SCHOOLS, "squared", algorithm="rank"), "algorithm must be"),
        (lambda: lcvi(SCHOOLS, "squared", estimator="plain"), "estimator: unknown"),
        (lambda: lcvi(SCHOOLS, "squared", percentile=0), "percentile must be in"),
    ],
)
def test_loop_rejects_bad_input_before_running(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_stan_data_rejects_decisions_of_the_wrong_shape():
    loss = get_loss("squared")
    eps = np.zeros((2, 8))
    with pytest.raises(ValueError, match=r"h \(decisions\) must have shape \(8,\)"):
        stan_data(SCHOOLS, np.zeros(7), eps, loss, "linear", 1.0)
    with pytest.raises(ValueError, match=r"h \(decisions\) must have shape \(8,\)"):
        stan_data(SCHOOLS, np.zeros((8, 1)), eps, loss, "linear", 1.0)
    with pytest.raises(ValueError, match=r"h \(decisions\) must be finite"):
        stan_data(SCHOOLS, np.full(8, np.nan), eps, loss, "linear", 1.0)
    with pytest.raises(ValueError, match=r"eps_y must have shape \(S, 8\)"):
        stan_data(SCHOOLS, np.zeros(8), np.zeros((2, 3)), loss, "linear", 1.0)
    with pytest.raises(ValueError, match="weight must be >= 0"):
        stan_data(SCHOOLS, np.zeros(8), eps, loss, "linear", 1.0, weight=-1.0)


def test_problems_reject_bad_data():
    with pytest.raises(ValueError, match="J must be a positive integer"):
        eight_schools({"J": 0, "y": [], "sigma": []})
    with pytest.raises(ValueError, match="sigma must be a finite vector of length 2"):
        eight_schools({"J": 2, "y": [1.0, 2.0], "sigma": [1.0]})
    with pytest.raises(ValueError, match="sigma must be positive"):
        eight_schools({"J": 2, "y": [1.0, 2.0], "sigma": [1.0, -1.0]})
    with pytest.raises(ValueError, match="sigma must be positive"):
        normal_mean(np.ones(3), 0.0)
    with pytest.raises(ValueError, match="y must be a non-empty finite vector"):
        normal_mean(np.array([1.0, np.inf]), 1.0)
