"""ADVI state files (stanflow.advi.AdviState) without a compiler: reading, draws, entropy."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from stanflow.advi import AdviState

MU = [0.5, -1.0, 2.0]


def write_state(path, algorithm, scale):
    path.write_text(
        json.dumps(
            {
                "format": "stanflow-advi-state",
                "version": 1,
                "algorithm": algorithm,
                "model": "m_model",
                "dimension": 3,
                "iteration": 1200,
                "eta": 0.1,
                "elbo": None,
                "mu": MU,
                "scale": np.ravel(scale).tolist(),
                "history_mu": [0.0] * 3,
                "history_scale": np.zeros_like(np.ravel(scale)).tolist(),
                "rng": "17 2 0 ...",
            }
        )
    )
    return AdviState.read(path)


def test_mean_field_state_draws_and_entropy(tmp_path):
    omega = np.array([0.0, np.log(2.0), np.log(0.5)])
    state = write_state(tmp_path / "s.json", "meanfield", omega)
    assert state.iteration == 1200 and state.eta == 0.1 and state.elbo is None
    base = np.random.default_rng(0).standard_normal((4, 3))
    assert np.allclose(state.draws(base), MU + np.exp(omega) * base)
    expected = multivariate_normal(MU, np.diag(np.exp(2 * omega))).entropy()
    assert state.entropy() == pytest.approx(expected)


def test_full_rank_state_draws_and_entropy(tmp_path):
    L = np.array([[1.0, 0.0, 0.0], [0.5, 2.0, 0.0], [-0.3, 0.2, 0.7]])
    state = write_state(tmp_path / "s.json", "fullrank", L)
    assert state.scale.shape == (3, 3) and np.array_equal(state.scale, L)
    base = np.random.default_rng(1).standard_normal((200_000, 3))
    draws = state.draws(base)
    assert np.allclose(np.cov(draws.T), L @ L.T, atol=0.03)
    assert state.entropy() == pytest.approx(multivariate_normal(MU, L @ L.T).entropy())


def test_bad_files_and_base_samples(tmp_path):
    (tmp_path / "other.json").write_text(json.dumps({"format": "something"}))
    with pytest.raises(ValueError, match="is not a stanflow-advi-state file"):
        AdviState.read(tmp_path / "other.json")
    state = write_state(tmp_path / "s.json", "meanfield", np.zeros(3))
    with pytest.raises(ValueError, match=r"base must have shape \(T, 3\)"):
        state.draws(np.zeros((2, 4)))
