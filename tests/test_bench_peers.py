"""The peer benchmarks in ``bench/peers/``: their command lines work without the peers,
and their committed results hold what docs/benchmarks.md quotes.

CI does not run the benchmarks themselves (they install PyMC and R); these tests
need neither.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
PEERS = REPO / "bench" / "peers"
RESULTS = REPO / "bench" / "results"
DOC = REPO / "docs" / "benchmarks.md"

SCRIPTS = [
    "pymc_power_posterior.py", "quantreg_intervals.py", "_pymc_power_worker.py", "smc_log_z.py",
    "_pymc_smc_worker.py", "_blackjax_smc_worker.py", "bridgesampling_log_z.py",
]

RATES = ["wall", "draws_per_s", "ess_bulk", "ess_per_s"]
QUOTED = {
    "pymc_power_posterior": [
        ["command"], ["versions", "pymc"], ["versions", "pytensor"], ["versions", "pymc_python"],
        ["versions", "stanflow"], ["machine", "date"], ["machine", "load_average_at_start"],
        ["settings", "n"], ["settings", "omega"],
        ["stanflow_cold", "make_program"], ["stanflow_cold", "first_posterior"],
        *(["stanflow_medians", k] for k in RATES),
        *(["pymc_first_call", k] for k in RATES),
        *(["pymc_warm_medians", k] for k in [*RATES, "sampling_time"]),
        ["agreement", "exact", "mean"], ["agreement", "exact", "sd"], ["agreement", "agree"],
        *(["agreement", side, k] for side in ("stanflow_pooled", "pymc_pooled")
          for k in ("mean", "sd", "mcse_mean", "mcse_sd")),
        ["ess_per_s_ratio_stanflow_over_pymc_warm"],
    ],
    "quantreg_intervals": [
        ["command"], ["versions", "r_quantreg"], ["versions", "stanflow"], ["machine", "date"],
        ["settings", "datasets"], ["settings", "boot_r"],
        *(["cells", cell, key] for cell in (
            "homoscedastic_tau0.5", "homoscedastic_tau0.9",
            "heteroscedastic_tau0.5", "heteroscedastic_tau0.9",
        ) for key in ("truth_slope", "goal_coverage_met", "goal_time_met")),
        *(["cells", cell, "methods", method, key] for cell in (
            "homoscedastic_tau0.5", "homoscedastic_tau0.9",
            "heteroscedastic_tau0.5", "heteroscedastic_tau0.9",
        ) for method in ("quantreg_nid", "quantreg_boot", "stanflow_gpc", "stanflow_plugin")
          for key in ("coverage", "se", "median_width", "seconds_per_fit")),
    ],
    "bridgesampling_log_z": [
        ["command"], ["machine", "date"], ["versions", "r_bridgesampling"],
        ["settings", "seeds"], ["nuts_median_seconds"],
        *(["methods", method, key] for method in (
            "bridgesampling_normal", "bridgesampling_warp3", "stanflow_bridge",
            "stanflow_smc_1000",
        ) for key in ("median_abs_error", "mean_error", "sd_error", "median_seconds")),
    ],
    "smc_log_z": [
        ["command"], ["machine", "date"], ["settings", "particles"], ["settings", "seeds"],
        *(["datasets", data, key] for data in ("pima", "sonar")
          for key in ("reference_log_z", "peer_versions", "peer_settings")),
        *(["datasets", data, comparison, side, key] for data in ("pima", "sonar")
          for comparison, sides in (("equal_particles", ("stanflow", "pymc", "blackjax")),
                                    ("equal_cpu", ("pymc", "blackjax")))
          for side in sides
          for key in ("particles", "runs", "median_abs_error", "mean_error",
                      "median_cpu_seconds")),
    ],
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_works_without_the_peers(script: str) -> None:
    proc = subprocess.run([sys.executable, str(PEERS / script), "--help"],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:")


def dig(data: dict[str, Any], keys: list[str]) -> Any:
    """``data[k1][k2]...``; a missing key fails the test with its path."""
    value: Any = data
    for depth, key in enumerate(keys):
        assert isinstance(value, dict) and key in value, f"missing {'.'.join(keys[: depth + 1])}"
        value = value[key]
    return value


@pytest.mark.parametrize("name", sorted(QUOTED))
def test_committed_results_hold_the_quoted_fields(name: str) -> None:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path.name} is not committed")
    data = json.loads(path.read_text())
    for keys in QUOTED[name]:
        assert dig(data, keys) is not None, ".".join(keys)
    assert data["command"] in DOC.read_text(), f"{name}'s command is not quoted in {DOC.name}"


def test_committed_quantreg_coverages_are_shares_with_their_error() -> None:
    path = RESULTS / "quantreg_intervals.json"
    if not path.exists():
        pytest.skip(f"{path.name} is not committed")
    data = json.loads(path.read_text())
    datasets = data["settings"]["datasets"]
    for cell in data["cells"].values():
        for method in cell["methods"].values():
            p = method["coverage"]
            assert round(p * datasets) == pytest.approx(p * datasets, abs=1e-9)
            assert method["se"] == pytest.approx((p * (1 - p) / datasets) ** 0.5)


def test_committed_smc_errors_are_the_ones_the_docs_quote() -> None:
    path = RESULTS / "smc_log_z.json"
    if not path.exists():
        pytest.skip(f"{path.name} is not committed")
    data = json.loads(path.read_text())
    text = DOC.read_text()
    for result in data["datasets"].values():
        runs = result["runs"]
        truth = result["reference_log_z"]
        ours = sorted(abs(r["log_z"] - truth) for r in runs["stanflow"])
        middle = len(ours) // 2
        median = (ours[middle - 1] + ours[middle]) / 2 if len(ours) % 2 == 0 else ours[middle]
        summary = result["equal_particles"]["stanflow"]
        assert summary["median_abs_error"] == pytest.approx(median)
        for comparison in ("equal_particles", "equal_cpu"):
            for side, cell in result[comparison].items():
                if isinstance(cell, dict):
                    assert f"{cell['median_abs_error']:.3f}" in text, (comparison, side)
