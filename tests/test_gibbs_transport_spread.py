"""Moving particles to bootstrap resamples, spread: on a Dask cluster, in blocks, resumed.

Truths: the same calibration computed in this process in one piece (the
numbers must be identical, not close: every resample draws from its own
random stream); the program's own log density after a round trip through
pickle.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import distributed
import numpy as np
import pytest

from stanflow.gibbs import linear_program
from stanflow.gibbs.gpc.algorithm import bootstrap_indices
from stanflow.gibbs.path import LearningRatePath, PathSampler, path_gpc, transport
from stanflow.gibbs.path.coverage import BootstrapProblem
from stanflow.gibbs.path.transport import TransportCoverage
from stanflow.runs import DaskExecutor, LocalExecutor, Workers
from stanflow.runs.calls import CALLS

N, K, B = 200, 4, 30
OMEGAS = (1.0, 1.6)


def regression(seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(N), rng.normal(size=(N, K - 1))])
    y = X @ np.r_[1.0, 0.5, np.zeros(K - 2)] + rng.standard_t(3, size=N)
    return linear_program(y, X, loss="check", loss_params={"tau": 0.5}, prior="normal",
                          prior_params={"mean": 0, "sd": 10})


@pytest.fixture(scope="module")
def problem(cmdstan):
    program = regression()
    path = LearningRatePath(program, sampler=PathSampler(n_particles=1000), seed=3)
    indices = bootstrap_indices(N, B, np.random.SeedSequence(4))
    return BootstrapProblem(path, indices, program.estimate().theta, 0.05)


def evaluate(problem, workers=None):
    coverage = TransportCoverage(problem, draws=150, seed=5, workers=workers)
    found = [coverage(omega) for omega in OMEGAS]
    assert coverage.placement is not None
    return found, coverage.placement, coverage.moves


@pytest.mark.e2e
def test_a_program_travels_by_pickle(cmdstan):
    program = regression()
    u = np.random.default_rng(0).normal(size=(5, K))
    again = pickle.loads(pickle.dumps(program))
    np.testing.assert_array_equal(again.log_density(u, 0.7), program.log_density(u, 0.7))
    # where the compiled library is not to be seen, the process compiles its own
    state = program.__getstate__()
    state["_library_file"] = Path("/nonexistent/evaluation_model.so")
    moved = object.__new__(type(program))
    moved.__setstate__(state)
    np.testing.assert_array_equal(moved.losses(u), program.losses(u))


@pytest.mark.e2e
def test_dask_and_other_blocks_give_the_numbers_of_one_local_piece(problem, monkeypatch):
    local = evaluate(problem)
    assert local[2] >= B
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                 dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        remote = evaluate(problem, Workers(DaskExecutor(client)))
    monkeypatch.setattr(transport, "BLOCK", 7)
    small_blocks = evaluate(problem, Workers(LocalExecutor(1)))
    for other in (remote, small_blocks):
        assert other[0] == local[0]
        for a, b in zip(other[1], local[1], strict=True):
            np.testing.assert_array_equal(a, b)


class Crash(Exception):
    pass


class CrashingExecutor(LocalExecutor):
    """Dies after ``calls`` calls, as a killed process would."""

    def __init__(self, calls: int) -> None:
        super().__init__(1)
        self.left = calls

    def run_calls(self, fn, shared, items):
        for call in super().run_calls(fn, shared, items):
            if self.left == 0:
                raise Crash
            self.left -= 1
            yield call


class CountingExecutor(LocalExecutor):
    def __init__(self) -> None:
        super().__init__(1)
        self.computed = 0

    def run_calls(self, fn, shared, items):
        self.computed += len(items)
        return super().run_calls(fn, shared, items)


@pytest.mark.e2e
def test_a_crashed_calibration_resumes_to_the_uninterrupted_numbers(problem, tmp_path):
    path = problem.path
    kwargs = {"B": B, "seed": 2, "resamples": "transport", "max_evaluations": 6}
    every = CountingExecutor()
    whole = path_gpc(path, problem.estimate, **kwargs, workers=Workers(every))
    assert every.computed >= 2  # so that a crash leaves one kept and one to compute
    folder = tmp_path / "gpc"
    with pytest.raises(Crash):  # the process dies before its last call ends
        path_gpc(path, problem.estimate, **kwargs,
                 workers=Workers(CrashingExecutor(calls=every.computed - 1), out_dir=folder))
    kept = len(list((folder / CALLS).iterdir()))
    assert kept == every.computed - 1
    counting = CountingExecutor()
    resumed = path_gpc(path, problem.estimate, **kwargs,
                       workers=Workers(counting, out_dir=folder))
    for name in ("omega", "omega_se", "omega_path", "coverage_path", "ess_min", "resample_moves"):
        np.testing.assert_array_equal(resumed[name].values, whole[name].values)
    # the kept calls were read, the rest computed
    assert len(list((folder / CALLS).iterdir())) == kept + counting.computed
