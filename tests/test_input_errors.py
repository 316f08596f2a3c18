"""Bad input is refused before anything compiles, naming the user's field or file.

One binding of loss parameters for every method (a sequence in the declared
order or a mapping by name, for shipped losses and files alike); the WBB
drivers' settings checked before any solve or compile, with one rule for
``B``; a q-path target's data checked for NaN; a loss or penalty file with the
wrong signature named with the signature its slot needs. "Before any compile"
is asserted by making every compile entry point fail the test if called.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import stanflow.gibbs.program
import stanflow.lcvi.numeric_decisions
import stanflow.lcvi.program
import stanflow.models.libraries
import stanflow.wbb.bootstrap
import stanflow.wbb.stan_optimize
from stanflow import gibbs, lcvi
from stanflow.gibbs.plugin import replicate_location_plugin
from stanflow.gibbs.templates import LOSS_SIGNATURE, template_data
from stanflow.lcvi.numeric_decisions import (
    bayes_decisions,
    check_loss_params,
    loss_values,
    mixture_decisions,
)
from stanflow.lcvi.problem import normal_mean
from stanflow.losses import functions, get_loss, loss_function, loss_parameters
from stanflow.models import CompileError, program_path
from stanflow.qpaths.stan_density import stan_log_density
from stanflow.signatures import PENALTY
from stanflow.wbb import GlmProblem, wbb_lasso, wbb_ridge, wbb_trend_filter
from stanflow.wbb.inprocess import WeightedGlm, wbb_glm_inprocess
from stanflow.wbb.stan_optimize import wbb_glm

RNG = np.random.default_rng(3)
Y = RNG.normal(size=25)
X = RNG.normal(size=(25, 2))

TAU_LOSS = """// A check loss of mine.
// params: tau in (0, 1)
real loss(real y, real f, vector loss_params) {
  real u = y - f;
  return loss_params[1] * u - fmin(u, 0);
}
"""
DATA_Y_LOSS = """// params: none
real loss(data real y, real f, vector loss_params) {
  return abs(y - f);
}
"""
TWO_ARGUMENT_LOSS = """// params: none
real loss(real y, real f) {
  return abs(y - f);
}
"""
ONE_ARGUMENT_PENALTY = """// params: none
real penalty(vector beta) {
  return dot_self(beta);
}
"""


class Compiled(AssertionError):
    """Raised by the patched compile functions: something compiled."""


@pytest.fixture
def no_compile(monkeypatch):
    """Every compile entry point fails the test if called."""

    def compiled(*args, **kwargs):
        raise Compiled(f"a compile was started: {args[:1]}")

    monkeypatch.setattr(stanflow.models.libraries, "compile_library", compiled)
    monkeypatch.setattr(stanflow.gibbs.program, "compile_library", compiled)
    monkeypatch.setattr(stanflow.gibbs.program, "compile_model", compiled)
    monkeypatch.setattr(stanflow.wbb.stan_optimize, "compile_model", compiled)
    monkeypatch.setattr(stanflow.lcvi.numeric_decisions, "compile_library", compiled)
    monkeypatch.setattr(stanflow.lcvi.program, "compile_library", compiled)
    monkeypatch.setattr(stanflow.lcvi.program, "compile_model", compiled)


def _write(tmp_path, name: str, code: str):
    path = tmp_path / f"{name}.stanfunctions"
    path.write_text(code)
    return path


# -- one binding of loss parameters ---------------------------------------------


def test_every_loss_takes_its_parameters_in_order_or_by_name(tmp_path):
    mine = _write(tmp_path, "mine", TAU_LOSS)
    for loss in ("check", get_loss("check"), get_loss("check").stan_file, mine, str(mine)):
        assert loss_parameters(loss, [0.25]) == (0.25,), loss
        assert loss_parameters(loss, {"tau": 0.25}) == (0.25,), loss
        assert loss_parameters(loss, np.array([0.25])) == (0.25,), loss


@pytest.mark.parametrize(
    "params, error, message",
    [
        ([0.25, 0.5], ValueError, r"loss_params: .*takes 1 parameter\(s\) \['tau'\], got 2"),
        ({"q": 0.25}, ValueError,
         r"loss_params: .*takes \['tau'\]; missing \['tau'\], unknown \['q'\]"),
        ([1.5], ValueError, r"loss_params\['tau'\].* must be finite and in \(0, 1\), got 1.5"),
        ("0.25", TypeError, "loss_params must be a sequence of numbers or a mapping"),
        (0.25, TypeError, "loss_params must be a sequence of numbers or a mapping"),
    ],
)
def test_bad_loss_parameters_name_the_argument_for_names_and_files(
    tmp_path, params, error, message
):
    for loss in ("check", _write(tmp_path, "mine", TAU_LOSS)):
        with pytest.raises(error, match=message):
            loss_parameters(loss, params)


def test_gibbs_templates_bind_a_shipped_loss_in_order_or_by_name(no_compile):
    by_order = template_data(Y, loss="check", loss_params=[0.3], prior="normal",
                             prior_params=[0.0, 2.0])
    by_name = template_data(Y, loss="check", loss_params={"tau": 0.3}, prior="normal",
                            prior_params={"mean": 0.0, "sd": 2.0})
    for data in (by_order, by_name):
        assert data["loss_params"].tolist() == [0.3]
        assert data["prior_params"].tolist() == [0.0, 2.0]
    with pytest.raises(ValueError, match=r"prior_params: prior 'normal' takes 2 parameter"):
        template_data(Y, prior="normal", prior_params=[1.0])


def test_a_gibbs_program_takes_a_list_and_evaluates_the_loss_it_names(cmdstan):
    program = gibbs.location_program(Y, loss="check", loss_params=[0.3])
    f = np.linspace(-1, 1, 5)[:, None]
    np.testing.assert_allclose(program.loss_values()(Y, f), functions.check(Y, f, 0.3))
    same = gibbs.location_program(Y, loss="check", loss_params={"tau": 0.3})
    assert program.describe()["loss_params"] == same.describe()["loss_params"]
    assert float(gibbs.calibrate_plugin(program).calibration.omega) == pytest.approx(
        float(gibbs.calibrate_plugin(same).calibration.omega), rel=1e-12)


def test_the_replicated_plugin_and_lcvi_bind_the_same_way(tmp_path):
    y = RNG.normal(size=(3, 40))
    by_order = replicate_location_plugin(y, "check", [0.7])
    by_name = replicate_location_plugin(y, "check", {"tau": 0.7})
    np.testing.assert_array_equal(by_order.omega, by_name.omega)
    mine = _write(tmp_path, "mine", TAU_LOSS)
    assert check_loss_params(mine, [0.2]) == check_loss_params(mine, {"tau": 0.2}) == (0.2,)


def test_wbb_in_process_takes_a_mapping_and_evaluates_the_loss_it_names(cmdstan):
    problem = GlmProblem(X, Y, 0.0, loss="check", loss_params={"tau": 0.5})
    assert problem.loss_params == (0.5,)
    beta, w = np.array([0.3, -0.2]), RNG.exponential(size=len(Y))
    value, _ = WeightedGlm(problem).objective(beta, w, 1.0)
    assert value == pytest.approx(np.sum(w * functions.check(Y, X @ beta, 0.5)), rel=1e-12)
    listed = WeightedGlm(GlmProblem(X, Y, 0.0, loss="check", loss_params=[0.5]))
    assert listed.objective(beta, w, 1.0)[0] == value


def test_wbb_through_cmdstan_binds_before_compiling_and_solves_with_the_vector(
    no_compile, monkeypatch
):
    with pytest.raises(ValueError, match=r"loss_params: loss 'check' takes \['tau'\]"):
        GlmProblem(X, Y, 1.0, loss="check", loss_params={"q": 0.5})
    seen = {}

    class Solved(Exception):
        pass

    def solver(model, problem, *args, **kwargs):
        seen["problem"] = problem
        raise Solved

    monkeypatch.setattr(stanflow.wbb.stan_optimize, "glm_model", lambda loss, penalty: None)
    monkeypatch.setattr(stanflow.wbb.stan_optimize, "optimize_draws", solver)
    with pytest.raises(Solved):
        wbb_glm(GlmProblem(X, Y, 1.0, loss="check", loss_params={"tau": 0.5},
                           penalty="pseudo_huber", penalty_params={"delta": 0.1}), 2, seed=1)
    assert seen["problem"].loss_params == (0.5,) and seen["problem"].penalty_params == (0.1,)


# -- the WBB drivers: every check before any solve or compile --------------------


@pytest.mark.parametrize(
    "settings, error, message",
    [
        ({"B": 0}, ValueError, r"^B must be an integer >= 1, got 0$"),
        ({"B": -5}, ValueError, r"^B must be an integer >= 1, got -5$"),
        ({"B": 2.5}, ValueError, r"^B must be an integer >= 1, got 2.5$"),
        ({"seed": -1}, ValueError, r"^seed must be an integer >= 0, got -1$"),
        ({"prior": "flat"}, ValueError, "prior must be one of"),
        ({"batch_size": 0}, ValueError, r"batch_size must be an integer >= 1, got 0"),
        ({"on_failure": "ignore"}, ValueError, "on_failure must be one of"),
    ],
)
def test_wbb_settings_are_checked_before_any_compile_or_solve(
    no_compile, monkeypatch, settings, error, message
):
    def solved(*args, **kwargs):
        raise Compiled("a solve was started")

    for name in ("solve_lasso", "solve_ridge", "trend_filter"):
        monkeypatch.setattr(stanflow.wbb.bootstrap, name, solved)
    arguments = {"B": 2, "seed": 1, **settings}
    B = arguments.pop("B")
    calls = [
        lambda: wbb_glm_inprocess(GlmProblem(X, Y, 1.0), B, **arguments),
        lambda: wbb_glm(GlmProblem(X, Y, 1.0), B, **arguments),
        lambda: wbb_lasso(X, Y, 1.0, B, **arguments),
        lambda: wbb_ridge(X, Y, 1.0, B, **arguments),
        lambda: wbb_trend_filter(Y, 1.0, 1, B, **arguments),
    ]
    for call in calls:
        with pytest.raises(error, match=message):
            call()


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"feature_names": ["a"]}, "feature_names must have 2 entries, got 1"),
        ({"loss_params": [1.0]}, r"loss_params: loss 'squared' takes no parameters, got 1"),
        ({"penalty": "pseudo_huber"}, r"penalty_params: pseudo_huber.stanfunctions takes 1"),
        ({"loss": "pinball"}, "loss: unknown loss 'pinball' .*stanflow calls it check"),
    ],
)
def test_a_wbb_glm_problem_is_checked_when_it_is_made(no_compile, arguments, message):
    with pytest.raises(ValueError, match=message):
        GlmProblem(X, Y, 1.0, **arguments)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"gtol": 0.0}, "gtol must be finite and > 0"),
        ({"max_iter": 0}, "max_iter must be an integer >= 1"),
    ],
)
def test_wbb_in_process_checks_its_solver_options_before_compiling(no_compile, arguments, message):
    with pytest.raises(ValueError, match=message):
        wbb_glm_inprocess(GlmProblem(X, Y, 1.0), 2, seed=1, **arguments)


# -- Gibbs bounds --------------------------------------------------------------------


def test_reversed_bounds_are_named_before_any_compile(no_compile):
    with pytest.raises(ValueError, match=r"bounds must have lower < upper, got \(8, 0\)"):
        gibbs.location_program(Y, bounds=(8, 0))


def test_a_box_that_misses_the_data_is_named_as_bounds(cmdstan):
    program = gibbs.location_program(Y, bounds=(8.0, 8.0 + 1e-6))  # every y below it
    with pytest.raises(ValueError, match=r"bounds: the risk minimiser .* lies on the boundary"):
        gibbs.calibrate_gpc(program, backend=gibbs.GridBackend(), B=20)


# -- q-path targets --------------------------------------------------------------


def test_nan_in_a_target_s_data_is_named_before_any_compile(no_compile, tmp_path):
    X_nan = X.copy()
    X_nan[3, 1] = np.nan
    data = {"n": len(Y), "d": 2, "X": X_nan, "y": np.sign(Y), "prior_sd": 1.0}
    source = program_path("qpaths/logistic_regression")
    message = r"data: field 'X' holds NaN \(1 value\(s\), first at index \[3, 1\]\)"
    with pytest.raises(ValueError, match=message):
        stan_log_density(source, data)
    plain = {**data, "y": data["y"].tolist(),
             "X": [[None if np.isnan(v) else v for v in row] for row in X_nan.tolist()]}
    text = json.dumps(plain).replace("null", "NaN")  # Stan's JSON spells it NaN
    with pytest.raises(ValueError, match=message):
        stan_log_density(source, text)
    file = tmp_path / "data.json"
    file.write_text(text)
    with pytest.raises(ValueError, match=message):
        stan_log_density(source, file)
    with pytest.raises(ValueError, match="data: no such file"):
        stan_log_density(source, tmp_path / "missing.json")


# -- slot files with the wrong signature ----------------------------------------


@pytest.mark.parametrize("code", [DATA_Y_LOSS, TWO_ARGUMENT_LOSS], ids=["data-y", "two-args"])
def test_a_wrong_loss_signature_names_the_file_before_any_compile(
    cmdstan, no_compile, tmp_path, code
):
    file = _write(tmp_path, "wrong", code)
    calls = [
        lambda: gibbs.location_program(Y, loss=file, bounds=(-3, 3)),
        lambda: gibbs.linear_program(Y, X, loss=file),
        lambda: loss_function(file),
        lambda: GlmProblem(X, Y, 1.0, loss=file),  # both WBB GLM drivers take this problem
    ]
    for call in calls:
        with pytest.raises(CompileError) as error:
            call()
        text = str(error.value)
        assert f"loss file {file}; it must define `{LOSS_SIGNATURE}`" in text


def test_a_wrong_penalty_signature_names_the_file_before_any_compile(
    cmdstan, no_compile, tmp_path
):
    file = _write(tmp_path, "wrong_penalty", ONE_ARGUMENT_PENALTY)
    with pytest.raises(CompileError, match=f"penalty file {file}; it must define") as error:
        GlmProblem(X, Y, 1.0, penalty=file)
    assert PENALTY.signature in str(error.value)


@pytest.mark.parametrize("code", [DATA_Y_LOSS, TWO_ARGUMENT_LOSS], ids=["data-y", "two-args"])
def test_lcvi_names_a_wrong_loss_signature_before_any_compile(
    cmdstan, no_compile, tmp_path, monkeypatch, code
):
    monkeypatch.chdir(tmp_path)
    file = _write(tmp_path, "my_bad_loss", code)
    program = normal_mean(Y[:5], sigma=1.0)
    draws = RNG.normal(size=(20, 3))
    calls = [
        lambda: lcvi.run_lcvi(program, "my_bad_loss.stanfunctions"),  # as a user types it
        lambda: lcvi.stan_loss(file),
        lambda: bayes_decisions(file, draws),
        lambda: mixture_decisions(file, draws, np.ones(3)),
        lambda: loss_values(file, draws, draws),
        # a loss of one's own with a Python decision rule: bound without stan_loss
        lambda: program.bind(dataclasses.replace(get_loss("absolute").with_params(),
                                                 stan_file=file)),
    ]
    for call in calls:
        with pytest.raises(CompileError) as error:
            call()
        assert f"loss file {file}; it must define `{LOSS_SIGNATURE}`" in str(error.value)
    assert LOSS_SIGNATURE == "real loss(real y, real f, vector loss_params)"
