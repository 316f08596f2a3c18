"""The README's "Quick start in Python": every example run as written, its numbers checked.

Each ```python block of the section is executed in a fresh namespace with a
temporary folder as the working directory (``STANFLOW_DATA_DIR`` as the suite
has it); the names it leaves behind are then checked against truths computed
here: an exact grid posterior, a conjugate posterior's predictive quantile, a
Gaussian integral, the Bayesian bootstrap of a mean.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import norm

from stanflow import arviz_compat

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## Quick start in Python"
EXAMPLES = {
    "gibbs": "gibbs.calibrate_path(",
    "lcvi": "lcvi.run_lcvi(",
    "qpaths": "smc(",
    "wbb": "wbb.wbb_program(",
}
"""Each example's block, found by a call only it makes."""


def quick_start_blocks() -> list[str]:
    """The ```python blocks of the README's quick-start section, in order."""
    text = README.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:] if end < 0 else text[start:end]
    return re.findall(r"^```python\n(.*?)^```$", section, flags=re.M | re.S)


def run_example(name: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Execute the example ``name`` in ``folder``; the names it defined."""
    [block] = [b for b in quick_start_blocks() if EXAMPLES[name] in b]
    monkeypatch.chdir(folder)
    namespace: dict[str, Any] = {"__name__": f"readme_{name}"}
    exec(compile(block, f"README.md, quick start: {name}", "exec"), namespace)
    return namespace


def test_every_example_is_run_by_a_test():
    blocks = quick_start_blocks()
    assert len(blocks) == len(EXAMPLES)
    for block in blocks:
        assert sum(marker in block for marker in EXAMPLES.values()) == 1, block


@pytest.mark.e2e
def test_gibbs_example(cmdstan, tmp_path, monkeypatch, capsys):
    """NUTS's posterior mean at GPC's omega against the exact posterior on a fine grid."""
    ns = run_example("gibbs", tmp_path, monkeypatch)
    printed = capsys.readouterr().out
    assert {"gpc_path", "plugin", "holmes_walker"} <= set(re.findall(r"^(\w+) +\d", printed, re.M))
    omega = float(ns["fit"].attrs["omega"])
    path = arviz_compat.group(ns["path"], "calibration")
    assert omega == pytest.approx(float(path["omega"]))
    # The same resamples, regions and root search from one importance sample: the same root
    # within their Monte Carlo errors.
    fast = arviz_compat.group(ns["fast"], "calibration")
    gap = abs(float(fast["omega"]) - omega)
    assert gap <= 4 * math.hypot(float(fast["omega_se"]), float(path["omega_se"])) + 0.02 * omega
    theta = np.linspace(0, 8, 16001)
    log_density = -omega * np.abs(ns["y"][:, None] - theta).sum(axis=0)
    density = np.exp(log_density - log_density.max())
    exact_mean = np.trapezoid(theta * density, theta) / np.trapezoid(density, theta)
    mcse = float(arviz_compat.mcse(ns["fit"], var_names=["theta"])["theta"])
    assert abs(float(ns["fit"].posterior["theta"].mean()) - exact_mean) <= 4 * mcse


@pytest.mark.e2e
def test_lcvi_example(cmdstan, tmp_path, monkeypatch):
    """Plain VI's decisions against the exact Bayes decision of the conjugate posterior,
    within 5% of the predictive's sd (ADVI's final iterate is a few % of the posterior sd
    off; the decisions come from 1000 draws of its state)."""
    ns = run_example("lcvi", tmp_path, monkeypatch)
    y, loop = ns["y"], ns["loop"]
    precision = 1 / 10**2 + y.size
    exact = y.sum() / precision + math.sqrt(1 / precision + 1) * norm.ppf(0.2)
    assert ns["exact"] == pytest.approx(exact)
    assert np.allclose(loop.steps[0].decisions, exact, atol=0.05 * math.sqrt(1 / precision + 1))
    assert len(loop.steps) >= 2 and np.all(np.isfinite(loop.steps[-1].decisions))


@pytest.mark.e2e
def test_qpaths_example(cmdstan, tmp_path, monkeypatch):
    """``log Z`` of ``exp(-|z - 1|^2 / (2 0.5^2))`` in two dimensions is ``log(2 pi 0.25)``;
    SMC's own estimate within 4 standard errors and adaptive SMC's O(1/N) bias (0.02), the
    estimate combined with the final bridge within 4 of its standard errors and 0.005."""
    ns = run_example("qpaths", tmp_path, monkeypatch)
    smc = ns["run"]["smc"].attrs
    exact = math.log(2 * math.pi * 0.25)
    assert abs(smc["log_z_smc"] - exact) < 4 * smc["log_z_smc_se"] + 0.02
    assert abs(smc["log_z"] - exact) < 4 * smc["log_z_se"] + 0.005
    assert (tmp_path / "target.stan").is_file()


@pytest.mark.e2e
def test_wbb_example(cmdstan, tmp_path, monkeypatch):
    """Each draw minimises ``sum_i w_i (y_i - theta)^2``: the weighted mean of its weights,
    exactly. Exp(1) weights normalised are Dirichlet(1, ..., 1): the draws' mean is
    ``mean(y)`` and their variance ``mean((y - mean y)^2) / (n + 1)``, checked within
    4 standard errors of 1000 draws."""
    ns = run_example("wbb", tmp_path, monkeypatch)
    y, theta = ns["y"], ns["theta"]
    w = arviz_compat.group(ns["draws"], "weights")["w"].values.reshape(len(theta), y.size)
    np.testing.assert_allclose(theta, (w @ y) / w.sum(axis=1), rtol=1e-8)
    sd = math.sqrt(np.mean((y - y.mean()) ** 2) / (y.size + 1))
    assert abs(theta.mean() - y.mean()) <= 4 * sd / math.sqrt(theta.size)
    assert abs(theta.std() / sd - 1) <= 4 / math.sqrt(2 * theta.size)
