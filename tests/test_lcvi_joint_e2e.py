"""The paper's joint LCVI optimisation (stanflow.lcvi.joint) against independent truths.

- The shipped programs' evaluation forms: their utility term, read off the
  in-process log density at weight 1 minus weight 0, equals the NumPy
  estimator at the same ``(theta, h, eps_y)``; their gradient (in the model's
  parameters, ``h`` and ``eps_y``) equals central finite differences of the
  log density.
- The normal mean (``theta ~ N(0, 10^2)``, ``y_n ~ N(theta, 1)``): plain VI by
  the in-process optimiser (weight 0) is the exact Gaussian posterior; LCVI with
  fresh outcome samples reaches the optimum of ``ELBO + U`` in closed form.
  With fresh samples the outcome expectation is exact in expectation: for
  ``q = N(m, s^2)`` the outcome is ``N(m, s^2 + 1)``, the optimal decision its
  ``tau``-quantile ``m + sqrt(s^2 + 1) z_tau``, and there
  ``U = -(N / M) sqrt(s^2 + 1) phi(z_tau)``, which leaves ``m`` at the
  posterior mean and shrinks ``s`` to the maximiser of
  ``-s^2 (1/10^2 + N) / 2 + log s + U(s)`` (scipy, 1-D).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.stats import norm

from stanflow.lcvi import Utility, run_lcvi_joint
from stanflow.lcvi.joint_optimiser import joint_model
from stanflow.lcvi.mf import matrix_factorisation, split_cells
from stanflow.lcvi.problem import eight_schools, normal_mean
from stanflow.lcvi.utility import normal_outcomes, utility_per_theta
from stanflow.losses import bound_loss
from stanflow.workflows import DATA_DIR

pytestmark = pytest.mark.e2e

SCHOOLS = eight_schools(json.loads((DATA_DIR / "eight_schools.json").read_text()))
LOSS = bound_loss("check", tau=0.2)
Y = np.array([0.3, -0.5, 1.1, 0.6])
PRIOR_SD, TAU, M = 10.0, 0.2, 0.5


def _point(joint, z, h, eps_y):
    """An evaluation row at unconstrained ``(z, h, eps_y)`` with the joint's settings."""
    point = np.zeros(joint.parts["lcvi"].stop)
    point[joint.parts["theta"]], point[joint.parts["h"]] = z, h
    point[joint.parts["z"]] = eps_y.ravel(order="F")  # Stan: column-major
    point[joint.parts["u"]] = 0.5
    point[joint.parts["lcvi"]] = joint.settings
    return point


def _utility_from_log_density(problem, z, h, eps_y, kind, scale, estimator):
    """log density at weight 1 minus at weight 0, at unconstrained ``(z, h, eps_y)``."""
    S = eps_y.shape[0]
    values = []
    for weight in (1.0, 0.0):
        utility = Utility(kind=kind, scale=scale, estimator=estimator, n_outcomes=S)
        joint = joint_model(problem.bind(LOSS), utility, weight)
        values.append(joint.library.log_density(_point(joint, z, h, eps_y), propto=False))
    return values[0] - values[1]


@pytest.mark.parametrize(
    "kind, scale, estimator",
    [("linear", 40.0, "linearised"), ("linear", 40.0, "naive"), ("exp", 0.1, "naive")],
)
def test_eight_schools_joint_utility_term_matches_numpy(cmdstan, kind, scale, estimator):
    rng = np.random.default_rng(11)
    theta = rng.normal(5.0, 4.0, size=8)
    z = np.concatenate([[4.0, np.log(3.0)], theta])  # (mu, log tau, theta)
    eps_y, h = rng.standard_normal((6, 8)), rng.normal(5.0, 5.0, size=8)
    expected = utility_per_theta(
        normal_outcomes(theta[None], np.array(SCHOOLS.data["sigma"]), eps_y), h, LOSS, kind,
        scale, estimator
    )[0]
    got = _utility_from_log_density(SCHOOLS, z, h, eps_y, kind, scale, estimator)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_matrix_factorisation_joint_utility_term_matches_numpy(cmdstan):
    rng = np.random.default_rng(4)
    I, J, K = 6, 5, 2
    problem = matrix_factorisation(rng.normal(size=(I, J)), split_cells((I, J), rng), K=K)
    U, V = rng.normal(size=(I, K)), rng.normal(size=(J, K))
    z = np.concatenate([U.ravel(order="F"), V.ravel(order="F")])
    loc = (U @ V.T).ravel(order="F")[np.asarray(problem.data["cell"]) - 1][None]  # column-major
    eps_y, h = rng.standard_normal((2, problem.n)), rng.normal(size=problem.n)
    expected = utility_per_theta(
        normal_outcomes(loc, np.ones(problem.n), eps_y), h, LOSS, "exp", 0.6, "linearised"
    )[0]
    got = _utility_from_log_density(problem, z, h, eps_y, "exp", 0.6, "linearised")
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_joint_gradient_equals_finite_differences(cmdstan):
    joint = joint_model(SCHOOLS.bind(LOSS), Utility(scale=40.0, estimator="naive", n_outcomes=3), 1.0)
    rng = np.random.default_rng(2)
    z = np.concatenate([[4.0, np.log(3.0)], rng.normal(5.0, 4.0, 8)])
    point = _point(joint, z, rng.normal(5.0, 5.0, 8), rng.standard_normal((3, 8)))
    model, parts = joint.library, joint.parts
    _, grad = model.log_density_gradient(point, propto=False)
    step = 1e-6
    # the model's parameters, the base samples and the decisions
    moving = np.r_[parts["theta"], parts["z"], parts["h"]]
    finite = np.array(
        [
            (model.log_density(point + step * e, propto=False)
             - model.log_density(point - step * e, propto=False)) / (2 * step)
            for e in np.eye(point.size)[moving]
        ]
    )
    # the check loss is piecewise linear: no kink lies within `step` of this point
    assert np.allclose(grad[moving], finite, rtol=1e-6, atol=1e-6)
    assert np.any(grad[parts["h"]] != 0) and np.any(grad[parts["z"]] != 0)  # h and eps_y enter


@pytest.fixture(scope="module")
def normal_mean_joint(cmdstan):
    problem = normal_mean(Y, 1.0, prior_sd=PRIOR_SD)
    return run_lcvi_joint(
        problem, "check", tau=TAU, utility=Utility(scale=M), iter=10_000, lr=0.05, average=0.5,
        seed=2
    )


def test_plain_vi_by_the_joint_optimiser_is_the_exact_posterior(normal_mean_joint):
    precision = 1 / PRIOR_SD**2 + Y.size
    vi = normal_mean_joint.vi
    assert vi.mu[0] == pytest.approx(Y.sum() / precision, abs=0.01)
    assert np.exp(vi.omega[0]) == pytest.approx(precision**-0.5, rel=0.02)


def test_joint_lcvi_reaches_the_closed_form_optimum(normal_mean_joint):
    precision = 1 / PRIOR_SD**2 + Y.size
    z_tau = norm.ppf(TAU)

    def negative_objective(s: float) -> float:
        return s**2 * precision / 2 - np.log(s) + Y.size / M * np.sqrt(s**2 + 1) * norm.pdf(z_tau)

    s_star = minimize_scalar(negative_objective, bounds=(0.01, 2.0), method="bounded").x
    m_star = Y.sum() / precision
    h_star = m_star + np.sqrt(s_star**2 + 1) * z_tau
    assert s_star < 0.85 * precision**-0.5  # calibration shrinks q well beyond the noise
    fit = normal_mean_joint.lcvi
    assert fit.mu[0] == pytest.approx(m_star, abs=0.01)
    assert np.exp(fit.omega[0]) == pytest.approx(s_star, rel=0.02)
    assert np.allclose(fit.h, h_star, atol=0.015)
    assert fit.record["iteration"][-1] == 10_000


def test_a_part_run_alone_is_the_same_as_in_a_run_of_both(cmdstan):
    problem = normal_mean(Y, 1.0, prior_sd=PRIOR_SD)
    options = {"utility": Utility(scale=M), "iter": 300, "record_every": 100, "seed": 5}
    both = run_lcvi_joint(problem, "check", tau=TAU, **options)
    vi = run_lcvi_joint(problem, "check", tau=TAU, parts="vi", **options)
    lcvi = run_lcvi_joint(problem, "check", tau=TAU, parts="lcvi", **options)
    assert vi.lcvi is None and lcvi.vi is None
    for alone, together in ((vi.vi, both.vi), (lcvi.lcvi, both.lcvi)):
        for name in ("mu", "omega", "h", "decisions"):
            assert np.array_equal(getattr(alone, name), getattr(together, name)), name
    assert not np.array_equal(both.vi.mu, both.lcvi.mu)
    # theta and the outcomes have streams of their own: plain VI is the same with
    # fixed outcomes, and LCVI differs only through them
    fixed = run_lcvi_joint(problem, "check", tau=TAU, outcomes="fixed", **options)
    assert np.array_equal(fixed.vi.mu, both.vi.mu) and np.array_equal(fixed.vi.omega, both.vi.omega)
    assert not np.array_equal(fixed.lcvi.mu, both.lcvi.mu)


def test_a_run_stopped_and_rerun_from_its_checkpoints_is_the_uninterrupted_run(
    cmdstan, tmp_path, monkeypatch
):
    from stanflow.lcvi import joint_optimiser

    problem = normal_mean(Y, 1.0, prior_sd=PRIOR_SD)
    options = {"utility": Utility(scale=M), "iter": 300, "record_every": 100, "average": 0.5,
               "outcomes": "fixed", "seed": 5}
    whole = run_lcvi_joint(problem, "check", tau=TAU, **options)
    calls, gradient = [], joint_optimiser.log_density_gradient_rows

    def crashing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 450:  # LCVI's step 150: plain VI is done, LCVI saved at step 140
            raise KeyboardInterrupt
        return gradient(*args, **kwargs)

    monkeypatch.setattr(joint_optimiser, "log_density_gradient_rows", crashing)
    with pytest.raises(KeyboardInterrupt):
        run_lcvi_joint(problem, "check", tau=TAU, checkpoint=tmp_path, checkpoint_every=70,
                       **options)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["lcvi.npz", "vi.npz"]
    calls.clear()
    resumed = run_lcvi_joint(problem, "check", tau=TAU, checkpoint=tmp_path, checkpoint_every=70,
                             **options)
    assert len(calls) == 300 - 140
    for part in ("vi", "lcvi"):
        ours, theirs = getattr(resumed, part), getattr(whole, part)
        for name in ("mu", "omega", "h", "decisions", "risk", "risk_h"):
            assert np.array_equal(getattr(ours, name), getattr(theirs, name)), (part, name)
        for key, values in theirs.record.items():
            assert np.array_equal(ours.record[key], values) and ours.record[key].dtype == values.dtype
    with pytest.raises(ValueError, match=r"vi\.npz is the state of another run"):
        run_lcvi_joint(problem, "check", tau=TAU, checkpoint=tmp_path, **options | {"seed": 6})


@pytest.mark.parametrize(
    "options, match",
    [
        ({"outcomes": "stale"}, "outcomes"),
        ({"iter": 0}, "iter"),
        ({"grad_samples": 1.5}, "grad_samples"),
        ({"lr": -0.1}, "lr"),
        ({"average": 1.0}, "average"),
        ({"parts": "decisions"}, "parts"),
        ({"parts": "lcvi"}, r"scale: LCVI alone \(parts='lcvi'\) needs the scale M or gamma"),
        ({"parts": "lcvi", "utility": Utility(percentile=50)}, "scale: LCVI alone"),
        ({"checkpoint_every": 0}, "checkpoint_every"),
    ],
)
def test_bad_input_fails_before_any_compilation(options, match):
    problem = normal_mean(Y, 1.0)
    with pytest.raises(ValueError, match=match):
        run_lcvi_joint(problem, "check", tau=TAU, **options)


def test_the_utility_term_is_a_utility_and_comes_back_with_its_scale(cmdstan):
    problem = normal_mean(Y, 1.0)
    with pytest.raises(TypeError, match="utility must be a Utility, got str"):
        run_lcvi_joint(problem, "check", tau=TAU, utility="linear")
    given = Utility(kind="exp", scale=2.0, n_outcomes=2)
    joint = run_lcvi_joint(problem, "check", tau=TAU, utility=given, iter=20, record_every=10,
                           n_draws=50)
    assert joint.utility == given
    found = run_lcvi_joint(problem, "check", tau=TAU, utility=Utility(kind="exp", n_outcomes=2),
                           iter=20, record_every=10, n_draws=50, parts="vi")
    assert found.utility.scale > 0 and found.utility == Utility(
        kind="exp", scale=found.utility.scale, n_outcomes=2)
