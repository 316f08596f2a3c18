"""SMC's final bridge (:func:`stanflow.qpaths.annealing.smc`, ``bridge=``): log Z by bridge
sampling on the final particles, combined with SMC's own estimate.

Truth: Gaussians with a known normalising constant (base N(0, I_d), target
exp(C) N(z; MU, SIGMA^2 I_d), so log Z = C exactly)."""

from __future__ import annotations

import numpy as np

from stanflow.qpaths.annealing import smc
from stanflow.qpaths.kernels import rwm_moves

C, MU, SIGMA = 2.0, 1.5, 0.4


def problem(d):
    def log_pi0(z):
        return -0.5 * np.sum(z**2, axis=1) - 0.5 * d * np.log(2 * np.pi)

    def sample_pi0(rng, n):
        return rng.standard_normal((n, d))

    def log_pi1(z):
        return (C - 0.5 * np.sum(((z - MU) / SIGMA) ** 2, axis=1)
                - 0.5 * d * np.log(2 * np.pi * SIGMA**2))

    return log_pi0, sample_pi0, log_pi1


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
