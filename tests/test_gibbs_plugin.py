"""Plug-in learning rates against closed forms and simulation (the kernels need no compiler;
the programs' tests, marked e2e, load compiled models)."""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest

from stanflow.gibbs import calibrate_plugin, linear_program, location_program, plugin
from stanflow.gibbs.loss_terms import python_terms
from stanflow.gibbs.plugin import replicate_location_plugin
from stanflow.losses import loss_function

# Gamma(2, 1): F(m) = 1 - exp(-m) (1 + m) = 1/2 at m = 1.67835; f(m) = m exp(-m).
MEDIAN = 1.6783469900166608
OMEGA_STAR = 2 * MEDIAN * math.exp(-MEDIAN)  # 2 f(m) = 0.62664


def test_silverman_bandwidth_follows_r_bw_nrd0():
    # x = 1..10: sd = sqrt(55 / 6) = 3.027650, IQR / 1.34 = 4.5 / 1.34 = 3.358209,
    # so the sd wins: 0.9 * 3.027650 * 10^(-1/5) = 1.719286.
    assert plugin.silverman_bandwidth(np.arange(1.0, 11.0)) == pytest.approx(
        1.719286, abs=1e-6
    )
    # A heavy tail: the IQR wins.
    x = np.array([0.0, 1, 2, 3, 100])
    iqr = (3 - 1) / 1.34
    assert plugin.silverman_bandwidth(x) == pytest.approx(0.9 * iqr * 5**-0.2)
    with pytest.raises(ValueError, match="zero spread"):
        plugin.silverman_bandwidth(np.ones(5))


def test_kernel_density_is_an_average_of_normal_densities():
    u = np.array([[0.0, 2.0], [1.0, 1.0]])
    expected = [
        (NormalDist(0, 0.5).pdf(0.7) + NormalDist(2, 0.5).pdf(0.7)) / 2,
        NormalDist(1, 0.5).pdf(0.7),
    ]
    np.testing.assert_allclose(plugin.kernel_density(u, 0.7, 0.5), expected)


def test_location_estimate_minimises_the_total_loss():
    y = np.random.default_rng(1).exponential(size=(3, 101))
    np.testing.assert_allclose(
        plugin.location_estimate(y, loss_function("absolute"), 0.0, 10.0),
        np.median(y, axis=-1),
        atol=1e-8,
    )
    np.testing.assert_allclose(
        plugin.location_estimate(y, loss_function("squared"), y.min(-1), y.max(-1)),
        y.mean(axis=-1),
        atol=1e-8,
    )
    # The check loss is minimised by an order statistic: the 0.25 quantile of 101
    # points is the 26th smallest (25 below, 75 above).
    np.testing.assert_allclose(
        plugin.location_estimate(y, loss_function("check", {"tau": 0.25}), 0.0, 10.0),
        np.sort(y, axis=-1)[:, 25],
        atol=1e-8,
    )


def test_omega_from_matrices_is_h_over_j_in_one_dimension_and_rotation_invariant():
    assert plugin.omega_from_matrices([[0.6]], [[1.5]]) == pytest.approx(0.4)
    H, J = np.diag([1.0, 3.0]), np.diag([2.0, 0.5])
    expected = (1 / 2 + 9 / 0.5) / 4
    assert plugin.omega_from_matrices(H, J) == pytest.approx(expected)
    c, s = math.cos(0.3), math.sin(0.3)
    Q = np.array([[c, -s], [s, c]])
    assert plugin.omega_from_matrices(Q @ H @ Q.T, Q @ J @ Q.T) == pytest.approx(
        expected
    )
    with pytest.raises(ValueError, match="J must be positive definite"):
        plugin.omega_from_matrices(H, np.diag([1.0, 0.0]))
    with pytest.raises(ValueError, match="H must have a positive trace"):
        plugin.omega_from_matrices(-H, J)
    with pytest.raises(ValueError, match="square matrices of one shape"):
        plugin.omega_from_matrices(H, J[:1])


def test_plugin_converges_to_two_f_of_the_median():
    # omega_hat = 2 f_hat(m_hat) / J_hat. Its spread is estimated from the
    # replications; the kernel estimate's bias is about h^2 f''(m) / 2 per f,
    # f''(m) = (m - 2) exp(-m).
    rng = np.random.default_rng(2)
    replications = 100
    spreads = []
    for n in (100, 1000, 10000):
        c = replicate_location_plugin(rng.gamma(2.0, 1.0, size=(replications, n)))
        omega = c["omega"].values
        bias = float(c["bandwidth"].median()) ** 2 * abs(MEDIAN - 2) * math.exp(-MEDIAN)
        tolerance = 4 * omega.std() / math.sqrt(replications) + bias
        assert abs(omega.mean() - OMEGA_STAR) < tolerance, n
        spreads.append(omega.std())
    assert spreads[0] > spreads[1] > spreads[2]
    assert spreads[2] < 0.03


def test_plugin_for_a_quantile_of_exponential_data_is_one_over_tau():
    # Check loss at tau: H = f(q_tau), J = tau (1 - tau); for Exp(1),
    # q_tau = -log(1 - tau) and f(q_tau) = 1 - tau, so omega* = 1 / tau.
    y = np.random.default_rng(3).exponential(size=(20, 20000))
    c = replicate_location_plugin(y, loss="check", loss_params={"tau": 0.25})
    assert float(c["omega"].mean()) == pytest.approx(4.0, rel=0.03)
    np.testing.assert_allclose(
        c["estimate"].values[:, 0], np.quantile(y, 0.25, -1), atol=1e-3
    )


@pytest.mark.e2e
def test_vector_plugin_for_heteroscedastic_least_squares(cmdstan):
    # y = 1 + 2 z + e, e ~ N(0, 1 + z^2), z ~ N(0, 1), x = (1, z), squared loss:
    # H = 2 E[x x'] = 2 I, J = 4 E[(1 + z^2) x x'] = 4 diag(2, 4), so
    # tr(H J^-1 H) / tr(H) = (1/2 + 1/4) / 4 = 3/16.
    rng = np.random.default_rng(4)
    n = 40000
    z = rng.standard_normal(n)
    X = np.column_stack([np.ones(n), z])
    y = 1 + 2 * z + rng.standard_normal(n) * np.sqrt(1 + z**2)
    beta_hat = np.linalg.lstsq(X, y, rcond=None)[0]
    c = calibrate_plugin(linear_program(y, X, loss="squared"), estimate=beta_hat).calibration

    assert float(c["omega"]) == pytest.approx(3 / 16, rel=0.05)
    np.testing.assert_allclose(c["sensitivity"], 2 * np.eye(2), atol=0.05)
    np.testing.assert_allclose(
        c["variability"], np.diag([8.0, 16.0]), rtol=0.1, atol=0.3
    )
    assert list(c["param"].values) == ["beta[1]", "beta[2]"]
    # The same kernels straight from the squared loss's terms.
    terms = python_terms(y, X @ beta_hat, "squared", ())
    np.testing.assert_allclose(c["sensitivity"], plugin.sensitivity_from_terms(terms, X, 1.0))
    np.testing.assert_allclose(c["variability"], plugin.variability_from_terms(terms, X))


def test_replicate_group_layout():
    y = np.random.default_rng(5).gamma(2.0, 1.0, size=(7, 60))
    c = replicate_location_plugin(y, bandwidth=0.3)
    assert set(c.data_vars) == {
        "omega",
        "estimate",
        "sensitivity",
        "variability",
        "bandwidth",
    }
    assert c["omega"].dims == ("replicate",)
    assert c["sensitivity"].dims == ("replicate", "param", "param2")
    assert list(c["param"].values) == ["theta"]
    assert c.attrs["method"] == "plugin" and c.attrs["loss"] == "absolute"
    assert c.attrs["bandwidth_rule"] == "given"
    # For the absolute loss H = 2 f_hat(theta_hat), with the given bandwidth.
    h = 2 * plugin.kernel_density(y, c["estimate"].values[:, 0], 0.3)
    np.testing.assert_allclose(c["sensitivity"].values[:, 0, 0], h)


@pytest.mark.e2e
def test_a_programs_calibration_group(cmdstan):
    y = np.random.default_rng(5).gamma(2.0, 1.0, size=60)
    one = calibrate_plugin(location_program(y, loss="check", loss_params={"tau": 0.5})).calibration
    assert one["omega"].dims == () and json.loads(one.attrs["loss_params"]) == {"tau": 0.5}
    assert one.attrs["curvature"] == "kernel (silverman)" and one.attrs["template"] == "location"
    given = calibrate_plugin(location_program(y), bandwidth=0.3).calibration
    h = 2 * plugin.kernel_density(y, float(given["estimate"][0]), 0.3)
    assert float(given["sensitivity"][0, 0]) == pytest.approx(float(h))
    assert given.attrs["curvature"] == "kernel (given)"
    # The replicates' kernels and one program's give the same rate.
    assert float(replicate_location_plugin(y[None], bandwidth=0.3)["omega"][0]) == \
        pytest.approx(float(given["omega"]), rel=1e-12)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"y": [[1.0]]}, r"y must be a finite \(R, n\) array with n >= 2"),
        ({"y": [[1.0, np.nan]]}, r"y must be a finite \(R, n\) array"),
        ({"loss": "hinge"}, "kinks away from y = f"),
        ({"loss": "check", "loss_params": {"tau": 1.0}}, r"tau'\] must be finite and in"),
    ],
)
def test_bad_replicates_are_rejected_with_the_argument_named(kwargs, message):
    kwargs = {"y": [[0.3, 1.2, 2.0, 4.1]], **kwargs}
    with pytest.raises(ValueError, match=message):
        replicate_location_plugin(**kwargs)


@pytest.mark.e2e
def test_bad_input_of_a_program_is_rejected_with_the_argument_named(cmdstan):
    y = [0.3, 1.2, 2.0, 4.1]
    with pytest.raises(ValueError, match=r"y must be a 1-D array of at least one observation"):
        location_program([])
    with pytest.raises(ValueError, match="y must be finite"):
        location_program([1.0, np.nan])
    with pytest.raises(ValueError, match="kinks away from y = f"):
        calibrate_plugin(location_program(y, loss="hinge"))
    with pytest.raises(ValueError, match=r"tau'\] must be finite and in"):
        location_program(y, loss="check", loss_params={"tau": 1.0})
    with pytest.raises(ValueError, match=r"X must have shape \(4, K\)"):
        linear_program(y, np.ones((3, 1)))
    with pytest.raises(ValueError, match=r"estimate must be finite with 1 value\(s\)"):
        calibrate_plugin(location_program(y), estimate=[1.0, 2.0])
    with pytest.raises(ValueError, match="bounds must have lower < upper"):
        location_program(y, bounds=(2.0, 1.0))
    with pytest.raises(ValueError, match="bandwidth must be a positive number"):
        calibrate_plugin(location_program(y), bandwidth=-0.1)


@pytest.mark.e2e
def test_a_program_of_one_observation_is_rejected_before_the_kernel(cmdstan):
    """A kernel density needs two residuals; the message names the number of observations."""
    with pytest.raises(ValueError, match=r"n >= 2"):
        calibrate_plugin(location_program([1.0]))
