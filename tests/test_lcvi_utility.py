"""LCVI utility term in NumPy: against explicit loops and closed forms for a normal q."""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.lcvi.losses import get_loss
from stanflow.lcvi.utility import (
    normal_outcomes,
    theta_draws,
    utility_per_theta,
    utility_term,
)

MU = np.array([0.5, -1.0, 2.0])  # variational means
SIGMA = np.array([0.7, 1.2, 0.4])  # variational sds
SD = np.array([1.0, 0.5, 2.0])  # likelihood sds: y_n | theta ~ N(theta_n, SD_n^2)
H = np.array([0.0, -0.5, 3.0])  # decisions


def outcomes(T, S, seed=0):
    rng = np.random.default_rng(seed)
    theta = theta_draws(MU, SIGMA, rng.standard_normal((T, 3)))
    return normal_outcomes(theta, SD, rng.standard_normal((S, 3)))


def test_matches_an_explicit_loop_over_draws_and_data_points():
    y = outcomes(5, 7)
    loss = get_loss("tilted", q=0.2)
    M = 3.0
    expected = np.zeros(5)
    for t in range(5):
        for n in range(3):
            u = [M - loss.value(y[t, s, n], H[n]) for s in range(7)]
            expected[t] += np.log(np.mean(u))
    got = utility_per_theta(y, H, loss, "linear", M, "naive")
    assert np.allclose(got, expected)
    assert utility_term(y, H, loss, "linear", M, "naive") == pytest.approx(
        expected.mean()
    )


def test_linearised_squared_loss_matches_its_closed_form():
    # E_q E_y (y - h)^2 = (mu - h)^2 + sigma^2 + sd^2
    M, T, S = 10.0, 2000, 1000
    expected = -np.sum((MU - H) ** 2 + SIGMA**2 + SD**2) / M
    variance = (
        np.sum(2 * SD**4) / S + np.sum(2 * SIGMA**4 + 4 * (MU - H) ** 2 * SIGMA**2) / T
    )
    tolerance = 4 * np.sqrt(variance) / M
    y = outcomes(T, S)
    got = utility_term(y, H, "squared", "linear", M, "linearised")
    assert got == pytest.approx(expected, abs=tolerance)
    assert utility_term(y, H, "squared", "exp", 1 / M, "linearised") == pytest.approx(
        got
    )


def test_naive_exponential_squared_loss_matches_its_closed_form():
    # log E_y exp(-g (y - h)^2) = -log(1 + 2 g sd^2) / 2 - g (theta - h)^2 / (1 + 2 g sd^2)
    g = 0.2
    a = 1 + 2 * g * SD**2
    expected = np.sum(-0.5 * np.log(a) - g * ((MU - H) ** 2 + SIGMA**2) / a)
    got = utility_term(outcomes(4000, 400), H, "squared", "exp", g, "naive")
    assert got == pytest.approx(expected, abs=0.02)


def test_naive_linear_utility_is_minus_infinity_when_m_is_exceeded():
    y = outcomes(2, 5)
    assert np.all(
        utility_per_theta(y, H + 100, "squared", "linear", 1.0, "naive") == -np.inf
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"h": np.zeros(2)}, r"h \(decisions\) must have shape \(3,\)"),
        ({"h": np.zeros((3, 1))}, r"h \(decisions\) must have shape"),
        ({"y": np.zeros((4, 3))}, r"y must have shape \(T, S, N\)"),
        ({"estimator": "exact"}, "estimator: unknown estimator 'exact'"),
        ({"scale": -1.0}, r"scale \(M\) must be positive"),
        ({"loss": "tilted"}, "params: loss 'tilted' takes"),
    ],
)
def test_bad_input_is_rejected_naming_the_argument(kwargs, message):
    args = {
        "y": outcomes(2, 3),
        "h": H,
        "loss": "squared",
        "kind": "linear",
        "scale": 5.0,
        "estimator": "naive",
    } | kwargs
    with pytest.raises(ValueError, match=message):
        utility_per_theta(**args)


def test_draw_helpers_check_shapes():
    with pytest.raises(ValueError, match="eps_theta must have shape"):
        theta_draws(MU, SIGMA, np.zeros((4, 2)))
    with pytest.raises(ValueError, match="sigma must be positive"):
        theta_draws(MU, -SIGMA, np.zeros((4, 3)))
    with pytest.raises(ValueError, match="loc, scale, eps_y must have shapes"):
        normal_outcomes(np.zeros((4, 3)), SD, np.zeros((5, 2)))
