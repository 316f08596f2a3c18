"""GPC and the rules from one importance sample, against closed forms.

Both programs here have Gaussian Gibbs posteriors for every resample and
``omega``: a linear template under squared loss with normal priors (the
template's NumPy twin of the loss) and a user's power posterior of a normal
mean (Stan's losses on the unconstrained scale). GPC's covering count is then
exact (a resample's region holds the estimate when its Mahalanobis distance,
or the interval's ends, say so), and so is its root; each rule's interval is
the Gaussian's quantiles.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from stanflow import arviz_compat
from stanflow.gibbs import LossProgram, calibrate_importance, calibrate_path, linear_program
from stanflow.gibbs.gpc import bootstrap_indices
from stanflow.gibbs.gpc.reweighting import resample_counts
from stanflow.gibbs.importance import ImportanceProblem, ImportanceSample, student_t_draws
from stanflow.gibbs.importance.calibrate import _rule_reader
from stanflow.gibbs.path import weighted_quantile
from stanflow.gibbs.shape import volume_scale

pytestmark = pytest.mark.e2e

STAN = Path(__file__).parent / "stan"
SIGMA, PRIOR_MEAN, PRIOR_SD = 1.5, 0.5, 3.0
TARGET = 190  # (1 - alpha) B at the defaults
ROOT_TOL = 4.0
"""The root agrees with the exact one within this many of its stated errors (plus the bracket)."""


def bootstrap_counts(n, seed):
    """The counts of GPC's 200 resamples from ``seed``, as calibrate_importance draws them."""
    return resample_counts(bootstrap_indices(n, 200, np.random.SeedSequence(seed)), n)


def exact_root(count, lo=0.01, hi=100.0):
    """Where an exact covering count (decreasing in omega) crosses the target, by bisection."""
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if count(mid) > TARGET - 0.5 else (lo, mid)
    return math.sqrt(lo * hi)


def regression(seed):
    rng = np.random.default_rng(seed)
    n = 150
    x = rng.uniform(-2, 2, n)
    X = np.column_stack([np.ones(n), x])
    y = 1 + x + (0.5 + 0.5 * np.abs(x)) * rng.standard_normal(n)
    return X, y


def regression_count(X, y, estimate, counts, shape=None):
    """``omega ->`` resamples whose exact Gaussian posterior's 95% ellipsoid holds the
    estimate (in the shape fix's metric when ``shape`` is given)."""
    level = stats.chi2.ppf(0.95, 2)

    def count(omega):
        held = 0
        for c in counts:
            precision = 2 * omega * (X.T * c) @ X + np.eye(2) / 10**2
            mean = np.linalg.solve(precision, 2 * omega * (X.T * c) @ y)
            gap = estimate - mean
            if shape is None:
                metric = precision
            else:
                cov = np.linalg.inv(precision)
                metric = np.linalg.inv(shape) / volume_scale(cov[None], shape)[0]
            held += gap @ metric @ gap <= level
        return held

    return count


@pytest.mark.parametrize("adjust", ["none", "sandwich", "bootstrap"])
def test_gpc_root_and_intervals_of_a_gaussian_regression(cmdstan, adjust):
    X, y = regression(3)
    program = linear_program(y, X, loss="squared", prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    result = calibrate_importance(program, seed=4, adjust=adjust)
    c = arviz_compat.group(result, "calibration")
    estimate = c["estimate"].values
    np.testing.assert_allclose(estimate, np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-5)
    counts = bootstrap_counts(len(y), 4)
    shape = None if adjust == "none" else c["shape"].values
    if adjust == "bootstrap":
        # The shape (the volume aside) of the covariance of the resamples' exact
        # posterior means at the proposal's omega. Each mean is read from a few hundred
        # effective draws: the covariance's scale is off by up to about 5%.
        omega = arviz_compat.group(result, "importance").attrs["omega_ref"]
        means = [np.linalg.solve(2 * omega * (X.T * k) @ X + np.eye(2) / 10**2,
                                 2 * omega * (X.T * k) @ y) for k in counts]
        exact = np.cov(means, rowvar=False)
        np.testing.assert_allclose(shape / np.sqrt(np.linalg.det(shape)),
                                   exact / np.sqrt(np.linalg.det(exact)), atol=0.04)
    truth = exact_root(regression_count(X, y, estimate, counts, shape))
    root, se = float(c["omega"]), float(c["omega_se"])
    assert 0 < se < 0.1 * root
    assert abs(root - truth) <= ROOT_TOL * se + 2 * c.attrs["xtol"] * root, (root, truth, se)
    assert float(c["low_ess_share"]) == 0
    # Each rule's interval: the Gaussian posterior's quantiles at its omega (moved to the
    # sandwich's shape, whose marginal sds are the shape's scaled to the posterior's volume).
    for rule in c["rule"].values:
        omega = float(c["rule_omega"].sel(rule=rule))
        cov = np.linalg.inv(2 * omega * X.T @ X + np.eye(2) / 10**2)
        mean = cov @ (2 * omega * X.T @ y)
        if shape is not None:
            cov = shape * volume_scale(cov[None], shape)[0]
        sd = np.sqrt(np.diag(cov))
        ess = float(c["rule_ess"].sel(rule=rule))
        # A 2.5% quantile's Monte Carlo sd, sqrt(p (1 - p) / ESS) / phi(z), in posterior sds.
        tol = 4 * math.sqrt(0.025 * 0.975 / ess) / stats.norm.pdf(1.96) * sd
        interval = c["rule_interval"].sel(rule=rule).values
        np.testing.assert_array_less(np.abs(interval[0] - (mean - 1.96 * sd)), tol)
        np.testing.assert_array_less(np.abs(interval[1] - (mean + 1.96 * sd)), tol)
        mean_se = sd / math.sqrt(ess)
        np.testing.assert_array_less(np.abs(c["rule_mean"].sel(rule=rule).values - mean),
                                     4 * mean_se)


def test_gpc_root_of_a_users_power_posterior(cmdstan):
    y = np.random.default_rng(1).normal(2.0, 2.0, size=60)
    program = LossProgram(STAN / "power_normal.stan", {
        "N": len(y), "y": y, "sigma": SIGMA, "prior_mean": PRIOR_MEAN, "prior_sd": PRIOR_SD})
    result = calibrate_importance(program, seed=7)
    c = arviz_compat.group(result, "calibration")
    assert c.attrs["particle_space"] == "unconstrained"
    estimate = float(c["estimate"][0])
    assert estimate == pytest.approx(y.mean(), abs=1e-5)
    counts = bootstrap_counts(len(y), 7)
    z = stats.norm.ppf(0.975)

    def count(omega):
        precision = omega * len(y) / SIGMA**2 + 1 / PRIOR_SD**2
        mean = (omega * counts @ y / SIGMA**2 + PRIOR_MEAN / PRIOR_SD**2) / precision
        return int(np.sum(np.abs(estimate - mean) <= z / math.sqrt(precision)))

    truth = exact_root(count)
    root, se = float(c["omega"]), float(c["omega_se"])
    assert abs(root - truth) <= ROOT_TOL * se + 2 * c.attrs["xtol"] * root, (root, truth, se)
    plugin = float(c["rule_omega"].sel(rule="plugin"))
    assert plugin == pytest.approx(SIGMA**2 / np.var(y), rel=1e-6)
    # The importance group reweights to any omega: the closed-form posterior mean at 0.3.
    sample = arviz_compat.group(result, "importance")
    log_w = -0.3 * sample["total_loss"].values + sample["log_base"].values
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    precision = 0.3 * len(y) / SIGMA**2 + 1 / PRIOR_SD**2
    mean = (0.3 * y.sum() / SIGMA**2 + PRIOR_MEAN / PRIOR_SD**2) / precision
    assert w @ sample["theta"].values[:, 0] == pytest.approx(
        mean, abs=4 / math.sqrt(precision * (1 / np.sum(w**2))))


def test_gpc_root_of_a_users_bounded_location_is_the_exact_grids(cmdstan):
    """The median under absolute loss, uniform prior on (0, 8), as a user's program: the
    proposal on Stan's unconstrained (logit) scale, posteriors with kinks at n = 40. Each
    resample's interval holds the estimate when its CDF there lies in [0.025, 0.975],
    read exactly from a fine grid."""
    y = np.random.default_rng(7).gamma(2.0, 1.0, size=40)
    program = LossProgram(STAN / "location_absolute.stan", {"N": len(y), "y": y})
    c = arviz_compat.group(calibrate_importance(program, seed=2), "calibration")
    assert c.attrs["particle_space"] == "unconstrained"
    estimate = float(c["estimate"][0])
    assert abs(estimate - np.median(y)) < 1e-4 + 0.5 * np.ptp(np.sort(y)[19:21])
    theta = np.linspace(0, 8, 40001)[1:-1]
    resample_loss = bootstrap_counts(len(y), 2) @ np.abs(y[None, :] - theta[:, None]).T
    below = theta <= estimate

    def count(omega):
        log_w = -omega * resample_loss
        w = np.exp(log_w - log_w.max(axis=1, keepdims=True))
        cdf = w[:, below].sum(axis=1) / w.sum(axis=1)
        return int(np.sum((cdf >= 0.025) & (cdf <= 0.975)))

    truth = exact_root(count)
    root, se = float(c["omega"]), float(c["omega_se"])
    assert abs(root - truth) <= ROOT_TOL * se + 2 * c.attrs["xtol"] * root, (root, truth, se)


def test_a_templates_losses_are_stans(cmdstan):
    """The template's NumPy twin of the check loss gives Stan's losses at the proposal's draws."""
    X, y = regression(5)
    program = linear_program(y, X, loss="check", loss_params={"tau": 0.7}, prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    problem = ImportanceProblem(program, np.zeros((1, len(y)), int), np.ones(2),
                                np.eye(2) / len(y), np.eye(2) / len(y))
    assert problem.target.space == "box"
    z, _ = student_t_draws(np.random.default_rng(0), np.ones(2), np.eye(2), 50, 5.0)
    twin = problem.losses(z, problem.target.theta(z))
    np.testing.assert_allclose(twin, problem.target.pointwise_loss(z), rtol=1e-12, atol=1e-12)


def test_student_t_density_is_scipys():
    cov = np.array([[2.0, 0.3], [0.3, 0.5]])
    draws, log_density = student_t_draws(np.random.default_rng(1), np.array([1.0, -1.0]), cov,
                                         200, 5.0)
    np.testing.assert_allclose(log_density, stats.multivariate_t.logpdf(
        draws, [1.0, -1.0], cov, df=5.0), rtol=1e-10)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"draws": 10}, "draws"),
    ({"widen": 0.5}, "widen"),
    ({"adjust": "shape"}, "adjust"),
    ({"rules": ["gpc"]}, "rules"),
    ({"alpha": 1.5}, "alpha"),
    ({"B": 0}, "B"),
])
def test_bad_arguments_are_named_before_any_work(cmdstan, kwargs, message):
    X, y = regression(6)
    program = linear_program(y, X, loss="squared", prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    with pytest.raises(ValueError, match=message):
        calibrate_importance(program, **kwargs)


def test_a_loss_without_the_plugins_curvature_is_named(cmdstan):
    """The hinge loss has kinks away from y = f: no H, so no proposal; the error says what
    to use instead, before any sampling."""
    X, y = regression(9)
    program = linear_program(np.where(y > 1, 1.0, -1.0), X, loss="hinge", prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    with pytest.raises(ValueError, match=r"plug-in's H and J.*hinge.*calibrate_path"):
        calibrate_importance(program)


def test_where_the_weights_degenerate_it_says_so(cmdstan):
    """Twelve coefficients: one importance sample no longer serves the resamples, nor three
    proposals of its own the plug-in's posterior, and the result and warnings say so
    (calibrate_path moves particles to each resample there)."""
    rng = np.random.default_rng(8)
    X = np.column_stack([np.ones(120), rng.standard_normal((120, 11))])
    y = X @ np.linspace(-1, 1, 12) + rng.standard_normal(120)
    program = linear_program(y, X, loss="squared", prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    with pytest.warns(RuntimeWarning) as record:
        result = calibrate_importance(program, seed=1)
    messages = [str(w.message) for w in record]
    assert any("fewer than 100 effective draws after 3 proposals" in m for m in messages)
    assert any("posteriors of plugin (omega" in m for m in messages)
    c = arviz_compat.group(result, "calibration")
    assert float(c["low_ess_share"]) > 0.05 and int(c["rounds"]) == 3
    assert float(c["rule_ess"].sel(rule="plugin")) < 100


def test_a_rule_too_degenerate_for_the_shape_fix_gets_a_nan_interval_not_a_crash(cmdstan):
    """Twelve coefficients of a 0.9-quantile: with the shape fix GPC's posterior is read
    from fewer effective draws than coefficients, whose covariance no affine map can move.
    The calibration still returns, with that interval NaN (its mean kept), and the warning
    names it."""
    rng = np.random.default_rng(8)
    X = np.column_stack([np.ones(120), rng.standard_normal((120, 11))])
    y = X @ np.linspace(-1, 1, 12) + rng.standard_normal(120)
    program = linear_program(y, X, loss="check", loss_params={"tau": 0.9}, prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    with pytest.warns(RuntimeWarning) as record:
        result = calibrate_importance(program, seed=1, rules=[], adjust="sandwich")
    messages = [str(w.message) for w in record]
    assert any("fewer than 100 effective draws after 3 proposals" in m for m in messages)
    assert any(re.search(r"posteriors of gpc .*NaN where the draws", m) for m in messages)
    c = arviz_compat.group(result, "calibration")
    assert float(c["rule_ess"].sel(rule="gpc")) < 13
    assert np.isnan(c["rule_interval"].sel(rule="gpc").values).all()
    assert np.isfinite(c["rule_mean"].sel(rule="gpc").values).all()


def test_the_pooled_scatter_is_the_gaussian_mixtures():
    """Resample ``b``'s posterior at ``omega`` is ``N(m_b, (omega A)^-1)``; pooled over the
    resamples, its second moment about a centre ``c`` is ``mean_b (m_b - c)(m_b - c)' +
    (omega A)^-1``: what the next proposal is fitted to."""
    rng = np.random.default_rng(3)
    S, omega, c = 40000, 2.0, np.array([0.2, -0.1])
    A = np.array([[1.0, 0.4], [0.4, 3.0]])
    m = rng.normal(0, [0.5, 0.3], size=(30, 2))
    z = rng.normal(0, 1.5, size=(S, 2))
    log_q = stats.multivariate_normal.logpdf(z, np.zeros(2), 1.5**2 * np.eye(2))
    offset = z[None, :, :] - m[:, None, :]
    resample_loss = 0.5 * np.einsum("bsk,kl,bsl->bs", offset, A, offset)
    sample = ImportanceSample(z, z, -log_q, resample_loss.mean(axis=0), resample_loss, omega)
    scatter, ess = sample.mixture_scatter(omega, c)
    spread = (m - c).T @ (m - c) / len(m) + np.linalg.inv(omega * A)
    np.testing.assert_allclose(scatter, spread, rtol=0.05, atol=0.01)
    assert 1000 < ess < S


class NarrowProblem:
    """A Gibbs posterior ``N(0, I / omega)`` in two dimensions (flat prior, loss
    ``|theta|^2 / 2``), whose default proposal is five times too narrow."""

    centre = np.zeros(2)

    def sample(self, rng, omega_ref, draws, widen, scatter=None):
        cov = widen**2 * (0.01 * np.eye(2) / omega_ref if scatter is None else scatter)
        z, log_q = student_t_draws(rng, self.centre, cov, draws, 5.0)
        loss = 0.5 * np.sum(z**2, axis=1)
        return ImportanceSample(z, z, -log_q, loss, loss[None, :], omega_ref)


def test_a_rule_beyond_the_roots_sample_is_read_from_proposals_fitted_to_it():
    """The root's sample and the default proposal both carry the rule's posterior with few
    effective draws; the next proposal, fitted to the second moment the last one measured,
    carries it with many, and its mean and quantiles are the Gaussian's."""
    problem, omega, draws = NarrowProblem(), 4.0, 2000
    first = problem.sample(np.random.default_rng(1), omega, draws, 2.0)
    assert first.weights(omega)[1] < 100
    read = _rule_reader(problem, first, np.random.default_rng(2), draws, 2.0)
    theta, weights, ess = read(omega)
    assert ess >= 500
    sd = 1 / math.sqrt(omega)
    np.testing.assert_array_less(np.abs(weights @ theta), 4 * sd / math.sqrt(ess))
    for p in range(2):
        upper = weighted_quantile(theta[:, p], weights, np.array([0.975]))[0]
        tol = 4 * math.sqrt(0.025 * 0.975 / ess) / stats.norm.pdf(1.96) * sd
        assert abs(upper - 1.96 * sd) <= tol


def bench_quantile_data_set(index):
    """Data set ``index`` of the homoscedastic design of ``bench/peers/quantreg_intervals.py``."""
    rng = np.random.default_rng([20261204, 0])
    for _ in range(index + 1):
        x = rng.chisquare(2, size=200) - 2
        y = 2 + x + 2.0 * rng.normal(size=200)
    return np.column_stack([np.ones(200), x]), y


def grid_posterior_2d(X, y, tau, omega, prior_sd, centre, half_width, points=401):
    """The Gibbs posterior of a line under the check loss with normal(0, prior_sd) priors on
    a grid of ``points^2`` around ``centre``: the grid's axes, the posterior's mean and sds,
    and both marginals' masses on their axes."""
    axes = [np.linspace(c - h, c + h, points) for c, h in zip(centre, half_width, strict=True)]
    a, b = np.meshgrid(*axes, indexing="ij")
    u = y[None, None, :] - a[..., None] * X[:, 0] - b[..., None] * X[:, 1]
    log_density = (-omega * np.sum(tau * u - np.minimum(u, 0), axis=2)
                   - (a**2 + b**2) / (2 * prior_sd**2))
    mass = np.exp(log_density - log_density.max())
    mass /= mass.sum()
    mean = np.array([np.sum(mass * a), np.sum(mass * b)])
    sd = np.sqrt([np.sum(mass * (a - mean[0]) ** 2), np.sum(mass * (b - mean[1]) ** 2)])
    marginals = [mass.sum(axis=1), mass.sum(axis=0)]
    return axes, mean, sd, marginals


def grid_quantile(axis, marginal, q):
    """A marginal's quantile, its CDF interpolated linearly between cell midpoints."""
    cdf = np.cumsum(marginal) - marginal / 2
    return float(np.interp(q, cdf, axis))


def test_a_plugin_misled_by_a_leverage_point_is_replaced_by_the_samples_own_spread(cmdstan):
    """One point at x = 22.6 (the covariate's sd is 2) lies near the 0.9-quantile line: the
    kernel's ``H`` puts five times the slope's curvature on it, so the plug-in's rate is
    8 (GPC's is about 0.2 with the shape fix) and its proposal is far too narrow. The
    redrawn proposal, fitted to the pooled posteriors the first sample measured, finds
    the root that ``calibrate_path`` (no proposal at all) finds, and reads it from enough
    effective draws. The plug-in's own posterior lies beyond that sample: it is read from a
    proposal of its own, and its mean and marginal quantiles are an exact grid's."""
    X, y = bench_quantile_data_set(428)
    program = linear_program(y, X, loss="check", loss_params={"tau": 0.9}, prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        result = calibrate_importance(program, seed=428, rules=["plugin"], adjust="sandwich")
    fast = arviz_compat.group(result, "calibration")
    path = arviz_compat.group(calibrate_path(program, seed=428, rules=[], adjust="sandwich"),
                              "calibration")
    omega = float(fast["rule_omega"].sel(rule="plugin"))
    assert omega > 5 > 0.5 > float(fast["omega"])
    assert float(fast["low_ess_share"]) <= 0.05
    gap = abs(float(fast["omega"]) - float(path["omega"]))
    stated = math.hypot(float(fast["omega_se"]), float(path["omega_se"]))
    assert gap <= ROOT_TOL * stated + 0.01 * float(path["omega"]), (gap, stated)
    # The plug-in's posterior against a grid fitted to it in two passes; its mean does not
    # move with the shape fix, its quantiles are read without it.
    estimate = fast["estimate"].values
    _, mean, sd, _ = grid_posterior_2d(X, y, 0.9, omega, 10.0, estimate, [2.0, 0.5])
    axes, mean, sd, marginals = grid_posterior_2d(X, y, 0.9, omega, 10.0, mean, 8 * sd)
    ess = float(fast["rule_ess"].sel(rule="plugin"))
    assert ess >= 100
    np.testing.assert_array_less(np.abs(fast["rule_mean"].sel(rule="plugin").values - mean),
                                 4 * sd / math.sqrt(ess))
    plain = arviz_compat.group(calibrate_importance(program, seed=428, rules=["plugin"]),
                               "calibration")
    ess = float(plain["rule_ess"].sel(rule="plugin"))
    assert ess >= 100
    interval = plain["rule_interval"].sel(rule="plugin").values
    for p in range(2):
        for end, q in enumerate([0.025, 0.975]):
            truth = grid_quantile(axes[p], marginals[p], q)
            tol = 4 * math.sqrt(q * (1 - q) / ess) / stats.norm.pdf(1.96) * sd[p]
            assert abs(interval[end, p] - truth) <= tol, (p, q, interval[end, p], truth, tol)
