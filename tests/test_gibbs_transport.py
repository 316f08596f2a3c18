"""GPC with particles moved to every resample (:mod:`stanflow.gibbs.path.transport`).

Truths: the exact bootstrap fixed point of a location problem on a grid; each
resample's Gibbs posterior sampled by NUTS (the resample design) for a
regression with ten coefficients; the chi-square law of Mahalanobis distances
of Gaussian draws; each resample's total loss summed from the program's own
per-observation losses.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chi2, norm, truncnorm

from stanflow import arviz_compat
from stanflow.gibbs import GridBackend, calibrate_gpc, linear_program, location_program, posterior
from stanflow.gibbs.gpc.algorithm import bootstrap_indices
from stanflow.gibbs.gpc.reweighting import resample_counts
from stanflow.gibbs.path import LearningRatePath, PathSampler, bridge, path_gpc
from stanflow.gibbs.path.coverage import (
    LOW_ESS,
    BootstrapProblem,
    PathCoverage,
    cross_fit_variance,
    inside_and_flip,
    region_statistic_per_resample,
)
from stanflow.gibbs.path.resamples import prior_and_resample_loss
from stanflow.gibbs.path.transport import TransportCoverage
from stanflow.gibbs.plugin import location_estimate
from stanflow.losses import loss_function


def regression(n, K, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.normal(size=(n, K - 1))])
    y = X @ np.r_[1.0, np.zeros(K - 1)] + rng.normal(size=n)
    return linear_program(y, X, loss="check", loss_params={"tau": 0.5}, prior="normal",
                          prior_params={"mean": 0, "sd": 10})


def test_the_region_statistic_of_gaussian_draws_is_the_chi_square_cdf():
    """Draws of N(m, C) measured in C: the weight of draws closer to the mean than a
    point at squared distance r is the chi-square CDF at r, whatever the weights' design."""
    rng = np.random.default_rng(1)
    K, S = 4, 40000
    M = rng.normal(size=(K, K))
    C = M @ M.T + np.eye(K)
    L = np.linalg.cholesky(C)
    theta = (rng.normal(size=(3, S, K)) @ L.T) + 2.0
    points = 2.0 + np.array([0.5, 1.5, 2.5])[:, None] * (L @ np.ones(K))
    for b, point in enumerate(points):
        stat = region_statistic_per_resample(theta[b:b + 1], np.zeros((1, S)), point, C)[0]
        r = (point - 2.0) @ np.linalg.solve(C, point - 2.0)
        assert stat == pytest.approx(chi2.cdf(r, K), abs=0.01)



@pytest.mark.parametrize("K", [5, 20])
def test_the_statistics_spread_is_binomial_plus_the_cross_fitted_centres(K):
    """Replicates of S Gaussian draws, the estimate at the 95% distance: the statistic's
    variance over replicates is ``(p (1 - p) + cross_fit_variance) / S``, not the binomial
    ``p (1 - p) / S`` alone (1.35-1.39 times larger at these K)."""
    rng = np.random.default_rng([2, K])
    replicates, S, p = 4000, 400, 0.95
    theta = rng.normal(size=(replicates, S, K))
    point = np.zeros(K)
    point[0] = math.sqrt(chi2.ppf(p, K))
    stat = region_statistic_per_resample(theta, np.zeros((replicates, S)), point, np.eye(K))
    predicted = (p * (1 - p) + cross_fit_variance(K, 1 - p)) / S
    assert np.var(stat) == pytest.approx(predicted, rel=0.1)
    assert np.var(stat) > 1.2 * p * (1 - p) / S
    _, flip = inside_and_flip(np.array([p - 0.02]), np.array([S]), 1 - p, False,
                              cross_fit_variance(K, 1 - p))
    assert flip[0] == pytest.approx(norm.cdf(-0.02 / math.sqrt(predicted)))

@pytest.mark.e2e
def test_resample_losses_are_the_programs(cmdstan):
    """The box's one-row route: each resample's loss equals the sum of the program's
    per-observation losses weighted by its counts."""
    program = regression(80, 3)
    path = LearningRatePath(program, sampler=PathSampler(n_particles=1000), seed=0)
    counts = resample_counts(bootstrap_indices(80, 4, np.random.SeedSequence(2)), 80)
    z = np.random.default_rng(3).normal(1.0, 0.3, size=(4, 25, 3)) * [1, 0.1, 0.1]
    prior, loss = prior_and_resample_loss(path.target, z, counts.astype(float))
    for b in range(4):
        exact = program.losses(path.target.unconstrained(z[b])) @ counts[b]
        np.testing.assert_allclose(loss[b], exact, rtol=0, atol=1e-9 * np.abs(exact).max())
        np.testing.assert_allclose(prior[b], path.target.log_prior(z[b]))


@pytest.mark.e2e
def test_root_equals_the_bootstrap_fixed_point_of_a_location(cmdstan):
    """As the reweight design's test (tests/test_gibbs_path.py): the median of
    Gamma(2, 1) data, n = 100, B = 200; the transported root lies within its stated
    error (plus the count's plateau) of GPC's own fixed point on the exact grid."""
    rng = np.random.default_rng(12)
    for r in range(2):
        y = rng.gamma(2.0, 1.0, 100)
        estimate = location_estimate(y, loss_function("absolute"), 0.0, 8.0)
        program = location_program(y, bounds=(0, 8))
        path = LearningRatePath(program, sampler=PathSampler(n_particles=4000, n_moves=3), seed=r)
        c = path_gpc(path, [estimate], seed=r, resamples="transport")
        assert c.attrs["resamples"] == "transport" and bool(c["converged"])
        root, se = float(c["omega"]), float(c["omega_se"])
        fixed = calibrate_gpc(program, backend=GridBackend(801), seed=r, estimate=estimate,
                              eps=0.0, max_steps=300).calibration
        plateau = 1 / abs(float(c["count_slope"]))
        assert abs(root - float(fixed["omega"])) < 3 * se + plateau, (r, root, float(fixed["omega"]))
        assert float(c["low_ess_share"]) == 0 and int(c["resample_moves"]) >= 200


@pytest.mark.e2e
def test_the_first_order_root_is_the_exact_root_of_squared_loss(cmdstan):
    """Squared loss on a location (flat prior): resample b's Gibbs posterior at omega is
    exactly N(mean_b, 1 / (2 omega n)), its interval holds the data's mean while
    2 omega n (mean_b - mean)^2 <= chi2_1(0.95), so GPC's root over the resamples' own means
    is chi2_1(0.95) / the 95% quantile of 2 n (mean_b - mean)^2: where the search starts."""
    y = np.random.default_rng(8).normal(3.0, 1.5, 80)
    program = location_program(y, loss="squared", bounds=(-20, 20))
    path = LearningRatePath(program, sampler=PathSampler(n_particles=500, n_moves=1), seed=0)
    indices = bootstrap_indices(len(y), 200, np.random.SeedSequence(4))
    problem = BootstrapProblem(path, indices, np.array([y.mean()]), 0.05)
    distances = 2 * len(y) * (y[indices].mean(axis=1) - y.mean()) ** 2
    exact = chi2.ppf(0.95, 1) / np.quantile(distances, 0.95)
    assert TransportCoverage(problem).first_order_root() == pytest.approx(exact, rel=1e-6)


@pytest.mark.e2e
def test_each_resample_matches_its_nuts_posterior_with_ten_coefficients(cmdstan):
    """K = 10, n = 300: every resample's region statistic against the same statistic
    from 10^4 NUTS draws of that resample's Gibbs posterior (the resample design).
    The differences, in the stated Monte Carlo standard errors, have mean near 0 and
    spread near 1 (the particles are importance samples with their own Kish sizes), and
    the count of covering resamples agrees within the errors of both. The
    reweighted path, on the same problem, is unhealthy."""
    n, K, B, omega = 300, 10, 24, 1.0
    program = regression(n, K, seed=5)
    estimate = program.estimate().theta
    path = LearningRatePath(program, sampler=PathSampler(n_particles=2000, n_moves=3), seed=1)
    indices = bootstrap_indices(n, B, np.random.SeedSequence(1))
    problem = BootstrapProblem(path, indices, estimate, 0.05)
    coverage = TransportCoverage(problem, seed=2)
    found = coverage(omega)
    assert found.low_ess == 0 and found.ess_min >= LOW_ESS
    placed = coverage.placement
    assert placed is not None
    ours = region_statistic_per_resample(
        coverage._theta(placed.z), placed.log_weights(omega), estimate, coverage.region)
    ess = placed.ess(omega)
    counts = resample_counts(indices, n)
    z, nuts_inside = [], 0
    for b in range(B):
        fit = posterior(program, omega=omega, weights=counts[b], chains=2, iter_sampling=5000,
                        seed=b)
        draws = arviz_compat.group(fit, "posterior")["beta"].values.reshape(1, -1, K)
        truth = float(region_statistic_per_resample(
            draws, np.zeros(draws.shape[:2]), estimate, coverage.region)[0])
        nuts_inside += truth <= 0.95
        z.append((ours[b] - truth) / math.sqrt(max(truth * (1 - truth), 0.01) / ess[b]))
    z = np.array(z)
    assert abs(z.mean()) < 3 * 1.5 / math.sqrt(B) + 0.3, z
    assert 0.5 < z.std() < 1.5, z
    assert abs(found.count - nuts_inside) <= 3 * math.sqrt(found.count_variance + 1) + 1
    reweighted = PathCoverage(problem, 0.25)(omega)
    assert reweighted.low_ess > found.low_ess


def exact_gaussian_regression(n, K):
    """Squared loss and a N(0, 10^2) prior: every (weighted) Gibbs posterior is Gaussian."""
    rng = np.random.default_rng(11)
    X = np.column_stack([np.ones(n), rng.normal(size=(n, K - 1))])
    y = X[:, 0] + rng.normal(size=n)
    program = linear_program(y, X, loss="squared", prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    return X, y, program


@pytest.mark.e2e
def test_resamples_bridged_by_smc_match_their_exact_posteriors(cmdstan):
    """K = 25, n = 75 (three observations per coefficient), squared loss and a
    N(0, 10^2) prior: each resample's Gibbs posterior is Gaussian with precision
    ``I / 100 + 2 omega X' C X`` and mean ``2 omega P^-1 X' C y``. With the
    independence sampler off, the resamples that importance sampling leaves
    short are bridged by SMC with HMC moves; their particles' means sit from
    the exact means as their stated effective sizes imply (squared
    standardised errors average at most about ``K / ESS``: the clustered
    effective size is not overstated), and their spread is the posterior's."""
    n, K, B, omega = 75, 25, 16, 1.0
    X, y, program = exact_gaussian_regression(n, K)
    estimate = program.estimate().theta
    path = LearningRatePath(program, sampler=PathSampler(n_particles=2000, n_moves=3), seed=1)
    indices = bootstrap_indices(n, B, np.random.SeedSequence(3))
    problem = BootstrapProblem(path, indices, estimate, 0.05)
    coverage = TransportCoverage(problem, seed=4, max_steps=0)
    found = coverage(omega)
    assert coverage.hmc_moves >= B // 2, coverage.hmc_moves
    assert 0.5 < coverage.hmc_acceptance < 0.95
    placed = coverage.placement
    assert placed is not None
    by_hmc = np.flatnonzero(placed.efficiency < 1)
    assert by_hmc.size >= B // 2
    assert found.ess_min >= LOW_ESS
    counts = resample_counts(indices, n)
    ratios, spreads = [], []
    for b in by_hmc:
        precision = np.eye(K) / 100 + 2 * omega * (X.T * counts[b]) @ X
        exact = np.linalg.solve(precision, 2 * omega * (X.T * counts[b]) @ y)
        theta = placed.z[b]
        error = np.linalg.cholesky(precision).T @ (theta.mean(axis=0) - exact)
        ratios.append(float(error @ error) / (K / placed.ess(omega)[b]))
        spreads.append(np.trace(precision @ np.cov(theta, rowvar=False)) / K)
    assert np.mean(ratios) < 1.5, ratios
    assert np.median(spreads) == pytest.approx(1.0, abs=0.15), spreads


@pytest.fixture
def carried(monkeypatch):
    """A list that grows by one each time a population is carried from a Gaussian by SMC."""
    calls = []
    tempered = bridge._tempered_population
    monkeypatch.setattr(bridge, "_tempered_population",
                        lambda *a: calls.append(1) or tempered(*a))
    return calls


@pytest.mark.e2e
def test_population_from_a_poor_anchor_is_carried_by_smc(cmdstan, carried):
    """The full data's population where the anchor's t keeps almost no draw effective
    (its mean 3 posterior sds off in each of 25 coordinates, its spread half the
    posterior's): carried from a Gaussian by SMC, it has the exact Gaussian posterior's
    mean (within what 400 draws allow) and spread, from tens of families (24-35 over
    three seeds), where resampling the t's draws leaves 1-8: every bridge's families
    descend from them, and a few large ones measure its effective size too noisily."""
    n, K, omega, S = 75, 25, 1.0, 400
    X, y, program = exact_gaussian_regression(n, K)
    precision = np.eye(K) / 100 + 2 * omega * X.T @ X
    exact = np.linalg.solve(precision, 2 * omega * X.T @ y)
    root = np.linalg.cholesky(precision)
    far = exact + np.linalg.solve(root.T, np.full(K, 3.0))
    target = LearningRatePath(program).target
    u, families, _ = bridge.full_population(target, np.random.default_rng(0), far,
                                            0.5 * np.linalg.inv(precision), omega, S)
    assert carried
    assert len(np.unique(families)) >= 15
    error = root.T @ (u.mean(axis=0) - exact)
    assert float(error @ error) / (K / S) < chi2.ppf(0.999, K) / K * 1.5
    assert np.trace(precision @ np.cov(u, rowvar=False)) / K == pytest.approx(1.0, abs=0.15)


@pytest.mark.e2e
def test_population_on_a_box_from_a_poor_anchor(cmdstan, carried):
    """The same on a shipped prior's box (the particles' scale not Stan's): squared loss
    and a uniform prior on [-1, 3], data centred near the bound, so the Gibbs posterior
    at omega = 1 is a normal truncated at 3. From an anchor 15 posterior sds off, the
    population's mean and sd are the truncated normal's (within what 400 draws allow)."""
    y = np.random.default_rng(2).normal(2.9, 1.0, size=20)
    program = location_program(y, loss="squared", bounds=(-1, 3))
    target = LearningRatePath(program).target
    assert target.space == "box"
    sd = 1 / math.sqrt(2 * len(y))
    truth = truncnorm((-1 - y.mean()) / sd, (3 - y.mean()) / sd, y.mean(), sd)
    u, _, _ = bridge.full_population(target, np.random.default_rng(0),
                                     np.array([truth.mean() - 15 * truth.std()]),
                                     np.array([[0.25 * truth.var()]]), 1.0, 400)
    theta = program.constrain(u)[:, 0]
    assert carried
    assert abs(theta.mean() - truth.mean()) < 4 * truth.std() / math.sqrt(400 * 0.5)
    assert theta.std() == pytest.approx(truth.std(), rel=0.15)
    assert theta.max() <= 3


@pytest.mark.e2e
def test_unhealthy_resamples_are_reported_never_hidden(cmdstan):
    """Built to fail: a uniform prior on [5, 8] far from data centred at 0, so every
    posterior piles against the bound and the influence of a resample, through a
    curvature near 0, points far outside the prior. Without the SMC bridges
    (``max_hmc=0``) the result reports the resamples read from fewer than LOW_ESS
    effective draws and warns."""
    y = np.random.default_rng(0).normal(size=60)
    program = location_program(y, loss="squared", bounds=(5, 8))
    path = LearningRatePath(program, sampler=PathSampler(n_particles=1000), seed=0)
    indices = bootstrap_indices(60, 40, np.random.SeedSequence(0))
    found = TransportCoverage(BootstrapProblem(path, indices, np.array([5.05]), 0.05),
                              seed=0, max_hmc=0)(1.0)
    assert found.low_ess > 0


@pytest.mark.e2e
def test_the_bridge_reaches_posteriors_piled_on_a_bound(cmdstan):
    """The case above with the SMC bridges on: every resample is healthy, and its
    region statistic (the posterior CDF at the estimate 5.05) is the truncated
    normal's, ``N(mean_b, 1 / (2 omega sum c_b))`` on [5, 8], within its stated error."""
    from scipy.stats import truncnorm

    y = np.random.default_rng(0).normal(size=60)
    program = location_program(y, loss="squared", bounds=(5, 8))
    path = LearningRatePath(program, sampler=PathSampler(n_particles=1000), seed=0)
    B, omega, estimate = 40, 1.0, 5.05
    indices = bootstrap_indices(60, B, np.random.SeedSequence(0))
    coverage = TransportCoverage(BootstrapProblem(path, indices, np.array([estimate]), 0.05),
                                 seed=0)
    found = coverage(omega)
    assert found.low_ess == 0 and coverage.hmc_moves > 0
    placed = coverage.placement
    assert placed is not None
    ours = region_statistic_per_resample(
        coverage._theta(placed.z), placed.log_weights(omega), np.array([estimate]),
        coverage.region)
    ess = placed.ess(omega)
    counts = resample_counts(indices, 60)
    z = []
    for b in range(B):
        mean, sd = counts[b] @ y / counts[b].sum(), 1 / math.sqrt(2 * omega * counts[b].sum())
        truth = truncnorm.cdf(estimate, (5 - mean) / sd, (8 - mean) / sd, loc=mean, scale=sd)
        z.append((ours[b] - truth) / math.sqrt(max(truth * (1 - truth), 0.01) / ess[b]))
    assert abs(np.mean(z)) < 0.6 and np.std(z) < 1.5, z


def test_bad_input_is_named():
    y = np.random.default_rng(0).normal(size=30)
    program = location_program(y, bounds=(-5, 5))
    path = LearningRatePath(program, sampler=PathSampler(n_particles=1000), seed=0)
    indices = bootstrap_indices(30, 10, np.random.SeedSequence(0))
    problem = BootstrapProblem(path, indices, np.array([0.0]), 0.05)
    with pytest.raises(ValueError, match="draws must be an integer >= 10"):
        TransportCoverage(problem, draws=5)
    with pytest.raises(ValueError, match="target_ess must be in"):
        TransportCoverage(problem, target_ess=1.5)
    with pytest.raises(ValueError, match="estimate must be finite with 1 value"):
        TransportCoverage(problem._replace(estimate=np.array([0.0, 1.0])))
    with pytest.raises(ValueError, match="resamples must be one of"):
        path_gpc(path, [0.0], resamples="bootstrap")


def test_the_docs_state_the_cross_fitted_centres_share():
    """docs/gibbs.md and docs/benchmarks.md quote the centre's variance as a share of the
    binomial ``p (1 - p)`` at alpha = 0.05: 0.32-0.41 for K = 2 to 50, 0.37-0.39 at K = 10-20."""
    from pathlib import Path

    docs = Path(__file__).resolve().parent.parent / "docs"
    share = {K: cross_fit_variance(K, 0.05) / (0.95 * 0.05) for K in (2, 10, 20, 50)}
    wide, narrow = f"{share[2]:.2f}-{share[50]:.2f}", f"{share[10]:.2f}-{share[20]:.2f}"
    assert wide == "0.32-0.41" and narrow == "0.37-0.39"
    assert f"{wide} times\n`p (1 - p)` for K = 2 to 50" in (docs / "gibbs.md").read_text()
    assert f"{narrow} times the binomial term at K = 10-20" in (docs / "benchmarks.md").read_text()
    assert all(share[a] < share[b] for a, b in ((2, 10), (10, 20), (20, 50)))
