"""The `custom-loss` workflow: Stan files only, through the four methods (quick mode)."""

from __future__ import annotations

import math

import pytest

from stanflow.workflows import WORKFLOWS_DIR, execute

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def summary(cmdstan, tmp_path_factory):
    import importlib.util

    spec = importlib.util.spec_from_file_location("custom_loss", WORKFLOWS_DIR / "custom_loss.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("custom-loss")
    result = execute(module.run, out, quick=True)
    assert (out / "stan" / "log_cosh.stanfunctions").is_file()
    return result


def test_gibbs_with_a_loss_file(summary):
    gibbs = summary["gibbs"]
    assert gibbs["gpc_converged"]
    # one parameter: the plug-in and Holmes-Walker rates coincide (H / J)
    assert gibbs["omega_holmes_walker"] == pytest.approx(gibbs["omega_plugin"], rel=1e-12)
    # NUTS against the exact grid posterior: 4 x 500 draws, ESS >= 500 assumed
    mcse = gibbs["posterior_sd_grid"] / math.sqrt(500)
    assert abs(gibbs["posterior_mean_nuts"] - gibbs["posterior_mean_grid"]) < 5 * mcse


def test_lcvi_wbb_and_qpaths_with_stan_files(summary):
    assert summary["lcvi"]["steps"] >= 2
    assert len(summary["lcvi"]["decisions_lcvi"]) == 4
    assert summary["wbb"]["converged"] == summary["wbb"]["draws"] == 100
    beta = summary["wbb"]["beta_mean"]
    assert beta[0] == pytest.approx(1.0, abs=0.5) and beta[1] == pytest.approx(-0.5, abs=0.5)
    qp = summary["qpaths"]
    assert abs(qp["error"]) < 4 * qp["log_z_se"] + 0.03
