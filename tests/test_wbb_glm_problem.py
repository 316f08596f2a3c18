"""stanflow.wbb.GlmProblem, the smooth WBB problem both GLM drivers take first: every field
checked when it is made (errors name the field), kept frozen and read-only, and the
drivers refusing anything else before they compile or solve."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from stanflow.models import CompileError
from stanflow.wbb import GlmProblem

RNG = np.random.default_rng(11)
X = RNG.normal(size=(20, 3))
Y = X @ np.r_[1.0, 0.0, -0.5] + RNG.normal(size=20)

ONE_ARGUMENT_PENALTY = """// params: none
real penalty(vector beta) {
  return dot_self(beta);
}
"""


def test_defaults_and_bound_parameters():
    problem = GlmProblem(X, Y, 2)
    assert (problem.lam, problem.loss, problem.penalty) == (2.0, "squared", "ridge")
    assert type(problem.lam) is float
    assert problem.fit_intercept is False
    assert problem.loss_params == () and problem.penalty_params == ()
    assert problem.feature_names is None and problem.features == [0, 1, 2]
    assert (problem.n, problem.n_features) == (20, 3)
    assert problem.loss_file.name == "squared.stanfunctions"
    assert problem.penalty_file.name == "ridge.stanfunctions"
    assert problem.describe() == {"lam": 2.0, "loss": "squared", "penalty": "ridge"}
    by_name = GlmProblem(X, Y, 1.0, loss="check", loss_params={"tau": 0.3},
                         penalty="pseudo_huber", penalty_params={"delta": 0.5},
                         fit_intercept=np.True_, feature_names=np.array(["a", "b", "c"]))
    assert by_name.loss_params == (0.3,) and by_name.penalty_params == (0.5,)
    assert by_name.fit_intercept is True
    assert by_name.features == ["a", "b", "c"]
    in_order = GlmProblem(X, Y, 1.0, loss="check", loss_params=[0.3])
    assert in_order.loss_params == by_name.loss_params


def test_the_data_are_a_read_only_copy_and_the_fields_frozen():
    X_mine, y_mine = X.copy(), Y.tolist()
    problem = GlmProblem(X_mine, y_mine, 1.0)
    X_mine[0, 0] = 99.0  # changing yours afterwards does not change the problem
    assert problem.X[0, 0] == X[0, 0] and X_mine.flags.writeable
    np.testing.assert_array_equal(problem.y, Y)
    assert problem.X.dtype == problem.y.dtype == np.float64
    with pytest.raises(ValueError, match="read-only"):
        problem.X[0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        problem.y[0] = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        problem.lam = 3.0
    assert "X=" not in repr(problem) and "lam=1.0" in repr(problem)


def test_a_changed_copy_is_checked_again():
    problem = GlmProblem(X, Y, 1.0, penalty="pseudo_huber", penalty_params=[0.5])
    wider = dataclasses.replace(problem, lam=4)
    assert wider.lam == 4.0 and wider.penalty_params == (0.5,)
    np.testing.assert_array_equal(wider.X, problem.X)
    with pytest.raises(ValueError, match="lam must be finite and >= 0"):
        dataclasses.replace(problem, lam=-1.0)
    with pytest.raises(ValueError, match=r"penalty_params\['delta'\] of pseudo_huber"):
        dataclasses.replace(problem, penalty_params=[np.inf])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"X": np.full((20, 3), np.nan)}, ValueError, "X contains NaN"),
        ({"X": np.ones(20)}, ValueError, r"X must be 2-dimensional \(n, p\)"),
        ({"y": np.ones(5)}, ValueError, "X has 20 rows but y has 5 entries"),
        ({"y": np.full(20, np.inf)}, ValueError, "y contains NaN or infinite values"),
        ({"lam": -1.0}, ValueError, "lam must be finite and >= 0, got -1.0"),
        ({"lam": np.nan}, ValueError, "lam must be finite and >= 0"),
        ({"lam": "1"}, TypeError, "lam must be a real number, got '1'"),
        ({"lam": True}, TypeError, "lam must be a real number, got True"),
        ({"fit_intercept": 1}, TypeError, "fit_intercept must be True or False, got 1"),
        ({"fit_intercept": "yes"}, TypeError, "fit_intercept must be True or False"),
        ({"feature_names": ["a"]}, ValueError, "feature_names must have 3 entries, got 1"),
        ({"feature_names": "abc"}, TypeError, "feature_names must be a sequence of names, got 'abc'"),
        ({"loss_params": [np.inf]}, ValueError,
         r"loss_params: loss 'squared' takes no parameters, got 1"),
        ({"loss": "check"}, ValueError, r"loss_params: .*check"),
        ({"loss": "check", "loss_params": {"q": 0.5}}, ValueError,
         r"loss_params: loss 'check' takes \['tau'\]"),
        ({"loss": "pinball"}, ValueError, "loss: unknown loss 'pinball' .*stanflow calls it check"),
        ({"loss": "/no/such/loss.stanfunctions"}, ValueError,
         "loss: file not found: /no/such/loss.stanfunctions"),
        ({"penalty": "pseudo_huber"}, ValueError,
         r"penalty_params: pseudo_huber.stanfunctions takes 1 parameter\(s\) \['delta'\], got 0"),
        ({"penalty": "pseudo_huber", "penalty_params": [np.inf]}, ValueError,
         r"penalty_params\['delta'\] of pseudo_huber.stanfunctions must be finite"),
        ({"penalty": "pseudo_huber", "penalty_params": ["a"]}, ValueError,
         r"penalty_params\['delta'\] of pseudo_huber.stanfunctions must be a real number"),
        ({"penalty": "lasso"}, ValueError,
         r"penalty: no 'lasso' in stan/wbb/penalties \(shipped: pseudo_huber, ridge\)"),
        ({"penalty": "/no/such/penalty.stanfunctions"}, ValueError,
         "penalty: file not found: /no/such/penalty.stanfunctions"),
    ],
)
def test_every_bad_field_is_named(kwargs, error, message):
    call = {"X": X, "y": Y, "lam": 1.0, **kwargs}
    with pytest.raises(error, match=message):
        GlmProblem(call.pop("X"), call.pop("y"), call.pop("lam"), **call)


def test_the_problem_fields_are_keyword_only_after_lam():
    with pytest.raises(TypeError):
        GlmProblem(X, Y, 1.0, "logistic")


def test_a_penalty_file_with_the_wrong_signature_is_named_when_the_problem_is_made(
    cmdstan, tmp_path
):
    file = tmp_path / "wrong_penalty.stanfunctions"
    file.write_text(ONE_ARGUMENT_PENALTY)
    with pytest.raises(CompileError, match=f"penalty file {file}; it must define"):
        GlmProblem(X, Y, 1.0, penalty=file)


def test_the_drivers_take_a_problem_and_nothing_else():
    from stanflow.wbb.inprocess import WeightedGlm, wbb_glm_inprocess
    from stanflow.wbb.stan_optimize import optimize_draws, wbb_glm

    message = "problem must be a GlmProblem, got tuple"
    loose = (X, Y, 1.0)
    for call in (
        lambda: wbb_glm(loose, 2, seed=1),
        lambda: wbb_glm_inprocess(loose, 2, seed=1),
        lambda: optimize_draws(None, loose, np.ones(20)),
        lambda: WeightedGlm(loose),
    ):
        with pytest.raises(TypeError, match=message):
            call()
