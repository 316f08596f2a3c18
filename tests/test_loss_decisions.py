"""Losses as decision problems judge: values, Bayes decisions against closed forms and brute
force, LCVI's utilities of losses, errors."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from stanflow.lcvi.utility_transform import utility_from_losses, utility_scale
from stanflow.losses import LOSSES, bound_loss

M_PRED, S_PRED = 1.5, 2.0  # normal predictive N(M_PRED, S_PRED^2)


@pytest.fixture(scope="module")
def draws():
    return np.random.default_rng(3).normal(M_PRED, S_PRED, size=(400_000, 1))


def test_values_at_known_points():
    assert np.allclose(bound_loss("squared").value(3.0, 1.0), 4.0)
    assert np.allclose(bound_loss("absolute").value(-1.0, 1.0), 2.0)
    tilted = bound_loss("check", tau=0.2)
    assert np.allclose(tilted.value(np.array([2.0, 0.0]), 1.0), [0.2, 0.8])
    linex = bound_loss("linex", c=1.0)
    assert np.allclose(linex.value(1.0, 1.0), 0.0)
    assert np.allclose(linex.value(0.0, 1.0), np.e - 2)  # over-prediction by 1
    assert np.allclose(linex.value(1.0, 0.0), np.exp(-1.0))  # under-prediction by 1


@pytest.mark.parametrize(
    "name, params, expected",
    [
        ("squared", {}, M_PRED),
        ("absolute", {}, M_PRED),
        ("check", {"tau": 0.2}, M_PRED + S_PRED * norm.ppf(0.2)),
        ("check", {"tau": 0.8}, M_PRED + S_PRED * norm.ppf(0.8)),
        ("linex", {"c": 0.5}, M_PRED - 0.5 * S_PRED**2 / 2),
        ("linex", {"c": -0.3}, M_PRED + 0.3 * S_PRED**2 / 2),
    ],
)
def test_bayes_decisions_of_a_normal_predictive(draws, name, params, expected):
    decision = bound_loss(name, **params).bayes_decision(draws)
    assert decision.shape == (1,)
    assert abs(decision[0] - expected) < 0.03


@pytest.mark.parametrize(
    "name, params",
    [("squared", {}), ("absolute", {}), ("check", {"tau": 0.3}), ("linex", {"c": 0.7})],
)
def test_bayes_decision_minimises_the_empirical_risk(name, params):
    y = np.random.default_rng(5).gamma(2.0, size=(2000, 2))
    loss = bound_loss(name, **params)
    h = loss.bayes_decision(y)
    grid = h[:, None] + np.linspace(-0.5, 0.5, 201)  # (2, G), centred on h
    risk = loss.value(y[:, :, None], grid[None]).mean(axis=0)  # (2, G)
    assert np.all(risk.argmin(axis=1) == 100)


@pytest.mark.parametrize(
    "name, params, expected",
    [
        ("squared", {}, M_PRED),
        ("absolute", {}, M_PRED),
        ("check", {"tau": 0.2}, M_PRED + S_PRED * norm.ppf(0.2)),
        ("linex", {"c": 0.5}, M_PRED - 0.5 * S_PRED**2 / 2),
    ],
)
def test_mixture_decision_of_one_normal_is_the_closed_form(name, params, expected):
    decision = bound_loss(name, **params).mixture_decision(np.array([[M_PRED]]), S_PRED)
    assert decision == pytest.approx([expected], abs=1e-8)


@pytest.mark.parametrize("chunk_elements", [1, 15, 2**20])
def test_mixture_quantile_solves_the_mixture_cdf_in_any_chunks(monkeypatch, chunk_elements):
    monkeypatch.setattr("stanflow.losses.decisions.CHUNK_ELEMENTS", chunk_elements)
    rng = np.random.default_rng(5)
    loc = rng.normal(size=(7, 2, 5))  # 7 mixture components, 2 x 5 decisions
    sd = rng.uniform(0.5, 2.0, size=5)
    h = bound_loss("check", tau=0.8).mixture_decision(loc, sd)
    cdf = norm.cdf((h - loc) / sd).mean(axis=0)
    assert h.shape == (2, 5) and np.allclose(cdf, 0.8, atol=1e-9)


def normal_expected_loss(name, params, mu, s, h):
    """Closed-form E l(Y, h) for Y ~ N(mu, s^2)."""
    z = (h - mu) / s
    if name == "squared":
        return (mu - h) ** 2 + s**2
    if name == "linex":
        c = params["c"]
        return np.exp(c * (h - mu) + c**2 * s**2 / 2) - c * (h - mu) - 1
    tau = params.get("tau", 0.5)
    check = s * (norm.pdf(z) + z * (norm.cdf(z) - tau))
    return 2 * check if name == "absolute" else check


@pytest.mark.parametrize(
    "name, params",
    [("squared", {}), ("absolute", {}), ("check", {"tau": 0.8}), ("linex", {"c": -0.6})],
)
def test_mixture_decision_minimises_the_exact_mixture_risk(name, params):
    rng = np.random.default_rng(9)
    loc = rng.gamma(2.0, size=(7, 3))  # 7 mixture components, 3 decisions
    sd = np.array([0.5, 1.0, 2.0])
    h = bound_loss(name, **params).mixture_decision(loc, sd)
    grid = h[:, None] + np.linspace(-0.01, 0.01, 41)  # (3, 41), centred on h
    risk = normal_expected_loss(
        name, params, loc[:, :, None], sd[:, None], grid[None]
    ).mean(axis=0)
    assert np.all(risk.argmin(axis=1) == 20)


def test_mixture_decision_rejects_bad_input():
    loss = bound_loss("check", tau=0.3)
    with pytest.raises(ValueError, match="sd must be positive"):
        loss.mixture_decision(np.zeros((4, 2)), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match=r"sd must broadcast against shape \(2,\)"):
        loss.mixture_decision(np.zeros((4, 2)), np.ones(3))
    with pytest.raises(ValueError, match="loc must have at least one draw"):
        loss.mixture_decision(np.zeros((0, 2)), 1.0)
    with pytest.raises(ValueError, match="loc must be finite"):
        loss.mixture_decision(np.array([[np.nan]]), 1.0)


def test_utilities_and_their_scale():
    losses = np.arange(1.0, 101.0)
    M = utility_scale(losses, "linear", 90)
    # M is the utility scale (the paper's name), not a constant.
    assert M == pytest.approx(np.percentile(losses, 90))  # noqa: SIM300
    assert utility_scale(losses, "exp", 90) == pytest.approx(1 / M)
    assert np.allclose(utility_from_losses(losses, "linear", M), M - losses)
    assert np.allclose(utility_from_losses(losses, "exp", 0.5), np.exp(-0.5 * losses))


def test_losses_with_a_closed_form_decision_are_those_the_registry_says():
    closed = sorted(n for n, loss in LOSSES.items() if loss.decision is not None)
    assert closed == ["absolute", "check", "linex", "normal_nll", "squared"]
    for name, params in [("squared", {}), ("check", {"tau": 0.5}), ("linex", {"c": 1})]:
        assert bound_loss(name, **params).stan_file.is_file()


def test_normal_nll_decides_the_mean_and_huber_has_no_closed_form(draws):
    decision = bound_loss("normal_nll", sigma=2.0).bayes_decision(draws)
    assert decision == pytest.approx(draws.mean(axis=0), abs=1e-12)
    with pytest.raises(ValueError, match="'huber' has no Bayes decision in closed form"):
        bound_loss("huber", delta=1.0).bayes_decision(draws)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: bound_loss("check", tau=1.2), r"loss_params\['tau'\] must be finite and in \(0, 1\)"),
        (lambda: bound_loss("check", tau=0.0), r"loss_params\['tau'\] must be finite and in \(0, 1\)"),
        (lambda: bound_loss("linex", c=0), r"loss_params\['c'\] must be non-zero"),
        (lambda: bound_loss("tilted", q=0.2), r"unknown loss 'tilted' \(stanflow calls it check"),
        (lambda: bound_loss("hubber"), "loss: unknown loss 'hubber'"),
        (
            lambda: bound_loss("squared", q=0.5),
            r"loss_params: loss 'squared' takes no parameters; missing \[\], unknown \['q'\]",
        ),
        (lambda: bound_loss("check"), r"loss_params: loss 'check' takes \['tau'\]; missing \['tau'\]"),
        (lambda: utility_from_losses([1.0], "linear", -2.0), r"scale \(M\) must be positive"),
        (lambda: utility_from_losses([1.0], "exp", 0.0), r"scale \(gamma\) must be positive"),
        (lambda: utility_from_losses([1.0], "log", 1.0), "utility: unknown utility 'log'"),
        (lambda: utility_scale([1.0], "linear", 0), "percentile must be in"),
        (lambda: utility_scale([-1.0, 0.0], "linear"), "M must be positive"),
        (lambda: bound_loss("squared").bayes_decision(np.empty((0, 3))), "draws must"),
    ],
)
def test_bad_input_is_rejected_naming_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()
