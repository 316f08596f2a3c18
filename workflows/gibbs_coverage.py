"""Coverage of Gibbs posterior intervals for the median against the learning rate.

Data ``y_1..n ~ Gamma(2, 1)`` (median ``m = 1.6783``, density there ``f(m) =
0.3133``); the Gibbs posterior of the median under the absolute loss
``|y - theta|`` with a uniform prior on ``[0, 8]``, computed exactly on a grid
(``stanflow.gibbs.grid``). Its equal-tailed 95% interval covers ``m`` with
asymptotic probability ``2 Phi(1.96 sqrt(omega* / omega)) - 1``, where
``omega* = H / J = 2 f(m) = 0.6266``.

For ``n = 50`` and ``n = 400`` and 2000 replications (``--quick``: 200), the
coverage is estimated on a grid of learning rates, with Monte Carlo standard
errors ``sqrt(c (1 - c) / R)``; the plug-in learning rate
(``stanflow.gibbs.plugin``, ``2 f_hat(m_hat)`` by a kernel density estimate) is
computed for every replication, and Syring and Martin's bootstrap calibration
(``stanflow.gibbs.gpc``, exact grid backend, its defaults B = 200, eps = 0.01,
at most 16 steps from omega = 1, and again started from the replication's plug-in
rate) for the first 100 replications (``--quick``: 4).
In one dimension Holmes and Walker's information matching is the plug-in.
Writes into ``--out``:

- ``gibbs_coverage.png``: left, Gibbs posteriors for several learning rates on
  one data set (n = 400) beside the Gaussian-model posterior (flat prior on the
  mean, variance the sample variance), which centres on the mean 2, not the
  median; right, coverage against the learning rate with the asymptotic curve
  and the spread of the plug-in learning rates;
- ``gibbs_coverage.nc``: groups ``calibration`` (plug-in results by ``n`` and
  ``replicate``; ``gpc_omega``, ``gpc_steps``, ``gpc_from_plugin_omega``,
  ``gpc_from_plugin_steps`` by ``n`` and ``gpc_replicate``)
  and ``coverage`` (by ``n`` and ``omega``);
- ``summary.json``: ``omega_star``, ``coverage_n400``, ``coverage_n50`` and
  ``coverage_formula`` (omega -> coverage), ``calibrated_omega`` (method ->
  median over the n = 400 replications), Monte Carlo errors, the largest
  standardised distance of the n = 400 curve from the formula, and where each
  curve crosses 0.95.

Every n's coverage and plug-in rates, its GPC calibrations from omega = 1 and
those from the plug-in rates, and the data set plotted are pieces
(``OUT/runs/``), so a stopped run resumes. All data sets come from one stream
of the seed, in the order n = 50, n = 400, the plotted data set: a piece draws
the stream up to its own data.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import xarray as xr

from stanflow import arviz_compat
from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.gibbs import GridBackend, calibrate_gpc, grid, location_program
from stanflow.gibbs.plugin import replicate_location_plugin
from stanflow.idata import save
from stanflow.losses import loss_function
from stanflow.workflows import main, save_figure

DESCRIPTION = (
    "Gibbs posteriors for the median of Gamma(2, 1) data: interval coverage "
    "against the learning rate, exact grid computations"
)

SEED = 20240504
SIZES = (50, 400)
OMEGAS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6.5, 8, 10)
SHOWN_OMEGAS = (0.1, 1, 5)
PRIOR_SUPPORT = (0.0, 8.0)
GRID_POINTS = 2001
LEVEL = 0.95
Z_LEVEL = 1.96
CHUNK = 100
GPC_STARTS = ("gpc", "gpc_from_plugin")
"""GPC from omega = 1, and from the replication's plug-in rate."""

SETTINGS = {
    "quick": {"replications": 200, "gpc_replications": 4},
    "full": {"replications": 2000, "gpc_replications": 100},
}


def gamma2_median() -> float:
    """Median of Gamma(2, 1): the root of ``1 - exp(-m) (1 + m) = 1/2`` (Newton)."""
    m = 1.7
    for _ in range(50):
        m -= (1 - math.exp(-m) * (1 + m) - 0.5) / (m * math.exp(-m))
    return m


def formula(omega: np.ndarray, omega_star: float) -> np.ndarray:
    """Asymptotic coverage ``2 Phi(z sqrt(omega* / omega)) - 1`` of the intervals."""
    z = Z_LEVEL * np.sqrt(omega_star / np.asarray(omega))
    return np.vectorize(math.erf)(z / math.sqrt(2))


def cells(settings: dict[str, Any]) -> list[Cell]:
    """Per n: the coverage and plug-in rates, then GPC from 1 and from the plug-in; the example."""
    replications = settings["replications"]
    per_n = []
    for n in SIZES:
        data = {"n": n, "replications": replications}
        gpc = data | {"gpc_replications": settings["gpc_replications"]}
        per_n += [
            Cell(f"n{n}/coverage", data | {"part": "coverage"}),
            Cell(f"n{n}/gpc", gpc | {"part": "gpc"}),
            Cell(f"n{n}/gpc_from_plugin", gpc | {"part": "gpc_from_plugin"},
                 needs=(f"n{n}/coverage",)),
        ]
    return [*per_n, Cell("example", {"part": "example", "replications": replications})]


def compute(run: CellRun) -> dict:
    """One cell: coverage and plug-in rates, GPC calibrations, or the plotted data set."""
    part = run.params["part"]
    if part == "coverage":
        return coverage(run)
    if part == "example":
        return {"y": data_sets(run, None)}
    return gpc(run, part)


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """Coverage against omega for both n, its distance from the formula, the calibrated rates."""
    replications = settings["replications"]
    median = gamma2_median()
    density_at_median = median * math.exp(-median)
    omega_star = 2 * density_at_median
    rates = coverage_rates(records)
    mcse = np.sqrt(rates * (1 - rates) / replications)
    expected = formula(np.array(OMEGAS), omega_star)
    z = (rates - expected) / np.sqrt(expected * (1 - expected) / replications)
    calibrations = calibration_group(records)
    medians = {
        "plugin": calibrations["omega"].median("replicate"),
        **{name: calibrations[f"{name}_omega"].median("gpc_replicate") for name in GPC_STARTS},
    }

    def by_omega(values: np.ndarray) -> dict[str, float]:
        return {f"{omega:g}": float(v) for omega, v in zip(OMEGAS, values, strict=True)}

    return {
        "omega_star": omega_star,
        "median": median,
        "density_at_median": density_at_median,
        "coverage_n400": by_omega(rates[SIZES.index(400)]),
        "coverage_n50": by_omega(rates[SIZES.index(50)]),
        "coverage_formula": by_omega(expected),
        "mcse_n400": by_omega(mcse[SIZES.index(400)]),
        "mcse_n50": by_omega(mcse[SIZES.index(50)]),
        "max_abs_z_n400": float(np.max(np.abs(z[SIZES.index(400)]))),
        "crossing_n400": _crossing(rates[SIZES.index(400)]),
        "crossing_n50": _crossing(rates[SIZES.index(50)]),
        "calibrated_omega": {name: float(value.sel(n=400)) for name, value in medians.items()},
        "calibrated_omega_n50": {name: float(value.sel(n=50)) for name, value in medians.items()},
        "gpc_replications": settings["gpc_replications"],
        "replications": replications,
        "grid_points": GRID_POINTS,
        "quick": settings == SETTINGS["quick"],
    }


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``gibbs_coverage.nc`` (calibrations and coverage) and ``gibbs_coverage.png``."""
    replications, omega_star = summary["replications"], summary["omega_star"]
    rates = coverage_rates(records)
    mcse = np.sqrt(rates * (1 - rates) / replications)
    calibrations = calibration_group(records)
    save(
        arviz_compat.build(
            {
                "calibration": calibrations,
                "coverage": xr.Dataset(
                    {
                        "coverage": (("n", "omega"), rates),
                        "mcse": (("n", "omega"), mcse),
                        "formula": ("omega", formula(np.array(OMEGAS), omega_star)),
                    },
                    coords={"n": list(SIZES), "omega": list(OMEGAS)},
                    attrs={
                        "level": LEVEL,
                        "replications": replications,
                        "true_median": summary["median"],
                    },
                ),
            }
        ),
        out / "gibbs_coverage.nc",
    )
    figure = plt.figure(figsize=(14, 6.5))
    layout = figure.add_gridspec(3, 2, hspace=0.08, wspace=0.18)
    _plot_posteriors(figure.add_subplot(layout[:, 0]), np.array(records["example"]["y"]),
                     summary["median"], omega_star)
    top = figure.add_subplot(layout[:2, 1])
    bottom = figure.add_subplot(layout[2, 1], sharex=top)
    _plot_coverage(top, bottom, rates, mcse, calibrations, omega_star, replications)
    save_figure(figure, out / "gibbs_coverage.png")


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, seed=SEED)


def run(out: Path, quick: bool) -> dict:
    """Every cell (resumed from ``out/runs``), the InferenceData, the figure and the summary."""
    return EXPERIMENT.run(out, quick)


# -- the cells -------------------------------------------------------------------

def data_sets(run: CellRun, n: int | None) -> np.ndarray:
    """The ``(R, n)`` data sets of size ``n``, or the plotted data set (``None``; n = 400).

    All come from the seed's one stream: R data sets per n in ``SIZES``, then
    the plotted one; the stream is drawn up to the ones asked for.
    """
    rng = run.rng()
    for size in SIZES:
        y = rng.gamma(2.0, 1.0, size=(run.params["replications"], size))
        if size == n:
            return y
    return rng.gamma(2.0, 1.0, size=SIZES[-1])


def coverage(run: CellRun) -> dict:
    """Coverage of the median per learning rate, and the plug-in calibration of every replication."""
    theta = np.linspace(*PRIOR_SUPPORT, GRID_POINTS)
    median = gamma2_median()
    y = data_sets(run, run.params["n"])
    covered = []
    for part in np.split(y, range(CHUNK, len(y), CHUNK)):
        sums = grid.loss_sums(theta, part, loss_function("absolute"))
        lower, upper = np.moveaxis(
            grid.interval(grid.posterior(theta, sums, OMEGAS), LEVEL), -1, 0
        )
        covered.append((lower <= median) & (median <= upper))
    return {
        "coverage": np.concatenate(covered).mean(axis=0),
        "plugin": replicate_location_plugin(y).to_dict(data="list"),
    }


def gpc(run: CellRun, start: str) -> dict:
    """GPC (grid backend) on the first replications, from omega = 1 or from their plug-in rates."""
    y = data_sets(run, run.params["n"])
    starts = (np.ones(len(y)) if start == "gpc"
              else plugin_group(run.needed[f"n{run.params['n']}/coverage"])["omega"].values)
    runs = [
        arviz_compat.group(calibrate_gpc(
            location_program(y[r], bounds=PRIOR_SUPPORT), backend=GridBackend(),
            seed=run.seed + r, omega0=float(starts[r])), "calibration")
        for r in range(run.params["gpc_replications"])
    ]
    return {"omega": [float(c["omega"]) for c in runs], "steps": [int(c["steps"]) for c in runs]}


# -- summaries -------------------------------------------------------------------

def plugin_group(record: dict) -> xr.Dataset:
    """The plug-in calibrations of a coverage cell's record."""
    return xr.Dataset.from_dict(record["plugin"])


def coverage_rates(records: Records) -> np.ndarray:
    """``(n, omega)`` coverage of the median."""
    return np.array([records[f"n{n}/coverage"]["coverage"] for n in SIZES])


def calibration_group(records: Records) -> xr.Dataset:
    """Plug-in calibrations by ``n`` and ``replicate``; GPC's by ``n`` and ``gpc_replicate``."""
    groups = []
    for n in SIZES:
        group = plugin_group(records[f"n{n}/coverage"])
        for name in GPC_STARTS:
            record = records[f"n{n}/{name}"]
            group[f"{name}_omega"] = ("gpc_replicate", record["omega"])
            group[f"{name}_steps"] = ("gpc_replicate", record["steps"])
        groups.append(group)
    return xr.concat(groups, dim=pd.Index(SIZES, name="n"))


def _crossing(rates: np.ndarray) -> float | None:
    """The learning rate where coverage first falls below LEVEL (log-linear)."""
    below = np.flatnonzero(rates < LEVEL)
    if len(below) == 0 or below[0] == 0:
        return None
    k = below[0]
    t = (rates[k - 1] - LEVEL) / (rates[k - 1] - rates[k])
    return float(np.exp(np.log(OMEGAS[k - 1]) + t * np.log(OMEGAS[k] / OMEGAS[k - 1])))


def _plot_posteriors(axis, y: np.ndarray, median: float, omega_star: float) -> None:
    theta = np.linspace(*PRIOR_SUPPORT, 8001)
    omegas = sorted({*SHOWN_OMEGAS, omega_star})
    post = grid.posterior(
        theta, grid.loss_sums(theta, y, loss_function("absolute")), omegas
    )
    colours = plt.cm.viridis(np.linspace(0.1, 0.85, len(omegas)))
    for omega, values, colour in zip(omegas, grid.density(post), colours, strict=True):
        label = (
            f"Gibbs, omega* = {omega:.3f}"
            if omega == omega_star
            else f"Gibbs, omega = {omega:g}"
        )
        axis.plot(
            theta,
            values,
            color=colour,
            lw=2.5 if omega == omega_star else 1.5,
            label=label,
        )
    mean, sd = y.mean(), y.std(ddof=1) / math.sqrt(len(y))
    gauss = np.exp(-0.5 * ((theta - mean) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
    axis.plot(
        theta,
        gauss,
        color="tab:red",
        ls="--",
        lw=1.5,
        label="Gaussian model (flat prior)",
    )
    axis.axvline(
        median, color="black", lw=0.8, ls=":", label=f"median m = {median:.3f}"
    )
    axis.axvline(2.0, color="tab:red", lw=0.8, ls=":", label="mean 2")
    axis.set_xlim(1.2, 2.5)
    axis.set_xlabel("theta")
    axis.set_ylabel("posterior density")
    axis.set_title(
        f"One data set, n = {len(y)}: absolute loss, uniform prior on [0, 8]"
    )
    axis.legend(fontsize=8, loc="upper right")


def _plot_coverage(top, bottom, rates, mcse, calibrations, omega_star, replications) -> None:
    """Coverage against omega (top) and its distance from the formula (bottom)."""
    dense = np.geomspace(0.15, 12, 300)
    omegas = np.array(OMEGAS)
    expected = formula(omegas, omega_star)
    se = np.sqrt(expected * (1 - expected) / replications)
    top.plot(
        dense,
        formula(dense, omega_star),
        color="black",
        lw=1.2,
        label="asymptotic 2 Phi(1.96 sqrt(omega*/omega)) - 1",
    )
    bottom.fill_between(
        omegas,
        -3 * se,
        3 * se,
        color="grey",
        alpha=0.25,
        lw=0,
        label="3 Monte Carlo standard errors",
    )
    style = {50: ("tab:orange", "s", 0.97), 400: ("tab:blue", "o", 1.03)}
    for row, n in enumerate(SIZES):
        colour, marker, shift = style[n]
        for axis, values in ((top, rates[row]), (bottom, rates[row] - expected)):
            axis.errorbar(
                omegas * shift,
                values,
                yerr=1.96 * mcse[row],
                color=colour,
                marker=marker,
                ms=4,
                capsize=2,
                lw=1,
                label=f"n = {n}: grid posteriors, {replications} replications "
                "(95% Monte Carlo error)",
            )
        for variable, height, marker, name in (
            ("omega", 0.12, "D", "plug-in"),
            ("gpc_omega", 0.27, "v", "GPC"),
        ):
            values = calibrations[variable].sel(n=n)
            low, mid, high = np.quantile(values, [0.1, 0.5, 0.9])
            top.errorbar(
                mid,
                height if n == 400 else height - 0.06,
                xerr=[[mid - low], [high - mid]],
                color=colour,
                marker=marker,
                capsize=3,
                lw=2,
                label=f"n = {n}: {name} omega (median, 10-90% over {values.size} replications)",
            )
    for axis in (top, bottom):
        axis.axvline(omega_star, color="grey", lw=0.8, ls=":")
        axis.set_xscale("log")
        axis.set_xlim(0.15, 12)
    top.axhline(LEVEL, color="grey", lw=0.8, ls="--")
    top.text(
        omega_star * 1.03,
        0.015,
        f"omega* = 2 f(m) = {omega_star:.4f}",
        color="grey",
        fontsize=8,
    )
    top.set_ylim(0, 1.02)
    top.set_ylabel(f"coverage of m by {LEVEL:.0%} intervals")
    top.set_title("Coverage of the true median against the learning rate")
    top.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 0.33))
    top.tick_params(labelbottom=False)
    bottom.axhline(0, color="black", lw=1.2)
    bottom.set_xlabel("learning rate omega")
    bottom.set_ylabel("coverage - asymptotic")
    handles, labels = bottom.get_legend_handles_labels()
    bottom.legend(handles[:1], labels[:1], fontsize=8, loc="upper right")


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
