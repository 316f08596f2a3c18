"""Programs whose parameters are a simplex: more values than unconstrained coordinates.

A simplex's values sum to one, so their covariance is singular. GPC's regions are
then taken in coordinates of the plane the values span, where Mahalanobis
distances are those of any ``C - 1`` of the values (checked against the plain
inverse on the first ``C - 1``). The plug-in's ``H`` and ``J`` stay on Stan's
unconstrained scale, on dims of their own. With two categories every resample's
Gibbs posterior is a Beta (the flat Dirichlet prior, the loss ``-log p[y]``
weighted by ``omega`` times the resample's counts), so GPC's covering count and
root are exact.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from scipy.special import gammaln

from stanflow import arviz_compat
from stanflow.gibbs import (
    LossProgram,
    StanBackend,
    calibrate_gpc,
    calibrate_holmes_walker,
    calibrate_importance,
    calibrate_path,
    calibrate_plugin,
    gibbs_path,
)
from stanflow.gibbs.gpc import bootstrap_indices, draws_inside
from stanflow.gibbs.gpc.regions import span_coordinates
from stanflow.gibbs.gpc.reweighting import ellipsoid_coverage, resample_counts
from stanflow.gibbs.path.coverage import region_statistic, region_statistic_per_resample

STAN = Path(__file__).parent / "stan"
B, TARGET = 200, 190  # GPC's defaults: (1 - alpha) B resamples must cover
ROOT_TOL = 4.0
"""The root agrees with the exact one within this many of its stated errors (plus the bracket)."""


def categorical(categories, y):
    return LossProgram(STAN / "categorical_simplex.stan",
                       {"C": categories, "N": len(y), "y": y})


def mahalanobis(draws, estimate):
    """The draws' and the estimate's squared distances from the draws' mean (plain inverse)."""
    mean = draws.mean(axis=0)
    inverse = np.linalg.inv(np.cov(draws, rowvar=False))
    d_draws = np.einsum("sk,kl,sl->s", draws - mean, inverse, draws - mean)
    return d_draws, (estimate - mean) @ inverse @ (estimate - mean)


def test_span_coordinates_keep_the_distances_of_all_but_one_value():
    rng = np.random.default_rng(0)
    p = rng.dirichlet([4.0, 6.0, 9.0], size=3000)
    estimate = np.array([0.3, 0.3, 0.4])
    spanned, point = span_coordinates(p, estimate)
    assert spanned.shape == (3000, 2)
    for ours, plain in zip(mahalanobis(spanned, point), mahalanobis(p[:, :2], estimate[:2]),
                           strict=True):
        np.testing.assert_allclose(ours, plain, rtol=1e-8)
    # Draws that span every direction are returned as they are.
    first, point = p[:, :2], estimate[:2]
    assert span_coordinates(first, point) == (first, point)


def test_each_region_of_a_simplex_is_its_first_values_region():
    """The three region kernels on Dirichlet draws match themselves on C - 1 values."""
    rng = np.random.default_rng(1)
    p = rng.dirichlet([5.0, 7.0, 8.0], size=2000)
    estimate = np.array([0.2, 0.35, 0.45])
    log_w = rng.normal(scale=0.3, size=(40, 2000))
    w = np.exp(log_w) / np.exp(log_w).sum(axis=1, keepdims=True)
    np.testing.assert_array_equal(ellipsoid_coverage(p, w, estimate, 0.05),
                                  ellipsoid_coverage(p[:, :2], w, estimate[:2], 0.05))
    # The region statistic takes log weights as -omega loss + log base: loss = -log_w.
    both = [region_statistic(draws, -log_w, np.zeros(2000), 1.0, point)
            for draws, point in ((p, estimate), (p[:, :2], estimate[:2]))]
    np.testing.assert_allclose(both[0][0], both[1][0], atol=1e-4)  # float32 kernels
    np.testing.assert_allclose(both[0][1], both[1][1], rtol=1e-5)
    per_resample = p.reshape(20, 100, 3)
    np.testing.assert_array_equal(draws_inside(per_resample, estimate, 0.05),
                                  draws_inside(per_resample[:, :, :2], estimate[:2], 0.05))
    # Particles moved to each resample, measured in the full posterior's covariance.
    log_w = log_w[:20, :100]
    both = [region_statistic_per_resample(draws, log_w, point,
                                          np.cov(draws.reshape(-1, k), rowvar=False))
            for draws, point, k in ((per_resample, estimate, 3),
                                    (per_resample[:, :, :2], estimate[:2], 2))]
    np.testing.assert_allclose(both[0], both[1], rtol=1e-10)


@pytest.mark.e2e
def test_the_path_of_a_simplex_gives_the_dirichlets_log_z_and_means(cmdstan):
    """Under the flat Dirichlet prior the Gibbs posterior at omega is Dirichlet(1 + omega n_c):
    ``Z(omega) = Gamma(C) prod_c Gamma(1 + omega n_c) / Gamma(C + omega N)``."""
    y = np.random.default_rng(4).choice([1, 2, 3], size=50, p=[0.2, 0.3, 0.5])
    counts = np.bincount(y, minlength=4)[1:]
    result = gibbs_path(categorical(3, y), omega_max=2.0, seed=7)
    path = arviz_compat.group(result, "path")
    levels = zip(path["omega"].values, path["log_z"].values, path["log_z_se"].values, strict=True)
    for omega, log_z, se in levels:
        exact = gammaln(3) + np.sum(gammaln(1 + omega * counts)) - gammaln(3 + omega * len(y))
        assert abs(log_z - exact) <= 4 * se + 0.02, omega
    table = arviz_compat.group(result, "path_functionals")
    for omega in (0.5, 1.0, 2.0):
        row = table.sel(omega=omega, method="nearest")
        alpha = 1 + float(row["omega"]) * counts
        np.testing.assert_allclose(row["mean"].values, alpha / alpha.sum(),
                                   atol=4 * float(row["mean_se"].max()) + 1e-3)


@pytest.mark.e2e
def test_plugin_of_a_categorical_likelihood_is_one(cmdstan):
    """At the maximum likelihood estimate of a multinomial, H = J in any coordinates: omega = 1."""
    y = np.random.default_rng(2).integers(1, 4, size=40)
    program = categorical(3, y)
    c = arviz_compat.group(calibrate_plugin(program), "calibration")
    assert c.attrs["scale"] == "unconstrained"
    assert c["estimate"].dims == ("param",) and list(c["param"].values) == ["p[1]", "p[2]",
                                                                              "p[3]"]
    np.testing.assert_allclose(c["estimate"].values, np.bincount(y, minlength=4)[1:] / len(y),
                               atol=1e-5)
    assert c["sensitivity"].dims == ("coord", "coord2")
    assert list(c["coord"].values) == ["u[1]", "u[2]"]
    np.testing.assert_allclose(c["sensitivity"].values, c["variability"].values, atol=1e-5)
    assert float(c["omega"]) == pytest.approx(1.0, abs=1e-5)
    holmes_walker = arviz_compat.group(calibrate_holmes_walker(program), "calibration")
    assert float(holmes_walker["omega"]) == pytest.approx(1.0, abs=1e-5)


def beta_count(counts, estimate):
    """``omega ->`` resamples whose exact Beta posterior's region holds the estimate: the
    posterior mass strictly closer to its mean than the estimate is at most 0.95."""

    def count(omega):
        a, b = 1 + omega * counts[:, 0], 1 + omega * counts[:, 1]
        mean = a / (a + b)
        gap = np.abs(estimate - mean)
        closer = stats.beta.cdf(mean + gap, a, b) - stats.beta.cdf(mean - gap, a, b)
        return int(np.sum(closer <= 0.95))

    return count


def exact_root(count, lo=0.01, hi=100.0):
    """Where an exact covering count (decreasing in omega) crosses the target, by bisection."""
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if count(mid) > TARGET - 0.5 else (lo, mid)
    return math.sqrt(lo * hi)


@pytest.mark.e2e
@pytest.mark.parametrize("method", ["path", "path transport", "importance"])
def test_gpc_root_of_a_two_category_simplex_is_the_exact_betas(cmdstan, method):
    y = np.where(np.random.default_rng(3).random(60) < 0.3, 1, 2)
    program = categorical(2, y)
    result = {
        "path": lambda: calibrate_path(program, seed=5),
        "path transport": lambda: calibrate_path(program, seed=5, resamples="transport"),
        "importance": lambda: calibrate_importance(program, seed=5),
    }[method]()
    c = arviz_compat.group(result, "calibration")
    estimate = c["estimate"].values
    np.testing.assert_allclose(estimate, [np.mean(y == 1), np.mean(y == 2)], atol=1e-5)
    indices = bootstrap_indices(len(y), B, np.random.SeedSequence(5))
    ones = resample_counts(indices, len(y)) @ np.column_stack([y == 1, y == 2])
    truth = exact_root(beta_count(ones, estimate[0]))
    root, se = float(c["omega"]), float(c["omega_se"])
    assert abs(root - truth) <= ROOT_TOL * se + 2 * c.attrs["xtol"] * root, (root, truth, se)


@pytest.mark.e2e
@pytest.mark.parametrize("design", ["reweight", "resample"])
def test_syring_martins_steps_cover_as_the_exact_betas(cmdstan, design):
    """Each step's coverage (draws read back from CmdStan's files) is the exact count's."""
    y = np.where(np.random.default_rng(3).random(60) < 0.3, 1, 2)
    resamples = 60
    c = arviz_compat.group(calibrate_gpc(
        categorical(2, y), backend=StanBackend(design=design, draws=1000), B=resamples, seed=6,
        max_steps=3), "calibration")
    indices = bootstrap_indices(len(y), resamples, np.random.SeedSequence(6))
    ones = resample_counts(indices, len(y)) @ np.column_stack([y == 1, y == 2])
    count = beta_count(ones, float(c["estimate"].values[0]))
    exact = [count(omega) / resamples for omega in c["omega_path"].values]
    np.testing.assert_allclose(c["coverage_path"].values, exact, atol=3 / resamples)


@pytest.mark.e2e
def test_a_shape_is_refused_on_a_simplex_before_any_work(cmdstan):
    program = categorical(3, np.random.default_rng(2).integers(1, 4, size=40))
    for calibrate in (calibrate_path, calibrate_importance):
        with pytest.raises(ValueError, match=r"unconstrained scale .* use adjust='none'"):
            calibrate(program, adjust="sandwich")
