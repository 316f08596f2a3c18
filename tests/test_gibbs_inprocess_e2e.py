"""Plug-in and Holmes-Walker calibration of a template with a loss given only as its Stan file.

For every shipped loss, the derivatives read off the Stan file in process
(stanflow.gibbs.loss_terms) must give the same estimate, H, J and omega as the
NumPy Loss objects, on the same data and bandwidth.
"""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.gibbs import (
    calibrate_holmes_walker,
    calibrate_plugin,
    linear_program,
    location_program,
)
from stanflow.gibbs.loss_terms import stan_terms
from stanflow.gibbs.plugin import replicate_location_plugin, sensitivity_from_terms
from stanflow.losses import get_loss

pytestmark = pytest.mark.e2e

RNG = np.random.default_rng(8)
Y_REAL = RNG.gamma(2.0, 1.0, size=41)
Y_SIGN = np.where(RNG.random(41) < 0.7, 1.0, -1.0)

CASES = {
    "absolute": (Y_REAL, {}),
    "check": (Y_REAL, {"tau": 0.3}),
    "squared": (Y_REAL, {}),
    "huber": (Y_REAL, {"delta": 0.8}),
    "normal_nll": (Y_REAL, {"sigma": 1.3}),
    "logistic": (Y_SIGN, {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_location_plugin_from_the_stan_file_equals_numpy(cmdstan, name):
    y, params = CASES[name]
    loss = get_loss(name)
    expected = calibrate_plugin(location_program(y, loss=name, loss_params=params),
                                bandwidth=0.4).calibration
    got = calibrate_plugin(
        location_program(y, loss=loss.stan_file, loss_params=list(loss.bind(params))),
        bandwidth=0.4,
    ).calibration
    assert got.attrs["derivatives"] == "stan (in process)"
    assert expected.attrs["derivatives"] == "numpy"
    np.testing.assert_allclose(got["estimate"], expected["estimate"], rtol=1e-7)
    for key in ("sensitivity", "variability", "omega"):
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-6, err_msg=key)


def test_quantile_regression_plugin_and_holmes_walker_from_the_stan_file(cmdstan):
    rng = np.random.default_rng(3)
    X = np.column_stack([np.ones(60), rng.normal(size=60)])
    y = X @ [1.0, 0.5] + rng.standard_t(4, size=60)
    estimate = np.array([0.7, 0.45])
    loss = get_loss("check")
    for calibration in (calibrate_plugin, calibrate_holmes_walker):
        expected = calibration(
            linear_program(y, X, loss="check", loss_params={"tau": 0.25}), estimate=estimate
        ).calibration
        got = calibration(
            linear_program(y, X, loss=loss.stan_file, loss_params=[0.25]), estimate=estimate
        ).calibration
        for key in ("sensitivity", "variability", "omega"):
            np.testing.assert_allclose(got[key], expected[key], rtol=1e-6)


def test_replicates_are_calibrated_one_by_one(cmdstan):
    y = np.random.default_rng(4).normal(size=(3, 21))
    expected = replicate_location_plugin(y, loss="absolute", bandwidth=0.5)
    got = [float(calibrate_plugin(location_program(row, loss=get_loss("absolute").stan_file),
                                  bandwidth=0.5).calibration["omega"]) for row in y]
    np.testing.assert_allclose(got, expected["omega"], rtol=1e-6)


def test_the_hinge_kink_at_y_equals_f_is_measured(cmdstan):
    """NumPy's hinge declares its kinks elsewhere; for y in {-1, 1} Stan finds
    the jump 1 at f = y, and H is that jump times the kernel density at 0."""
    f = np.full(Y_SIGN.shape, 0.4)
    terms = stan_terms(get_loss("hinge").stan_file, np.zeros(0), Y_SIGN, f)
    np.testing.assert_array_equal(terms.jump, 1.0)
    np.testing.assert_array_equal(terms.curvature, 0.0)
    np.testing.assert_array_equal(terms.gradient, np.where(Y_SIGN * 0.4 < 1, -Y_SIGN, 0))
    h = 0.3
    kernel = np.exp(-0.5 * ((Y_SIGN - f) / h) ** 2) / (h * np.sqrt(2 * np.pi))
    H = sensitivity_from_terms(terms, np.ones((len(f), 1)), h)
    assert H[0, 0] == pytest.approx(kernel.mean(), rel=1e-12)


def test_a_users_loss_file_needs_no_python(cmdstan, tmp_path):
    """log-cosh: smooth, H = mean sech^2(y - f), J = var tanh(y - f)."""
    file = tmp_path / "log_cosh.stanfunctions"
    file.write_text(
        "real loss(real y, real f, vector loss_params) {\n"
        "  return log(cosh(y - f));\n}\n"
    )
    group = calibrate_plugin(location_program(Y_REAL, loss=file)).calibration
    theta = float(group["estimate"][0])
    u = Y_REAL - theta
    assert abs(np.tanh(u).sum()) < 1e-6 * len(u)  # the risk's minimiser
    H = np.mean(1 / np.cosh(u) ** 2)
    J = np.var(np.tanh(u))
    assert float(group["sensitivity"][0, 0]) == pytest.approx(H, rel=1e-6)
    assert float(group["variability"][0, 0]) == pytest.approx(J, rel=1e-6)
    assert float(group["omega"]) == pytest.approx(H / J, rel=1e-6)


def test_bad_loss_files_and_parameters_are_clear_errors(cmdstan, tmp_path):
    check = get_loss("check").stan_file
    with pytest.raises(ValueError, match="loss: file not found"):
        location_program(Y_REAL, loss=tmp_path / "missing.stanfunctions")
    with pytest.raises(ValueError, match=r"loss_params\['tau'\] of check.stanfunctions must be finite"):
        location_program(Y_REAL, loss=check, loss_params=[np.nan])
    with pytest.raises(ValueError, match=r"check.stanfunctions takes 1 parameter\(s\) \['tau'\], got 0"):
        location_program(Y_REAL, loss=check)
    with pytest.raises(ValueError, match=r"must be finite and in \(0, 1\), got 1.5"):
        location_program(Y_REAL, loss=check, loss_params=[1.5])


def test_loss_params_of_a_loss_file_given_as_a_string_are_a_type_error(cmdstan):
    with pytest.raises(TypeError, match="loss_params must be a sequence"):
        location_program(Y_REAL, loss=get_loss("check").stan_file, loss_params="0.3")
