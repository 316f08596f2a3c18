"""The NumPy losses and priors: values, derivatives, parameters, registry; no compiler."""

from __future__ import annotations

import math
import re
from statistics import NormalDist

import numpy as np
import pytest

from stanflow.gibbs import PRIORS, log_prior_on_grid
from stanflow.losses import LOSSES, get_loss, loss_function
from stanflow.models import STAN_DIR

PARAMS = {
    "check": {"tau": 0.3},
    "huber": {"delta": 0.7},
    "normal_nll": {"sigma": 1.5},
    "linex": {"c": 0.7},
}


@pytest.mark.parametrize(
    "name, y, f, expected",
    [
        ("absolute", 1.0, 3.5, 2.5),
        ("check", 1.0, 3.5, 2.5 * 0.7),  # u = -2.5 < 0: (1 - tau) |u|
        ("check", 3.5, 1.0, 2.5 * 0.3),  # u = 2.5 > 0: tau |u|
        ("squared", 1.0, 3.5, 6.25),
        ("huber", 1.0, 1.5, 0.125),  # |u| = 0.5 <= delta: u^2 / 2
        ("huber", 1.0, 3.5, 0.7 * (2.5 - 0.35)),
        ("hinge", -1.0, 0.25, 1.25),
        ("hinge", 1.0, 2.0, 0.0),
        ("logistic", 1.0, 0.0, math.log(2)),
        ("logistic", -1.0, 2.0, math.log1p(math.exp(2))),
        ("normal_nll", 1.0, 3.5, -math.log(NormalDist(3.5, 1.5).pdf(1.0))),
    ],
)
def test_values_at_hand_computed_points(name, y, f, expected):
    assert loss_function(name, PARAMS.get(name))(np.array(y), np.array(f)) == (
        pytest.approx(expected, rel=1e-12)
    )


@pytest.mark.parametrize("name", LOSSES)
def test_derivatives_match_finite_differences_away_from_kinks(name):
    loss = LOSSES[name]
    params = loss.bind(PARAMS.get(name))
    y = np.array([-1.0, 1.0, 1.0, -1.0, 1.0])
    f = np.array([-2.3, -0.6, 0.35, 1.7, 2.6])  # no kink at y = f, y f = 1, |u| = delta
    step = 1e-5

    def value(x):
        return loss.value(y, x, *params)

    gradient = (value(f + step) - value(f - step)) / (2 * step)
    curvature = (value(f + step) - 2 * value(f) + value(f - step)) / step**2
    np.testing.assert_allclose(loss.gradient(y, f, *params), gradient, atol=1e-7)
    np.testing.assert_allclose(loss.curvature(y, f, *params), curvature, atol=1e-4)


@pytest.mark.parametrize(
    "name", [n for n, loss in LOSSES.items() if loss.jump is not None]
)
def test_jump_is_the_step_of_the_gradient_where_f_crosses_y(name):
    loss = LOSSES[name]
    params = loss.bind(PARAMS.get(name))
    y = np.array([0.4])
    step = loss.gradient(y, y + 1e-9, *params) - loss.gradient(y, y - 1e-9, *params)
    assert step[0] == pytest.approx(loss.jump, abs=1e-6)


@pytest.mark.parametrize(
    "name, params, message",
    [
        ("check", {"tau": 1.5}, r"loss_params\['tau'\] must be finite and in \(0, 1\)"),
        ("check", {"tau": 0.0}, r"loss_params\['tau'\] must be finite and in \(0, 1\)"),
        ("check", {"tau": "a"}, r"loss_params\['tau'\] must be a real number"),
        ("check", None, r"loss 'check' takes \['tau'\]; missing \['tau'\]"),
        (
            "huber",
            {"delta": -1},
            r"loss_params\['delta'\] must be finite and in \(0, inf\)",
        ),
        (
            "absolute",
            {"tau": 0.5},
            r"loss 'absolute' takes no parameters; .*unknown \['tau'\]",
        ),
        ("median", None, r"unknown loss 'median'; shipped losses: absolute, check"),
    ],
)
def test_bad_loss_parameters_are_rejected_naming_them(name, params, message):
    with pytest.raises(ValueError, match=message):
        loss_function(name, params)


def test_parameters_are_given_by_name_or_in_declared_order():
    check = get_loss("check")
    assert check.bind([0.5]) == check.bind({"tau": 0.5}) == (0.5,)
    with pytest.raises(TypeError, match="loss_params must be a sequence of numbers or a mapping"):
        check.bind(0.5)
    with pytest.raises(ValueError, match=r"loss_params: loss 'check' takes 1 parameter\(s\)"):
        check.bind([0.5, 0.1])


def test_every_shipped_stan_file_is_registered_with_the_documented_signature():
    files = {p.stem for p in (STAN_DIR / "losses").glob("*.stanfunctions")}
    assert files == set(LOSSES)
    for loss in LOSSES.values():
        text = loss.stan_file.read_text()
        assert re.search(
            r"^real loss\(real y, real f, vector loss_params\) \{", text, re.MULTILINE
        )
    files = {p.stem for p in (STAN_DIR / "priors").glob("*.stanfunctions")}
    assert files == set(PRIORS)
    for prior in PRIORS.values():
        text = prior.stan_file.read_text()
        assert re.search(
            r"^real log_prior\(vector theta, vector prior_params\) \{",
            text,
            re.MULTILINE,
        )


def test_prior_log_densities():
    theta = np.array([-1.0, 0.5, 3.0])
    np.testing.assert_allclose(
        log_prior_on_grid(theta, "normal", {"mean": 0.5, "sd": 2.0}),
        [math.log(NormalDist(0.5, 2.0).pdf(t)) for t in theta],
    )
    np.testing.assert_array_equal(log_prior_on_grid(theta, "uniform"), 0.0)
    with pytest.raises(ValueError, match=r"prior_params\['sd'\] must be finite and in"):
        log_prior_on_grid(theta, "normal", {"mean": 0.0, "sd": 0.0})
    with pytest.raises(
        ValueError, match="unknown prior 'beta'; shipped priors: uniform, normal"
    ):
        log_prior_on_grid(theta, "beta")
