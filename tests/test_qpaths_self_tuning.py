"""The self-tuning default moves of SMC and AIS against closed forms.

Gaussian base and target with a known normalising constant (``log Z = C``), a
correlated and badly scaled target (what the whitening is for), the gradient
weights of the q-path against finite differences, invariance of the target under
the moves, the decorrelation rule, and points the target rejects.
"""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.qpaths.annealing import ais, smc
from stanflow.qpaths.densities import GaussianBase, is_differentiable
from stanflow.qpaths.kernels import Particles, evaluate, rwm_moves
from stanflow.qpaths.qmath import log_qpath, target_share
from stanflow.qpaths.self_tuning import SelfTuningMoves

C = 1.5


class GaussianTarget:
    """``exp(C) N(mean, cov)``: log density with gradient (``differentiable``) or without."""

    def __init__(self, mean, cov, differentiable=True):
        self.mean = np.asarray(mean, dtype=float)
        self.cov = np.asarray(cov, dtype=float)
        self.precision = np.linalg.inv(self.cov)
        d = len(self.mean)
        self.norm = C - 0.5 * (d * np.log(2 * np.pi) + np.linalg.slogdet(self.cov)[1])
        if differentiable:
            self.value_and_gradient = self._value_and_gradient

    def __call__(self, z):
        r = z - self.mean
        return self.norm - 0.5 * np.einsum("ni,ij,nj->n", r, self.precision, r)

    def _value_and_gradient(self, z):
        return self(z), -(z - self.mean) @ self.precision


def correlated(d, differentiable=True):
    """Means 2 .. 2 + d, scales 0.05 .. 3 and correlations 0.4 between neighbours."""
    scales = np.geomspace(0.05, 3.0, d)
    corr = np.eye(d) + 0.4 * (np.eye(d, k=1) + np.eye(d, k=-1))
    return GaussianTarget(2 + np.arange(d), corr * np.outer(scales, scales), differentiable)


def base_of(d, differentiable=True):
    base = GaussianBase(d, sd=4.0)
    log_pi0 = base if differentiable else base.__call__
    return log_pi0, base.sample


@pytest.mark.parametrize("differentiable", [True, False], ids=["hmc", "independence-rwm"])
@pytest.mark.parametrize("d", [2, 8])
def test_default_smc_recovers_log_z(differentiable, d):
    log_pi0, sample_pi0 = base_of(d, differentiable)
    target = correlated(d, differentiable)
    kind = "hmc" if differentiable else "independence-rwm"
    moves = SelfTuningMoves(kind=kind)
    group = smc(log_pi0, sample_pi0, target, n_particles=1000, n_runs=4, seed=d, moves=moves).smc
    assert group.attrs["moves"].startswith(f"self-tuning ({kind} at ")
    error = abs(group.attrs["log_z"] - C)
    assert error < 4 * group.attrs["log_z_se"] + 0.05, (error, group.attrs["log_z_se"])
    # The number of moves is chosen per temperature and recorded.
    moves = group.n_moves.values[~np.isnan(group.n_moves.values)]
    assert moves.min() >= 1 and moves.max() <= 30


@pytest.mark.parametrize("q", [1.0, 0.9])
def test_default_ais_recovers_log_z(q):
    d = 3
    log_pi0, sample_pi0 = base_of(d)
    target = correlated(d)
    group = ais(log_pi0, sample_pi0, target, np.linspace(0, 1, 20) ** 4, q=q,
                n_particles=500, n_runs=4, seed=3).smc
    error = abs(group.attrs["log_z"] - C)
    assert error < 4 * group.attrs["log_z_se"] + 0.05, (error, group.attrs["log_z_se"])


@pytest.mark.parametrize("q", [1.0, 0.7, 1.4])
@pytest.mark.parametrize("beta", [0.0, 0.3, 1.0])
def test_target_share_is_the_gradient_of_the_path(q, beta):
    """``d log pi_{beta,q} / d log pi1`` by finite differences in ``log pi1``."""
    rng = np.random.default_rng(0)
    lp0, lp1 = rng.normal(-3, 2, 50), rng.normal(-3, 2, 50)
    h = 1e-6
    numeric = (log_qpath(lp0, lp1 + h, beta, q) - log_qpath(lp0, lp1 - h, beta, q)) / (2 * h)
    assert np.allclose(target_share(lp0, lp1, beta, q), numeric, atol=1e-6)


@pytest.mark.parametrize("kind", ["hmc", "independence-rwm"])
def test_moves_leave_the_target_invariant_and_decorrelate(kind):
    """Exact draws of the target stay exact draws; the particles forget their start."""
    d, n = 4, 4000
    target = correlated(d)
    base = GaussianBase(d, sd=4.0)
    rng = np.random.default_rng(11)
    z = rng.multivariate_normal(target.mean, target.cov, size=n)
    # Resampling duplicates: every particle twice, as after an SMC step.
    particles = evaluate(np.repeat(z[: n // 2], 2, axis=0), base, target)
    kernel = SelfTuningMoves(kind=kind)
    moved, info = kernel(rng, particles, 1.0, 1.0, base, target, None)
    assert 1 <= info.n_moves < kernel.max_moves
    assert 0.1 < info.acceptance <= 1
    se = np.sqrt(np.diag(target.cov) / n)
    assert np.all(np.abs(moved.z.mean(axis=0) - target.mean) < 5 * se * np.sqrt(2))
    white = np.linalg.solve(np.linalg.cholesky(target.cov), (moved.z - target.mean).T)
    assert np.allclose(np.cov(white), np.eye(d), atol=0.1)
    start = (particles.z - particles.z.mean(0)) / particles.z.std(0)
    now = (moved.z - moved.z.mean(0)) / moved.z.std(0)
    assert np.max(np.abs(np.mean(start * now, axis=0))) < 0.1 + 4 / np.sqrt(n)


def test_fixed_number_of_moves_is_respected():
    d = 2
    target = correlated(d)
    base = GaussianBase(d, sd=4.0)
    rng = np.random.default_rng(1)
    particles = evaluate(base.sample(rng, 200), base, target)
    _, info = SelfTuningMoves()(rng, particles, 0.5, 1.0, base, target, 3)
    assert info.n_moves == 3


def test_hmc_particles_stop_at_points_the_target_rejects():
    """A target that is zero for z_0 < 0: trajectories that leave the support are rejected."""
    d = 2
    inner = GaussianTarget([0.5, 0.0], np.eye(d))

    class HalfSpace:
        def __call__(self, z):
            return np.where(z[:, 0] > 0, inner(z), -np.inf)

        def value_and_gradient(self, z):
            value, grad = inner.value_and_gradient(z)
            outside = z[:, 0] <= 0
            grad[outside] = np.nan
            return np.where(outside, -np.inf, value), grad

    base = GaussianBase(d, sd=1.0)
    group = smc(base, base.sample, HalfSpace(), n_particles=800, n_runs=4, seed=2).smc
    # Z = exp(C) P(N(0.5, 1) > 0) for the target, as the base is normalised.
    from scipy.stats import norm

    truth = C + norm.logcdf(0.5)
    assert abs(group.attrs["log_z"] - truth) < 4 * group.attrs["log_z_se"] + 0.05


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="kind"):
        SelfTuningMoves(kind="nuts")
    with pytest.raises(ValueError, match="decorrelation"):
        SelfTuningMoves(decorrelation=1.0)
    with pytest.raises(ValueError, match="max_moves"):
        SelfTuningMoves(max_moves=0)
    d = 2
    target = correlated(d, differentiable=False)
    base = GaussianBase(d)
    rng = np.random.default_rng(0)
    particles = evaluate(base.sample(rng, 50), base, target)
    with pytest.raises(ValueError, match="log_pi1: HMC moves need value_and_gradient"):
        SelfTuningMoves(kind="hmc")(rng, particles, 0.5, 1.0, base, target, None)
    few = Particles(particles.z[:2], particles.log_pi0[:2], particles.log_pi1[:2])
    with pytest.raises(ValueError, match="more particles than dimensions"):
        SelfTuningMoves()(rng, few, 0.5, 1.0, base, target, None)
    with pytest.raises(ValueError, match="n_moves: random-walk moves need a fixed number"):
        smc(base, base.sample, target, moves=rwm_moves, n_particles=50, seed=0)


def test_gaussian_base_is_normalised_with_its_gradient():
    base = GaussianBase(3, sd=2.0, mean=[1.0, -1.0, 0.5])
    assert is_differentiable(base)
    z = np.random.default_rng(0).normal(size=(5, 3))
    from scipy.stats import multivariate_normal

    truth = multivariate_normal(base.mean, 4.0 * np.eye(3)).logpdf(z)
    value, grad = base.value_and_gradient(z)
    assert np.allclose(value, truth)
    h = 1e-6
    numeric = np.stack(
        [(base(z + h * e) - base(z - h * e)) / (2 * h) for e in np.eye(3)], axis=1
    )
    assert np.allclose(grad, numeric, atol=1e-6)
    with pytest.raises(ValueError, match="sd must be positive"):
        GaussianBase(2, sd=0.0)


class Banana:
    """``exp(-(z0^2 / A^2 + (z1 - B z0^2)^2) / 2)``: a twisted Gaussian with ``Z = 2 pi A``.

    The shear ``z1 -> z1 - B z0^2`` keeps volumes, so ``Z`` is the normal's.
    """

    A, B = 2.0, 0.8

    def __call__(self, z):
        return -0.5 * ((z[:, 0] / self.A) ** 2 + (z[:, 1] - self.B * z[:, 0] ** 2) ** 2)

    def value_and_gradient(self, z):
        shear = z[:, 1] - self.B * z[:, 0] ** 2
        grad = np.stack([-z[:, 0] / self.A**2 + 2 * self.B * z[:, 0] * shear, -shear], axis=1)
        return self(z), grad


def test_auto_uses_gradients_where_the_fitted_gaussian_fails():
    """Near Gaussian: independence proposals; on the banana's far end: HMC; log Z right."""
    base = GaussianBase(2, sd=5.0)
    kernel = SelfTuningMoves()
    group = smc(base, base.sample, Banana(), n_particles=2000, n_runs=4, seed=5,
                moves=kernel).smc
    moves = [call["move"] for call in kernel.history]
    assert moves[0] == "independence" and "hmc" in moves, moves
    truth = np.log(2 * np.pi * Banana.A)
    error = abs(group.attrs["log_z"] - truth)
    assert error < 4 * group.attrs["log_z_se"] + 0.05, (error, group.attrs["log_z_se"])
