"""Data of the Gibbs templates, the learning rate's check, input checks before compiling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stanflow.gibbs import program, sampling, templates
from stanflow.gibbs.program import check_omega
from stanflow.gibbs.templates import location_program, template_data
from stanflow.models import STAN_DIR

Y = [0.4, 1.9, 2.6]


def test_location_data():
    data = template_data(Y, loss="check", loss_params={"tau": 0.2}, bounds=(0, 8))
    assert data["N"] == 3 and "omega" not in data and "weights" not in data
    np.testing.assert_array_equal(data["y"], Y)
    assert data["n_loss_params"] == 1 and list(data["loss_params"]) == [0.2]
    assert data["n_prior_params"] == 0 and data["prior_params"].shape == (0,)
    assert (data["lower_bound"], data["upper_bound"]) == (0.0, 8.0)
    assert "X" not in data and "K" not in data


def test_linear_data_with_a_loss_file_and_per_coefficient_bounds(tmp_path):
    loss_file = tmp_path / "my_loss.stanfunctions"
    loss_file.write_text("// placeholder\n")
    X = np.column_stack([np.ones(3), Y])
    data = template_data(
        Y,
        loss=loss_file,
        loss_params={"a": 1.0, "b": 3.0},
        prior="normal",
        prior_params={"mean": 0, "sd": 10},
        X=X,
        bounds=([-math.inf, 0.0], math.inf),
    )
    assert data["K"] == 2 and data["X"].shape == (3, 2)
    assert list(data["loss_params"]) == [1.0, 3.0]
    assert list(data["prior_params"]) == [0.0, 10.0]
    assert list(data["lower_bound"]) == [-math.inf, 0.0]
    assert list(data["upper_bound"]) == [math.inf, math.inf]
    assert list(
        template_data(Y, loss=str(loss_file), loss_params=[7])["loss_params"]
    ) == [7]


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"y": []}, ValueError, r"y must be a 1-D array of at least one observation"),
        ({"y": [[1.0, 2.0]]}, ValueError, r"y must be a 1-D array"),
        ({"y": [1.0, math.nan]}, ValueError, "y must be finite"),
        (
            {"loss": "check", "loss_params": {"tau": 1.2}},
            ValueError,
            r"loss_params\['tau'\] must be finite and in \(0, 1\), got 1.2",
        ),
        (
            {"loss": "check", "loss_params": {"tau": -0.1}},
            ValueError,
            r"loss_params\['tau'\] must be finite and in \(0, 1\)",
        ),
        ({"loss": "hubber"}, ValueError, "unknown loss 'hubber'; shipped losses"),
        ({"loss": "nowhere/my.stanfunctions"}, ValueError, "loss: file not found"),
        ({"prior": "normal"}, ValueError, r"prior 'normal' takes \['mean', 'sd'\]"),
        ({"X": np.ones((2, 1))}, ValueError, r"X must have shape \(3, K\)"),
        ({"bounds": (1.0, 1.0)}, ValueError, "bounds must have lower < upper"),
        ({"bounds": 3.0}, ValueError, "bounds must be a pair"),
        (
            {"X": np.ones((3, 2)), "bounds": ([0, 1, 2], 5)},
            ValueError,
            "bounds must be",
        ),
    ],
)
def test_bad_input_is_rejected_naming_the_argument(kwargs, error, message):
    kwargs = {"y": Y, **kwargs}
    with pytest.raises(error, match=message):
        template_data(**kwargs)


@pytest.mark.parametrize(
    "omega, error, message",
    [
        (-1, ValueError, "omega must be finite and >= 0, got -1"),
        (math.inf, ValueError, "omega must be finite and >= 0"),
        (math.nan, ValueError, "omega must be finite and >= 0"),
        (True, TypeError, "omega must be a number, got bool"),
        ("1", TypeError, "omega must be a number, got str"),
    ],
)
def test_a_learning_rate_is_a_finite_number_at_least_zero(omega, error, message):
    with pytest.raises(error, match=message):
        check_omega(omega)
    assert check_omega(0) == 0.0 and check_omega(np.float32(2.5)) == 2.5


def test_a_template_program_checks_its_input_before_compiling(monkeypatch):
    def compile_fails(*args, **kwargs):
        raise AssertionError("compiled before checking the input")

    monkeypatch.setattr(program, "compile_library", compile_fails)
    monkeypatch.setattr(templates.LossProgram, "__init__", compile_fails)
    with pytest.raises(ValueError, match=r"tau'\] must be finite and in \(0, 1\)"):
        location_program(Y, loss="check", loss_params={"tau": 2})
    with pytest.raises(ValueError, match="bounds must have lower < upper"):
        location_program(Y, bounds=(2, 1))


@pytest.mark.e2e
def test_posterior_checks_its_input_before_compiling(cmdstan, monkeypatch):
    """The program's evaluation form loads (a compiled library); the executable that
    ``posterior`` samples must not be compiled or run before omega and the weights
    are checked."""
    prog = location_program(Y, loss="check", loss_params={"tau": 0.2}, bounds=(0, 8))
    data = prog.stan_data(0.5)
    assert data["omega"] == 0.5 and data["N"] == 3
    np.testing.assert_array_equal(data["weights"], np.ones(3))
    np.testing.assert_array_equal(prog.stan_data(2, weights=[0, 1, 3])["weights"], [0, 1, 3])

    def compile_fails(*args, **kwargs):
        raise AssertionError("compiled before checking the input")

    monkeypatch.setattr(prog, "model", compile_fails)
    with pytest.raises(ValueError, match=r"omega must be finite and >= 0, got -2\.0"):
        sampling.posterior(prog, omega=-2.0)
    with pytest.raises(TypeError, match="omega must be a number, got str"):
        sampling.posterior(prog, omega="1")
    with pytest.raises(ValueError, match=r"weights must have shape \(3,\)"):
        sampling.posterior(prog, omega=1.0, weights=np.ones(2))
    with pytest.raises(ValueError, match="weights must be finite and non-negative"):
        sampling.posterior(prog, omega=1.0, weights=[1.0, -1.0, 1.0])
    with pytest.raises(TypeError, match="program must be a LossProgram"):
        sampling.posterior(Y, omega=1.0)


def test_templates_use_the_documented_slots_and_data():
    for template in ("location", "linear"):
        text = (STAN_DIR / "gibbs" / f"{template}.stan").read_text()
        assert "#include loss.stanfunctions" in text
        assert "#include prior.stanfunctions" in text
        for name in (
            "omega",
            "weights",
            "loss_params",
            "prior_params",
            "lower_bound",
            "upper_bound",
        ):
            assert f" {name};" in text
