"""Independence MH moves and the t-importance reference log Z, on Gaussians with a
known normalising constant.

Base N(0, I_d); target exp(C) N(z; MU, SIGMA^2 I_d), so log Z = C exactly."""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.qpaths.annealing import smc
from stanflow.qpaths.independence import gaussian_independence_moves
from stanflow.qpaths.kernels import evaluate
from stanflow.qpaths.reference import (
    FinalParticles,
    reference_log_z,
    t_importance_log_z,
)

C, MU, SIGMA = 2.0, 3.0, 0.5


def problem(d):
    def log_pi0(z):
        return -0.5 * np.sum(z**2, axis=1) - 0.5 * d * np.log(2 * np.pi)

    def sample_pi0(rng, n):
        return rng.standard_normal((n, d))

    def log_pi1(z):
        return (
            C
            - 0.5 * np.sum(((z - MU) / SIGMA) ** 2, axis=1)
            - 0.5 * d * np.log(2 * np.pi * SIGMA**2)
        )

    return log_pi0, sample_pi0, log_pi1


def test_moves_keep_the_target_and_forget_the_start():
    log_pi0, _, log_pi1 = problem(3)
    rng = np.random.default_rng(0)
    # Exact target draws, every one repeated 4 times (as after resampling).
    z = np.repeat(MU + SIGMA * rng.standard_normal((2000, 3)), 4, axis=0)
    start = evaluate(z, log_pi0, log_pi1)
    moved, (acceptance, _) = gaussian_independence_moves(
        rng, start, 1.0, 1.0, log_pi0, log_pi1, 3
    )
    n = len(z)
    assert acceptance > 0.7  # a Gaussian proposal 1.1x wider than a Gaussian target
    np.testing.assert_allclose(
        moved.z.mean(axis=0), MU, atol=5 * SIGMA / np.sqrt(n / 4)
    )
    np.testing.assert_allclose(
        moved.z.var(axis=0), SIGMA**2, rtol=5 * np.sqrt(2 / (n / 4))
    )
    # Duplicates separate: nearly all particles are distinct after the moves.
    assert len(np.unique(moved.z[:, 0])) > 0.9 * n
    np.testing.assert_allclose(moved.log_pi1, log_pi1(moved.z))


def test_smc_with_independence_moves_recovers_log_z():
    group = smc(
        *problem(4),
        n_particles=1000,
        n_moves=2,
        n_runs=4,
        seed=1,
        moves=gaussian_independence_moves,
    ).smc
    assert abs(group.attrs["log_z"] - C) < 4 * group.attrs["log_z_se"] + 0.05


def test_t_importance_sampling_on_exact_draws():
    _, _, log_pi1 = problem(2)
    rng = np.random.default_rng(2)
    particles = MU + SIGMA * rng.standard_normal((3000, 2))
    result = t_importance_log_z(log_pi1, particles, rng, 20_000)
    assert abs(result["log_z"] - C) < 4 * result["se"]
    assert 0.3 < result["ess_fraction"] < 1


def test_reference_log_z_keeps_every_runs_particles():
    log_pi0, sample_pi0, log_pi1 = problem(2)
    result = reference_log_z(
        log_pi0,
        sample_pi0,
        log_pi1,
        seed=3,
        n_draws=20_000,
        n_particles=500,
        n_moves=2,
        n_runs=3,
    )
    assert len(result["importance"]) == 3 and len(result["smc_log_z"]) == 3
    assert abs(result["log_z"] - C) < 4 * result["se"]
    final = FinalParticles()
    smc(log_pi0, sample_pi0, log_pi1, n_particles=200, n_runs=2, seed=4, moves=final)
    assert [z.shape for z in final.runs] == [(200, 2), (200, 2)]
    assert abs(final.runs[0].mean() - MU) < 0.3


def test_bad_input_is_named():
    log_pi0, sample_pi0, log_pi1 = problem(3)
    few = evaluate(np.zeros((3, 3)), log_pi0, log_pi1)
    rng = np.random.default_rng(5)
    with pytest.raises(ValueError, match="more particles than dimensions"):
        gaussian_independence_moves(rng, few, 0.5, 1.0, log_pi0, log_pi1, 1)
    many = evaluate(rng.standard_normal((50, 3)), log_pi0, log_pi1)
    with pytest.raises(ValueError, match="n_moves"):
        gaussian_independence_moves(rng, many, 0.5, 1.0, log_pi0, log_pi1, 0)
    with pytest.raises(ValueError, match="particles must be"):
        t_importance_log_z(log_pi1, np.zeros((2, 3)), rng, 10)
    with pytest.raises(ValueError, match="n_draws"):
        t_importance_log_z(log_pi1, many.z, rng, 1)
    with pytest.raises(ValueError, match="schedule: the reference run"):
        reference_log_z(
            log_pi0, sample_pi0, log_pi1, seed=0, n_draws=10, schedule=[0.0, 1.0]
        )
