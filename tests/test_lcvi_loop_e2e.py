"""The LCVI loop on eight schools (the model of test_lcvi_stan_e2e, cached): it records
plain VI and the LCVI blocks, LCVI branches off plain VI's trajectory, lowers
its empirical risk at a small cost in ELBO, and bad input fails before any run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from stanflow.lcvi import Utility, eight_schools, lcvi, normal_mean, run_lcvi
from stanflow.lcvi.decision_step import empirical_risk, settled
from stanflow.lcvi.utility import normal_outcomes, utility_per_theta
from stanflow.losses import bound_loss
from stanflow.workflows import DATA_DIR

SCHOOLS = eight_schools(
    json.loads((DATA_DIR / "eight_schools.json").read_text())
)


def test_empirical_risk_and_settling():
    loss = bound_loss("check", tau=0.2)
    assert empirical_risk(np.array([1.0, -1.0]), np.zeros(2), loss) == pytest.approx(
        0.5
    )
    with pytest.raises(ValueError, match=r"h \(decisions\) must have shape \(2,\)"):
        empirical_risk(np.zeros(2), np.zeros(3), loss)
    assert settled(np.zeros(3), np.full(3, 0.01), 0.05)
    assert not settled(np.zeros(3), np.array([0.0, 0.1, 0.0]), 0.05)


@pytest.mark.e2e
def test_loop_records_vi_and_lcvi_blocks(cmdstan, tmp_path):
    with pytest.warns(RuntimeWarning, match="decisions still moved by up to .* in the last block"):
        idata = lcvi(
            SCHOOLS,
            "check",
            tau=0.2,
            seed=3,
            decision_every=1000,
            tol=1e-9,  # never settles: LCVI goes on to max_iter
            max_iter=8000,
            advi_args={"iter": 6000},
            out_dir=tmp_path,
        )
    dec = idata.decisions
    # plain VI, then LCVI from iteration 3000 in blocks of 1000, past iter
    assert dec.h.shape == (6, 8)
    assert dec.advi_iteration.values.tolist() == [6000, 4000, 5000, 6000, 7000, 8000]
    assert dec.attrs["branch_iter"] == 3000 and dec.attrs["decision_rule"] == "bayes"
    assert np.all(np.isfinite(dec.elbo)) and np.all(np.isfinite(dec.utility))
    assert dec.attrs["scale"] > 0 and dec.attrs["loss_params"] == [0.2]
    assert dec.attrs["advi_eta"] > 0 and dec.attrs["advi_grad_samples"] == 10
    # LCVI is compared with plain VI continued to the same budget
    assert int(dec.baseline_advi_iteration) == 8000 and dec.attrs["settled"] == 0
    (folder,) = tmp_path.glob("lcvi-check-*")  # the call's own folder
    assert (folder / "vi-longer-state.json").is_file()
    assert float(dec.risk[-1]) < float(dec.baseline_risk)
    # The ELBO gives way a little to the utility term, never much.
    assert float(dec.elbo[0]) - 1.0 < float(dec.elbo[-1]) <= float(dec.elbo[0]) + 0.5
    assert idata.posterior.theta.shape[-1] == 8
    assert idata.posterior.sizes["draw"] == 1000  # the last block's, all of them
    assert (folder / "vi-branch-state.json").is_file()
    assert (folder / "lcvi-001.csv").is_file()


@pytest.mark.e2e
def test_loop_settled_before_max_iter_keeps_all_draws_of_its_last_fit(cmdstan, tmp_path):
    loop = run_lcvi(
        SCHOOLS,
        "check",
        tau=0.2,
        seed=5,
        decision_every=500,
        tol=10.0,  # settles at the first check, at iter < max_iter
        max_iter=4000,
        advi_args={"iter": 2000, "output_samples": 300, "elbo_samples": 50},
        out_dir=tmp_path,
    )
    assert loop.settled
    assert [s.state.iteration for s in loop.steps] == [2000, 1500, 2000]
    draws = [s.fit.variational_sample.shape[0] for s in loop.steps]
    # a block that might not have been the last wrote only its ELBO's draws;
    # the last one was run again from the same state for all of them
    assert draws == [300, 50, 300]
    (folder,) = tmp_path.glob("lcvi-check-*")
    light = json.loads((folder / "lcvi-002-state.json").read_text())
    again = json.loads((folder / "lcvi-002-draws-state.json").read_text())
    assert light == again


@pytest.mark.e2e
def test_full_rank_loop_with_utility_optimal_decisions(cmdstan):
    loop = run_lcvi(
        SCHOOLS,
        "check",
        tau=0.2,
        utility=Utility(kind="exp", estimator="naive"),
        decision="utility",
        algorithm="fullrank",
        seed=4,
        tol=10.0,
        advi_args={"iter": 2000, "grad_samples": 4},
    )
    assert [s.state.algorithm for s in loop.steps] == ["fullrank"] * 2
    assert loop.steps[-1].state.scale.shape == (10, 10) and loop.settled
    # the decision step maximised the estimated utility term of the last state
    step = loop.steps[-1]
    z = step.state.draws(loop.eps_theta)
    y = normal_outcomes(z[:, 2:], np.array(SCHOOLS.data["sigma"]), loop.eps_y)  # (mu, log tau, theta)
    scale = loop.utility.scale
    assert loop.utility == Utility(kind="exp", scale=scale, estimator="naive")  # the scale set
    best = utility_per_theta(y, step.decisions, loop.loss, "exp", scale, "naive").mean()
    for shift in (-0.05, 0.05):
        other = utility_per_theta(y, step.decisions + shift, loop.loss, "exp", scale, "naive")
        assert best >= other.mean()
    assert np.all(np.isfinite([s.elbo for s in loop.steps]))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: lcvi(SCHOOLS, "check", tau=1.5), r"loss_params\['tau'\] must be finite and in"),
        (lambda: lcvi(SCHOOLS, "check", tau=0.0), r"loss_params\['tau'\] must be finite and in"),
        (lambda: lcvi(SCHOOLS, "check", q=0.2), r"loss 'check' takes \['tau'\]; missing \['tau'\]"),
        (lambda: lcvi(SCHOOLS, "tilted", q=0.2), "unknown loss 'tilted' \\(stanflow calls it check"),
        (lambda: lcvi(SCHOOLS, "hubber"), "loss: unknown loss 'hubber'"),
        (lambda: lcvi(SCHOOLS, "squared", kind="exp"), r"loss_params: .* unknown \['kind'\]"),
        (lambda: lcvi(SCHOOLS, "squared", n_draws=0), "n_draws must be an integer >= 1"),
        (lambda: lcvi(SCHOOLS, "squared", decision="mode"), "decision must be one of"),
        (lambda: lcvi(SCHOOLS, "squared", branch_iter=10000), r"branch_iter must be in \[1, iter\)"),
        (lambda: lcvi(SCHOOLS, "squared", decision_every=0), "decision_every must be an integer >= 1"),
        (lambda: lcvi(SCHOOLS, "squared", max_iter=100), "max_iter must be an integer >= iter"),
        (
            lambda: lcvi(SCHOOLS, "squared", advi_args={"grad_sample": 3}),
            "'grad_sample' is not a variational argument",
        ),
        (
            lambda: lcvi(SCHOOLS, "squared", advi_args={"algorithm": "fullrank"}),
            r"advi_args\['algorithm'\]: set by the loop",
        ),
        (
            lambda: lcvi(SCHOOLS, "squared", advi_args={"tol_rel_obj": 0.01}),
            r"advi_args\['tol_rel_obj'\]: set by the loop \(its runs have fixed budgets\)",
        ),
        (lambda: lcvi(SCHOOLS, "squared", tol=0), "tol must be finite and > 0"),
        (lambda: lcvi(SCHOOLS, "squared", algorithm="rank"), "algorithm must be"),
    ],
)
def test_loop_rejects_bad_input_before_running(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_loop_takes_the_utility_term_as_a_utility_only():
    with pytest.raises(TypeError, match="utility must be a Utility, got dict"):
        run_lcvi(SCHOOLS, "squared", utility={"kind": "exp"})


@pytest.mark.e2e
def test_stan_data_rejects_decisions_of_the_wrong_shape(cmdstan):
    model = SCHOOLS.bind(bound_loss("squared"))
    eps, settings = np.zeros((2, 8)), model.settings(1.0, "linear", 1.0, "linearised", 2)
    with pytest.raises(ValueError, match=r"h \(decisions\) must have shape \(8,\)"):
        model.stan_data(np.zeros(7), eps, eps, settings)
    with pytest.raises(ValueError, match=r"h \(decisions\) must have shape \(8,\)"):
        model.stan_data(np.zeros((8, 1)), eps, eps, settings)
    with pytest.raises(ValueError, match=r"h \(decisions\) must be finite"):
        model.stan_data(np.full(8, np.nan), eps, eps, settings)
    with pytest.raises(ValueError, match=r"base samples must have shape \(S, 8\)"):
        model.stan_data(np.zeros(8), np.zeros((2, 3)), np.zeros((2, 3)), settings)


def test_problems_reject_bad_data():
    with pytest.raises(ValueError, match="J must be an integer >= 1"):
        eight_schools({"J": 0, "y": [], "sigma": []})
    with pytest.raises(ValueError, match="sigma must be a finite vector of length 2"):
        eight_schools({"J": 2, "y": [1.0, 2.0], "sigma": [1.0]})
    with pytest.raises(ValueError, match="sigma must be positive"):
        eight_schools({"J": 2, "y": [1.0, 2.0], "sigma": [1.0, -1.0]})
    with pytest.raises(ValueError, match="sigma must be positive"):
        normal_mean(np.ones(3), 0.0)
    with pytest.raises(ValueError, match="y must be a non-empty finite vector"):
        normal_mean(np.array([1.0, np.inf]), 1.0)
