"""Weights that leave observations out (a bootstrap resample's) evaluated on the others
(stanflow.gibbs.drawn): the closed form, the forms loaded once per resample once it is
asked for often enough, kept within their budget, and programs whose losses use all the
data evaluated whole."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import stanflow.gibbs.drawn as drawn_module
from stanflow.gibbs import LossProgram

STAN = Path(__file__).parent / "stan"
SIGMA, PRIOR_MEAN, PRIOR_SD = 1.5, 0.5, 3.0
N = 400


@pytest.fixture(scope="module")
def program(cmdstan):
    """The power posterior of a normal mean (tests/stan/power_normal.stan), small data."""
    y = np.random.default_rng(7).normal(2.0, 2.0, size=N)
    program = LossProgram(STAN / "power_normal.stan", {
        "N": N, "y": y, "sigma": SIGMA, "prior_mean": PRIOR_MEAN, "prior_sd": PRIOR_SD})
    # Checked (a random half loaded) on first use, before any test counts loads.
    assert program.drawn is not None
    return program, y


@pytest.fixture
def loads(monkeypatch):
    """The observations of each form loaded, in order; a form loaded on its weights' first use."""
    seen: list[int] = []
    real_load = drawn_module.load

    def counted(library_file, data):
        seen.append(int(json.loads(data)["N"]))
        return real_load(library_file, data)

    monkeypatch.setattr(drawn_module, "load", counted)
    monkeypatch.setattr(drawn_module, "LOAD_AFTER", 0)
    return seen


def resample(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.bincount(rng.integers(N, size=N), minlength=N).astype(float)


def closed_form(y, theta, omega, weights):
    """``log prior - omega * sum_i w_i (y_i - theta)^2 / (2 sigma^2) + const`` (every
    constant of the normal kept) and its derivative in theta."""
    prior = stats.norm.logpdf(theta, PRIOR_MEAN, PRIOR_SD)
    log_lik = stats.norm.logpdf(y[None, :], theta[:, None], SIGMA)
    lp = prior + omega * log_lik @ weights
    grad = (-(theta - PRIOR_MEAN) / PRIOR_SD**2
            + omega * (y[None, :] - theta[:, None]) @ weights / SIGMA**2)
    return lp, grad


@pytest.mark.e2e
def test_a_resample_is_evaluated_on_its_drawn_observations_as_the_closed_form(program, loads):
    program, y = program
    assert program.drawn is not None
    counts = resample(1)
    theta = np.random.default_rng(2).normal(2.0, 0.1, size=6)
    u = theta[:, None]
    lp, grad = closed_form(y, theta, 0.8, counts)
    np.testing.assert_allclose(program.log_density(u, 0.8, counts), lp, rtol=1e-12)
    found, gradient = program.log_density_gradient(u, 0.8, counts)
    np.testing.assert_allclose(found, lp, rtol=1e-12)
    np.testing.assert_allclose(gradient[:, 0], grad, rtol=1e-10, atol=1e-10)
    _, loss = program.prior_and_loss(u, counts, jacobian=False)
    np.testing.assert_allclose(loss, -(lp - stats.norm.logpdf(theta, PRIOR_MEAN, PRIOR_SD)) / 0.8,
                               rtol=1e-11)
    assert loads == [int(np.count_nonzero(counts))]  # loaded once, on the drawn observations


@pytest.mark.e2e
def test_the_forms_are_kept_for_reuse_within_their_budget(program, loads, monkeypatch):
    program, y = program
    cut = drawn_module.DrawnForms(program.drawn.library_file, program.data, program.slices)
    monkeypatch.setattr(program, "drawn", cut)
    first, second = resample(11), resample(12)
    u = np.array([[1.9], [2.2]])
    for weights in (first, second, first, 2 * first):  # the same observations: kept
        program.log_density(u, 1.0, weights)
    assert loads == [np.count_nonzero(first), np.count_nonzero(second)]
    monkeypatch.setattr(drawn_module, "KEPT_BYTES", 1)  # room for the last form only
    third = resample(13)
    for weights in (third, first, second, second, first):
        np.testing.assert_allclose(program.log_density(u, 1.0, weights),
                                   closed_form(y, u[:, 0], 1.0, weights)[0], rtol=1e-12)
    assert loads[2:] == [np.count_nonzero(w) for w in (third, first, second, first)]
    few = np.ones(N)
    few[:10] = 0.0  # 2.5 % left out: evaluated whole
    program.log_density(u, 1.0, few)
    assert len(loads) == 6


@pytest.mark.e2e
def test_weights_are_evaluated_whole_until_asked_for_at_enough_points(program, loads,
                                                                     monkeypatch):
    program, y = program
    monkeypatch.setattr(drawn_module, "LOAD_AFTER", 10)
    monkeypatch.setattr(program, "drawn", drawn_module.DrawnForms(
        program.drawn.library_file, program.data, program.slices))
    counts = resample(21)
    u = np.linspace(1.8, 2.2, 6)[:, None]
    expected = closed_form(y, u[:, 0], 1.0, counts)[0]
    for asked in (6, 12, 18):  # loaded at the third call, the first past 10 points
        np.testing.assert_allclose(program.log_density(u, 1.0, counts), expected, rtol=1e-12)
        assert len(loads) == (asked > 12)


@pytest.mark.e2e
def test_the_cut_travels_by_pickle(program):
    program, _ = program
    again = pickle.loads(pickle.dumps(program))
    assert again.drawn is not None
    u, counts = np.array([[1.9], [2.1]]), resample(3)
    np.testing.assert_array_equal(again.log_density(u, 0.8, counts),
                                  program.log_density(u, 0.8, counts))


@pytest.mark.e2e
def test_losses_that_use_all_the_data_are_not_cut(cmdstan):
    """Centred data: the prior's slice passes, the cut would move every loss; evaluated
    whole, and right."""
    y = np.random.default_rng(5).normal(1.0, 1.0, size=N)
    program = LossProgram(STAN / "normal_variants.stan", {"N": N, "y": y, "variant": 1})
    assert program.slices is not None and program.drawn is None
    theta, counts = np.array([0.3, 1.2]), resample(4)
    losses = 0.5 * ((y - y.mean())[None, :] - theta[:, None]) ** 2
    np.testing.assert_allclose(program.log_density(theta[:, None], 0.9, counts, jacobian=False),
                               stats.norm.logpdf(theta, 0, 3.0) - 0.9 * losses @ counts,
                               rtol=1e-12)
