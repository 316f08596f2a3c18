"""Calibration at the size and shape of real regressions: many coefficients, and intervals per coefficient.

Two parts (full sizes; ``--quick`` shrinks them to run in a few minutes):

(a) **scale**: median regression (check loss, tau = 0.5) on ``K = 20``
    coefficients (an intercept and 19 N(0, 1) predictors, true coefficients
    ``beta* = (1, 0.5, -0.5, 0.25, -0.25, 0, ...)``, N(0, 1) errors), n = 1000,
    N(0, 10^2) priors, 100 data sets. On each: ``calibrate_path`` with its
    defaults (GPC on the path with the resamples' posteriors read as the path
    chooses: at this size particles are moved to every resample, B = 200;
    plug-in marked), then the Gibbs posterior by NUTS (2 chains of 2000 draws)
    at GPC's rate and at ``omega = 1``, and whether its joint 95% credible
    ellipsoid (the draws' mean and covariance, radius their own 95% quantile)
    holds ``beta*``.
(b) **shape**: quantile regression of ``y`` on ``(1, x)``, n = 200, 200 data
    sets per design, ``X ~ chi2_2 - 2``: ``hetero_tau90`` (``Y = 2 + X + (1 +
    0.5 (X + 2)) e``, tau = 0.9, true slope ``1 + 0.5 Phi^-1(0.9)``) and
    ``homo_tau50`` (``Y = 2 + X + N(0, 2^2)``, tau = 0.5, true slope 1). On each:
    ``calibrate_path`` (plug-in marked) without and with the shape fix
    (``adjust="sandwich"``), and whether the slope's 95% interval holds the
    true slope, at GPC's rate and at the plug-in's.

Every data set is a piece (``OUT/runs/*.json``), so a stopped run resumes; two
run at a time. Writes ``gibbs_scale.png`` (coverage with binomial error bars
against 0.95 for both parts) and ``summary.json``: ``coverage.gpc``,
``coverage.omega_1``, ``omega.gpc.median``, ``seconds_per_calibration.median``,
``ess_min_per_resample.median`` for (a) and
``shape.{hetero_tau90,homo_tau50}.coverage.{gpc,adjusted}`` for (b). The full
run is stored in ``results/gibbs-scale/``.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import norm

from stanflow import arviz_compat
from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.gibbs import PathSampler, calibrate_path, linear_program, posterior
from stanflow.gibbs.gpc.regions import draws_inside
from stanflow.workflows import main, save_figure

DESCRIPTION = (
    "Calibration at scale: GPC with 20 coefficients (particles moved to every resample) "
    "and the sandwich shape fix for per-coefficient intervals"
)

SEED = 20261205
ALPHA = 0.05
DESIGNS = {"hetero_tau90": 0.9, "homo_tau50": 0.5}


SETTINGS = {
    "quick": {
        "scale": {"K": 6, "n": 300, "datasets": 2, "B": 60, "particles": 2000, "nuts_draws": 1000},
        "shape": {"n": 200, "datasets": 3, "B": 60, "particles": 2000},
    },
    "full": {
        "scale": {"K": 20, "n": 1000, "datasets": 100, "B": 200, "particles": 4000,
                  "nuts_draws": 2000},
        "shape": {"n": 200, "datasets": 200, "B": 200, "particles": 4000},
    },
}


def true_coefficients(K: int) -> np.ndarray:
    """``(1, 0.5, -0.5, 0.25, -0.25, 0, ..., 0)``, ``K`` values."""
    beta = np.zeros(K)
    beta[:5] = [1.0, 0.5, -0.5, 0.25, -0.25][:K]
    return beta


def true_slope(design: str) -> float:
    """The slope of the tau-quantile of ``Y`` given ``X``."""
    return 1.0 if design == "homo_tau50" else 1.0 + 0.5 * float(norm.ppf(DESIGNS[design]))


def cells(settings: dict[str, Any]) -> list[Cell]:
    """One cell per data set: the scale part's, then each shape design's."""
    def part(name: str, **extra: Any) -> dict[str, Any]:
        # what a data set depends on: its part's settings but the number of data sets
        return {k: v for k, v in settings[name].items() if k != "datasets"} | {"part": name, **extra}

    scale = [Cell(f"scale-{r:03d}", part("scale") | {"r": r})
             for r in range(settings["scale"]["datasets"])]
    shape = [Cell(f"shape-{design}-{r:03d}", part("shape", design=design) | {"r": r})
             for design in DESIGNS for r in range(settings["shape"]["datasets"])]
    return scale + shape


def compute(run: CellRun) -> dict:
    """One data set of its part."""
    params = dict(run.params)
    part, r = params.pop("part"), params.pop("r")
    if part == "scale":
        return scale_data_set(params, r, run)
    return shape_data_set(params, params.pop("design"), r, run)


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """The scale part's keys and each shape design's."""
    scale = [r for r in records.values() if r["part"] == "scale"]
    return {
        **summarise_scale(scale),
        "shape": {design: summarise_shape([r for r in records.values()
                                           if r.get("design") == design], design)
                  for design in DESIGNS},
    }


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``gibbs_scale.png``."""
    figure(summary, out / "gibbs_scale.png")


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, seed=SEED, jobs=2)


def run(out: Path, quick: bool) -> dict:
    """Every data set (resumed from ``out/runs``), the figure and the summary."""
    return EXPERIMENT.run(out, quick)


# -- the data sets ----------------------------------------------------------------

def scale_data_set(config: dict, r: int, run: CellRun) -> dict:
    """One K-coefficient data set: GPC at scale, then NUTS at its rate and at 1."""
    K, n = config["K"], config["n"]
    rng = run.rng(1, r)
    X = np.column_stack([np.ones(n), rng.normal(size=(n, K - 1))])
    beta = true_coefficients(K)
    y = X @ beta + rng.normal(size=n)
    program = linear_program(y, X, loss="check", loss_params={"tau": 0.5},
                             prior="normal", prior_params={"mean": 0, "sd": 10})
    sampler = PathSampler(n_particles=config["particles"], n_moves=3)
    start = time.perf_counter()
    c = calibrate_path(program, B=config["B"], seed=r, rules=["plugin"],
                       sampler=sampler).calibration
    seconds = time.perf_counter() - start
    omega = float(c["omega"])
    inside = {}
    for name, rate in (("gpc", omega), ("omega_1", 1.0)):
        fit = posterior(program, omega=rate, chains=2, iter_sampling=config["nuts_draws"],
                        seed=r)
        draws = arviz_compat.group(fit, "posterior")["beta"].values.reshape(1, -1, K)
        inside[name] = bool(draws_inside(draws, beta, ALPHA)[0])
    at_root = int(np.argmin(np.abs(c["omega_path"].values - omega)))
    return {
        "part": "scale",
        "omega_gpc": omega,
        "omega_se": float(c["omega_se"]),
        "omega_plugin": float(c["rule_omega"].sel(rule="plugin")),
        "converged": bool(c["converged"]),
        "resamples": c.attrs["resamples"],
        "seconds_calibration": seconds,
        "ess_min_per_resample": float(c["ess_min"].values[at_root]),
        "ess_median_per_resample": float(c["ess_median"].values[at_root]),
        "low_ess_share": float(c["low_ess_share"]),
        "inside": inside,
    }


def shape_data_set(config: dict, design: str, r: int, run: CellRun) -> dict:
    """One two-coefficient data set of ``design``: the slope's interval without and with the fix."""
    n, tau = config["n"], DESIGNS[design]
    rng = run.rng(2, list(DESIGNS).index(design), r)
    x = rng.chisquare(2, size=n) - 2
    scale = 2.0 if design == "homo_tau50" else 1.0 + 0.5 * (x + 2)
    y = 2 + x + scale * rng.normal(size=n)
    program = linear_program(y, np.column_stack([np.ones(n), x]), loss="check",
                             loss_params={"tau": tau}, prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    truth = true_slope(design)
    record: dict[str, Any] = {"part": "shape", "design": design}
    sampler = PathSampler(n_particles=config["particles"], n_moves=3)
    for adjust, suffix in (("none", ""), ("sandwich", "_adjusted")):
        c = calibrate_path(program, B=config["B"], seed=r, rules=["plugin"],
                           sampler=sampler, adjust=adjust).calibration
        slope = c["rule_interval"].isel(param=1)
        for rule, name in (("gpc_path", "gpc"), ("plugin", "plugin")):
            low, high = (float(v) for v in slope.sel(rule=rule).values)
            record[f"inside_{name}{suffix}"] = bool(low <= truth <= high)
            record[f"width_{name}{suffix}"] = high - low
            record[f"omega_{name}{suffix}"] = float(c["rule_omega"].sel(rule=rule))
    return record


# -- summaries -------------------------------------------------------------------

def share(flags: list[bool]) -> dict[str, float]:
    """A share of data sets with its binomial standard error."""
    p = float(np.mean(flags))
    return {"value": p, "se": math.sqrt(p * (1 - p) / len(flags)), "datasets": len(flags)}


def stated_errors(values: list[float | None]) -> dict[str, float]:
    """The median of the roots' stated errors, and how many were undefined (the count's
    slope not found: NaN, stored as null)."""
    se = np.array([math.nan if v is None else v for v in values], float)
    defined = se[np.isfinite(se)]
    return {"median": float(np.median(defined)) if defined.size else math.nan,
            "undefined": int(se.size - defined.size)}


def summarise_scale(records: list[dict]) -> dict[str, Any]:
    """The scale part's keys (medians over data sets)."""
    return {
        "coverage": {name: share([r["inside"][name] for r in records])
                     for name in ("gpc", "omega_1")},
        "omega": {"gpc": {"median": float(np.median([r["omega_gpc"] for r in records]))},
                  "plugin": {"median": float(np.median([r["omega_plugin"] for r in records]))}},
        "omega_se": stated_errors([r["omega_se"] for r in records]),
        "seconds_per_calibration": {
            "median": float(np.median([r["seconds_calibration"] for r in records])),
            "max": float(np.max([r["seconds_calibration"] for r in records]))},
        "ess_min_per_resample": {
            "median": float(np.median([r["ess_min_per_resample"] for r in records])),
            "min": float(np.min([r["ess_min_per_resample"] for r in records]))},
        "low_ess_share": {"max": float(np.max([r["low_ess_share"] for r in records]))},
        "converged": int(sum(r["converged"] for r in records)),
        "resamples": sorted({r["resamples"] for r in records}),
    }


def summarise_shape(records: list[dict], design: str) -> dict[str, Any]:
    """One design's slope coverage and widths, without and with the fix."""
    names = {"gpc": "gpc", "adjusted": "gpc_adjusted", "plugin": "plugin",
             "plugin_adjusted": "plugin_adjusted"}
    return {
        "tau": DESIGNS[design],
        "true_slope": true_slope(design),
        "coverage": {key: share([r[f"inside_{name}"] for r in records])["value"]
                     for key, name in names.items()},
        "coverage_se": {key: share([r[f"inside_{name}"] for r in records])["se"]
                        for key, name in names.items()},
        "median_width": {key: float(np.median([r[f"width_{name}"] for r in records]))
                         for key, name in names.items()},
        "omega_median": {key: float(np.median([r[f"omega_{name}"] for r in records]))
                         for key, name in names.items()},
        "datasets": len(records),
    }


def figure(summary: dict, path: Path) -> None:
    """Coverage with binomial error bars against 0.95, both parts."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    names = ["gpc", "omega_1"]
    cov = summary["coverage"]
    left.errorbar(range(2), [cov[k]["value"] for k in names],
                  yerr=[2 * cov[k]["se"] for k in names], fmt="o", capsize=4)
    left.set_xticks(range(2), ["GPC (moved particles)", "omega = 1"])
    left.axhline(0.95, color="grey", linestyle="--")
    left.set_ylabel("coverage of the joint 95% region")
    left.set_title(f"K = {summary['settings']['scale']['K']} coefficients, "
                   f"n = {summary['settings']['scale']['n']}")
    keys = ["gpc", "adjusted", "plugin", "plugin_adjusted"]
    for i, (design, record) in enumerate(summary["shape"].items()):
        right.errorbar(np.arange(4) + 0.15 * (2 * i - 1), [record["coverage"][k] for k in keys],
                       yerr=[2 * record["coverage_se"][k] for k in keys], fmt="o", capsize=4,
                       label=design)
    right.set_xticks(range(4), ["GPC", "GPC + fix", "plug-in", "plug-in + fix"])
    right.axhline(0.95, color="grey", linestyle="--")
    right.set_ylabel("coverage of the slope's 95% interval")
    right.legend()
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
