"""Gibbs templates through Stan: against grid posteriors, a user's loss file, the
NumPy losses and compile errors. Three models are compiled (cached)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from stanflow import arviz_compat
from stanflow.gibbs import (
    grid,
    linear_program,
    location_program,
    log_prior_on_grid,
    posterior,
)
from stanflow.gibbs.templates import LOSS_SIGNATURE
from stanflow.losses import LOSSES, loss_function
from stanflow.models import CompileError, compile_model

pytestmark = pytest.mark.e2e

PROBS = np.array([0.05, 0.25, 0.5, 0.75, 0.95])
PARAMS = {
    "check": {"tau": 0.3},
    "huber": {"delta": 0.7},
    "normal_nll": {"sigma": 1.5},
    "linex": {"c": 0.7},
}


def assert_quantiles_match(idata, name, post):
    """Stan's quantiles within 4 Monte Carlo standard errors of the grid's."""
    draws = idata.posterior[name].values.ravel()
    mcse = [
        float(
            arviz_compat.mcse(idata, var_names=[name], method="quantile", prob=p)[name].squeeze()
        )
        for p in PROBS
    ]
    np.testing.assert_array_less(
        np.abs(np.quantile(draws, PROBS) - grid.quantile(post, PROBS)),
        4 * np.array(mcse),
    )


@pytest.mark.parametrize("omega", [0.63, 4.0])
def test_absolute_loss_with_uniform_prior_matches_the_grid(cmdstan, omega):
    y = np.random.default_rng(11).gamma(2.0, 1.0, size=50)
    idata = posterior(
        location_program(y, bounds=(0, 8)), omega=omega, chains=4, iter_sampling=2000, seed=12
    )
    theta = np.linspace(0, 8, 8001)
    post = grid.posterior(
        theta, grid.loss_sums(theta, y, loss_function("absolute")), omega
    )

    assert_quantiles_match(idata, "theta", post)
    assert idata.attrs["omega"] == omega and idata.attrs["loss"] == "absolute"
    assert float(idata.constant_data["omega"]) == omega
    np.testing.assert_array_equal(idata.constant_data["weights"], np.ones(50))
    assert float(idata.constant_data["upper_bound"]) == 8.0
    assert int(idata.sample_stats["diverging"].sum()) == 0


USER_LOSS = """\
// Cauchy (Lorentzian) loss log(1 + ((y - f) / s)^2), s = loss_params[1].
real loss(real y, real f, vector loss_params) {
  return log1p(square((y - f) / loss_params[1]));
}
"""


def test_a_loss_added_by_writing_one_file(cmdstan, tmp_path):
    loss_file = tmp_path / "cauchy.stanfunctions"
    loss_file.write_text(USER_LOSS)
    rng = np.random.default_rng(13)
    y = rng.standard_cauchy(size=40) + 1.0
    omega, scale = 1.5, 0.8
    program = linear_program(y, np.ones((len(y), 1)), loss=loss_file, loss_params=[scale],
                             prior="normal", prior_params={"mean": 0.0, "sd": 5.0})
    idata = posterior(
        program,
        omega=omega,
        chains=4,
        iter_sampling=2000,
        seed=14,
    )
    theta = np.linspace(-4, 6, 8001)
    sums = grid.loss_sums(theta, y, lambda y, f: np.log1p(((y - f) / scale) ** 2))
    post = grid.posterior(
        theta,
        sums,
        omega,
        log_prior=log_prior_on_grid(theta, "normal", {"mean": 0.0, "sd": 5.0}),
    )

    assert idata.posterior["beta"].dims == ("chain", "draw", "coef")
    idata.posterior["b"] = idata.posterior["beta"].isel(coef=0)
    assert_quantiles_match(idata, "b", post)
    assert idata.attrs["loss"] == str(loss_file) and idata.attrs["template"] == "linear"


def test_shipped_stan_losses_equal_the_numpy_losses(cmdstan, tmp_path):
    # One program holds every shipped loss, renamed loss_<name>, and evaluates
    # them at points on both sides of their kinks (y in {-1, 1} for the labels).
    y = np.array([-1.0, 1.0, 1.0, -1.0, 1.0, -1.0, 1.0, 0.4])
    f = np.array([-2.3, -0.6, 0.35, 1.7, 2.6, -1.0, 1.0, 1.5])
    functions, outputs, assignments = [], [], []
    for name, loss in LOSSES.items():
        functions.append(
            loss.stan_file.read_text().replace("real loss(", f"real loss_{name}(")
        )
        values = ", ".join(str(v) for v in loss.bind(PARAMS.get(name)))
        params = f"[{values}]'" if values else "rep_vector(0, 0)"
        outputs.append(f"  vector[M] {name};")
        assignments.append(f"    {name}[i] = loss_{name}(y[i], f[i], {params});")
    program = tmp_path / "gibbs_losses_probe.stan"
    program.write_text(
        "functions {\n" + "".join(functions) + "}\n"
        "data {\n  int<lower=1> M;\n  vector[M] y;\n  vector[M] f;\n}\n"
        "generated quantities {\n"
        + "\n".join(outputs)
        + "\n  for (i in 1:M) {\n"
        + "\n".join(assignments)
        + "\n  }\n}\n"
    )
    fit = compile_model(program).sample(
        data={"M": len(y), "y": y, "f": f},
        fixed_param=True,
        chains=1,
        iter_sampling=1,
        show_progress=False,
    )
    for name in LOSSES:
        np.testing.assert_allclose(
            fit.stan_variable(name)[0],
            loss_function(name, PARAMS.get(name))(y, f),
            rtol=1e-5,  # Stan's CSV output has 6 significant digits
            err_msg=name,
        )


def test_a_loss_file_that_does_not_compile_is_named_in_the_error(cmdstan, tmp_path):
    broken = tmp_path / "broken.stanfunctions"
    broken.write_text(
        "real loss(real y, real f, vector loss_params) {\n  return y - ;\n}\n"
    )
    with pytest.raises(CompileError) as error:
        location_program(np.ones(3), loss=broken)
    message = str(error.value)
    assert str(broken) in message and LOSS_SIGNATURE in message
    assert re.search(rf"is {re.escape(str(broken))}, line 2", message)

    misnamed = tmp_path / "misnamed.stanfunctions"
    misnamed.write_text(
        "real my_loss(real y, real f, vector loss_params) {\n  return 0;\n}\n"
    )
    with pytest.raises(CompileError, match=re.escape(LOSS_SIGNATURE)):
        location_program(np.ones(3), loss=misnamed)


def test_quantile_regression_matches_a_two_dimensional_grid(cmdstan):
    """linear.stan with the check loss and N(0, 10^2) priors: the marginal
    quantiles of both coefficients against an exact 400 x 400 grid posterior,
    and the pointwise losses the program's target weights, read in process at
    the draws, against the NumPy check loss."""
    rng = np.random.default_rng(21)
    x = rng.chisquare(2, size=50) - 2
    y = 2 + x + rng.normal(0, 2, size=50)
    X = np.column_stack([np.ones(50), x])
    omega, tau = 0.8, 0.5
    program = linear_program(y, X, loss="check", loss_params={"tau": tau}, prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    idata = posterior(program, omega=omega, chains=4, iter_sampling=2000, seed=3)
    beta = idata.posterior["beta"].values.reshape(-1, 2)
    centre, spread = beta.mean(axis=0), beta.std(axis=0)
    axes = [np.linspace(c - 7 * s, c + 7 * s, 400) for c, s in zip(centre, spread, strict=True)]
    b0, b1 = np.meshgrid(*axes, indexing="ij")
    check = loss_function("check", {"tau": tau})
    total = check(y[:, None, None], b0[None] + b1[None] * x[:, None, None]).sum(axis=0)
    log_post = -omega * total - (b0**2 + b1**2) / (2 * 10**2)
    weights = np.exp(log_post - log_post.max())
    for k, axis in enumerate(axes):
        marginal = weights.sum(axis=1 - k)
        cdf = np.cumsum(marginal) / marginal.sum()
        exact = np.interp(PROBS, cdf, axis)
        draws = idata.posterior["beta"].sel(coef=idata.posterior["coef"][k])
        mcse = [float(arviz_compat.mcse(draws, method="quantile", prob=p)) for p in PROBS]
        np.testing.assert_array_less(np.abs(np.quantile(draws.values, PROBS) - exact),
                                     4 * np.array(mcse) + (axis[1] - axis[0]))
    read = program.losses(program.unconstrain(beta))
    np.testing.assert_allclose(read, check(y[None, :], beta @ X.T), rtol=1e-10, atol=1e-12)
