"""A learning-rate path started at a Gaussian near the data, against exact answers.

Truths: the closed form of the squared loss with a normal prior (a normal Gibbs
posterior and ``log Z_n(omega)`` at every ``omega``), and the exact grid
posteriors and ``log Z_n`` of ``stanflow.gibbs.grid`` for the absolute loss.
The Gaussian is put off on purpose (shifted, too wide or too narrow): the
bridge from it must correct it, not inherit it. Tolerances as in
``tests/test_gibbs_path.py``: Dvoretzky-Kiefer-Wolfowitz bands for CDFs from
the effective sample size, ``Z_TOL`` standard errors for means and ``log Z``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from stanflow import arviz_compat
from stanflow.gibbs import grid, linear_program, location_program
from stanflow.gibbs.gpc import bootstrap_indices
from stanflow.gibbs.path import (
    GaussianStart,
    LearningRatePath,
    PathSampler,
    cdf,
    gibbs_path,
    reweight,
)
from stanflow.gibbs.path.coverage import BootstrapProblem, PathCoverage
from stanflow.gibbs.path.gpc_root import AUTO_TRANSPORT_DIMENSION, choose_coverage
from stanflow.gibbs.path.read import default_omegas
from stanflow.gibbs.path.transport import START_SHARE, TransportCoverage
from stanflow.gibbs.plugin import location_estimate
from stanflow.losses import loss_function

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("cmdstan")]
DELTA = 1e-3
Z_TOL = 4.0


def points(path) -> list[tuple[float, float]]:
    """Every schedule point (with its incremental ESS) and the log-midpoint of
    every schedule interval (with its reading ESS)."""
    omegas, ess = path["omega"].values, path["ess"].values
    found = [(float(w), float(e)) for w, e in zip(omegas, ess, strict=True)]
    for lo, hi in itertools.pairwise(omegas):
        mid = math.sqrt(lo * hi)
        found.append((mid, reweight(path, mid).ess))
    return found


def dkw(ess: float, comparisons: int) -> float:
    return math.sqrt(math.log(2 * comparisons / DELTA) / (2 * ess))


@pytest.mark.parametrize(("shift", "widen"), [(0.0, 1.0), (1.0, 2.0), (-0.5, 0.7)])
def test_conjugate_squared_loss_from_an_off_gaussian_in_closed_form(shift, widen):
    """exp(-omega sum (y - theta)^2) N(theta; m0, s0^2): precision P = 2 omega n +
    1/s0^2, mean (2 omega sum y + m0/s0^2) / P, log Z = -log(P s0^2)/2 + b^2/(2P) -
    omega sum y^2 - m0^2/(2 s0^2), b = P mean. The start at omega_0 = 0.2 is the exact
    posterior there moved by ``shift`` of its sd and scaled by ``widen``."""
    y = np.random.default_rng(3).normal(0.7, 1.5, 400)
    m0, s0 = 0.5, 2.0

    def exact(omega: float) -> tuple[float, float, float]:
        precision = 2 * omega * len(y) + 1 / s0**2
        b = 2 * omega * y.sum() + m0 / s0**2
        log_z = -0.5 * math.log(precision * s0**2) + b**2 / (2 * precision) \
            - omega * np.sum(y**2) - m0**2 / (2 * s0**2)
        return b / precision, precision**-0.5, log_z

    program = location_program(y, loss="squared", prior="normal",
                               prior_params={"mean": m0, "sd": s0})
    mean0, sd0, _ = exact(0.2)
    start = GaussianStart(0.2, [mean0 + shift * sd0], [[(widen * sd0) ** 2]])
    idata = gibbs_path(program, omega_max=3.0, sampler=PathSampler(n_particles=2000), seed=5,
                       start=start)
    path = arviz_compat.group(idata, "path")
    assert path["omega"].values[0] == 0.2 and path.attrs["start"] == "gaussian"
    assert path.attrs["start_omega"] == 0.2
    read_at = points(path)
    for omega, ess in read_at:
        mean, sd, log_z = exact(omega)
        read = reweight(path, omega)
        x = read.theta[:, 0]
        assert abs(read.weights @ x - mean) < Z_TOL * sd / math.sqrt(ess), omega
        sd_hat = math.sqrt(read.weights @ (x - read.weights @ x) ** 2)
        assert abs(sd_hat / sd - 1) < Z_TOL / math.sqrt(2 * ess), omega
        grid_x = np.linspace(mean - 5 * sd, mean + 5 * sd, 501)
        F, _ = cdf(read, grid_x)
        assert np.max(np.abs(F - stats.norm.cdf(grid_x, mean, sd))) < dkw(ess, len(read_at))
        assert abs(read.log_z - log_z) < Z_TOL * read.log_z_se, omega


def test_absolute_loss_from_a_laplace_start_matches_the_grid():
    """The median's Gibbs posterior is not Gaussian (the absolute loss is piecewise
    linear): from a normal at the estimate, the path's CDFs and log Z_n equal the
    exact grid's at every schedule point and between them; fewer steps than a path
    from the prior to the same end."""
    y = np.random.default_rng(7).gamma(2.0, 1.0, 300)
    bounds = (0.0, 8.0)
    program = location_program(y, bounds=bounds)
    estimate = location_estimate(y, loss_function("absolute"), *bounds)
    # density of Gamma(2, 1) at its median ~ 0.26: H = 2 f(median), sd^2 = 1 / (omega n H)
    start = GaussianStart(0.1, [estimate], [[1 / (0.1 * len(y) * 2 * 0.26)]])
    sampler = PathSampler(n_particles=2000)
    idata = gibbs_path(program, omega_max=3.0, sampler=sampler, seed=11, start=start)
    path = arviz_compat.group(idata, "path")
    theta = np.linspace(*bounds, 4001)
    sums = grid.loss_sums(theta, y, loss_function("absolute"))
    read_at = points(path)
    for omega, ess in read_at:
        exact = grid.posterior(theta, sums, omega)
        read = reweight(path, omega)
        F, _ = cdf(read, theta)
        assert np.max(np.abs(F - grid.cdf(exact))) < dkw(ess, len(read_at)), omega
        assert abs(read.log_z - float(exact.log_z)) < Z_TOL * read.log_z_se + 1e-3, omega
    # the table starts at the start, not at omega_max / 1000
    table = idata.path_functionals
    assert float(table["omega"].min()) == 0.1
    assert np.array_equal(table["omega"].values, default_omegas(path))
    prior_path = LearningRatePath(program, sampler=sampler, seed=11).extend(3.0)
    assert len(path["omega"]) < len(prior_path.levels)


def test_reading_below_the_start_is_importance_sampling_from_the_first_point():
    """Below omega_0 the first point's particles are reweighted by exp((omega_0 -
    omega) L_n): the right posterior, from fewer effective draws."""
    y = np.random.default_rng(3).normal(0.7, 1.5, 400)
    program = location_program(y, loss="squared", bounds=(-20, 20))
    # flat prior: the Gibbs posterior at omega is N(mean y, 1 / (2 omega n))
    start = GaussianStart(0.5, [y.mean()], [[1 / (2 * 0.5 * len(y))]])
    path = LearningRatePath(program, sampler=PathSampler(n_particles=4000), seed=2,
                            start=start).extend(1.0).to_dataset()
    read = reweight(path, 0.4)
    assert read.step == 0 and read.ess < 4000
    x = read.theta[:, 0]
    sd = (2 * 0.4 * len(y)) ** -0.5
    assert abs(read.weights @ x - y.mean()) < Z_TOL * sd / math.sqrt(read.ess)


def test_moved_resamples_start_the_path_near_the_first_order_root():
    """A TransportCoverage of a path not yet swept starts it at the Laplace
    approximation at START_SHARE of the first-order root; a path that has levels is
    kept as it is."""
    y = np.random.default_rng(8).normal(3.0, 1.5, 80)
    program = location_program(y, loss="squared", bounds=(-20, 20))
    indices = bootstrap_indices(len(y), 200, np.random.SeedSequence(4))
    path = LearningRatePath(program, sampler=PathSampler(n_particles=500, n_moves=1), seed=0)
    coverage = TransportCoverage(BootstrapProblem(path, indices, np.array([y.mean()]), 0.05))
    assert path.start is not None
    assert path.start.omega == pytest.approx(START_SHARE * coverage.first_order_root())
    # squared loss, flat prior: the Laplace approximation is the posterior, 1 / (2 omega n)
    assert path.start.cov[0, 0] == pytest.approx(1 / (2 * path.start.omega * len(y)), rel=1e-3)
    assert path.start.mean[0] == pytest.approx(y.mean(), abs=1e-6)
    swept = LearningRatePath(program, sampler=PathSampler(n_particles=500, n_moves=1),
                             seed=0).extend(0.1)
    TransportCoverage(BootstrapProblem(swept, indices, np.array([y.mean()]), 0.05))
    assert swept.start is None and swept.omegas[0] == 0


def test_bad_starts_are_named():
    y = np.random.default_rng(0).gamma(2.0, 1.0, 30)
    program = location_program(y, bounds=(0, 8))
    with pytest.raises(ValueError, match="omega must be"):
        GaussianStart(0.0, [1.0], [[1.0]])
    with pytest.raises(ValueError, match="mean must be a finite vector"):
        GaussianStart(1.0, [np.nan], [[1.0]])
    with pytest.raises(ValueError, match="cov must be a symmetric 1 x 1"):
        GaussianStart(1.0, [1.0], [[1.0, 0.0]])
    with pytest.raises(ValueError, match="cov must be positive definite"):
        GaussianStart(1.0, [1.0, 2.0], [[1.0, 2.0], [2.0, 1.0]])
    start = GaussianStart(0.5, [1.0], [[0.1]])
    with pytest.raises(ValueError, match="start: a Gaussian in 2 dimensions for particles in 1"):
        LearningRatePath(program, start=GaussianStart(0.5, [1.0, 1.0], np.eye(2)))
    with pytest.raises(ValueError, match="needs q = 1 and random-walk"):
        LearningRatePath(program, sampler=PathSampler(moves="nuts"), start=start)
    with pytest.raises(ValueError, match="needs q = 1"):
        LearningRatePath(program, q=0.5, start=start)
    with pytest.raises(TypeError, match="start must be a GaussianStart, got dict"):
        LearningRatePath(program, start={"omega": 0.5})
    path = LearningRatePath(program, sampler=PathSampler(n_particles=100), start=start)
    with pytest.raises(ValueError, match=r"omega_max = 0.25 lies below the path's start"):
        path.extend(0.25)
    path.extend(1.0)
    with pytest.raises(ValueError, match="the path has started already"):
        path.start_from(start)


def test_auto_moves_particles_from_five_parameters_without_sweeping_from_the_prior():
    rng = np.random.default_rng(5)
    X = np.column_stack([np.ones(200), rng.normal(size=(200, AUTO_TRANSPORT_DIMENSION - 1))])
    y = X @ np.ones(AUTO_TRANSPORT_DIMENSION) + rng.normal(size=200)
    program = linear_program(y, X, loss="check", loss_params={"tau": 0.5}, prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    indices = bootstrap_indices(200, 50, np.random.SeedSequence(1))
    path = LearningRatePath(program, sampler=PathSampler(n_particles=500), seed=0)
    estimate = program.estimate().theta
    coverage = choose_coverage("auto", BootstrapProblem(path, indices, estimate, 0.05), 0.25, 0,
                               1.0)
    assert isinstance(coverage, TransportCoverage) and not path.levels
    assert path.start is not None
    one = location_program(y, bounds=(-5, 10))
    few = LearningRatePath(one, sampler=PathSampler(n_particles=4000), seed=0)
    problem = BootstrapProblem(few, indices, np.array([np.median(y)]), 0.05)
    assert isinstance(choose_coverage("auto", problem, 0.25, 0, 1.0), PathCoverage)
    assert few.start is None and few.omegas[0] == 0
