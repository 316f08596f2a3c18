"""Learning-rate calibrations side by side: plug-in, Holmes-Walker, GPC.

Two examples (SafeBayes on Grunwald and van Ommen's misspecified regression is
the workflow ``gibbs-safebayes``):

(a) the median of Gamma(2, 1) data (n = 50; absolute loss, uniform prior on
    [0, 8], exact grid posteriors; omega* = 2 f(m) = 0.6266): plug-in,
    Holmes-Walker (``tr(H) / tr(J)``) and GPC (grid backend, B = 200) on each of
    R replications (200; ``--quick``: 20); then the coverage of the true median
    by the 95% intervals at each method's own omega, over the same replications;
(b) the quantile regression n = 50, X ~ chi2_2 - 2, Y = 2 + X + N(0, 2^2),
    tau = 0.5 (check loss, coefficients (intercept, slope), N(0, 10^2) priors):
    plug-in, Holmes-Walker and GPC through Stan (reweight design, B = 200) on
    each of R data sets (40; ``--quick``: 2), then each method's Gibbs posterior
    (Stan, run layer) and the coverage of the true (2, 1) by the 95% ellipsoid
    and of the slope by its 95% interval.

Every data set is a piece (``OUT/runs/{median,quantreg}/NNN.json``), so a
stopped run resumes; two run at a time. Writes ``gibbs_calibrate.nc`` (groups
``calibration_median``, ``calibration_quantreg``) and ``summary.json``
(``table``: example -> method -> omega, medians over the replications;
``coverage_median``: method -> coverage; ``coverage_quantreg``: method ->
{joint, slope}), and prints the table.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.gibbs import (
    GridBackend,
    StanBackend,
    TemplateProgram,
    calibrate_gpc,
    calibrate_holmes_walker,
    calibrate_plugin,
    grid,
    linear_program,
    location_program,
)
from stanflow.gibbs.gpc import draws_inside
from stanflow.gibbs.information import omega_from_traces
from stanflow.gibbs.plugin import replicate_location_plugin
from stanflow.gibbs.templates import glm_minimiser
from stanflow.idata import save
from stanflow.losses import loss_function
from stanflow.runs import RunSet, RunSpec
from stanflow.runs.seeds import run_seed
from stanflow.workflows import main

DESCRIPTION = (
    "Learning-rate calibrations side by side (plug-in, Holmes-Walker, GPC) on a "
    "median and a quantile regression"
)

SEED = 20240505
MEDIAN = 1.6783469900166608
OMEGA_STAR = 2 * MEDIAN * math.exp(-MEDIAN)
LEVEL = 0.95
N = 50
B = 200
TRUTH = np.array([2.0, 1.0])
METHODS = ("plugin", "holmes_walker", "gpc")

SETTINGS = {
    "quick": {"median_replications": 20, "quantreg_replications": 2},
    "full": {"median_replications": 200, "quantreg_replications": 40},
}


def cells(settings: dict[str, Any]) -> list[Cell]:
    """One cell per data set: the median's, then the quantile regression's."""
    median = [Cell(f"median/{r:03d}", {"r": r}) for r in range(settings["median_replications"])]
    # a regression's data follow every median data set in the seed's stream, and
    # its posteriors' seeds are those of runs method * replications + r of one run set
    counts = {key: settings[key] for key in ("median_replications", "quantreg_replications")}
    quantreg = [Cell(f"quantreg/{r:03d}", {"r": r} | counts)
                for r in range(settings["quantreg_replications"])]
    return median + quantreg


def compute(run: CellRun) -> dict:
    """One data set of its example."""
    if run.cell.name.startswith("median/"):
        return median_data_set(run.seed, run.params["r"])
    return quantreg_data_set(run)


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """The omegas' medians and the coverages of both examples."""
    med, qr = median_table(records), quantreg_table(records)
    return {
        "table": {
            "median": {m: float(med["omega"].sel(calibrator=m).median()) for m in METHODS},
            "quantreg": {m: float(qr["omega"].sel(calibrator=m).median()) for m in METHODS},
        },
        "coverage_median": {m: float(med["coverage"].sel(calibrator=m)) for m in METHODS},
        "coverage_quantreg": {
            m: {"joint": float(qr["coverage_joint"].sel(calibrator=m)),
                "slope": float(qr["coverage_slope"].sel(calibrator=m))}
            for m in METHODS
        },
        "replications_quantreg": int(qr.sizes["replicate"]),
        "omega_star_median": OMEGA_STAR,
        "replications_median": int(med.sizes["replicate"]),
        "quick": settings == SETTINGS["quick"],
    }


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``gibbs_calibrate.nc``: every data set's omegas, and the coverages."""
    groups = {"calibration_median": median_table(records),
              "calibration_quantreg": quantreg_table(records)}
    save(arviz_compat.build(groups), out / "gibbs_calibrate.nc")


# -- the data sets ----------------------------------------------------------------

def median_data_set(seed: int, r: int) -> dict:
    """Plug-in, Holmes-Walker and GPC omegas on median data set ``r``; whether each interval holds m."""
    # row r of the example's one (replications, n) draw: its rows are drawn in order
    y = np.random.default_rng(seed).gamma(2.0, 1.0, size=(r + 1, N))[r]
    rates = replicate_location_plugin(y[None])
    hw = omega_from_traces(rates["sensitivity"].values, rates["variability"].values)
    c = calibrate_gpc(location_program(y, bounds=(0, 8)), backend=GridBackend(401), B=B, seed=r)
    omegas = {"plugin": float(rates["omega"].values[0]), "holmes_walker": float(hw[0]),
              "gpc": float(arviz_compat.group(c, "calibration")["omega"])}
    theta = np.linspace(0, 8, 801)
    sums = grid.loss_sums(theta, y, loss_function("absolute"))
    inside = {}
    for method, omega in omegas.items():
        low, high = grid.interval(grid.posterior(theta, sums, omega), LEVEL)
        inside[method] = bool(low <= MEDIAN and high >= MEDIAN)
    return {"omega": omegas, "inside": inside}


def regression_data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One regression data set ``(x, y)``: ``X ~ chi2_2 - 2``, ``Y = 2 + X + N(0, 2^2)``."""
    x = rng.chisquare(2, size=N) - 2
    return x, 2 + x + rng.normal(0, 2, size=N)


def quantreg_program(
    seed: int, median_replications: int, r: int
) -> tuple[TemplateProgram, np.ndarray]:
    """Regression data set ``r`` (drawn after the median's): its program and its risk minimiser."""
    rng = np.random.default_rng(seed)
    rng.gamma(2.0, 1.0, size=(median_replications, N))
    for _ in range(r):
        regression_data(rng)
    x, y = regression_data(rng)
    X = np.column_stack([np.ones(N), x])
    program = linear_program(y, X, loss="check", loss_params={"tau": 0.5}, prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    return program, glm_minimiser(y, X, loss_function("check", {"tau": 0.5}))


def quantreg_data_set(run: CellRun) -> dict:
    """Plug-in, Holmes-Walker and Stan GPC omegas on one regression, and whether each
    method's Gibbs posterior covers the true coefficients (2, 1) and the slope."""
    r, replications = run.params["r"], run.params["quantreg_replications"]
    program, beta = quantreg_program(run.seed, run.params["median_replications"], r)
    calibrations = {
        "plugin": calibrate_plugin(program, estimate=beta),
        "holmes_walker": calibrate_holmes_walker(program, estimate=beta),
        "gpc": calibrate_gpc(program, estimate=beta, backend=StanBackend(), B=B, seed=r),
    }
    omegas = {m: float(c.calibration["omega"]) for m, c in calibrations.items()}
    specs = [
        RunSpec(data=program.stan_data(omegas[m]), args={"num_samples": 2000, "num_warmup": 500},
                seed=run_seed(run.seed, k * replications + r))
        for k, m in enumerate(METHODS)
    ]
    runset = RunSet(program.model("stanflow"), specs, out_dir=run.scratch, root_seed=run.seed)
    failed = [result.index for result in runset.run(progress=False) if not result.ok]
    if failed:
        raise RuntimeError(f"quantile regression {r}: posteriors {failed} failed")
    beta_draws = runset.to_inference_data().posterior["beta"]
    draws = beta_draws.stack(sample=("chain", "draw")).transpose("run", "sample", ...).values
    joint = draws_inside(draws, TRUTH, 1 - LEVEL)
    slope = draws_inside(draws[:, :, 1], TRUTH[1], 1 - LEVEL)
    return {
        "omega": omegas,
        "estimate": [float(b) for b in beta],
        "inside_joint": {m: bool(joint[k]) for k, m in enumerate(METHODS)},
        "inside_slope": {m: bool(slope[k]) for k, m in enumerate(METHODS)},
    }


# -- tables and the printout -------------------------------------------------------

def example_records(records: Records, example: str) -> list[dict]:
    """The records of ``example``'s data sets, in order."""
    return [record for name, record in records.items() if name.startswith(f"{example}/")]


def omega_table(records: list[dict]) -> np.ndarray:
    """Every method's omega by data set, shape (calibrator, replicate)."""
    return np.array([[record["omega"][m] for record in records] for m in METHODS])


def coverage(records: list[dict], key: str) -> np.ndarray:
    """Per method, the share of data sets whose region (``key``) holds the truth."""
    return np.array([np.mean([record[key][m] for record in records]) for m in METHODS])


def median_table(records: Records) -> xr.Dataset:
    """The median example: omegas by data set and coverage of m."""
    median = example_records(records, "median")
    return xr.Dataset(
        {
            "omega": (("calibrator", "replicate"), omega_table(median)),
            "coverage": (("calibrator",), coverage(median, "inside")),
        },
        coords={"calibrator": list(METHODS)},
        attrs={"n": N, "omega_star": OMEGA_STAR, "B": B, "level": LEVEL},
    )


def quantreg_table(records: Records) -> xr.Dataset:
    """The regression: omegas and estimates by data set, coverage of (2, 1) and of the slope."""
    quantreg = example_records(records, "quantreg")
    return xr.Dataset(
        {
            "omega": (("calibrator", "replicate"), omega_table(quantreg)),
            "estimate": (("replicate", "coef"), np.array([r["estimate"] for r in quantreg])),
            "coverage_joint": (("calibrator",), coverage(quantreg, "inside_joint")),
            "coverage_slope": (("calibrator",), coverage(quantreg, "inside_slope")),
        },
        coords={"calibrator": list(METHODS), "coef": ["intercept", "slope"]},
        attrs={"n": N, "tau": 0.5, "truth": TRUTH, "B": B, "level": LEVEL,
               "region": "joint: Mahalanobis ellipsoid of the draws; slope: equal-tailed"},
    )


def report(summary: dict[str, Any]) -> None:
    """Print the omegas' medians and the coverages."""
    print(f"{'example':<10} {'method':<14} omega (median over replications)")
    for example, row in summary["table"].items():
        for method, value in row.items():
            print(f"{example:<10} {method:<14} {value:.4f}")
    print("coverage of the true median (n = 50):", summary["coverage_median"])
    print("coverage of the true quantile-regression coefficients (n = 50):",
          summary["coverage_quantreg"])


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, report=report, seed=SEED, jobs=2)


def run(out: Path, quick: bool) -> dict:
    """Every data set (resumed from ``out/runs``), the InferenceData and the summary; the table."""
    return EXPERIMENT.run(out, quick)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
