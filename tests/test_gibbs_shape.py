"""The shape fix (:mod:`stanflow.gibbs.shape`): draws moved to the sandwich's shape.

Truths: the defining identities of the map (``A C A = c S``, volume kept,
mean kept), the identity in one dimension, White's heteroscedasticity-consistent
covariance for least squares (the sandwich in closed form), a brute-force
count of GPC's adjusted regions from explicitly moved draws, and a Gaussian
Gibbs posterior whose adjusted intervals have the sandwich's width ratio.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from stanflow import arviz_compat
from stanflow.gibbs import (
    LossProgram,
    calibrate_importance,
    calibrate_path,
    calibrate_plugin,
    linear_program,
    posterior,
)
from stanflow.gibbs.gpc import bootstrap_indices
from stanflow.gibbs.path.calibration import rule_posteriors
from stanflow.gibbs.path.coverage import region_statistic
from stanflow.gibbs.path.resample_means import bootstrap_shape, warn_short_means
from stanflow.gibbs.shape import (
    SingularDrawsError,
    adjust_draws,
    check_shape,
    sandwich_shape,
    transport_map,
    volume_scale,
)

STAN = Path(__file__).parent / "stan"


def random_spd(rng, K):
    M = rng.normal(size=(K, K))
    return M @ M.T + 0.5 * np.eye(K)


def weighted_moments(x, w):
    w = w / w.sum()
    mean = w @ x
    centred = x - mean
    return mean, (centred * w[:, None]).T @ centred


@pytest.mark.parametrize("K", [2, 3, 6])
def test_the_transport_map_takes_one_covariance_to_the_other(K):
    rng = np.random.default_rng(K)
    C, T = random_spd(rng, K), random_spd(rng, K)
    A = transport_map(C, T)
    np.testing.assert_allclose(A @ C @ A, T, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(A, A.T, atol=1e-12)
    assert np.linalg.eigvalsh(A)[0] > 0
    np.testing.assert_allclose(transport_map(C, C), np.eye(K), atol=1e-10)


@pytest.mark.parametrize("K", [2, 4])
def test_adjusted_draws_keep_mean_and_volume_and_take_the_shape(K):
    rng = np.random.default_rng(10 + K)
    C, S = random_spd(rng, K), random_spd(rng, K)
    draws = rng.multivariate_normal(rng.normal(size=K), C, size=3000)
    weights = rng.uniform(0.1, 1.0, size=3000)
    moved = adjust_draws(draws, 7.0 * S, weights)
    mean0, cov0 = weighted_moments(draws, weights)
    mean1, cov1 = weighted_moments(moved, weights)
    np.testing.assert_allclose(mean1, mean0, atol=1e-10)
    assert np.linalg.det(cov1) == pytest.approx(np.linalg.det(cov0), rel=1e-9)
    # The shape is S's, whatever S's size: cov1 = c S with c from the volumes.
    c = volume_scale(cov0, S)
    np.testing.assert_allclose(cov1, c * S, rtol=1e-8, atol=1e-12)


def test_one_parameter_is_left_as_it_is():
    draws = np.random.default_rng(0).gamma(2.0, size=(500, 1))
    np.testing.assert_allclose(adjust_draws(draws, [[9.0]]), draws, atol=1e-12)


def test_rule_posteriors_give_a_nan_interval_where_the_draws_cannot_be_moved():
    """One draw carries all the weight of the "far" rule: its covariance is singular, so its
    interval under the shape fix is NaN while its mean is that draw; the other rule's
    interval is the moved draws' own quantiles."""
    rng = np.random.default_rng(2)
    draws = rng.normal(size=(4000, 2))

    def read(omega):
        if omega > 1:
            weights = np.zeros(len(draws))
            weights[7] = 1.0
            return draws, weights, 1.0
        return draws, np.full(len(draws), 1 / len(draws)), float(len(draws))

    shape = np.array([[1.0, 0.6], [0.6, 1.0]])
    out = rule_posteriors(read, {"near": 1.0, "far": 5.0}, ["a", "b"], shape=shape)
    assert np.isnan(out["rule_interval"].sel(rule="far").values).all()
    np.testing.assert_allclose(out["rule_mean"].sel(rule="far").values, draws[7])
    moved = adjust_draws(draws, shape)
    np.testing.assert_allclose(out["rule_interval"].sel(rule="near").values,
                               np.quantile(moved, [0.025, 0.975], axis=0), rtol=0.02)


def test_bad_input_names_the_field():
    draws = np.random.default_rng(0).normal(size=(50, 2))
    with pytest.raises(ValueError, match=r"shape must be 2 x 2"):
        adjust_draws(draws, np.eye(3))
    with pytest.raises(ValueError, match="positive definite"):
        adjust_draws(draws, np.diag([1.0, -1.0]))
    with pytest.raises(ValueError, match="symmetric"):
        check_shape([[1.0, 0.5], [0.0, 1.0]])
    with pytest.raises(ValueError, match="weights must be 50"):
        adjust_draws(draws, np.eye(2), weights=np.ones(49))
    with pytest.raises(SingularDrawsError, match="singular"):
        adjust_draws(np.ones((50, 2)), np.eye(2))
    with pytest.raises(ValueError, match="H and J must be square"):
        sandwich_shape(np.eye(2), np.eye(3))


def test_bootstrap_shape_is_the_covariance_of_the_tilted_means():
    """Draws of N(0, I) weighted by exp(a_b . theta) (the loss -a_b . theta / omega) are
    N(a_b, I) for resample b: each mean is a_b, and the shape is the a_b's covariance."""
    rng = np.random.default_rng(5)
    S, B, K, omega = 200_000, 60, 2, 2.0
    draws = rng.normal(size=(S, K))
    tilts = rng.multivariate_normal(np.zeros(K), [[0.04, 0.03], [0.03, 0.09]], size=B)
    shape, ess = bootstrap_shape(draws, -(tilts @ draws.T) / omega, np.zeros(S), omega)
    # A mean's Monte Carlo sd is about 1 / sqrt(ESS) = 0.003, against the tilts' 0.2-0.3.
    np.testing.assert_allclose(shape, np.cov(tilts, rowvar=False), atol=2e-3)
    want_ess = S * np.exp(-np.sum(tilts**2, axis=1))  # S / E[w^2] for w = exp(a.theta - |a|^2 / 2)
    np.testing.assert_allclose(ess, want_ess, rtol=0.1)


def test_bootstrap_shape_names_what_it_cannot_read():
    draws = np.random.default_rng(0).normal(size=(100, 3))
    with pytest.raises(ValueError, match="B must exceed 3, got 3"):
        bootstrap_shape(draws, np.zeros((3, 100)), np.zeros(100), 1.0)
    with pytest.raises(ValueError, match="do not vary in every direction"):
        bootstrap_shape(draws, np.zeros((10, 100)), np.zeros(100), 1.0)
    # Means from 10 effective draws each: a tenth of a posterior's covariance is noise.
    with pytest.warns(RuntimeWarning, match=r"about 10% of the shape is Monte Carlo noise"):
        warn_short_means(np.full(50, 10.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_short_means(np.r_[np.full(45, 1000.0), np.full(5, 50.0)])


def test_region_statistic_with_a_shape_counts_the_moved_draws():
    """GPC's adjusted statistic from moments alone equals the weight of explicitly
    moved draws closer to the mean than the estimate, in their own covariance."""
    rng = np.random.default_rng(3)
    S, B, K = 2000, 5, 3
    draws = rng.multivariate_normal(np.zeros(K), random_spd(rng, K), size=S)
    resample_loss = rng.gamma(2.0, size=(B, S))
    log_base = rng.normal(scale=0.3, size=S)
    estimate = np.array([0.3, -0.2, 0.5])
    shape = random_spd(rng, K)
    omega = 0.7
    statistic, ess = region_statistic(draws, resample_loss, log_base, omega, estimate, shape)
    for b in range(B):
        log_w = -omega * resample_loss[b] + log_base
        w = np.exp(log_w - log_w.max())
        moved = adjust_draws(draws, shape, w)
        mean, cov = weighted_moments(moved, w)
        inverse = np.linalg.inv(cov)
        d_draws = np.einsum("sk,kl,sl->s", moved - mean, inverse, moved - mean)
        d_estimate = (estimate - mean) @ inverse @ (estimate - mean)
        brute = w[d_draws < d_estimate].sum() / w.sum()
        assert statistic[b] == pytest.approx(brute, abs=2e-3)  # float32 kernel
        assert ess[b] == pytest.approx(w.sum() ** 2 / (w**2).sum(), rel=1e-4)
    # Without a shape, and with the only resample's own shape, the statistic is the unadjusted one.
    plain, _ = region_statistic(draws, resample_loss[:1], log_base, omega, estimate)
    log_w = -omega * resample_loss[0] + log_base
    _, own = weighted_moments(draws, np.exp(log_w - log_w.max()))
    same, _ = region_statistic(draws, resample_loss[:1], log_base, omega, estimate, 3 * own)
    assert same[0] == pytest.approx(plain[0], abs=2e-3)


@pytest.mark.e2e
def test_least_squares_sandwich_is_whites_covariance(cmdstan):
    """Squared loss: H = 2 X'X / n, J = 4 sum e_i^2 x_i x_i' / n, so the sandwich is
    n times White's HC0 covariance (X'X)^-1 (sum e_i^2 x_i x_i') (X'X)^-1."""
    rng = np.random.default_rng(8)
    n = 300
    z = rng.normal(size=n)
    X = np.column_stack([np.ones(n), z])
    y = 1 + 2 * z + rng.normal(size=n) * (0.3 + np.abs(z))
    beta = np.linalg.lstsq(X, y, rcond=None)[0]
    c = calibrate_plugin(linear_program(y, X, loss="squared"), estimate=beta).calibration
    shape = sandwich_shape(c["sensitivity"].values, c["variability"].values)
    e = y - X @ beta
    bread = np.linalg.inv(X.T @ X)
    white = bread @ (X.T * e**2) @ X @ bread
    np.testing.assert_allclose(shape, n * white, rtol=1e-6)


@pytest.mark.e2e
def test_adjusted_intervals_have_the_sandwichs_shape(cmdstan):
    """Least squares with noise growing in |z|: the Gibbs posterior is Gaussian with
    covariance proportional to (X'X)^-1 (prior aside), whose slope/intercept width
    ratio is far from the sandwich's. With the fix, every rule's interval widths
    stand in the sandwich's ratio; without it, in (X'X)^-1's."""
    rng = np.random.default_rng(12)
    n = 200
    z = rng.normal(size=n)
    X = np.column_stack([np.ones(n), z])
    y = 1 + 2 * z + rng.normal(size=n) * (0.2 + z**2)
    program = linear_program(y, X, loss="squared", prior="normal",
                             prior_params={"mean": 0, "sd": 100})
    kwargs = {"seed": 4, "B": 100, "rules": ["plugin"]}
    plain_results = calibrate_path(program, **kwargs)
    # calibrate_path's own default sampler: 4000 particles, 3 random-walk moves
    path = arviz_compat.group(plain_results, "path")
    assert [path.attrs[k] for k in ("n_particles", "n_moves", "target_ess", "moves")] == [
        4000, 3, 0.5, "rwm"]
    plain = arviz_compat.group(plain_results, "calibration")
    fixed = calibrate_path(program, adjust="sandwich", **kwargs).calibration
    assert plain.attrs["adjust"] == "none" and fixed.attrs["adjust"] == "sandwich"
    plugin = arviz_compat.group(calibrate_plugin(program), "calibration")
    shape = sandwich_shape(plugin["sensitivity"].values, plugin["variability"].values)
    np.testing.assert_allclose(fixed["shape"].values, shape, rtol=1e-8)
    want_fixed = np.sqrt(shape[1, 1] / shape[0, 0])
    bread = np.linalg.inv(X.T @ X)
    want_plain = np.sqrt(bread[1, 1] / bread[0, 0])
    assert want_fixed / want_plain > 1.5  # the two shapes differ: the test can tell them apart
    for cal, want in ((plain, want_plain), (fixed, want_fixed)):
        width = cal["rule_interval"].sel(end="upper") - cal["rule_interval"].sel(end="lower")
        for rule in ("gpc_path", "plugin"):
            ratio = float(width.sel(rule=rule).isel(param=1) / width.sel(rule=rule).isel(param=0))
            assert ratio == pytest.approx(want, rel=0.08), (cal.attrs["adjust"], rule)
    # The fix leaves the rules' means where they were.
    np.testing.assert_allclose(fixed["rule_mean"].sel(rule="plugin"),
                               plain["rule_mean"].sel(rule="plugin"), rtol=1e-10)


@pytest.mark.e2e
def test_the_bootstrap_shape_is_the_resample_estimates_covariance(cmdstan):
    """Least squares with noise growing in |z| and a wide prior: each resample's posterior
    mean is its least-squares fit, so adjust="bootstrap"'s shape is the covariance of the
    resamples' fits (in shape; the volume is the learning rate's), far from (X'X)^-1's;
    by importance and on the path (reweighted, and moved to each resample), each rule's
    intervals stand in its ratio."""
    rng = np.random.default_rng(12)
    n, B, seed = 200, 100, 4
    z = rng.normal(size=n)
    X = np.column_stack([np.ones(n), z])
    y = 1 + 2 * z + rng.normal(size=n) * (0.2 + z**2)
    program = linear_program(y, X, loss="squared", prior="normal",
                             prior_params={"mean": 0, "sd": 100})
    fits = [np.linalg.lstsq(X[i], y[i], rcond=None)[0]
            for i in bootstrap_indices(n, B, np.random.SeedSequence(seed))]
    exact = np.cov(fits, rowvar=False)
    bread = np.linalg.inv(X.T @ X)
    assert np.sqrt(exact[1, 1] / exact[0, 0]) / np.sqrt(bread[1, 1] / bread[0, 0]) > 1.5
    designs = ((calibrate_path, "gpc_path", {"resamples": "reweight"}),
               (calibrate_path, "gpc_path", {"resamples": "transport"}),  # moved particles' means
               (calibrate_importance, "gpc", {}))
    for calibrate, gpc, design in designs:
        c = arviz_compat.group(calibrate(program, seed=seed, B=B, rules=["plugin"],
                                         adjust="bootstrap", **design), "calibration")
        assert c.attrs["adjust"] == "bootstrap"
        shape = c["shape"].values
        np.testing.assert_allclose(shape / np.sqrt(np.linalg.det(shape)),
                                   exact / np.sqrt(np.linalg.det(exact)), atol=0.1)
        width = c["rule_interval"].sel(end="upper") - c["rule_interval"].sel(end="lower")
        for rule in (gpc, "plugin"):
            ratio = float(width.sel(rule=rule).isel(param=1) / width.sel(rule=rule).isel(param=0))
            assert ratio == pytest.approx(np.sqrt(shape[1, 1] / shape[0, 0]), rel=0.08), rule


@pytest.mark.e2e
def test_nuts_at_a_shape_fixed_rate_says_how_to_move_its_draws(cmdstan):
    rng = np.random.default_rng(5)
    X = np.column_stack([np.ones(60), rng.normal(size=60)])
    program = linear_program(X @ [1.0, 2.0] + rng.normal(size=60), X, loss="squared",
                             prior="normal", prior_params={"mean": 0, "sd": 10})
    run = {"chains": 1, "iter_warmup": 100, "iter_sampling": 100, "seed": 1}
    fixed = calibrate_importance(program, seed=1, rules=[], adjust="sandwich")
    with pytest.warns(UserWarning, match=r"adjust='sandwich'.*adjust_draws"):
        posterior(program, omega=fixed, **run)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        posterior(program, omega=calibrate_importance(program, seed=1, rules=[]), **run)


@pytest.mark.e2e
def test_a_simplex_is_refused_by_the_bootstrap_shape_before_any_work(cmdstan):
    """An affine map of a simplex's three values leaves the simplex: refused, naming why."""
    y = np.random.default_rng(2).integers(1, 4, size=40)
    program = LossProgram(STAN / "categorical_simplex.stan", {"C": 3, "N": len(y), "y": y})
    assert (len(program.names), program.dim) == (3, 2)
    for calibrate in (calibrate_path, calibrate_importance):
        with pytest.raises(ValueError, match="3 parameter values have 2 unconstrained"):
            calibrate(program, adjust="bootstrap")


def test_bootstrap_adjustment_needs_more_resamples_than_parameters():
    X = np.column_stack([np.ones(30), np.arange(30.0), np.arange(30.0) ** 0.5])
    y = np.random.default_rng(0).normal(size=30)
    with pytest.raises(ValueError, match="B must exceed the 3 parameters"):
        calibrate_path(linear_program(y, X, bounds=(-5, 5)), adjust="bootstrap", B=3)


def test_an_unknown_adjustment_is_named():
    y = np.random.default_rng(0).normal(size=30)
    with pytest.raises(ValueError, match="adjust must be one of"):
        calibrate_path(linear_program(y, np.ones((30, 1)), bounds=(-5, 5)), adjust="affine")
