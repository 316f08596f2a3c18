"""The learning-rate path of the templates' loss programs against exact answers.

Truths: the exact grid posteriors and ``log Z_n(omega)`` of
``stanflow.gibbs.grid``; the closed form of the squared loss with a normal prior;
the exact bootstrap coverage on the grid and GPC's own fixed point (many
Robbins-Monro steps with ``eps = 0``).

Tolerances come from the particles' effective sample size. For a CDF read from
``ESS`` effectively independent particles the Dvoretzky-Kiefer-Wolfowitz
inequality gives ``P(sup |F_hat - F| > e) <= 2 exp(-2 ESS e^2)``; over ``m``
comparisons at total failure probability ``DELTA`` that is
``e = sqrt(log(2 m / DELTA) / (2 ESS))``. At a schedule point the particles
were resampled from the previous one, so the ESS used is that of the
incremental weights into it (about ``N / 2``), not ``N``; between schedule
points it is the Kish ESS of the reading weights. Means and ``log Z`` get
``Z_TOL`` standard errors.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from stanflow import arviz_compat
from stanflow.gibbs import (
    GridBackend,
    grid,
    linear_program,
    location_program,
    log_prior_on_grid,
)
from stanflow.gibbs.box import LOGIT_LIMIT
from stanflow.gibbs.gpc import bootstrap_indices, calibrate_gpc
from stanflow.gibbs.gpc.grid_backend import grid_coverage
from stanflow.gibbs.gpc.reweighting import (
    ellipsoid_coverage,
    interval_coverage,
    normalise,
    resample_counts,
)
from stanflow.gibbs.path import (
    LearningRatePath,
    PathSampler,
    PathTarget,
    calibrate_path,
    cdf,
    gibbs_path,
    path_gpc,
    reweight,
)
from stanflow.gibbs.path.coverage import Evaluation, region_statistic
from stanflow.gibbs.path.root_search import chi2_root_guess, find_root, root_error
from stanflow.gibbs.plugin import location_estimate
from stanflow.losses import Loss, get_loss, loss_function

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("cmdstan")]
DELTA = 1e-3
Z_TOL = 4.0


def dkw(ess: np.ndarray, comparisons: int) -> np.ndarray:
    """The DKW tolerance for a CDF from ``ess`` particles, ``comparisons`` tests."""
    return np.sqrt(math.log(2 * comparisons / DELTA) / (2 * np.asarray(ess)))


def read_points(path) -> list[tuple[float, float]]:
    """Every schedule point (with its incremental ESS) and the log-midpoint of
    every schedule interval (with its reading ESS)."""
    omegas, ess = path["omega"].values, path["ess"].values
    points = [(float(w), float(e)) for w, e in zip(omegas[1:], ess[1:], strict=True)]
    for lo, hi in itertools.pairwise(omegas[1:]):
        mid = math.sqrt(lo * hi)
        points.append((mid, reweight(path, mid).ess))
    return points


CASES = {
    "absolute": (lambda rng: rng.gamma(2.0, 1.0, 100), "absolute", None, (0.0, 8.0)),
    "squared": (lambda rng: rng.normal(1.0, 1.0, 60), "squared", None, (-2.0, 4.0)),
    "check": (lambda rng: rng.exponential(1.0, 80), "check", {"tau": 0.25}, (0.0, 6.0)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_path_posteriors_and_log_z_match_the_grid(case):
    make, loss, params, bounds = CASES[case]
    y = make(np.random.default_rng(7))
    program = location_program(y, loss=loss, loss_params=params, bounds=bounds)
    idata = gibbs_path(program, omega_max=3.0, sampler=PathSampler(n_particles=2000), seed=11)
    path = arviz_compat.group(idata, "path")
    assert path["omega"].values[0] == 0 and path["omega"].values[-1] == 3.0
    theta = np.linspace(*bounds, 4001)
    sums = grid.loss_sums(theta, y, loss_function(loss, params))
    points = read_points(path)
    tolerance = dkw([e for _, e in points], len(points))
    for (omega, _), tol in zip(points, tolerance, strict=True):
        exact = grid.posterior(theta, sums, omega)
        read = reweight(path, omega)
        F, _ = cdf(read, theta)
        assert np.max(np.abs(F - grid.cdf(exact))) < tol, (case, omega)
        # log Z_n(omega) with the prior normalised on the box, as the grid's.
        assert abs(read.log_z - float(exact.log_z)) < Z_TOL * read.log_z_se + 1e-3, (case, omega)
    # The functionals table reads the same particles.
    table = idata.path_functionals
    for omega in path["omega"].values[1:]:
        row = table.sel(omega=omega)
        exact = grid.posterior(theta, sums, float(omega))
        mean = float(np.sum(exact.weights * grid.density(exact) * theta))
        assert abs(float(row["mean"][0]) - mean) < Z_TOL * float(row["mean_se"][0]) * math.sqrt(2)
        low, high = grid.interval(exact, 0.95)
        assert float(row["quantile_lower"].sel(prob=0.025)[0]) <= low + 0.02
        assert float(row["quantile_upper"].sel(prob=0.975)[0]) >= high - 0.02


def test_conjugate_squared_loss_normal_prior_in_closed_form():
    """exp(-omega sum (y - theta)^2) N(theta; m0, s0^2): a normal posterior of
    precision P = 2 omega n + 1/s0^2 and mean (2 omega sum y + m0/s0^2) / P, and
    log Z = -log(P s0^2)/2 + b^2/(2P) - omega sum y^2 - m0^2/(2 s0^2), b = P * mean."""
    y = np.random.default_rng(3).normal(0.7, 1.5, 50)
    m0, s0 = 0.5, 2.0
    program = location_program(y, loss="squared", prior="normal",
                               prior_params={"mean": m0, "sd": s0})
    idata = gibbs_path(program, omega_max=2.0, sampler=PathSampler(n_particles=2000), seed=5)
    path = arviz_compat.group(idata, "path")
    points = read_points(path)
    tolerance = dkw([e for _, e in points], len(points))
    for (omega, ess), tol in zip(points, tolerance, strict=True):
        precision = 2 * omega * len(y) + 1 / s0**2
        b = 2 * omega * y.sum() + m0 / s0**2
        mean, sd = b / precision, precision**-0.5
        log_z = -0.5 * math.log(precision * s0**2) + b**2 / (2 * precision) \
            - omega * np.sum(y**2) - m0**2 / (2 * s0**2)
        read = reweight(path, omega)
        x = read.theta[:, 0]
        assert abs(read.weights @ x - mean) < Z_TOL * sd / math.sqrt(ess)
        sd_hat = math.sqrt(read.weights @ (x - read.weights @ x) ** 2)
        # sd of a sample sd: sd / sqrt(2 ESS) for normal draws.
        assert abs(sd_hat / sd - 1) < Z_TOL / math.sqrt(2 * ess)
        grid_x = np.linspace(mean - 5 * sd, mean + 5 * sd, 501)
        F, _ = cdf(read, grid_x)
        assert np.max(np.abs(F - stats.norm.cdf(grid_x, mean, sd))) < tol
        assert abs(read.log_z - log_z) < Z_TOL * read.log_z_se, omega


def test_truncated_normal_prior_is_normalised_on_the_box():
    """The path starts from the prior normalised on the box, as the grid does;
    a box in the prior's upper tail tests the normalisation's tail formula."""
    y = np.random.default_rng(0).gamma(2.0, 1.0, 50)
    for bounds in ((0.5, 3.0), (2.5, 9.0)):
        program = location_program(y, bounds=bounds, prior="normal",
                                   prior_params={"mean": 1, "sd": 0.7})
        idata = gibbs_path(program, seed=0)
        path = arviz_compat.group(idata, "path")
        # the default sampler, PathSampler()
        assert [path.attrs[k] for k in ("n_particles", "n_moves", "target_ess", "moves")] == [
            2000, 5, 0.5, "rwm"]
        theta = np.linspace(*bounds, 4001)
        sums = grid.loss_sums(theta, y, loss_function("absolute"))
        log_prior = log_prior_on_grid(theta, "normal", {"mean": 1, "sd": 0.7})
        points = read_points(path)
        for (omega, _), tol in zip(points, dkw([e for _, e in points], len(points)), strict=True):
            exact = grid.posterior(theta, sums, omega, log_prior=log_prior)
            read = reweight(path, omega)
            assert np.max(np.abs(cdf(read, theta)[0] - grid.cdf(exact))) < tol
            assert abs(read.log_z - float(exact.log_z)) < Z_TOL * read.log_z_se + 1e-3


def test_schedule_keeps_the_reading_ess_and_extends():
    y = np.random.default_rng(1).gamma(2.0, 1.0, 100)
    path = LearningRatePath(location_program(y, bounds=(0, 8)),
                            sampler=PathSampler(n_particles=1000), seed=2)
    path.extend(1.0)
    first = len(path.levels)
    path.extend(4.0)
    omegas = path.omegas
    assert omegas[first - 1] == 1.0 and omegas[-1] == 4.0 and np.all(np.diff(omegas) > 0)
    group = path.to_dataset()
    assert reweight(group, 1.0).ess == pytest.approx(1000)  # equal weights at a point
    for lo, hi in itertools.pairwise(omegas):
        # Reading between points never falls below target_ess * N (up to the
        # bisection's tolerance).
        for omega in np.linspace(lo, hi, 6)[1:-1]:
            assert reweight(group, float(omega)).ess >= 0.5 * 1000 * (1 - 1e-3)
    with pytest.raises(ValueError, match="omega must lie"):
        reweight(group, 4.5)


def test_q_path_endpoint_and_reweighted_levels_match_the_grid():
    """A q-path between the same endpoints: its levels are not Gibbs posteriors,
    but every omega is read from them by importance weights."""
    y = np.random.default_rng(2).gamma(2.0, 1.0, 100)
    program = location_program(y, bounds=(0, 8))
    idata = gibbs_path(program, omega_max=1.0, q=0.99, sampler=PathSampler(n_particles=2000),
                       seed=3)
    path = arviz_compat.group(idata, "path")
    assert path.attrs["q"] == 0.99
    theta = np.linspace(0, 8, 4001)
    sums = grid.loss_sums(theta, y, loss_function("absolute"))
    omegas = [0.05, 0.3, 1.0]
    reads = [reweight(path, w) for w in omegas]
    tolerance = dkw([r.ess for r in reads], len(reads))
    for omega, read, tol in zip(omegas, reads, tolerance, strict=True):
        exact = grid.posterior(theta, sums, omega)
        assert np.max(np.abs(cdf(read, theta)[0] - grid.cdf(exact))) < tol
    end = grid.posterior(theta, sums, 1.0)
    assert abs(reads[-1].log_z - float(end.log_z)) < Z_TOL * reads[-1].log_z_se
    q_path = LearningRatePath(program, q=0.99, sampler=PathSampler(n_particles=100))
    with pytest.raises(ValueError, match="cannot be extended"):
        q_path.extend(1.0).extend(2.0)


# ---------------------------------------------------------------- GPC on the path


def test_region_statistic_agrees_with_the_reweight_kernels():
    rng = np.random.default_rng(0)
    S, B = 3000, 40
    for K, estimate in ((1, np.array([0.1])), (3, np.array([0.2, -0.1, 0.3]))):
        draws = rng.normal(size=(S, K))
        resample_loss = rng.gamma(2.0, 1.0, size=(B, S))
        log_base = rng.normal(size=S)
        statistic, ess = region_statistic(draws, resample_loss, log_base, 0.7, estimate)
        w = normalise(-0.7 * resample_loss + log_base)
        np.testing.assert_allclose(ess, 1 / np.sum(w**2, axis=1), rtol=1e-5)
        if K == 1:
            np.testing.assert_allclose(statistic, w @ (draws[:, 0] <= estimate[0]), atol=1e-5)
            inside = (statistic >= 0.025) & (statistic <= 0.975)
            assert np.array_equal(inside, interval_coverage(draws[:, 0], w, estimate[0], 0.05))
        else:
            inside = statistic <= 0.95
            assert np.array_equal(inside, ellipsoid_coverage(draws, w, estimate, 0.05))


def test_find_root_brackets_a_step_function():
    """count(omega) = #{b: omega_b > omega} for known switch points omega_b:
    the count equals 190 of 200 between the 10th and 11th smallest."""
    switches = np.sort(np.random.default_rng(4).uniform(0.3, 1.5, 200))

    class Count:
        def __call__(self, omega):
            return Evaluation(omega, int(np.sum(switches > omega)), 0.0, 1.0, 1.0, 0, 0)

    for start in (0.05, 1.0, 5.0):
        root, history, done = find_root(Count(), start, 190, xtol=1e-6, max_evaluations=60)
        assert done and switches[9] <= root < switches[10], start
        assert len(history) < 40
    root, history, done = find_root(Count(), 1.0, 190.5, xtol=1e-9, max_evaluations=80)
    assert done and root == pytest.approx(switches[9], abs=1e-8)  # no exact hit: the jump


@pytest.mark.parametrize("K", [1, 5, 20])
def test_the_chi2_guess_is_the_root_of_gaussian_counts(K):
    """Gaussian posteriors right at omega* = 1.7: a resample's statistic is chi2_K times
    omega / omega*, so the count at omega is B F_K(q omega* / omega) (B = 10^6 here, the
    half-resample shrink negligible); from any omega the guess is omega*."""
    B, alpha, truth = 1_000_000, 0.05, 1.7
    q = stats.chi2.ppf(1 - alpha, K)
    guess = chi2_root_guess(K, B, alpha)
    for omega in (1.0, 1.3, 1.7, 2.9):
        count = int(np.rint(B * stats.chi2.cdf(q * truth / omega, K)))
        assert guess(omega, count) == pytest.approx(truth, rel=1e-3), omega


@pytest.mark.parametrize("K", [2, 20])
def test_a_guided_search_finds_the_same_root_in_short_steps(K):
    """B = 200 resamples with chi2_K statistics (omega* = 1.6): resample b covers while
    omega < omega* q / T_b, a step function. Guided by the chi-squared model from omega0
    = 1, the search lands in the same plateau as doubling does, in no more evaluations,
    and never steps by more than the factor 2 doubling takes; at K = 20 its first step
    lands within a quarter of the root."""
    rng = np.random.default_rng([5, K])
    B, alpha, truth = 200, 0.05, 1.6
    switches = truth * stats.chi2.ppf(1 - alpha, K) / rng.chisquare(K, B)

    def count(omega):
        return Evaluation(omega, int(np.sum(switches > omega)), 0.0, 400.0, 400.0, 0, 0)

    plain = find_root(count, 1.0, 190, xtol=1e-6, max_evaluations=60)
    guided = find_root(count, 1.0, 190, xtol=1e-6, max_evaluations=60,
                       guess=chi2_root_guess(K, B, alpha))
    ordered = np.sort(switches)
    for root, _, done in (plain, guided):
        assert done and ordered[9] <= root < ordered[10]
    omegas = np.array([e.omega for e in guided[1]])
    assert len(omegas) <= len(plain[1])
    assert np.all(np.abs(np.diff(np.log(omegas))) <= math.log(2) + 1e-12)
    if K == 20:  # chi2_20's quantiles are close together: even from a count of B, one step
        assert omegas[1] == pytest.approx(guided[0], rel=0.25)


def test_the_root_error_reads_the_slope_beyond_the_counts_noise():
    """A count falling by 50 per unit of omega through 190 at omega = 1.5, each evaluation
    off by N(0, 1.6^2) noise (its stated variance) and rounded, over 400 root searches: the
    slope behind ``omega_se`` is within a factor 1.5 of the truth in 95% of them (secants
    through counts two resamples from the target, the noise's size, were off by more in
    nearly half, up to 100 times too steep), and the stated error is never smaller than
    the roots' spread in the median."""
    rng = np.random.default_rng(11)
    sd, slope, truth = 1.6, -50.0, 1.5

    def count(omega):
        noisy = 190 + slope * (omega - truth) + sd * rng.normal()
        return Evaluation(omega, int(np.clip(np.rint(noisy), 0, 200)), sd**2, 400.0, 400.0, 0, 0)

    roots, errors = [], []
    for _ in range(400):
        root, history, _ = find_root(count, 1.0, 190, xtol=1e-3, max_evaluations=40)
        roots.append(root)
        errors.append(root_error(count, root, history, 190, 40, 200))
    ratio = np.array([e.slope for e in errors]) / slope
    assert np.mean((ratio > 2 / 3) & (ratio < 1.5)) >= 0.95
    assert np.median(ratio) == pytest.approx(1.0, abs=0.1)
    assert np.median([e.se for e in errors]) >= np.std(roots)
    assert np.mean(roots) == pytest.approx(truth, abs=0.005)


def test_the_root_error_is_finite_with_few_resamples_above_the_target():
    """B = 60: at most 3 resamples lie above the target 57, fewer than three standard
    deviations of a noisy count; the slope is read through those there are."""
    rng = np.random.default_rng(3)

    def count(omega):
        noisy = 57 + -20.0 * (omega - 1.5) + 1.6 * rng.normal()
        return Evaluation(omega, int(np.clip(np.rint(noisy), 0, 60)), 1.6**2, 400.0, 400.0, 0, 0)

    for _ in range(20):
        root, history, _ = find_root(count, 1.0, 57, xtol=1e-3, max_evaluations=40)
        found = root_error(count, root, history, 57, 40, 60)
        assert math.isfinite(found.se) and found.slope < 0


def test_root_found_gpc_equals_the_bootstrap_fixed_point():
    """Median of Gamma(2, 1) data, n = 100, B = 200, the same resamples.

    The fixed point: GPC's own rule with eps = 0 and up to 300 steps on the exact
    grid (it stops where the coverage equals 0.95). Both sit where the exact
    count of covering resamples is 190; the path's root is off by its stated
    Monte Carlo error (omega_se), the fixed point anywhere on the count's
    plateau at 190, about 1 / |slope| wide. The exact grid coverage at the
    path's root is within the count's Monte Carlo spread of 190."""
    rng = np.random.default_rng(12)
    theta = np.linspace(0, 8, 801)
    for r in range(3):
        y = rng.gamma(2.0, 1.0, 100)
        estimate = location_estimate(y, loss_function("absolute"), 0.0, 8.0)
        program = location_program(y, bounds=(0, 8))
        path = LearningRatePath(program, sampler=PathSampler(n_particles=4000, n_moves=3), seed=r)
        c = path_gpc(path, [estimate], seed=r)
        root, se = float(c["omega"]), float(c["omega_se"])
        assert bool(c["converged"]) and float(c["coverage"]) == 0.95
        fixed = calibrate_gpc(program, backend=GridBackend(801), seed=r, estimate=estimate,
                              eps=0.0, max_steps=300).calibration
        assert bool(fixed["converged"])
        plateau = 1 / abs(float(c["count_slope"]))
        assert abs(root - float(fixed["omega"])) < 3 * se + plateau, (r, root, float(fixed["omega"]), se)
        sums = grid.loss_sums(theta, y[bootstrap_indices(100, 200, np.random.SeedSequence(r))],
                              loss_function("absolute"))
        exact, _ = grid_coverage(theta, sums, root, estimate, 0.05)
        assert abs(exact * 200 - 190) <= 3 * math.sqrt(float(c["count_variance"])) + 1


def test_path_gpc_on_a_linear_model_reads_resamples_from_a_wider_level():
    rng = np.random.default_rng(20240505)
    x = rng.chisquare(2, size=50) - 2
    y = 2 + x + rng.normal(0, 2, size=50)
    X = np.column_stack([np.ones(50), x])
    program = linear_program(y, X, loss="check", loss_params={"tau": 0.5}, prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    estimate = program.estimate().theta
    path = LearningRatePath(program, sampler=PathSampler(n_particles=2000, n_moves=3), seed=0)
    c = path_gpc(path, estimate, seed=1)
    assert c.attrs["region"] == "weighted Mahalanobis ellipsoid"
    assert bool(c["converged"]) and 0.5 < float(c["omega"]) < 1.5
    ratio = c["proposal_omega"].values / c["omega_path"].values
    assert np.all(ratio <= 0.5) and np.all(ratio > 0.05)
    assert np.all(c["ess_median"] > 200) and float(c["low_ess_share"]) < 0.05
    counts = resample_counts(bootstrap_indices(50, 200, np.random.SeedSequence(1)), 50)
    assert counts.sum() == 200 * 50


# ---------------------------------------------------------------- bad input


def test_bad_input_gives_clear_errors_before_sampling():
    y = np.random.default_rng(0).gamma(2.0, 1.0, 30)
    program = location_program(y, bounds=(0, 8))
    with pytest.raises(ValueError, match="omega_max must be positive"):
        gibbs_path(program, omega_max=0.0)
    with pytest.raises(ValueError, match="omega_max must be positive"):
        gibbs_path(program, omega_max=-1.0)
    with pytest.raises(ValueError, match="omega_max must be positive"):
        gibbs_path(program, omega_max=float("nan"))
    # the sampler's own fields are checked when it is made (test_gibbs_path_sampler.py);
    # what depends on the program or on q, when the path is
    with pytest.raises(ValueError, match=r"n_particles must be an integer >= 100 \(50 per parameter\)"):
        gibbs_path(linear_program(y, np.ones((30, 2)), bounds=(0, 8)),
                   sampler=PathSampler(n_particles=99))
    with pytest.raises(TypeError, match="sampler must be a PathSampler, got dict"):
        gibbs_path(program, sampler={"n_particles": 100})
    with pytest.raises(TypeError, match="sampler must be a PathSampler, got int"):
        calibrate_path(program, sampler=4000)
    with pytest.raises(ValueError, match="prior: unknown prior 'horseshoe'"):
        location_program(y, prior="horseshoe", bounds=(0, 8))
    with pytest.raises(ValueError, match="bounds: the uniform prior is improper"):
        gibbs_path(location_program(y))
    with pytest.raises(ValueError, match="tau"):
        location_program(y, loss="check", loss_params={"tau": 1.5}, bounds=(0, 8))
    with pytest.raises(ValueError, match="y must"):
        location_program(np.array([]), bounds=(0, 8))
    with pytest.raises(ValueError, match=r"NUTS moves .* need q = 1"):
        gibbs_path(program, sampler=PathSampler(moves="nuts"), q=0.5)
    with pytest.raises(TypeError, match="program must be a LossProgram"):
        gibbs_path(y)
    with pytest.raises(ValueError, match="weights must have shape"):
        gibbs_path(program, weights=np.ones(3))
    path = LearningRatePath(program, sampler=PathSampler(n_particles=100))
    with pytest.raises(ValueError, match="omega0"):
        path_gpc(path, [1.0], omega0=0.0)
    with pytest.raises(ValueError, match="estimate"):
        path_gpc(path, [1.0, 2.0])
    weighted = LearningRatePath(program, sampler=PathSampler(n_particles=100),
                                weights=np.full(30, 2.0))
    with pytest.raises(ValueError, match="GPC's bootstrap resamples the data itself"):
        path_gpc(weighted, [1.0])


def test_a_loss_objects_numpy_value_is_checked_when_its_program_is_made():
    """A Loss whose NumPy value takes a parameter the loss does not declare: the
    program's estimate and the grid use that value, so making the program names it."""
    y = np.random.default_rng(0).gamma(2.0, 1.0, 30)
    value = lambda y, f, tau: np.abs(y - f)
    wrong = Loss("two_argument", get_loss("absolute").stan_file, value, value, value, jump=2.0)
    with pytest.raises(
        TypeError, match=r"loss: 'two_argument'.value must be callable as value\(y, f, \*params\)"
    ):
        location_program(y, loss=wrong, bounds=(0, 8))


def test_only_bounded_coordinates_are_clipped_on_the_unconstrained_scale():
    y = np.random.default_rng(0).normal(size=20)
    X = np.column_stack([np.ones(20), y])
    program = linear_program(y, X, loss="squared", prior="normal",
                             prior_params={"mean": 0, "sd": 10}, bounds=([0, -np.inf], [8, np.inf]))
    target = PathTarget(program)
    z = np.array([[8.0, 45.1], [4.0, -60.0]])
    u = target.unconstrained(z)
    assert u[0, 0] == LOGIT_LIMIT and u[1, 0] == pytest.approx(0.0)
    np.testing.assert_array_equal(u[:, 1], z[:, 1])  # unbounded: the identity, never clipped
    np.testing.assert_allclose(target.total_loss(z[1:]), np.sum((y - X @ z[1]) ** 2), rtol=1e-12)
