"""Numerical Bayes decisions of a loss given only as a Stan file, in process.

Every shipped loss with a closed-form decision, given only as its Stan file, must
give the Bayes decisions of its :class:`~stanflow.losses.BoundLoss` on the same
samples within the stated tolerance (``XTOL`` times each decision's range of
samples); a loss of the user's own (log-cosh, no closed form) must give the
minimiser that a brute-force grid in NumPy finds; the LCVI loop with a loss
given as a file path must take the decisions it takes with the shipped loss.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from stanflow.lcvi import normal_mean, run_lcvi, stan_loss
from stanflow.lcvi.mixture_nodes import noise_nodes
from stanflow.lcvi.numeric_decisions import (
    XTOL,
    bayes_decisions,
    loss_values,
    mixture_decisions,
    resolve_loss,
)
from stanflow.losses import bound_loss
from stanflow.models import STAN_DIR

pytestmark = pytest.mark.e2e

LOSS_DIR = STAN_DIR / "losses"

S = 1001
"""Odd, and ``(S - 1) q`` is an integer for ``q`` in {0.2, 0.8}: the shipped
rules (``np.median``, ``np.quantile`` with linear interpolation) then return
the unique minimiser of the empirical risk, an order statistic."""

SHIPPED = [
    ("squared", {}),
    ("absolute", {}),
    ("check", {"tau": 0.2}),
    ("check", {"tau": 0.8}),
    ("linex", {"c": 0.7}),
    ("linex", {"c": -0.4}),
]

MIXTURE_TOL = 1e-2
"""Of the predictive sd: the stratified noise nodes' error against the exact
mixture decision is at most about 5e-3 of it (numeric_decisions' docstring)."""

LOOP_TOL = 0.01
"""About :data:`MIXTURE_TOL` of the plain-VI predictive sd (1.1); measured: at most
4e-3 over three seeds, the LCVI blocks moving a little with the decisions."""

LOG_COSH = """\
// log cosh((h - y - b) / a) with a = loss_params[1] > 0, b = loss_params[2]:
// quadratic near h = y + b, linear far from it; written without overflow.
// params: a in (0, inf), b
real loss(real y, real f, vector loss_params) {
  real u = abs(f - y - loss_params[2]) / loss_params[1];
  return u + log1p_exp(-2 * u) - log(2);
}
"""


def log_cosh(y: np.ndarray, h: np.ndarray, a: float, b: float) -> np.ndarray:
    u = np.abs(h - y - b) / a
    return u + np.log1p(np.exp(-2 * u)) - np.log(2)


def grid_minimum(
    y: np.ndarray, a: float, b: float, low: float, high: float
) -> tuple[float, float]:
    """The point of a 2001-point grid on ``[low, high]`` with the least mean log-cosh loss, and the step."""
    grid = np.linspace(low, high, 2001)
    risk = log_cosh(y[:, None], grid, a, b).mean(axis=0)
    return float(grid[np.argmin(risk)]), float(grid[1] - grid[0])


def ids(case: tuple[str, dict]) -> str:
    name, params = case
    return name + "".join(f"-{k}{v}" for k, v in params.items())


@pytest.fixture(scope="module")
def samples() -> np.ndarray:
    """Skewed outcome samples of six decisions of different scales and places, (S, 2, 3)."""
    rng = np.random.default_rng(11)
    scale = np.array([0.5, 1.0, 3.0])
    shift = np.array([[-1.0], [2.0]])
    return rng.gamma(2.0, size=(S, 2, 3)) * scale + shift


@pytest.fixture(scope="module")
def log_cosh_file(tmp_path_factory) -> object:
    path = tmp_path_factory.mktemp("user_loss") / "log_cosh.stanfunctions"
    path.write_text(LOG_COSH)
    return path


@pytest.mark.parametrize("case", SHIPPED, ids=ids)
def test_decisions_equal_the_closed_forms_of_the_shipped_losses(cmdstan, samples, case):
    name, params = case
    h = bayes_decisions(
        LOSS_DIR / f"{name}.stanfunctions", samples, list(params.values())
    )
    expected = bound_loss(name, **params).bayes_decision(samples)
    width = samples.max(axis=0) - samples.min(axis=0)
    assert h.shape == (2, 3)
    assert np.all(np.abs(h - expected) <= XTOL * width), np.abs(h - expected) / width


@pytest.mark.parametrize("case", SHIPPED[1:3] + SHIPPED[4:5], ids=ids)
def test_mixture_decisions_are_close_to_the_exact_ones(cmdstan, case):
    name, params = case
    rng = np.random.default_rng(5)
    loc = rng.normal(0.5, 0.4, size=(1000, 4))
    sd = np.array([0.3, 0.8, 1.2, 2.0])
    loss = stan_loss(LOSS_DIR / f"{name}.stanfunctions", tuple(params.values()))
    h = loss.mixture_decision(loc, sd)
    expected = bound_loss(name, **params).mixture_decision(loc, sd)
    predictive_sd = np.sqrt(loc.var(axis=0) + sd**2)
    assert np.all(np.abs(h - expected) <= MIXTURE_TOL * predictive_sd)
    # the mixture rule is the sample rule on the stratified noise nodes
    nodes = loc[:, None, :] + noise_nodes(1000, 8)[:, :, None] * sd
    assert mixture_decisions(
        loss.stan_file, loc, sd, loss.params, nodes=8
    ) == pytest.approx(bayes_decisions(loss.stan_file, nodes.reshape(-1, 4), loss.params))


def test_stan_loss_values_equal_the_python_loss(cmdstan):
    rng = np.random.default_rng(2)
    y, h = rng.normal(size=(50, 3, 4)), rng.normal(size=4)
    for name, params in SHIPPED:
        loss = stan_loss(LOSS_DIR / f"{name}.stanfunctions", tuple(params.values()))
        assert loss.name == name and loss.params == tuple(params.values())
        expected = bound_loss(name, **params).value(y, h)
        assert loss.value(y, h) == pytest.approx(expected, rel=1e-13, abs=1e-14)


def test_a_loss_of_your_own_against_a_brute_force_grid(cmdstan, samples, log_cosh_file):
    a, b = 0.7, 0.0
    y = samples.reshape(S, -1)
    h = bayes_decisions(log_cosh_file, y, [a, b])
    assert loss_values(log_cosh_file, y[:5], h, [a, b]) == pytest.approx(
        log_cosh(y[:5], h, a, b), rel=1e-13
    )
    for n in range(y.shape[1]):
        column = y[:, n]
        best, step = grid_minimum(column, a, b, column.min(), column.max())
        best, step = grid_minimum(column, a, b, best - 2 * step, best + 2 * step)
        assert abs(h[n] - best) <= step
        # not the mean or the median in disguise
        assert min(abs(h[n] - np.median(column)), abs(h[n] - column.mean())) > 0.01


def test_a_shipped_loss_without_a_closed_form_decides_numerically(cmdstan, samples):
    # huber has no closed-form Bayes decision: resolve_loss takes its Stan file
    loss = resolve_loss("huber", delta=0.5)
    assert loss.name == "huber" and loss.stan_file.name == "huber.stanfunctions"
    y = samples.reshape(S, -1)
    h = loss.bayes_decision(y)
    for n in range(y.shape[1]):
        grid = np.linspace(y[:, n].min(), y[:, n].max(), 20001)
        u = np.abs(y[:, n, None] - grid)
        risk = np.where(u <= 0.5, u**2 / 2, 0.5 * (u - 0.25)).mean(axis=0)
        assert abs(h[n] - grid[np.argmin(risk)]) <= grid[1] - grid[0]


def test_a_minimum_outside_the_samples_range_is_an_error(
    cmdstan, samples, log_cosh_file
):
    with pytest.raises(ValueError, match="decreases above the range of the samples"):
        bayes_decisions(log_cosh_file, samples, [0.7, 100.0])  # minimum at y + 100


def test_the_loop_with_a_loss_file_takes_the_shipped_losss_decisions(cmdstan):
    problem = normal_mean(np.array([0.3, -0.5, 1.1, 0.6]), 1.0)
    options = {
        "tau": 0.2,
        "seed": 2,
        "decision_every": 500,
        "tol": 10.0,
        "advi_args": {"iter": 2000, "eta": 0.1},
    }
    path = LOSS_DIR / "check.stanfunctions"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shipped = run_lcvi(problem, "check", **options)
        numeric = run_lcvi(problem, path, **options)
    assert numeric.loss.stan_file == path.resolve() and numeric.loss.name == "check"
    assert numeric.loss.params == (0.2,)
    assert [s.state.iteration for s in numeric.steps] == [2000, 1500, 2000]
    # plain VI is the same run: its decisions differ by the mixture rule's error
    for mine, theirs in zip(numeric.steps, shipped.steps, strict=True):
        assert mine.decisions == pytest.approx(theirs.decisions, abs=LOOP_TOL)
    assert numeric.utility.scale == pytest.approx(shipped.utility.scale, rel=LOOP_TOL)


def test_the_loop_rejects_a_loss_file_without_its_parameters(cmdstan):
    problem = normal_mean(np.array([0.3, -0.5]), 1.0)
    with pytest.raises(
        ValueError, match=r"loss_params: check.stanfunctions takes \['tau'\]; missing \['tau'\]"
    ):
        run_lcvi(problem, LOSS_DIR / "check.stanfunctions")


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda y: bayes_decisions(LOSS_DIR / "squared.stanfunctions", y[:, 0, 0]),
            r"samples must have shape \(S, N\) \(one column per decision\)",
        ),
        (
            lambda y: bayes_decisions(LOSS_DIR / "squared.stanfunctions", y[:0]),
            r"samples must have shape \(S, \*shape\) with S >= 1",
        ),
        (
            lambda y: bayes_decisions(
                LOSS_DIR / "squared.stanfunctions", np.where(y > 4, np.nan, y)
            ),
            r"samples must be finite: \d+ value\(s\) are not, first at index",
        ),
        (
            lambda y: bayes_decisions(LOSS_DIR / "check.stanfunctions", y),
            r"loss_params: check.stanfunctions takes 1 parameter\(s\) \['tau'\], got 0",
        ),
        (
            lambda y: stan_loss(LOSS_DIR / "linex.stanfunctions"),
            r"loss_params: linex.stanfunctions takes 1 parameter\(s\) \['c'\], got 0",
        ),
        (
            lambda y: bayes_decisions(LOSS_DIR / "check.stanfunctions", y, [np.nan]),
            r"loss_params\['tau'\] of check.stanfunctions must be finite",
        ),
        (
            lambda y: bayes_decisions(LOSS_DIR / "hubber.stanfunctions", y),
            "loss_file: no such file .*hubber.stanfunctions",
        ),
        (
            lambda y: bayes_decisions(LOSS_DIR / "squared.stanfunctions", y, xtol=0.0),
            r"xtol must be in \(0, 1\)",
        ),
        (
            lambda y: mixture_decisions(LOSS_DIR / "squared.stanfunctions", y, -1.0),
            "sd must be positive",
        ),
        (
            lambda y: mixture_decisions(
                LOSS_DIR / "squared.stanfunctions", y, 1.0, nodes=0
            ),
            "nodes must be an integer >= 1",
        ),
    ],
)
def test_bad_input_is_a_clear_error(cmdstan, samples, call, message):
    with pytest.raises(ValueError, match=message):
        call(samples)


def test_arguments_of_the_wrong_type_are_type_errors(samples):
    with pytest.raises(TypeError, match="loss_params must be a sequence of numbers"):
        bayes_decisions(LOSS_DIR / "check.stanfunctions", samples, "0.2")
    with pytest.raises(TypeError, match="loss_file must be a path to a Stan file"):
        bayes_decisions(3, samples)
