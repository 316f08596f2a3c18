"""The SMC log Z peer workers ``bench/peers/_pymc_smc_worker.py`` and
``_blackjax_smc_worker.py``: their command lines and input checks work without
the peers, and, where the peer venv exists, the log Z each prints for a small
logistic regression matches the one from quadrature.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.special import log_expit, logsumexp

PEERS = Path(__file__).resolve().parent.parent / "bench" / "peers"
PEER_PYTHON = Path("/work/peers/pymc-venv/bin/python")
"""The peer venv ``bench/peers`` scripts use by default (PyMC and BlackJAX)."""
WORKERS = {"pymc": "_pymc_smc_worker.py", "blackjax": "_blackjax_smc_worker.py"}


def small_problem() -> dict[str, np.ndarray | float]:
    """A logistic regression with d = 2 (intercept, one predictor) and n = 15."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(15)
    X = np.column_stack([np.ones(15), 0.5 * (x - x.mean()) / x.std()])
    y = np.where(rng.random(15) < 1 / (1 + np.exp(-(0.3 + 2.0 * X[:, 1]))), 1.0, -1.0)
    return {"X": X, "y": y, "prior_sd": 5.0}


def quadrature_log_z(
    problem: dict[str, np.ndarray | float], step: float = 0.05, half_width: float = 15.0
) -> float:
    """``log Z`` by a Riemann sum on a grid over ``[-half_width, half_width]^2``."""
    axis = np.arange(-half_width, half_width + step / 2, step)
    z0, z1 = (a.ravel() for a in np.meshgrid(axis, axis))
    prior_sd = problem["prior_sd"]
    log_joint = -0.5 * (z0**2 + z1**2) / prior_sd**2 - np.log(2 * np.pi * prior_sd**2)
    for (_, x), y in zip(problem["X"], problem["y"], strict=True):
        log_joint += log_expit(y * (z0 + x * z1))
    return float(logsumexp(log_joint) + 2 * np.log(step))


def run_worker(python: Path | str, worker: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), str(PEERS / worker), *args], capture_output=True,
                          text=True, check=False, timeout=600)


@pytest.mark.parametrize("worker", WORKERS.values())
def test_help_works_without_the_peers(worker: str) -> None:
    proc = run_worker(sys.executable, worker, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--particles" in proc.stdout


@pytest.mark.parametrize("worker", WORKERS.values())
@pytest.mark.parametrize(("fields", "named"), [
    ({"X": np.ones((4, 2)), "y": np.array([1.0, -1.0, 1.0, -1.0])}, "prior_sd"),
    ({"X": np.ones((4, 2)), "y": np.array([1.0, 0.0, 1.0, 0.0]), "prior_sd": 5.0}, "y must"),
    ({"X": np.zeros((4, 2)), "y": np.array([1.0, -1.0, 1.0, -1.0]), "prior_sd": 5.0},
     "intercept"),
])
def test_bad_data_is_named_before_the_peer_is_imported(
    tmp_path: Path, worker: str, fields: dict[str, object], named: str
) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, **fields)
    proc = run_worker(sys.executable, worker, str(path), "--particles", "10", "--seeds", "0")
    assert proc.returncode == 2
    message = proc.stderr.strip().splitlines()[-1]
    assert str(path) in message and named in message


def test_quadrature_reference_is_converged() -> None:
    problem = small_problem()
    finer = quadrature_log_z(problem, step=0.03, half_width=20.0)
    assert quadrature_log_z(problem) == pytest.approx(finer, abs=1e-6)


@pytest.mark.parametrize("peer", WORKERS)
def test_worker_log_z_matches_quadrature(tmp_path: Path, peer: str) -> None:
    if not PEER_PYTHON.exists():
        pytest.skip(f"no peer venv at {PEER_PYTHON}")
    if subprocess.run([str(PEER_PYTHON), "-c", f"import {peer}"], check=False,
                      capture_output=True).returncode != 0:
        pytest.skip(f"{peer} is not installed in {PEER_PYTHON}")
    problem = small_problem()
    path = tmp_path / "small.npz"
    np.savez(path, **problem)
    proc = run_worker(PEER_PYTHON, WORKERS[peer], str(path), "--particles", "1000",
                      "--seeds", "0", "1")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["peer"] == peer and result["first_call_seconds"] > 0
    assert [run["seed"] for run in result["runs"]] == [0, 1]
    truth = quadrature_log_z(problem)
    for run in result["runs"]:
        assert run["log_z"] == pytest.approx(truth, abs=0.15), (run, truth)
        assert run["cpu_seconds"] > 0 and run["wall_seconds"] > 0 and run["n_stages"] >= 1
