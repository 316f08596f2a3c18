"""Calibration of the learning rate: GPC (grid and Stan), Holmes-Walker, SafeBayes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stanflow.gibbs import GridBackend, StanBackend, linear_program, location_program
from stanflow.gibbs.gpc import bootstrap_indices, calibrate_gpc, draws_coverage
from stanflow.gibbs.gpc.algorithm import converged, update
from stanflow.gibbs.information import calibrate_holmes_walker, omega_from_traces
from stanflow.gibbs.loss_terms import python_terms
from stanflow.gibbs.plugin import (
    replicate_location_plugin,
    sensitivity_from_terms,
    variability_from_terms,
)
from stanflow.gibbs.safebayes import calibrate_safebayes_conjugate, sequential_losses

OMEGA_STAR_MEDIAN = 0.6266  # 2 f(m) for Gamma(2, 1)


# ---------------------------------------------------------------- GPC pieces


def test_update_and_stop_rule():
    assert update(1.0, 0.90, 0, 0.05) == pytest.approx(1.0 - 0.05)
    assert update(1.0, 1.00, 3, 0.05) == pytest.approx(1.0 + 4**-0.51 * 0.05)
    assert update(0.01, 0.0, 0, 0.05) == 0.005  # never non-positive
    assert converged(0.945, 0.05, 0.01) and not converged(0.93, 0.05, 0.01)
    with pytest.raises(ValueError, match="alpha"):
        update(1.0, 0.9, 0, 1.5)
    with pytest.raises(ValueError, match="omega"):
        update(0.0, 0.9, 0, 0.05)


def test_bootstrap_indices_are_common_random_numbers():
    a = bootstrap_indices(30, 5, np.random.SeedSequence(7))
    b = bootstrap_indices(30, 5, np.random.SeedSequence(7))
    assert a.shape == (5, 30) and np.array_equal(a, b)
    assert a.min() >= 0 and a.max() < 30
    with pytest.raises(ValueError, match="B must"):
        bootstrap_indices(30, 0, 1)


def test_draws_coverage_against_normal_truth():
    rng = np.random.default_rng(0)
    # Posteriors N(mu_b, 1) with mu_b ~ N(0, 1): the 95% interval holds 0 iff |mu_b| < 1.96.
    mu = rng.normal(size=400)
    draws = mu[:, None] + rng.normal(size=(400, 4000))
    expected = np.mean(np.abs(mu) < 1.96)
    assert draws_coverage(draws, 0.0, 0.05) == pytest.approx(expected, abs=0.02)
    # 2-D: chi-square(2) ellipsoid, P(chi2_2 <= q_0.95) = 0.95
    mu2 = rng.normal(size=(400, 2))
    draws2 = mu2[:, None, :] + rng.normal(size=(400, 2000, 2))
    expected2 = np.mean(np.sum(mu2**2, axis=1) <= -2 * math.log(0.05))
    assert draws_coverage(draws2, np.zeros(2), 0.05) == pytest.approx(expected2, abs=0.03)


def test_gpc_backends_check_themselves_when_made():
    with pytest.raises(ValueError, match="design"):
        StanBackend(design="importance")
    with pytest.raises(ValueError, match="proposal_scale"):
        StanBackend(proposal_scale=2.0)
    with pytest.raises(ValueError, match="warmup"):
        StanBackend(warmup=-1)
    with pytest.raises(ValueError, match="draws"):
        StanBackend(draws=0)
    with pytest.raises(ValueError, match="points"):
        GridBackend(points=0)


@pytest.mark.e2e
def test_gpc_bad_input(cmdstan):
    y = np.random.default_rng(0).gamma(2.0, 1.0, 30)
    with pytest.raises(ValueError, match="GridBackend needs finite bounds"):
        calibrate_gpc(location_program(y), backend=GridBackend())
    with pytest.raises(ValueError, match="GridBackend computes exact posteriors of a scalar"):
        calibrate_gpc(linear_program(y, np.ones((30, 1)), bounds=(0, 8)), backend=GridBackend())
    program = location_program(y, bounds=(0, 8))
    with pytest.raises(TypeError, match="backend must be a StanBackend or a GridBackend"):
        calibrate_gpc(program, backend="mcmc")
    with pytest.raises(ValueError, match="alpha"):
        calibrate_gpc(program, backend=GridBackend(), alpha=0)
    with pytest.raises(ValueError, match="omega0"):
        calibrate_gpc(program, backend=GridBackend(), omega0=-1.0)
    with pytest.raises(TypeError, match="program must be a LossProgram"):
        calibrate_gpc(y)
    with pytest.raises(ValueError, match="tau"):
        location_program(y, loss="check", loss_params={"tau": 1.2}, bounds=(0, 8))
    with pytest.raises(ValueError, match="y must"):
        location_program(np.array([]), bounds=(0, 8))


# ---------------------------------------------------------------- GPC, grid


@pytest.mark.e2e
def test_gpc_grid_squared_loss_finds_one_over_two_sigma2(cmdstan):
    """Squared loss on N(1, 1) data: omega* = H / J = 2 / 4 = 0.5; the bootstrap is
    accurate for the mean, so GPC's fixed point centres on 0.5."""
    rng = np.random.default_rng(3)
    omegas = []
    for r in range(20):
        y = rng.normal(1.0, 1.0, 100)
        c = calibrate_gpc(location_program(y, loss="squared", bounds=(-2, 4)),
                          backend=GridBackend(401), seed=r, max_steps=60, eps=0.0).calibration
        omegas.append(float(c["omega_path"][-20:].mean()))
    omegas = np.array(omegas)
    se = omegas.std(ddof=1) / math.sqrt(len(omegas))
    assert abs(omegas.mean() - 0.5) < 3 * se + 0.02, (omegas.mean(), se)


@pytest.mark.e2e
def test_gpc_grid_median_centres_near_omega_star(cmdstan):
    """Median of Gamma(2, 1) data, absolute loss, uniform prior [0, 8].

    Measured (docs/gibbs.md): the bootstrap fixed point sits about +0.09 above
    omega* = 0.6266 (0.72 +- 0.02 over 24 replications at n = 400, same at
    n = 100): the bootstrap overstates the coverage of the median's intervals by
    about 0.015. The tolerance is 3 replication standard errors plus that bias.
    """
    rng = np.random.default_rng(1)
    omegas = []
    for r in range(20):
        y = rng.gamma(2.0, 1.0, 100)
        c = calibrate_gpc(location_program(y, bounds=(0, 8)), backend=GridBackend(401), seed=r,
                          max_steps=60, eps=0.0).calibration
        omegas.append(float(c["omega_path"][-20:].mean()))
    omegas = np.array(omegas)
    se = omegas.std(ddof=1) / math.sqrt(len(omegas))
    assert abs(omegas.mean() - OMEGA_STAR_MEDIAN) < 3 * se + 0.1, (omegas.mean(), se)
    # The defaults (B = 200, eps = 0.01, 16 steps from omega0 = 1) record their path.
    c = calibrate_gpc(location_program(rng.gamma(2.0, 1.0, 100), bounds=(0, 8)),
                      backend=GridBackend(), seed=5).calibration
    assert c.attrs["B"] == 200 and c.attrs["alpha"] == 0.05 and c.attrs["eps"] == 0.01
    assert int(c["steps"]) in range(1, 17)
    assert c["omega_path"].dims == ("step",) and c["coverage_path"].sizes["step"] == int(c["steps"])
    assert float(c["omega_path"][0]) == 1.0
    assert np.all(np.diff(c["omega_path"].values) < 0)  # intervals at omega = 1 under-cover


# ---------------------------------------------------------------- GPC, Stan


@pytest.mark.e2e
def test_gpc_stan_resample_design_agrees_with_grid(tmp_path, cmdstan):
    """Same resamples, same omega path length: Stan (NUTS per resample, run layer)
    vs exact grid.

    Coverage at each step is a fraction of B = 20 resamples; Monte Carlo error in
    the interval ends can flip a resample whose interval ends near the estimate,
    so the omegas may differ by a few update steps of 1/20 each."""
    program = location_program(np.random.default_rng(11).gamma(2.0, 1.0, 50), bounds=(0, 8))
    kwargs = {"B": 20, "seed": 3, "max_steps": 3, "eps": 0.0}
    g = calibrate_gpc(program, backend=GridBackend(801), **kwargs).calibration
    s = calibrate_gpc(program, backend=StanBackend(design="resample", draws=2000, warmup=300,
                                                   out_dir=tmp_path), **kwargs).calibration
    assert s.attrs["backend"] == "stan" and s.attrs["design"] == "resample"
    np.testing.assert_allclose(s["coverage_path"], g["coverage_path"], atol=0.1 + 1e-9)
    assert float(s["omega"]) == pytest.approx(float(g["omega"]), abs=0.15)
    assert np.all(s["step_sampling_time"] > 0)
    assert (tmp_path / "step-00" / "plan.json").is_file()


@pytest.mark.e2e
def test_gpc_stan_reweight_design_agrees_with_grid(tmp_path, cmdstan):
    """The default design: one proposal run reweighted to every resample and step.

    B = 200 resamples against the exact grid coverage at each omega of the path
    (3 steps from 0.5 upwards, eps = 0 so that all three run). Measured: equal or
    one resample apart; the tolerance allows three (0.015)."""
    program = location_program(np.random.default_rng(11).gamma(2.0, 1.0, 50), bounds=(0, 8))
    kwargs = {"B": 200, "seed": 3, "max_steps": 3, "eps": 0.0, "omega0": 0.5}
    g = calibrate_gpc(program, backend=GridBackend(2001), **kwargs).calibration
    s = calibrate_gpc(program, backend=StanBackend(out_dir=tmp_path), **kwargs).calibration
    assert s.attrs["design"] == "reweight"
    np.testing.assert_allclose(s["omega_path"][0], 0.5)
    for t in range(3):
        exact = calibrate_gpc(program, backend=GridBackend(2001), **{
            **kwargs, "max_steps": 1, "omega0": float(s["omega_path"][t])}).calibration
        assert float(s["coverage_path"][t]) == pytest.approx(
            float(exact["coverage_path"][0]), abs=0.015 + 1e-9)
    assert float(s["omega"]) == pytest.approx(float(g["omega"]), abs=0.05)
    assert np.all(s["ess_min"] > 0) and np.all(s["ess_median"] > 1000)
    assert np.all(s["omega_ref"] == 0.125)  # one proposal served all steps
    assert (tmp_path / "proposal-00" / "plan.json").is_file()


@pytest.mark.e2e
def test_gpc_reweight_samples_poorly_served_resamples_directly(tmp_path, cmdstan):
    """With min_ess above any attainable ESS every resample is sampled directly
    (so this is the resample design) and the proposal is redrawn at each new
    omega; the coverage still agrees with the exact grid."""
    program = location_program(np.random.default_rng(11).gamma(2.0, 1.0, 50), bounds=(0, 8))
    kwargs = {"B": 20, "seed": 3, "max_steps": 2, "eps": 0.0}
    g = calibrate_gpc(program, backend=GridBackend(801), **kwargs).calibration
    s = calibrate_gpc(program, backend=StanBackend(min_ess=1e9, proposal_draws=2000, draws=2000,
                                                   out_dir=tmp_path), **kwargs).calibration
    np.testing.assert_array_equal(s["n_direct"], [20, 20])
    assert float(s["omega_ref"][1]) == pytest.approx(0.25 * float(s["omega_path"][1]))
    np.testing.assert_allclose(s["coverage_path"], g["coverage_path"], atol=0.1 + 1e-9)
    assert (tmp_path / "direct-01" / "plan.json").is_file()


# ---------------------------------------------------------------- Holmes-Walker


@pytest.mark.e2e
def test_holmes_walker_squared_loss_normal(cmdstan):
    """Squared loss, N(1, 2^2) data: H = 2, J = 4 sigma^2 = 16, omega = 1/8."""
    y = np.random.default_rng(0).normal(1.0, 2.0, size=(20, 4000))
    omegas = []
    for row in y:
        c = calibrate_holmes_walker(location_program(row, loss="squared")).calibration
        assert c.attrs["method"] == "holmes_walker"
        omegas.append(float(c["omega"]))
    assert float(np.mean(omegas)) == pytest.approx(1 / 8, rel=0.02)
    # The replicates' kernels give the same traces.
    r = replicate_location_plugin(y, loss="squared")
    np.testing.assert_allclose(
        omegas, omega_from_traces(r["sensitivity"].values, r["variability"].values), rtol=1e-6)


@pytest.mark.e2e
def test_holmes_walker_nll_well_specified_is_one(cmdstan):
    y = np.random.default_rng(1).normal(0.0, 1.5, size=(20, 4000))
    omegas = [
        float(calibrate_holmes_walker(
            location_program(row, loss="normal_nll", loss_params={"sigma": 1.5})
        ).calibration["omega"])
        for row in y
    ]
    assert float(np.mean(omegas)) == pytest.approx(1.0, rel=0.03)


@pytest.mark.e2e
def test_holmes_walker_regression_traces(cmdstan):
    """Least squares, x = (1, z), noise variance 1 + z^2: H = 2 I, J = 4 diag(2, 4),
    so tr(H)/tr(J) = 4 / 24 = 1/6 (the loss-likelihood bootstrap's is 3/16)."""
    rng = np.random.default_rng(2)
    n = 20000
    z = rng.normal(size=n)
    X = np.column_stack([np.ones(n), z])
    y = 1 + 2 * z + rng.normal(size=n) * np.sqrt(1 + z**2)
    beta = np.linalg.lstsq(X, y, rcond=None)[0]
    c = calibrate_holmes_walker(linear_program(y, X, loss="squared"), estimate=beta).calibration
    assert float(c["omega"]) == pytest.approx(1 / 6, rel=0.05)
    assert float(c["omega"]) == pytest.approx(
        float(omega_from_traces(c["sensitivity"].values, c["variability"].values))
    )
    # The same traces straight from the squared loss's terms.
    terms = python_terms(y, X @ beta, "squared", ())
    H, J = sensitivity_from_terms(terms, X, 1.0), variability_from_terms(terms, X)
    assert float(c["omega"]) == pytest.approx(float(omega_from_traces(H, J)), rel=1e-10)
    with pytest.raises(ValueError, match="J must"):
        omega_from_traces(np.eye(2), np.zeros((2, 2)))


# ---------------------------------------------------------------- SafeBayes


def test_sequential_losses_first_point_is_prior_predictive():
    y, X = np.array([0.7, -0.2]), np.array([[1.0, 0.5], [1.0, -1.0]])
    losses = sequential_losses(y, X, [0.5, 1.0], sigma=2.0, prior_scale=3.0)
    var = 4.0 * (1 + 9.0 * (1 + 0.25))  # sigma^2 + sigma^2 x' V0 x
    r_log = 0.5 * math.log(2 * math.pi * 4.0) + (0.7**2 + var - 4.0) / 8.0
    assert losses["r-log"][:, 0] == pytest.approx([r_log, r_log])
    # second point after a power update, against the batch formula
    P = np.eye(2) / 9.0 + 0.5 * np.outer(X[0], X[0])
    m = np.linalg.solve(P, 0.5 * X[0] * y[0])
    r = y[1] - X[1] @ m
    v = X[1] @ np.linalg.solve(P, X[1])
    assert losses["r-log"][0, 1] == pytest.approx(0.5 * math.log(8 * math.pi) + (r**2 + 4 * v) / 8)
    assert losses["i-log"][0, 1] == pytest.approx(0.5 * math.log(8 * math.pi) + r**2 / 8)


def test_safebayes_well_specified_picks_one():
    rng = np.random.default_rng(4)
    chosen = []
    for _ in range(5):
        X = np.column_stack([np.ones(200), rng.normal(size=200)])
        y = X @ [1.0, 2.0] + rng.normal(size=200)
        chosen.append(calibrate_safebayes_conjugate(y, X).calibration["omega"]
                      .sel(variant="r-log").item())
    assert np.median(chosen) == 1.0
