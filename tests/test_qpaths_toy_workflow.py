"""Workflow qpaths-toy in quick mode: log Z against the truth (TI, SMC) and the
moment-averaging comparison against closed forms written out here."""

from __future__ import annotations

import json

import numpy as np
import pytest

from stanflow.workflows import run_workflow


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("qpaths_toy")
    return out, run_workflow("qpaths-toy", out, quick=True)


def test_outputs_and_log_z(quick):
    out, summary = quick
    assert json.loads((out / "summary.json").read_text()) == summary
    for name in ("qpaths_toy.png", "qpaths_toy_moment_averaging.png", "qpaths_toy.nc"):
        assert (out / name).stat().st_size > 0
    assert summary["seed"] > 0
    # one cell per problem, method and q, kept with its run's diagnostics
    assert len(list((out / "runs").rglob("*.json"))) == 2 * 3 * 2
    # TI and SMC are consistent with the known log Z (AIS is biased on the quick
    # schedule, as its note says).
    for problem, methods in summary["log_z"].items():
        for method in ("ti", "smc"):
            for cell in methods[method].values():
                assert abs(cell["error"]) < 4 * cell["se"] + 0.1, (problem, method, cell)


def test_moment_averaging_against_closed_forms(quick):
    _, summary = quick
    ma = summary["moment_averaging"]
    beta = np.array(ma["beta"])
    m0, v0 = ma["endpoints"]["base"]["mean"], ma["endpoints"]["base"]["variance"]
    m1, v1 = ma["endpoints"]["target"]["mean"], ma["endpoints"]["target"]["variance"]
    assert (m0, v0, m1, v1) == (-4.0, 3.0, 4.0, 1.0)
    paths = ma["paths"]
    assert set(paths) == {"q=0", "q=0.5", "q=0.9", "q=1", "q=2", "moment_averaging"}
    # Moment averaging: first and second moments interpolated linearly.
    mean = (1 - beta) * m0 + beta * m1
    second = (1 - beta) * (v0 + m0**2) + beta * (v1 + m1**2)
    for entry in (paths["moment_averaging"], ma["moment_averaging_closed_form"], paths["q=0"]):
        np.testing.assert_allclose(entry["mean"], mean, atol=1e-6)
        np.testing.assert_allclose(entry["variance"], second - mean**2, atol=1e-5)
    # Geometric path: natural parameters interpolated.
    precision = (1 - beta) / v0 + beta / v1
    np.testing.assert_allclose(paths["q=1"]["variance"], 1 / precision, atol=1e-6)
    np.testing.assert_allclose(
        paths["q=1"]["mean"], ((1 - beta) * m0 / v0 + beta * m1 / v1) / precision, atol=1e-6
    )
    # Same two moments, different shapes: the mixture is bimodal, moment averaging
    # and the geometric path are single Gaussians.
    assert paths["q=0"]["n_modes"] == [2] * len(beta)
    assert paths["moment_averaging"]["n_modes"] == paths["q=1"]["n_modes"] == [1] * len(beta)
