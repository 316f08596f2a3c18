"""A loss program's data cut by observation (stanflow.gibbs.slices): which data
can be cut, the chunks, and the sliced evaluation against closed forms; programs
whose data cannot be cut are evaluated whole, rightly."""

from __future__ import annotations

import itertools
import pickle
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from stanflow.gibbs import LossProgram
from stanflow.gibbs.slices import (
    CHUNK_BYTES,
    ObservationLayout,
    chunk_bounds,
    observation_layout,
)

STAN = Path(__file__).parent / "stan"
SIGMA, PRIOR_MEAN, PRIOR_SD = 1.5, 0.5, 3.0


def data_block(*lines: str) -> str:
    """A formatted program whose data block has ``lines`` and the contract's two."""
    body = "".join(f"  {line}\n" for line in lines)
    return (f"data {{\n{body}  real<lower=0> omega;\n  vector<lower=0>[N] weights;\n}}\n"
            "parameters {\n  real theta;\n}\n")


@pytest.mark.parametrize(
    ("lines", "fields"),
    [
        (["int<lower=1> N;", "int<lower=1> K;", "matrix[N, K] X;", "vector[N] y;",
          "vector[K] lower_bound;", "vector<lower=lower_bound>[K] upper_bound;"], ("X", "y")),
        (["int N;", "array[N] int<lower=0, upper=1> y;", "array[N, 2] real x;",
          "array[N] vector[3] z; // by observation", "real sigma;"], ("y", "x", "z")),
        (["int<lower=1> N;", "int<lower=1> G;", "array[N] int<lower=1, upper=G> group;"],
         ("group",)),
    ],
)
def test_the_variables_indexed_first_by_observation_are_cut(lines, fields):
    assert observation_layout(data_block(*lines), "N") == ObservationLayout("N", fields)


@pytest.mark.parametrize(
    "lines",
    [
        ["int<lower=1> N;", "int<lower=1> K;", "matrix[K, N] X;"],  # N not first
        ["int<lower=1> N;", "vector[N] y;", "array[N] int<lower=1, upper=N> next;"],
        ["int<lower=1> N;", "vector[N + 1] knots;"],
        ["real N;", "vector[N] y;"],  # not an int
        ["vector[N] y;"],  # N not declared in the data
    ],
)
def test_data_whose_size_serves_elsewhere_are_not_cut(lines):
    assert observation_layout(data_block(*lines), "N") is None


def test_a_size_expression_is_not_cut():
    assert observation_layout(data_block("int<lower=1> N;"), "N - 1") is None


def test_chunks_cover_the_observations_within_the_budget():
    assert chunk_bounds(1000, 64.0) == []  # 64 kB of data: whole
    per_chunk = CHUNK_BYTES // 64
    for n in (2 * per_chunk + 1, 100_000, 1_234_567):
        bounds = chunk_bounds(n, 64.0)
        assert bounds[0].start == 0 and bounds[-1].stop == n
        assert all(a.stop == b.start for a, b in itertools.pairwise(bounds))
        assert max(b.stop - b.start for b in bounds) <= per_chunk


def test_layout_cuts_the_data_and_counts_the_observations():
    layout = ObservationLayout("N", ("X", "y"))
    data = {"N": 5, "K": 2, "X": np.arange(10.0).reshape(5, 2), "y": [1, 2, 3, 4, 5], "s": 1.0}
    cut = layout.cut(data, slice(1, 3))
    assert cut["N"] == 2 and cut["K"] == 2 and cut["s"] == 1.0
    np.testing.assert_array_equal(cut["X"], [[2.0, 3.0], [4.0, 5.0]])
    np.testing.assert_array_equal(cut["y"], [2, 3])


# -- sliced evaluation against the closed form ----------------------------------


@pytest.fixture(scope="module")
def large(cmdstan):
    """The power posterior of a normal mean with enough data to be chunked."""
    y = np.random.default_rng(3).normal(2.0, 2.0, size=60_000)
    program = LossProgram(STAN / "power_normal.stan", {
        "N": len(y), "y": y, "sigma": SIGMA, "prior_mean": PRIOR_MEAN, "prior_sd": PRIOR_SD})
    return program, y


def closed_form(y, theta, omega, weights):
    """``log prior + omega * sum_i w_i log N(y_i | theta, sigma)`` and its derivative."""
    prior = stats.norm.logpdf(theta, PRIOR_MEAN, PRIOR_SD)
    log_lik = stats.norm.logpdf(y[None, :], theta[:, None], SIGMA)
    lp = prior + omega * np.sum(weights * log_lik, axis=-1)
    grad = -(theta - PRIOR_MEAN) / PRIOR_SD**2 + omega * np.sum(
        weights * (y[None, :] - theta[:, None]), axis=-1) / SIGMA**2
    return lp, grad, -log_lik


@pytest.mark.e2e
def test_chunked_evaluation_is_the_closed_form(large):
    program, y = large
    assert program.slices is not None and program.slices.layout.fields == ("y",)
    assert len(program.slices.chunks) == 3
    assert program.drawn is not None  # `shared` leaves out about 1/e: its drawn ones, chunked
    rng = np.random.default_rng(4)
    theta = rng.normal(2.0, 0.05, size=7)
    u = theta[:, None]
    shared = rng.poisson(1.0, size=len(y)).astype(float)
    own = rng.poisson(1.0, size=(7, len(y))).astype(float)
    omegas = rng.uniform(0.2, 2.0, size=7)
    for omega, weights in ((0.7, shared), (omegas, own), (1.0, np.ones(len(y)))):
        lp, grad, _ = closed_form(y, theta, omega, weights)
        np.testing.assert_allclose(program.log_density(u, omega, weights), lp, rtol=1e-11)
        found, gradient = program.log_density_gradient(u, omega, weights)
        np.testing.assert_allclose(found, lp, rtol=1e-11)
        np.testing.assert_allclose(gradient[:, 0], grad, rtol=1e-9, atol=1e-9)
    losses = closed_form(y, theta, 1.0, 1.0)[2]
    np.testing.assert_allclose(program.losses(u[:2]), losses[:2], rtol=1e-12)
    prior, loss = program.prior_and_loss(u, shared, jacobian=False)
    np.testing.assert_allclose(prior, stats.norm.logpdf(theta, PRIOR_MEAN, PRIOR_SD), rtol=1e-13)
    np.testing.assert_allclose(loss, (shared * losses).sum(axis=1), rtol=1e-11)
    total, gradient = program.loss_gradient(u, shared)
    np.testing.assert_allclose(total, loss, rtol=1e-11)
    np.testing.assert_allclose(
        gradient[:, 0], -(shared * (y[None, :] - theta[:, None])).sum(axis=1) / SIGMA**2,
        rtol=1e-9, atol=1e-9)


@pytest.mark.e2e
def test_a_point_of_zero_density_is_minus_infinity_on_the_chunks(large):
    """The prior is -inf there: the chunks' sum less the prior must not be nan."""
    program, _ = large
    u = np.array([[2.0], [1e300]])
    lp = program.log_density(u, 1.0)
    assert np.isfinite(lp[0]) and lp[1] == -np.inf


@pytest.mark.e2e
def test_the_slices_travel_by_pickle(large):
    program, _ = large
    again = pickle.loads(pickle.dumps(program))
    assert again.slices is not None
    assert again.slices.bounds == program.slices.bounds
    u = np.array([[1.9], [2.1]])
    np.testing.assert_array_equal(again.log_density(u, 0.8), program.log_density(u, 0.8))


@pytest.mark.e2e
@pytest.mark.parametrize(("variant", "kept"), [(1, "prior"), (2, None), (3, None)])
def test_data_that_cannot_be_cut_are_evaluated_whole_and_right(cmdstan, variant, kept):
    """Losses of centred data: the chunks refused, the prior's slice kept; a prior
    that depends on N, or a program that rejects one observation: nothing cut."""
    y = np.random.default_rng(5).normal(1.0, 1.0, size=50_000)
    program = LossProgram(STAN / "normal_variants.stan", {"N": len(y), "y": y,
                                                          "variant": variant})
    assert program.drawn is None
    if kept is None:
        assert program.slices is None
    else:
        assert program.slices is not None and program.slices.chunks == []
    z = y - y.mean() if variant == 1 else y
    prior_sd = np.sqrt(len(y)) if variant == 2 else 3.0
    theta = np.array([0.3, 1.2])
    prior = stats.norm.logpdf(theta, 0, prior_sd)
    losses = 0.5 * (z[None, :] - theta[:, None]) ** 2
    np.testing.assert_allclose(program.log_density(theta[:, None], 0.9, jacobian=False),
                               prior - 0.9 * losses.sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(program.log_prior(theta[:, None]), prior, rtol=1e-12)
    np.testing.assert_allclose(program.losses(theta[:, None]), losses, rtol=1e-10, atol=1e-12)
