"""LCVI utility term in NumPy: against explicit loops and closed forms for a normal q."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.stats import norm

from stanflow.lcvi import utility as utility_module
from stanflow.lcvi.utility import (
    Utility,
    normal_outcomes,
    outcome_base_samples,
    theta_draws,
    utility_at_locations,
    utility_decisions,
    utility_per_theta,
    utility_term,
)
from stanflow.losses import bound_loss

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
    loss = bound_loss("check", tau=0.2)
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


@pytest.mark.parametrize("chunk_elements", [1, 30, 2**20])
def test_utility_at_locations_matches_an_explicit_loop_in_any_chunks(
    monkeypatch, chunk_elements
):
    monkeypatch.setattr(utility_module, "CHUNK_ELEMENTS", chunk_elements)
    rng = np.random.default_rng(4)
    loc, eps_y = rng.normal(size=(6, 3)), rng.standard_normal((4, 3))
    loss, gamma = bound_loss("squared"), 0.7
    expected = np.zeros(6)
    for t in range(6):
        for n in range(3):
            y = loc[t, n] + SD[n] * eps_y[:, n]
            expected[t] += np.log(np.mean(np.exp(-gamma * (y - H[n]) ** 2)))
    got = utility_at_locations(loc, SD, eps_y, H, loss, "exp", gamma, "naive")
    assert got.shape == (6,) and np.allclose(got, expected)


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
        ({"loss": "check"}, r"loss_params: loss 'check' takes \['tau'\]"),
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


@pytest.mark.parametrize(
    "loss, kind, scale",
    [
        (bound_loss("check", tau=0.2), "exp", 0.7),
        (bound_loss("check", tau=0.8), "linear", 30.0),
        (bound_loss("squared"), "exp", 0.3),
        (bound_loss("linex", c=0.5), "linear", 40.0),
        (bound_loss("absolute"), "exp", 1.5),
    ],
)
def test_utility_decisions_maximise_the_naive_term(loss, kind, scale):
    y = outcomes(40, 3, seed=4)
    h = utility_decisions(y, loss, kind, scale, "naive")
    # brute force: the per-point term on a fine grid around each decision
    for n in range(3):
        def term(g, n=n):
            hn = np.tile(H, (g.size, 1))
            hn[:, n] = g
            return np.array([utility_per_theta(y, row, loss, kind, scale, "naive").mean() for row in hn])

        grid = np.linspace(y[:, :, n].min(), y[:, :, n].max(), 601)
        best = grid[np.argmax(term(grid))]
        assert h[n] == pytest.approx(best, abs=2 * (grid[1] - grid[0]))
        assert term(np.array([h[n]]))[0] >= term(grid).max() - 1e-9


def test_utility_decisions_of_the_linearised_term_are_pooled_bayes_decisions():
    y = outcomes(50, 4, seed=5)
    loss = bound_loss("check", tau=0.3)
    h = utility_decisions(y, loss, "linear", 10.0, "linearised")
    assert np.allclose(h, np.quantile(y.reshape(-1, 3), 0.3, axis=0, method="inverted_cdf"), atol=0.05)
    assert np.allclose(h, loss.bayes_decision(y.reshape(-1, 3)))


def test_utility_decisions_fall_back_where_the_naive_m_minus_l_term_is_minus_infinity():
    y = outcomes(20, 2, seed=6) * np.array([1.0, 1.0, 50.0])  # point 2: losses far above M
    loss = bound_loss("squared")
    h = utility_decisions(y, loss, "linear", 5.0, "naive")
    assert np.isfinite(h).all()
    assert h[2] == pytest.approx(y[:, :, 2].mean())  # the pooled Bayes decision
    with pytest.raises(ValueError, match=r"y must have shape \(T, S, N\)"):
        utility_decisions(y[0], loss, "linear", 5.0, "naive")


@pytest.mark.parametrize("S", [1, 2, 5, 6])
def test_outcome_base_samples_are_stratified_and_antithetic(S):
    eps = outcome_base_samples(S, 400, np.random.default_rng(S))
    # one draw in each equal-probability stratum of N(0, 1), in order
    assert np.array_equal(np.floor(norm.cdf(eps) * S), np.tile(np.arange(S)[:, None], 400))
    assert np.allclose(eps, -eps[::-1]) and np.allclose(eps.mean(axis=0), 0, atol=1e-15)
    # over data points, each stratum's draws are uniform within it
    within = norm.cdf(eps[0]) * S
    assert abs(within.mean() - 0.5) < 0.05
    # the squared loss's outcome average is exact: mean_s (d + eps)^2 = d^2 + mean eps^2
    d = 0.7
    assert np.allclose(((d + eps) ** 2).mean(axis=0), d**2 + (eps**2).mean(axis=0))
    assert outcome_base_samples(S, 3, np.random.default_rng(0), stratified=False).shape == (S, 3)


def test_the_utility_term_object_has_the_defaults_of_the_paper():
    assert Utility() == Utility(kind="linear", scale=None, percentile=90.0,
                                estimator="linearised", n_outcomes=5)
    # numbers of any type are kept as the floats and ints the procedures use
    given = Utility(kind="exp", scale=np.float32(0.5), percentile=75, n_outcomes=np.int64(2))
    assert (type(given.scale), type(given.percentile), type(given.n_outcomes)) == (float, float, int)
    with pytest.raises(dataclasses.FrozenInstanceError):
        given.scale = 1.0  # type: ignore[misc]


def test_a_utility_term_takes_its_scale_from_losses_at_its_percentile():
    losses = np.arange(1.0, 101.0)
    assert Utility(percentile=50).scaled(losses) == Utility(percentile=50, scale=50.5)
    assert Utility(kind="exp").scaled(losses).scale == pytest.approx(1 / np.percentile(losses, 90))
    with pytest.raises(ValueError, match="scale: the loop needs the scale M or gamma"):
        Utility().given_scale("the loop")
    assert Utility(scale=3).given_scale("the loop") == 3.0


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"kind": "log"}, r"kind: unknown utility 'log'; known: \['linear', 'exp'\]"),
        ({"scale": -1.0}, r"scale \(M\) must be positive, got -1.0"),
        ({"kind": "exp", "scale": 0.0}, r"scale \(gamma\) must be positive"),
        ({"scale": np.inf}, "scale must be finite"),
        ({"scale": "big"}, "scale must be a real number, got 'big'"),
        ({"percentile": 0}, r"percentile must be in \(0, 100\], got 0"),
        ({"percentile": 100.5}, r"percentile must be in \(0, 100\]"),
        ({"percentile": None}, "percentile must be a real number, got None"),
        ({"estimator": "plain"}, "estimator: unknown estimator 'plain'"),
        ({"n_outcomes": 0}, "n_outcomes must be an integer >= 1, got 0"),
        ({"n_outcomes": 2.0}, "n_outcomes must be an integer >= 1, got 2.0"),
        ({"n_outcomes": True}, "n_outcomes must be an integer >= 1, got True"),
    ],
)
def test_a_utility_term_rejects_bad_fields_naming_them(fields, message):
    with pytest.raises(ValueError, match=message):
        Utility(**fields)
