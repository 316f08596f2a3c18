"""LCVI programs of your own: the contract's checks, the outcomes read from Stan, the baselines.

- Bad programs (no functions or data of stanflow's, no utility term, outcomes
  of the wrong size, the term twice, data missing) are errors naming the
  program and the missing piece, before any optimisation.
- Weight 0 is the model's own target exactly: the shipped eight-schools
  program's evaluation form against ``stan/models/eight_schools_centered.stan``.
- A log-normal regression (``tests/stan/lognormal_regression.stan``, outcomes
  ``exp(alpha + beta x + sigma z)`` of any form): the outcomes stanflow reads
  equal that formula at the draws; its numerical Bayes decisions under the
  check loss (tau = 0.8) from NUTS draws equal the 0.8-quantiles of the
  program's own predictive draws (``lognormal_rng``) within Monte Carlo error;
  the loop and the joint optimisation run on it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from stanflow.gibbs import ContractError
from stanflow.lcvi import (
    LcviProgram,
    eight_schools,
    lcvi_joint,
    nuts_baseline,
    run_lcvi,
)
from stanflow.losses import bound_loss
from stanflow.models import load, program_path
from stanflow.workflows import DATA_DIR

HERE = Path(__file__).parent
LOGNORMAL = HERE / "stan" / "lognormal_regression.stan"
TAU = 0.8


def _lognormal_data(seed: int = 1, n: int = 60, m: int = 4):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, n)
    y = np.exp(0.5 + 0.8 * x + 0.4 * rng.standard_normal(n))
    x_new = np.linspace(-1, 1, m)
    y_new = np.exp(0.5 + 0.8 * x_new + 0.4 * rng.standard_normal(m))
    return {"N": n, "x": x, "y": y, "M": m, "x_new": x_new}, y_new


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "program.stan"
    path.write_text(text)
    return path


GOOD = LOGNORMAL.read_text()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.replace("#include lcvi.stanfunctions", ""), "functions are not included"),
        (lambda s: s.replace("#include lcvi_data.stan", ""),
         "lacks stanflow's LCVI data"),
        (lambda s: s.replace("target += lcvi_utility(", "real ignored = lcvi_utility("),
         "never adds the utility term"),
    ],
)
def test_bad_programs_are_named_before_anything_compiles(cmdstan, tmp_path, edit, message):
    data, y_new = _lognormal_data()
    with pytest.raises(ContractError, match=message) as info:
        LcviProgram(_write(tmp_path, edit(GOOD)), data, y=y_new)
    assert "program.stan" in str(info.value) and "your-own-model.md" in str(info.value)


def test_data_are_checked_by_name(cmdstan):
    data, y_new = _lognormal_data()
    with pytest.raises(ContractError, match=r"the data lack \['x_new'\]"):
        LcviProgram(LOGNORMAL, {k: v for k, v in data.items() if k != "x_new"}, y=y_new)
    with pytest.raises(ContractError, match=r"stanflow's variables \['lcvi_h'\]"):
        LcviProgram(LOGNORMAL, data | {"lcvi_h": y_new}, y=y_new)
    with pytest.raises(ValueError, match=r"give y .* or n_decisions"):
        LcviProgram(LOGNORMAL, data)


@pytest.mark.e2e
def test_outcomes_of_the_wrong_size_fail_when_bound(cmdstan, tmp_path):
    data, y_new = _lognormal_data()
    program = LcviProgram(LOGNORMAL, data, y=np.append(y_new, 1.0))  # 5 decisions, 4 outcomes
    # the program's own outcomes (2 x 4) meet the base samples (lcvi_S x lcvi_N = 2 x 5)
    with pytest.raises(ContractError, match=r"lognormal_regression.stan.*not finite at any.*"
                       r"\(2, 4\) and b \(2, 5\) must match in size"):
        program.bind(bound_loss("check", tau=TAU))
    twice = GOOD.replace("  target += lcvi_utility(", "  target += lcvi_utility(exp(rep_matrix("
                         "mu_new', lcvi_S) + sigma * lcvi_z), lcvi_h, lcvi);\n  target += "
                         "lcvi_utility(")
    with pytest.raises(ContractError, match=r"calls lcvi_utility .* exactly once"):
        LcviProgram(_write(tmp_path, twice), data, y=y_new).bind(bound_loss("check", tau=TAU))


@pytest.mark.e2e
def test_weight_zero_is_the_models_own_target(cmdstan):
    data = json.loads((DATA_DIR / "eight_schools.json").read_text())
    model = eight_schools(data).bind(bound_loss("check", tau=0.2))
    plain = load(program_path("models/eight_schools_centered"), data)
    rng = np.random.default_rng(3)
    settings = model.settings(0.0, "linear", 5.0, "naive", 1)
    parts = model.layout(1, settings.size)
    evaluation = model.evaluator(1, 0)
    for _ in range(5):
        theta = rng.normal(0, 2, model.dim)
        row = np.zeros(parts["lcvi"].stop)
        row[parts["theta"]], row[parts["z"]] = theta, rng.standard_normal(8)
        row[parts["h"]], row[parts["lcvi"]] = rng.normal(size=8), settings
        lp, grad = evaluation.log_density_gradient(row, propto=False)
        lp_plain, grad_plain = plain.log_density_gradient(theta, propto=False)
        assert lp == lp_plain and np.array_equal(grad[parts["theta"]], grad_plain)


@pytest.fixture(scope="module")
def lognormal(cmdstan):
    data, y_new = _lognormal_data()
    program = LcviProgram(LOGNORMAL, data, y=y_new)
    return program, program.bind(bound_loss("check", tau=TAU))


@pytest.mark.e2e
def test_one_loss_file_bound_at_two_parameters_gives_two_models(lognormal):
    """A binding is kept per loss file and parameters: the check loss at another tau is
    another model (it was once the first tau's, from a cache keyed by the file alone)."""
    program, model = lognormal
    other = program.bind(bound_loss("check", tau=0.2))
    assert other is not model and other.loss.params == (0.2,) and model.loss.params == (TAU,)
    assert program.bind(bound_loss("check", tau=TAU)) is model


@pytest.mark.e2e
def test_the_outcomes_read_from_stan_are_the_programs(lognormal):
    program, model = lognormal
    assert model.form == "general" and not model.uses_uniform and model.dim == 3
    rng = np.random.default_rng(5)
    theta = rng.normal(0, 0.5, (7, 3))
    z = rng.standard_normal((3, 4))
    got = model.outcomes(theta, z[None], np.full((1, 3, 4), 0.5))
    alpha, beta, sigma = theta[:, 0], theta[:, 1], np.exp(theta[:, 2])  # log-scale sigma
    mu = alpha[:, None] + beta[:, None] * program.data["x_new"][None]
    expected = np.exp(mu[:, None, :] + sigma[:, None, None] * z[None])
    assert got == pytest.approx(expected, rel=1e-12)
    values = model.constrain(theta)
    assert values["sigma"] == pytest.approx(sigma) and values["alpha"] == pytest.approx(alpha)


@pytest.mark.e2e
def test_numerical_bayes_decisions_are_the_predictive_quantiles(lognormal):
    program, _ = lognormal
    base = nuts_baseline(program, "check", tau=TAU, chains=2, draws=2000, seed=3)
    y_rep = base.fit.stan_variable("y_rep")  # (draws, M): the program's own predictive
    quantiles = np.quantile(y_rep, TAU, axis=0)
    # Monte Carlo error of an empirical quantile: sqrt(tau (1 - tau) / n) / density
    n = y_rep.shape[0]
    width = np.quantile(y_rep, TAU + 0.02, axis=0) - np.quantile(y_rep, TAU - 0.02, axis=0)
    se = np.sqrt(TAU * (1 - TAU) / n) * width / 0.04
    assert np.all(np.abs(base.decisions - quantiles) < 4 * se), (base.decisions, quantiles, se)
    assert np.isfinite(base.risk)


@pytest.mark.e2e
def test_the_loop_and_the_joint_optimisation_take_the_program(lognormal):
    program, _ = lognormal
    loop = run_lcvi(program, "check", tau=TAU, seed=2, tol=10.0, n_draws=300,
                    advi_args={"iter": 600, "output_samples": 100})
    assert loop.steps[-1].decisions.shape == (4,) and np.isfinite(loop.steps[-1].risk)
    assert np.all(loop.steps[-1].decisions > 0)  # the outcomes are positive
    idata = lcvi_joint(program, "check", tau=TAU, iter=200, record_every=100, n_draws=100,
                       seed=2)
    assert idata.posterior["sigma"].shape == (1, 100)
    assert float(idata.posterior["sigma"].min()) > 0
    assert list(idata.decisions["part"].values) == ["vi", "lcvi"]
    assert np.all(np.isfinite(idata.decisions["risk"]))


@pytest.mark.e2e
def test_plain_vi_is_the_plain_advi_a_user_runs(lognormal, tmp_path):
    """With the utility term off the outcomes never enter the target, so the loop's
    plain VI (one outcome sample, eta adapted, split at the branch) is the ADVI run a
    user starts on the program with cmdstanpy, draw for draw."""
    program, model = lognormal
    loop = run_lcvi(program, "check", tau=TAU, seed=4, tol=10.0, n_draws=100,
                    advi_args={"iter": 400, "output_samples": 50})
    N = program.n
    settings = model.settings(0.0, "linear", 1.0, "linearised", 1)
    data = model.stan_data(np.zeros(N), np.zeros((1, N)), np.full((1, N), 0.5), settings)
    fit = model.executable().variational(
        data=data, seed=4, iter=400, grad_samples=10, elbo_samples=100, eval_elbo=1000,
        tol_rel_obj=1e-9, draws=50, output_dir=tmp_path, require_converged=False,
    )
    for name in ("alpha", "beta", "sigma"):
        assert np.array_equal(loop.vi.fit.stan_variable(name), fit.stan_variable(name)), name
