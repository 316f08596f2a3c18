"""A user's own Stan program as a loss program: the contract, and every algorithm
against closed forms (power posterior of a normal mean, the spatial median, a
conjugate normal regression), exact grids and the templates."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from stanflow import arviz_compat
from stanflow.gibbs import (
    ContractError,
    GridBackend,
    LossProgram,
    PathSampler,
    StanBackend,
    calibrate_gpc,
    calibrate_holmes_walker,
    calibrate_path,
    calibrate_plugin,
    calibrate_safebayes,
    calibrate_safebayes_conjugate,
    gibbs_path,
    location_program,
    posterior,
)
from stanflow.gibbs.contract import CONTRACT_PAGE
from stanflow.models import CompileError
from stanflow.wbb import wbb_program

pytestmark = pytest.mark.e2e

STAN = Path(__file__).parent / "stan"
SIGMA, PRIOR_MEAN, PRIOR_SD = 1.5, 0.5, 3.0


def power_normal(y):
    return LossProgram(STAN / "power_normal.stan", {
        "N": len(y), "y": y, "sigma": SIGMA, "prior_mean": PRIOR_MEAN, "prior_sd": PRIOR_SD})


def normal_closed_form(y, omega, weights=None):
    """Posterior mean, sd and log Z(omega) of the power posterior of a normal mean."""
    w = np.ones_like(y) if weights is None else weights
    a, s1, s2 = omega * w.sum(), omega * w @ y, omega * w @ y**2
    precision = a / SIGMA**2 + 1 / PRIOR_SD**2
    b = s1 / SIGMA**2 + PRIOR_MEAN / PRIOR_SD**2
    c = s2 / SIGMA**2 + PRIOR_MEAN**2 / PRIOR_SD**2
    log_z = (-a * math.log(SIGMA * math.sqrt(2 * math.pi)) - math.log(PRIOR_SD)
             - 0.5 * math.log(precision) + 0.5 * b**2 / precision - 0.5 * c)
    return b / precision, precision**-0.5, log_z


@pytest.fixture(scope="module")
def normal_data():
    return np.random.default_rng(1).normal(2.0, 2.0, size=60)


# -- the contract ---------------------------------------------------------------

GOOD_DATA = """\
data {
  int<lower=1> N;
  vector[N] y;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
}
"""
GOOD_REST = """\
parameters {
  real theta;
}
model {
  target += -omega * dot_product(weights, abs(y - theta)) + normal_lpdf(theta | 0, 10);
}
"""


def write(tmp_path, name, code):
    path = tmp_path / name
    path.write_text(code)
    return path


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (GOOD_DATA.replace("  real<lower=0> omega;\n", "") + GOOD_REST.replace("omega *", ""),
         "declares no `omega`"),
        (GOOD_DATA.replace("  vector<lower=0>[N] weights;\n", "")
         + GOOD_REST.replace("dot_product(weights, abs(y - theta))", "sum(abs(y - theta))"),
         "declares no `weights`"),
        (GOOD_DATA.replace("vector<lower=0>[N] weights;", "array[N] real<lower=0> weights;")
         + GOOD_REST.replace("dot_product(weights, abs(y - theta))",
                             "dot_product(to_vector(weights), abs(y - theta))"),
         "declare the weights as a vector"),
        (GOOD_DATA.replace("real<lower=0> omega;", "vector<lower=0>[N] omega;")
         + GOOD_REST.replace("-omega *", "-omega[1] *"),
         "`omega` must be declared `real<lower=0> omega;`"),
        (GOOD_DATA + "transformed data {\n  real total = sum(weights);\n}\n" + GOOD_REST,
         "may be used only where a parameter may"),
        (GOOD_DATA + GOOD_REST.replace("dot_product(weights, abs(y - theta))",
                                       "dot_product(square(weights), abs(y - theta))"),
         "the target is not `log prior - omega * sum_i weights[i] * loss_i`"),
        (GOOD_DATA + GOOD_REST.replace("normal_lpdf(theta | 0, 10)", "log(-1.0)"),
         "the losses cannot be read"),
        (GOOD_DATA + GOOD_REST + "generated quantities {\n  vector[N] log_lik = -abs(y - theta)"
         " * 2;\n}\n", "but the generated quantity log_lik["),
        (GOOD_DATA + GOOD_REST + "generated quantities {\n  vector[N - 1] log_lik = "
         "-abs(y[2:N] - theta);\n}\n", "weights must have one entry per observation"),
    ],
    ids=["no-omega", "no-weights", "weights-array", "omega-vector", "weights-as-data",
         "not-linear", "not-finite", "log-lik-disagrees", "log-lik-size"],
)
def test_programs_off_the_contract_are_named_before_anything_samples(
        cmdstan, tmp_path, code, expected):
    path = write(tmp_path, "bad_program.stan", code)
    with pytest.raises(ContractError) as error:
        LossProgram(path, {"N": 5, "y": np.arange(5.0)})
    message = str(error.value)
    assert expected in message and str(path) in message and CONTRACT_PAGE in message


def test_bad_data_and_files_are_named(cmdstan, tmp_path):
    path = write(tmp_path, "good.stan", GOOD_DATA + GOOD_REST)
    with pytest.raises(ContractError, match="needs y"):
        LossProgram(path, {"N": 5})
    with pytest.raises(ContractError, match="data must not set omega"):
        LossProgram(path, {"N": 5, "y": np.arange(5.0), "omega": 1.0})
    with pytest.raises(ValueError, match=r"rejects its data.*y"):
        LossProgram(path, {"N": 5, "y": np.arange(4.0)})
    with pytest.raises(ContractError, match="file not found"):
        LossProgram(tmp_path / "missing.stan", {})
    loss_file = write(tmp_path, "loss.stanfunctions", "real loss(real y, real f, vector p) "
                                                      "{ return abs(y - f); }\n")
    with pytest.raises(ContractError, match="a complete Stan program"):
        LossProgram(loss_file, {})
    broken = write(tmp_path, "broken.stan", GOOD_DATA + "parameters {\n  real theta\n}\n")
    with pytest.raises(CompileError, match=str(broken)):
        LossProgram(broken, {"N": 5, "y": np.arange(5.0)})


def test_losses_are_read_off_the_target(cmdstan, normal_data):
    program = power_normal(normal_data)
    u = np.array([[0.3], [2.5]])
    np.testing.assert_allclose(
        program.losses(u), -stats.norm.logpdf(normal_data[None, :], u, SIGMA), rtol=1e-12)
    w = np.random.default_rng(2).exponential(size=len(normal_data))
    np.testing.assert_allclose(
        program.total_loss(u, w), -stats.norm.logpdf(normal_data[None, :], u, SIGMA) @ w,
        rtol=1e-12)
    np.testing.assert_allclose(
        program.log_prior(u), stats.norm.logpdf(u[:, 0], PRIOR_MEAN, PRIOR_SD), rtol=1e-12)
    assert program.names == ["theta"] and program.n == len(normal_data)


def test_many_rows_constrain_as_bridgestan_does(cmdstan):
    y = np.linspace(0.5, 7.5, 9)
    program = LossProgram(STAN / "location_absolute.stan", {"N": len(y), "y": y})
    u = np.random.default_rng(3).normal(0, 2, size=(7, 1))
    tail = np.ones(1 + program.n)
    expected = np.array([program.library.param_constrain(np.concatenate([row, tail]))[:1]
                         for row in u])
    np.testing.assert_array_equal(program.constrain(u), expected)
    np.testing.assert_allclose(program.unconstrain(expected), u, rtol=1e-12, atol=1e-12)
    assert np.all((expected > 0) & (expected < 8))
    with pytest.raises(ValueError, match="outside the parameters' support"):
        program.unconstrain(np.array([[9.0]]))


# -- NUTS, the path and log Z ----------------------------------------------------

def test_nuts_at_any_omega_and_weights_follows_the_closed_form(cmdstan, normal_data):
    program = power_normal(normal_data)
    weights = np.random.default_rng(3).exponential(size=len(normal_data))
    fit = posterior(program, omega=0.5, weights=weights, chains=4, iter_sampling=2000, seed=4)
    mean, sd, _ = normal_closed_form(normal_data, 0.5, weights)
    draws = fit.posterior["theta"].values.ravel()
    mcse = float(arviz_compat.mcse(fit, var_names=["theta"])["theta"])
    assert abs(draws.mean() - mean) < 4 * mcse
    assert draws.std() == pytest.approx(sd, rel=0.05)
    np.testing.assert_array_equal(fit.constant_data["weights"].values, weights)
    assert float(fit.constant_data["omega"]) == 0.5


@pytest.mark.parametrize("weighted", [False, True], ids=["unit-weights", "weights"])
def test_the_path_gives_log_z_and_posteriors_at_every_omega(cmdstan, normal_data, weighted):
    program = power_normal(normal_data)
    weights = np.random.default_rng(13).exponential(size=len(normal_data)) if weighted else None
    result = gibbs_path(program, omega_max=2.0, sampler=PathSampler(n_particles=4000), seed=5,
                        weights=weights)
    path = arviz_compat.group(result, "path")
    table = arviz_compat.group(result, "path_functionals")
    assert path.attrs["particle_space"] == "unconstrained"
    levels = zip(path["omega"].values, path["log_z"].values, path["log_z_se"].values, strict=True)
    for omega, log_z, se in levels:
        expected = normal_closed_form(normal_data, omega, weights)[2]
        assert abs(log_z - expected) <= 4 * se + 0.02, omega
    for omega in (0.1, 0.5, 1.0, 2.0):
        row = table.sel(omega=omega, method="nearest")
        mean, sd, _ = normal_closed_form(normal_data, float(row["omega"]), weights)
        assert float(row["mean"].sel(param="theta")) == pytest.approx(mean, abs=4 * float(
            row["mean_se"].sel(param="theta")) + 1e-3)
        width = float(row["quantile"].sel(param="theta", prob=0.975)
                      - row["quantile"].sel(param="theta", prob=0.025))
        assert width == pytest.approx(2 * 1.959964 * sd, rel=0.08)


# -- the plug-in rules -----------------------------------------------------------

def test_plugin_of_a_power_posterior_is_sigma2_over_the_sample_variance(cmdstan, normal_data):
    # loss = -log N(y | theta, sigma): H = 1 / sigma^2, J = var(y) / sigma^4 at the mean.
    cal = arviz_compat.group(calibrate_plugin(power_normal(normal_data)), "calibration")
    assert float(cal["omega"]) == pytest.approx(SIGMA**2 / np.var(normal_data), rel=1e-6)
    assert float(cal["estimate"][0]) == pytest.approx(normal_data.mean(), abs=1e-6)
    assert cal.attrs["curvature"] == "exact" and cal.attrs["scale"] == "constrained"


def test_spatial_median_rates_against_h_and_j(cmdstan):
    # x ~ N(0, s^2 I) in the plane: H = E[1/r]/2 I = sqrt(pi/2)/(2 s) I, J = I/2,
    # so both rules give omega* = sqrt(pi/2) / s.
    s, n = 2.0, 20000
    x = np.random.default_rng(6).normal(0.0, s, size=(n, 2))
    program = LossProgram(STAN / "spatial_median.stan", {"N": n, "x": x})
    plugin = arviz_compat.group(calibrate_plugin(program), "calibration")
    matching = arviz_compat.group(calibrate_holmes_walker(program), "calibration")
    omega_star = math.sqrt(math.pi / 2) / s
    np.testing.assert_allclose(plugin["sensitivity"].values, omega_star / 2 * np.eye(2),
                               atol=0.03 * omega_star)
    np.testing.assert_allclose(plugin["variability"].values, np.eye(2) / 2, atol=0.02)
    assert float(plugin["omega"]) == pytest.approx(omega_star, rel=0.04)
    assert float(matching["omega"]) == pytest.approx(omega_star, rel=0.04)


# -- GPC and WBB -----------------------------------------------------------------

def test_gpc_on_a_users_program_agrees_with_the_templates_exact_grid(cmdstan):
    y = np.random.default_rng(7).gamma(2.0, 1.0, size=40)
    user = LossProgram(STAN / "location_absolute.stan", {"N": len(y), "y": y})
    grid = arviz_compat.group(calibrate_gpc(location_program(y, bounds=(0, 8)),
                                            backend=GridBackend(801), B=60, seed=8, max_steps=5),
                              "calibration")
    stan = arviz_compat.group(calibrate_gpc(
        user, backend=StanBackend(draws=1000, proposal_draws=8000), estimate=grid["estimate"].values,
        B=60, seed=8, max_steps=5), "calibration")
    # The same resamples: each step's coverage within a few resamples of the exact one.
    steps = min(len(grid["omega_path"]), len(stan["omega_path"]))
    np.testing.assert_allclose(stan["coverage_path"].values[:steps],
                               grid["coverage_path"].values[:steps], atol=3 / 60)


def test_wbb_draws_are_the_weighted_optima(cmdstan, normal_data):
    # argmin sum w_i (y_i - t)^2 / (2 sigma^2) - wp log N(t | m0, s0) in closed form.
    program = power_normal(normal_data)
    result = wbb_program(program, 50, seed=9)
    draws = result.posterior["theta"].values[0]
    w = arviz_compat.group(result, "weights")
    obs, prior = w["w"].values[0], w["w_prior"].values[0]
    exact = ((obs @ normal_data) / SIGMA**2 + prior * PRIOR_MEAN / PRIOR_SD**2) / (
        obs.sum(axis=1) / SIGMA**2 + prior / PRIOR_SD**2)
    np.testing.assert_allclose(draws, exact, rtol=1e-8)
    assert bool(result.sample_stats["converged"].values.all())


# -- the path's calibration and SafeBayes ----------------------------------------

def test_calibrate_path_on_a_users_program(cmdstan, normal_data):
    sampler = PathSampler(n_particles=2000, n_moves=3)
    cal = arviz_compat.group(calibrate_path(power_normal(normal_data), B=100, sampler=sampler,
                                            seed=10), "calibration")
    rules = dict(zip(cal["rule"].values.tolist(), cal["rule_omega"].values, strict=True))
    assert rules["plugin"] == pytest.approx(SIGMA**2 / np.var(normal_data), rel=1e-6)
    # A correctly specified normal: GPC's root near 1 (the data's sd is 2, sigma 1.5,
    # so the loss is misspecified in scale and omega* = sigma^2 / 4 = 0.5625).
    assert 0.3 < rules["gpc_path"] < 1.0


def test_safebayes_of_a_program_follows_the_conjugate_closed_form(cmdstan):
    rng = np.random.default_rng(11)
    n, sigma, scale = 40, 1.0, 10.0
    X = np.column_stack([np.ones(n), rng.uniform(-1, 1, n)])
    y = X @ [0.5, 1.0] + rng.standard_t(3, size=n)
    program = LossProgram(STAN / "normal_regression.stan", {
        "N": n, "K": 2, "X": X, "y": y, "sigma": sigma, "prior_scale": scale})
    etas = np.geomspace(1 / 16, 1, 5)
    found = arviz_compat.group(calibrate_safebayes(program, etas=etas, n_particles=2000, seed=12),
                               "calibration")
    exact = arviz_compat.group(calibrate_safebayes_conjugate(y, X, etas=etas, sigma=sigma,
                                                             prior_scale=scale), "calibration")
    # The first score is the prior predictive's, the same for every eta (the sweeps share
    # their prior draws), and its Monte Carlo error under a diffuse prior is large; the
    # choice of eta depends on the differences between learning rates only.
    # The R-log sums carry their Monte Carlo standard errors: the gap to the closed form
    # may be 3 of them (of the difference of two independent sweeps) beyond 6 %.
    mcse = found["cumulative_r_log_mcse"].values
    assert np.all((mcse > 0) & (mcse < 2.0)), mcse
    for variant, allowed in (("r-log", 3 * np.hypot(mcse, mcse[-1])), ("i-log", 1.0)):
        ours = found["cumulative_loss"].sel(variant=variant).values
        truth = exact["cumulative_loss"].sel(variant=variant).values
        gap = np.abs((ours - ours[-1]) - (truth - truth[-1]))
        assert np.all(gap <= 0.06 * np.abs(truth - truth[-1]) + allowed), (variant, gap, mcse)
    assert float(found["omega"].sel(variant="r-log")) == float(exact["omega"].sel(variant="r-log"))
