"""Stan NUTS moves for q-path SMC and AIS: invariance of pi_{beta,q} (exact draws in, the
same distribution out) and SMC/AIS log Z of a Gaussian with known normalising constant.
Uses the Gaussian q-path model of test_qpaths_stan_e2e (compiled once, cached)."""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.qpaths import log_qpath
from stanflow.qpaths.annealing import ais, smc
from stanflow.qpaths.kernels import evaluate
from stanflow.qpaths.stan_moves import StanMoves

pytestmark = pytest.mark.e2e

C, MU, SIGMA = 1.5, 2.0, 0.7
DATA = {
    "d": 1,
    "n_base_params": 2,
    "base_params": [0.0, 1.0],
    "n_target_params": 3,
    "target_params": [MU, SIGMA, C],
}


def log_pi0(z):
    return -0.5 * np.sum(z**2, axis=1) - 0.5 * z.shape[1] * np.log(2 * np.pi)


def sample_pi0(rng, n):
    return rng.standard_normal((n, 1))


def log_pi1(z):
    return (
        C
        - 0.5 * np.sum(((z - MU) / SIGMA) ** 2, axis=1)
        - z.shape[1] * np.log(SIGMA * np.sqrt(2 * np.pi))
    )


@pytest.fixture(scope="module")
def model(qpath_gaussian_model):
    return qpath_gaussian_model


@pytest.mark.parametrize("q", [1.0, 0.9])
def test_nuts_moves_keep_the_intermediate_distribution(model, q, tmp_path):
    beta, n = 0.6, 400
    x = np.linspace(-8, 10, 36001)
    log_density = log_qpath(log_pi0(x[:, None]), log_pi1(x[:, None]), beta, q)
    density = np.exp(log_density - log_density.max())
    cdf = np.cumsum(density) / density.sum()
    rng = np.random.default_rng(11)
    start = np.interp(rng.uniform(size=n), cdf, x)[:, None]  # exact draws
    mean = np.sum(x * density) / density.sum()
    var = np.sum((x - mean) ** 2 * density) / density.sum()
    moves = StanMoves(model, DATA, work_dir=tmp_path)
    moved, (accept, _) = moves(
        rng, evaluate(start, log_pi0, log_pi1), beta, q, log_pi0, log_pi1, 2
    )
    assert 0.5 < accept <= 1
    assert np.mean(moved.z != start) > 0.8  # the particles did move
    z = moved.z[:, 0]
    assert abs(z.mean() - mean) < 4 * np.sqrt(var / n)
    assert abs(z.var() / var - 1) < 4 * np.sqrt(2 / n)
    np.testing.assert_allclose(moved.log_pi1, log_pi1(moved.z))
    assert not any(tmp_path.iterdir())  # run sets are cleaned up


def test_smc_with_stan_moves_estimates_log_z(model, tmp_path):
    moves = StanMoves(model, DATA, work_dir=tmp_path)
    group = smc(
        log_pi0,
        sample_pi0,
        log_pi1,
        q=0.99,
        schedule=np.linspace(0, 1, 6) ** 2,
        n_particles=64,
        n_moves=2,
        n_runs=2,
        seed=12,
        moves=moves,
    ).smc
    assert abs(group.attrs["log_z"] - C) < 4 * group.attrs["log_z_se"] + 0.1
    assert len(moves.history) == 10
    assert 0.5 < np.nanmean(group.acceptance.values) <= 1


def test_bad_input_is_named(model):
    with pytest.raises(ValueError, match=r"data is missing \['target_params'\]"):
        StanMoves(model, {k: v for k, v in DATA.items() if k != "target_params"})
    with pytest.raises(ValueError, match="must not hold"):
        StanMoves(model, DATA | {"beta": 0.5})
    moves = StanMoves(model, DATA)
    particles = evaluate(np.zeros((4, 2)), log_pi0, log_pi1)
    with pytest.raises(ValueError, match="dimension 2, data\\['d'\\] is 1"):
        moves(np.random.default_rng(0), particles, 0.5, 1.0, log_pi0, log_pi1, 1)


def test_ais_with_stan_moves_estimates_log_z(model, tmp_path):
    """AIS with NUTS transitions: particles as chains, no resampling."""
    group = ais(
        log_pi0,
        sample_pi0,
        log_pi1,
        np.linspace(0, 1, 8) ** 2,
        q=0.99,
        n_particles=64,
        n_moves=2,
        n_runs=2,
        seed=21,
        moves=StanMoves(model, DATA, work_dir=tmp_path),
    ).smc
    assert abs(group.attrs["log_z"] - C) < 4 * group.attrs["log_z_se"] + 0.1
    assert np.all(group.ess.values[:, -1] > 0.2 * 64)  # the weights did not collapse
