"""The shipped LCVI problems, now LCVI programs, give the numbers their templates gave.

``tests/reference/lcvi_shipped_numbers.json`` holds what the loop and the joint
optimisation returned on eight schools, the normal mean and a small matrix
factorisation when each was a Stan template with a Python twin of its
predictive (commit 1f9d6c5); the same calls on the programs must return the
same numbers, to round-off.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from stanflow.lcvi import Utility, eight_schools, normal_mean, run_lcvi, run_lcvi_joint
from stanflow.lcvi.mf import matrix_factorisation, split_cells
from stanflow.workflows import DATA_DIR

pytestmark = pytest.mark.e2e

REFERENCE = json.loads((Path(__file__).parent / "reference" / "lcvi_shipped_numbers.json").read_text())
RTOL = 1e-8


def _schools():
    return eight_schools(json.loads((DATA_DIR / "eight_schools.json").read_text()))


def _mf():
    Y = np.random.default_rng(7).normal(size=(12, 9))
    return matrix_factorisation(Y, split_cells(Y.shape, np.random.default_rng(8)), K=2)


def _normal_mean():
    return normal_mean(np.array([0.3, -0.5, 1.1, 0.6, 2.0]), 1.5)


LOOPS = {
    "eight_schools_check": lambda: run_lcvi(
        _schools(), "check", tau=0.2, seed=3, decision_every=500, tol=10.0,
        advi_args={"iter": 2000}),
    "eight_schools_utility_exp": lambda: run_lcvi(
        _schools(), "check", tau=0.8, utility=Utility(kind="exp", estimator="naive"),
        decision="utility", seed=4, tol=10.0, advi_args={"iter": 1500, "grad_samples": 4}),
    "normal_mean_huber": lambda: run_lcvi(
        _normal_mean(), "huber", delta=1.0, seed=2, tol=10.0, advi_args={"iter": 1000}),
    "matrix_factorisation_check": lambda: run_lcvi(
        _mf(), "check", tau=0.8, seed=5, decision_every=500, tol=10.0,
        advi_args={"iter": 1000}, n_draws=200),
}


def _close(got, expected):
    assert np.asarray(got) == pytest.approx(np.asarray(expected), rel=RTOL, abs=1e-9)


@pytest.mark.parametrize("name", list(LOOPS))
def test_loop_numbers_are_the_templates(cmdstan, name):
    loop, expected = LOOPS[name](), REFERENCE[name]
    assert loop.settled == expected["settled"]
    _close(loop.utility.scale, expected["scale"])
    _close([s.decisions for s in loop.steps], expected["decisions"])
    for key in ("risk", "elbo", "utility"):
        _close([getattr(s, key) for s in loop.steps], expected[key])
    _close(loop.baseline.risk, expected["baseline_risk"])
    _close(loop.args["eta"], expected["eta"])


@pytest.mark.parametrize("name, program", [
    ("eight_schools", _schools), ("normal_mean", _normal_mean), ("matrix_factorisation", _mf)])
def test_joint_numbers_are_the_templates(cmdstan, name, program):
    joint = run_lcvi_joint(program(), "check", tau=0.2, iter=300, record_every=100, seed=6,
                           n_draws=200)
    expected = REFERENCE[f"joint_{name}"]
    _close(joint.utility.scale, expected["scale"])
    _close(joint.vi.decisions, expected["vi_decisions"])
    _close(joint.lcvi.decisions, expected["lcvi_decisions"])
    _close(joint.lcvi.h, expected["lcvi_h"])
    _close(joint.lcvi.mu, expected["lcvi_mu"])
    _close(joint.vi.mu, expected["vi_mu"])
    _close([joint.vi.risk, joint.lcvi.risk], expected["risk"])
    _close(joint.lcvi.record["objective"], expected["objective"])
