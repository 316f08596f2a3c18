"""Logistic-regression targets: the vectorised likelihood, the UCI loaders, and log Z
against a quadrature (small problem) and the published Pima value."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import log_expit

from stanflow.qpaths.annealing import smc
from stanflow.qpaths.logistic import CHUNK, LogisticTarget, load_uci


def small_target(n=30, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    y = np.where(rng.uniform(size=n) < 1 / (1 + np.exp(-(0.5 + 1.5 * x))), 1.0, -1.0)
    return LogisticTarget(np.column_stack([np.ones(n), x]), y)


def quadrature_log_z(target):
    """log Z of a d = 2 target on a fine grid (trapezoid rule)."""
    a = np.linspace(-6, 6, 801)
    grid = np.stack(np.meshgrid(a, a, indexing="ij"), axis=-1).reshape(-1, 2)
    log_f = target.log_pi1(grid).reshape(len(a), len(a))
    top = log_f.max()
    return float(np.log(np.trapezoid(np.trapezoid(np.exp(log_f - top), a), a)) + top)


def test_log_likelihood_matches_a_direct_sum():
    target = small_target()
    z = np.random.default_rng(1).normal(0, 3, size=(2 * CHUNK + 7, 2))
    direct = np.array([log_expit(target.y * (target.X @ row)).sum() for row in z])
    np.testing.assert_allclose(target.log_likelihood(z), direct, rtol=1e-12, atol=1e-9)
    prior = -0.5 * np.sum(z**2, axis=1) / 25 - 2 * np.log(5 * np.sqrt(2 * np.pi))
    np.testing.assert_allclose(target.log_pi1(z), prior + direct, rtol=1e-12)


def test_float32_kernel_stays_within_1e_4_of_the_direct_sum():
    target = small_target(n=768)
    fast = LogisticTarget(target.X, target.y, kernel_dtype="float32")
    z = np.random.default_rng(2).normal(0, 1, size=(CHUNK + 3, 2))
    direct = np.array([log_expit(target.y * (target.X @ row)).sum() for row in z])
    np.testing.assert_allclose(fast.log_likelihood(z), direct, rtol=0, atol=1e-4)
    with pytest.raises(ValueError, match="kernel_dtype"):
        LogisticTarget(target.X, target.y, kernel_dtype="float16")


def test_log_z_against_quadrature():
    target = small_target()
    truth = quadrature_log_z(target)
    estimate, se = target.importance_log_z(np.random.default_rng(2), 20_000)
    assert abs(estimate - truth) < 4 * se + 1e-3
    for q in (1.0, 1 - 1e-2):
        group = smc(
            target.log_pi0,
            target.sample_pi0,
            target.log_pi1,
            q=q,
            n_particles=1000,
            n_moves=3,
            n_runs=4,
            seed=3,
        ).smc
        assert abs(group.attrs["log_z"] - truth) < 4 * group.attrs["log_z_se"] + 0.05


def test_loaders_scale_and_label():
    """Reads $STANFLOW_DATA_DIR (set by .ci/run); a missing file fails, naming it."""
    for name, shape in (("pima", (768, 9)), ("sonar", (208, 61))):
        target = load_uci(name)
        assert target.X.shape == shape
        np.testing.assert_allclose(target.X[:, 0], 1.0)
        np.testing.assert_allclose(target.X[:, 1:].mean(axis=0), 0, atol=1e-12)
        np.testing.assert_allclose(target.X[:, 1:].std(axis=0), 0.5, rtol=1e-12)
        assert set(np.unique(target.y)) == {-1.0, 1.0}
    assert int((load_uci("pima").y > 0).sum()) == 268  # diabetic cases


def test_pima_log_z_matches_the_published_value():
    target = load_uci("pima")
    estimate, se = target.importance_log_z(np.random.default_rng(4), 20_000)
    assert abs(estimate - (-391.494)) < 4 * se + 0.005
    group = smc(
        target.log_pi0,
        target.sample_pi0,
        target.log_pi1,
        n_particles=1000,
        n_moves=3,
        n_runs=2,
        seed=5,
    ).smc
    assert abs(group.attrs["log_z"] - (-391.494)) < 1.0


def test_missing_data_names_the_file(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"sonar\.all-data.*origin"):
        load_uci("sonar", tmp_path)
    monkeypatch.delenv("STANFLOW_DATA_DIR", raising=False)
    with pytest.raises(FileNotFoundError, match=r"STANFLOW_DATA_DIR is not set.*pima"):
        load_uci("pima")
    with pytest.raises(ValueError, match="dataset must be one of"):
        load_uci("iris", tmp_path)
