"""The peer benchmarks in ``bench/peers/``: their command lines work without the peers,
and their committed results hold what docs/benchmarks.md quotes.

CI does not run the benchmarks themselves (they install PyMC and R); these tests
need neither.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
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
        ) for key in ("truth_slope", "goal_coverage_met", "goal_coverage_met_adjusted",
                      "goal_coverage_met_bootstrap", "goal_coverage_met_importance",
                      "goal_coverage_met_importance_adjusted",
                      "goal_coverage_met_importance_bootstrap",
                      "goal_time_met", "goal_time_met_importance",
                      "max_importance_low_ess_share")),
        *(["cells", cell, "methods", method, key] for cell in (
            "homoscedastic_tau0.5", "homoscedastic_tau0.9",
            "heteroscedastic_tau0.5", "heteroscedastic_tau0.9",
        ) for method in ("quantreg_nid", "quantreg_boot", "stanflow_gpc", "stanflow_plugin",
                         "stanflow_gpc_adjusted", "stanflow_plugin_adjusted",
                         "stanflow_gpc_bootstrap", "stanflow_plugin_bootstrap",
                         "stanflow_importance_gpc", "stanflow_importance_plugin",
                         "stanflow_importance_gpc_adjusted",
                         "stanflow_importance_plugin_adjusted",
                         "stanflow_importance_gpc_bootstrap",
                         "stanflow_importance_plugin_bootstrap")
          for key in ("coverage", "se", "median_width", "seconds_per_fit")),
    ],
    "quantreg_intervals_importance": [
        ["command"], ["versions", "r_quantreg"], ["versions", "stanflow"], ["machine", "date"],
        ["settings", "datasets"], ["settings", "boot_r"],
        *(["cells", cell, key] for cell in (
            "homoscedastic_tau0.5", "homoscedastic_tau0.9",
            "heteroscedastic_tau0.5", "heteroscedastic_tau0.9",
        ) for key in ("truth_slope", "goal_coverage_met_importance",
                      "goal_coverage_met_importance_adjusted",
                      "goal_coverage_met_importance_bootstrap", "goal_time_met_importance",
                      "max_importance_low_ess_share")),
        *(["cells", cell, "methods", method, key] for cell in (
            "homoscedastic_tau0.5", "homoscedastic_tau0.9",
            "heteroscedastic_tau0.5", "heteroscedastic_tau0.9",
        ) for method in ("quantreg_nid", "quantreg_boot", "stanflow_importance_gpc",
                         "stanflow_importance_plugin", "stanflow_importance_gpc_adjusted",
                         "stanflow_importance_plugin_adjusted",
                         "stanflow_importance_gpc_bootstrap",
                         "stanflow_importance_plugin_bootstrap")
          for key in ("coverage", "se", "median_width", "seconds_per_fit")),
    ],
    "bridgesampling_log_z": [
        ["command"], ["machine", "date"], ["versions", "r_bridgesampling"],
        ["settings", "seeds"],
        *(["problems", problem, key] for problem in ("pima", "lasso")
          for key in ("sampling_median_seconds", "settings")),
        *(["problems", problem, "settings", key] for problem in ("pima", "lasso")
          for key in ("log_z_truth", "log_z_truth_se")),
        *(["problems", problem, "methods", method, key] for problem in ("pima", "lasso")
          for method in ("bridgesampling_normal", "bridgesampling_warp3", "stanflow_bridge",
                         "stanflow_smc", "stanflow_ti")
          for key in ("median_abs_error", "mean_error", "sd_error", "median_seconds")),
    ],
    "smc_log_z": [
        ["command"], ["machine", "date"], ["settings", "particles"], ["settings", "seeds"],
        *(["datasets", data, key] for data in ("pima", "sonar")
          for key in ("reference_log_z", "peer_versions", "peer_settings")),
        *(["datasets", data, comparison, side, key] for data in ("pima", "sonar")
          for comparison, sides in (("equal_particles", ("stanflow", "stanflow_smc_alone",
                                                         "pymc", "blackjax")),
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


@pytest.mark.parametrize("name", ["quantreg_intervals", "quantreg_intervals_importance"])
def test_committed_quantreg_coverages_are_shares_with_their_error(name: str) -> None:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path.name} is not committed")
    data = json.loads(path.read_text())
    datasets = data["settings"]["datasets"]
    for cell in data["cells"].values():
        for method in cell["methods"].values():
            p = method["coverage"]
            assert round(p * datasets) == pytest.approx(p * datasets, abs=1e-9)
            assert method["se"] == pytest.approx((p * (1 - p) / datasets) ** 0.5)


def section(heading: str) -> str:
    """The text of the docs/benchmarks.md section under ``heading``, up to the next heading."""
    text = DOC.read_text()
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def rows(text: str) -> dict[tuple[str, ...], list[str]]:
    """Table rows: their text cells as the key, their numeric cells (``**`` stripped) as values."""
    table = {}
    for line in text.splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or set(cells[0]) <= {"-", " "}:
            continue
        key = tuple(c for c in cells if not re.fullmatch(r"[-+]?[\d.]+|n/a", c))
        if len(key) < len(cells):
            table[key] = [c for c in cells if c not in key]
    return table


def shown(quoted: str, value: float | None) -> bool:
    """Whether ``quoted`` is ``value`` at the precision it is written with (``n/a`` for None)."""
    if value is None or quoted == "n/a":
        return value is None and quoted == "n/a"
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    return float(quoted) == round(value, decimals)


def committed(name: str) -> dict[str, Any]:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path.name} is not committed")
    return json.loads(path.read_text())


SMC_ROWS = {"equal particles": "equal_particles", "equal CPU": "equal_cpu"}


def test_every_number_of_the_smc_table_is_the_committed_one() -> None:
    data = committed("smc_log_z")
    text = section("### SMC log Z against PyMC and BlackJAX")
    table = rows(text)
    sides = {"stanflow": "stanflow", "stanflow, SMC alone": "stanflow_smc_alone",
             "PyMC": "pymc", "BlackJAX": "blackjax"}
    checked = 0
    for (data_name, comparison, side), cells in table.items():
        result = data["datasets"][data_name.lower()]
        cell = result[SMC_ROWS[comparison]][sides[side]]
        values = [cell["particles"], cell["runs"], cell["median_abs_error"], cell["mean_error"],
                  cell["median_cpu_seconds"]]
        assert all(shown(q, v) for q, v in zip(cells, values, strict=True)), (data_name, side)
        checked += 1
    assert checked == 12
    for result in data["datasets"].values():
        ours = sorted(abs(r["log_z"] - result["reference_log_z"]) for r in result["runs"]["stanflow"])
        middle = len(ours) // 2
        median = (ours[middle - 1] + ours[middle]) / 2 if len(ours) % 2 == 0 else ours[middle]
        assert result["equal_particles"]["stanflow"]["median_abs_error"] == pytest.approx(median)
    sonar, pima = data["datasets"]["sonar"], data["datasets"]["pima"]
    ratio = (sonar["equal_particles"]["blackjax"]["median_cpu_seconds"]
             / sonar["equal_particles"]["stanflow"]["median_cpu_seconds"])
    assert f"{ratio:.1f}x more" in text
    budget = (pima["equal_cpu"]["blackjax"]["median_cpu_seconds"]
              / pima["equal_cpu"]["cpu_budget_seconds"])
    assert f"take {budget:.1f}x the CPU" in text
    per_temperature = [
        round(np.mean([m / s for r in result["runs"]["stanflow"]
                       for m, s in zip(r["n_moves"], r["n_stages"], strict=True)]))
        for result in (pima, sonar)
    ]
    assert f"about {per_temperature[0]} and {per_temperature[1]} moves per temperature" in text


def test_every_number_of_the_bridgesampling_table_is_the_committed_one() -> None:
    data = committed("bridgesampling_log_z")
    text = section("### Marginal likelihood against bridgesampling, SMC and TI")
    names = {"bridgesampling, normal": "bridgesampling_normal",
             "bridgesampling, warp3": "bridgesampling_warp3",
             "stanflow `bridge_sampling`": "stanflow_bridge",
             "stanflow `smc` (no draws)": "stanflow_smc",
             "stanflow `thermodynamic_integration` (no draws)": "stanflow_ti"}
    problems = {"Pima": "pima", "Bayesian lasso": "lasso"}
    table = rows(text)
    checked = 0
    for (problem, label), cells in table.items():
        summary = data["problems"][problems[problem]]["methods"][names[label]]
        values = [summary[k] for k in ("median_abs_error", "mean_error", "sd_error",
                                       "median_estimated_error", "median_seconds")]
        assert all(shown(q, v) for q, v in zip(cells, values, strict=True)), (problem, label)
        checked += 1
    assert checked == len(problems) * len(names)
    for problem in data["problems"].values():
        methods = problem["methods"]
        speed = (methods["bridgesampling_normal"]["median_seconds"]
                 / methods["stanflow_bridge"]["median_seconds"])
        assert f"{speed:.1f}x faster" in text
        assert f"a median of {problem['sampling_median_seconds']:.1f} s per seed" in text
        truth = problem["settings"]
        assert f"{truth['log_z_truth']:.4f} (standard error {truth['log_z_truth_se']:.4f})" in text


QUANTREG_METHODS = {
    'quantreg `rq` + `se = "nid"`': "quantreg_nid",
    'quantreg `rq` + `se = "boot"` (R = 200)': "quantreg_boot",
    "stanflow, GPC on the path": "stanflow_gpc",
    "stanflow, plug-in": "stanflow_plugin",
    "stanflow, GPC + sandwich shape": "stanflow_gpc_adjusted",
    "stanflow, plug-in + sandwich shape": "stanflow_plugin_adjusted",
    "stanflow, GPC + bootstrap shape": "stanflow_gpc_bootstrap",
    "stanflow, plug-in + bootstrap shape": "stanflow_plugin_bootstrap",
    "stanflow, GPC by importance": "stanflow_importance_gpc",
    "stanflow, plug-in by importance": "stanflow_importance_plugin",
    "stanflow, GPC by importance + sandwich shape": "stanflow_importance_gpc_adjusted",
    "stanflow, plug-in by importance + sandwich shape": "stanflow_importance_plugin_adjusted",
    "stanflow, GPC by importance + bootstrap shape": "stanflow_importance_gpc_bootstrap",
    "stanflow, plug-in by importance + bootstrap shape": "stanflow_importance_plugin_bootstrap",
}


@pytest.mark.parametrize(("name", "heading"), [
    ("quantreg_intervals", "### Quantile regression intervals against quantreg"),
    ("quantreg_intervals_importance", "### Quantile regression intervals over 1000 data sets"),
])
def test_every_number_of_the_quantreg_table_is_the_committed_one(name: str, heading: str) -> None:
    data = committed(name)
    text = section(heading)
    checked = 0
    for line in text.splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if cells[0] not in ("homoscedastic", "heteroscedastic"):
            continue
        design, tau, slope, method, cov, off, width, omega, ms = cells
        cell = data["cells"][f"{design}_tau{tau}"]
        m = cell["methods"][QUANTREG_METHODS[method]]
        assert shown(slope, cell["truth_slope"]), line
        p, se = cov.split(" +- ")
        assert shown(p, m["coverage"]) and shown(se, m["se"]), line
        datasets = data["settings"]["datasets"]
        assert int(off) == abs(round(m["coverage"] * datasets) - round(0.95 * datasets)), line
        assert shown(width, m["median_width"]), line
        assert omega == "--" if "median_omega" not in m else shown(omega, m["median_omega"]), line
        assert shown(ms, 1000 * m["seconds_per_fit"]), line
        checked += 1
    assert checked == 4 * len(next(iter(data["cells"].values()))["methods"])
