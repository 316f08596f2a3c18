"""SMC (with its final bridge), AIS and TI on Gaussians with a known normalising constant, and bad input.

Base N(0, I_d); target exp(C) N(z; MU, SIGMA^2 I_d), so log Z = C exactly."""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.qpaths import log_incremental_weight
from stanflow.qpaths.annealing import ais, smc
from stanflow.qpaths.kernels import Particles, _weights_from, resample, rwm_moves
from stanflow.qpaths.ti import thermodynamic_integration

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


def assert_within(group, k=4.0):
    error = abs(group.attrs["log_z"] - C)
    assert error < k * group.attrs["log_z_se"] + 0.05, (error, group.attrs)


@pytest.mark.parametrize("q", [1.0, 1 - 1e-3, 1 - 1e-1])
@pytest.mark.parametrize("seed", [1, 2])
def test_adaptive_smc_d1(q, seed):
    group = smc(*problem(1), q=q, n_particles=500, n_moves=3, n_runs=6, seed=seed).smc
    assert_within(group)
    assert group.beta.values[0, -1] == 1.0 or np.nanmax(group.beta.values) == 1.0
    n = group.n_steps.values
    assert np.all(np.abs(group.ess.values[:, : n.min() - 1] / 500 - 0.5) < 0.01)


@pytest.mark.parametrize("q", [1.0, 1 - 1e-3])
def test_adaptive_smc_d5(q):
    group = smc(*problem(5), q=q, n_particles=800, n_moves=5, n_runs=6, seed=3).smc
    assert_within(group)
    assert 0.1 < float(np.nanmean(group.acceptance.values)) < 0.9


def test_fixed_schedule_smc_multinomial():
    betas = np.linspace(0, 1, 30) ** 3
    group = smc(
        *problem(1),
        q=0.9,
        schedule=betas,
        resampling="multinomial",
        n_particles=500,
        n_moves=2,
        n_runs=6,
        seed=4,
    ).smc
    assert_within(group)
    np.testing.assert_array_equal(group.beta.values[0], betas[1:])


@pytest.mark.parametrize("q", [1.0, 1 - 1e-2])
def test_ais_d1(q):
    group = ais(
        *problem(1),
        np.linspace(0, 1, 60) ** 3,
        q=q,
        n_particles=1000,
        n_moves=2,
        n_runs=4,
        seed=5,
    ).smc
    assert_within(group)


def test_ti_geometric_and_q_path():
    for q in (1.0, 1 - 1e-2):
        group = thermodynamic_integration(
            *problem(1),
            np.linspace(0, 1, 41) ** 4,
            q=q,
            chains=100,
            warmup=20,
            draws=50,
            seed=6,
        ).smc
        assert_within(group)
        assert group.attrs["log_z_discretisation"] < 0.2


def test_systematic_resampling_counts_are_within_one_of_n_w():
    w = np.random.default_rng(0).dirichlet(np.ones(7))
    for seed in range(5):
        ancestors = resample(np.random.default_rng(seed), np.log(w), "systematic")
        counts = np.bincount(ancestors, minlength=7)
        assert np.all(np.abs(counts - 7 * w) < 1) and counts.sum() == 7


def test_bad_input_is_named():
    log_pi0, sample_pi0, log_pi1 = problem(1)

    def nan_target(z):
        out = log_pi1(z)
        out[3] = np.nan
        return out

    with pytest.raises(ValueError, match="log_pi1 returned NaN"):
        smc(log_pi0, sample_pi0, nan_target, n_particles=20, seed=0)
    with pytest.raises(ValueError, match="log_pi1 must return shape"):
        smc(log_pi0, sample_pi0, lambda z: np.zeros(3), n_particles=20, seed=0)
    with pytest.raises(ValueError, match="schedule must lie in"):
        ais(log_pi0, sample_pi0, log_pi1, [0.0, 0.5, 1.5])
    with pytest.raises(ValueError, match="strictly increasing"):
        smc(log_pi0, sample_pi0, log_pi1, schedule=[0.0, 0.6, 0.5, 1.0])
    with pytest.raises(ValueError, match="chains must be an integer >= 2"):
        thermodynamic_integration(log_pi0, sample_pi0, log_pi1, [0, 0.5, 1], chains=1)
    with pytest.raises(ValueError, match="target_ess"):
        smc(log_pi0, sample_pi0, log_pi1, target_ess=1.0)
    with pytest.raises(ValueError, match="q must be finite"):
        smc(log_pi0, sample_pi0, log_pi1, q=np.inf)


@pytest.mark.parametrize("q", [1.0, 1 - 1e-9, 0.9, 0.0, -2.0])
def test_bisection_weights_equal_the_incremental_weights(q):
    rng = np.random.default_rng(8)
    particles = Particles(
        rng.standard_normal((50, 1)), rng.normal(-3, 4, 50), rng.normal(-20, 30, 50)
    )
    weights = _weights_from(particles, 0.3, q)
    for b in (0.3, 0.30001, 0.5, 0.99, 1.0):
        np.testing.assert_allclose(
            weights(b),
            log_incremental_weight(particles.log_pi0, particles.log_pi1, 0.3, b, q),
            rtol=1e-10,
            atol=1e-12,
        )


def test_q1_is_the_exact_geometric_limit_and_moves():
    """q = 1 and q = 1 - 1e-12 give the same runs (same seed); particles still move."""
    runs = [
        smc(*problem(2), q=q, n_particles=300, n_moves=2, n_runs=2, seed=9).smc
        for q in (1.0, 1 - 1e-12)
    ]
    np.testing.assert_allclose(runs[0].log_z.values, runs[1].log_z.values, atol=1e-6)
    np.testing.assert_array_equal(runs[0].n_steps.values, runs[1].n_steps.values)
    assert np.nanmin(runs[0].acceptance.values) > 0.05


def test_nan_reached_during_the_moves_is_an_error():
    log_pi0, sample_pi0, log_pi1 = problem(1)

    def nan_beyond(z):
        out = log_pi1(z)
        out[z[:, 0] > 2.5] = np.nan  # only reached once the particles move towards MU
        return out

    with pytest.raises(ValueError, match="log_pi1 returned NaN"):
        smc(log_pi0, sample_pi0, nan_beyond, n_particles=200, n_moves=3, seed=0)


# -- the final bridge: log Z by bridge sampling on the final particles, combined with SMC's


def test_the_bridge_is_combined_by_default_and_its_errors_are_honest():
    """Over 12 seeds: the combined estimate's standardised errors have mean near 0 and
    spread at most about 1, its stated error is below the bridge's alone, and it is far
    more accurate than SMC's alone."""
    z_combined, smc_errors, combined_errors = [], [], []
    for seed in range(12):
        attrs = smc(*problem(5), n_particles=500, seed=seed).smc.attrs
        assert {"log_z_bridge", "log_z_bridge_se", "log_z_smc", "log_z_smc_se"} <= set(attrs)
        assert attrs["log_z_se"] <= attrs["log_z_bridge_se"]
        z_combined.append((attrs["log_z"] - C) / attrs["log_z_se"])
        smc_errors.append(abs(attrs["log_z_smc"] - C))
        combined_errors.append(abs(attrs["log_z"] - C))
    z = np.array(z_combined)
    assert abs(z.mean()) < 3 / np.sqrt(len(z)) + 0.3, z
    assert z.std() < 1.6, z
    assert np.median(combined_errors) < 0.2 * np.median(smc_errors)


def test_a_kernel_of_your_own_is_not_bridged_unless_asked():
    plain = smc(*problem(2), n_particles=400, seed=0, moves=rwm_moves, n_moves=1).smc.attrs
    assert "log_z_bridge" not in plain and plain["log_z"] == plain["log_z_smc"]
    asked = smc(*problem(2), n_particles=400, seed=0, moves=rwm_moves, n_moves=5,
                bridge=True).smc.attrs
    assert "log_z_bridge" in asked
    assert abs(asked["log_z_bridge"] - C) < 4 * asked["log_z_bridge_se"] + 0.01
