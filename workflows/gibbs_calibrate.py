"""Learning-rate calibrations side by side: plug-in, Holmes-Walker, GPC, SafeBayes.

Three examples:

(a) the median of Gamma(2, 1) data (n = 50; absolute loss, uniform prior on
    [0, 8], exact grid posteriors; omega* = 2 f(m) = 0.6266): plug-in,
    Holmes-Walker (``tr(H) / tr(J)``) and GPC (grid backend, B = 200) on each of
    R replications; then the coverage of the true median by the 95% intervals
    at each method's own omega, over the same replications;
(b) the quantile regression n = 50, X ~ chi2_2 - 2, Y = 2 + X + N(0, 2^2),
    tau = 0.5 (check loss, coefficients (intercept, slope)): plug-in,
    Holmes-Walker and, in the full run, GPC through Stan (run layer) on one
    data set;
(c) a misspecified normal linear regression for SafeBayes (Grunwald and van
    Ommen's wrong-model data: degree-50 Legendre regression, noise variance
    1/40, half the points replaced by (x = 0, y = 0)): the R-log and I-log
    learning rates over R replications.

Writes ``gibbs_calibrate.nc`` (groups ``calibration_median``,
``calibration_quantreg``, ``calibration_safebayes``, ``coverage``) and
``summary.json`` (``table``: example -> method -> omega; ``coverage_median``:
method -> coverage), and prints the table.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import arviz as az
import numpy as np
import xarray as xr

from stanflow.gibbs import calibrate, grid, loss_function
from stanflow.gibbs.gpc import gpc
from stanflow.gibbs.information import information_matching
from stanflow.gibbs.safebayes import safebayes
from stanflow.idata import save
from stanflow.workflows import main

DESCRIPTION = (
    "Learning-rate calibrations side by side (plug-in, Holmes-Walker, GPC, "
    "SafeBayes) on a median, a quantile regression and a misspecified regression"
)

SEED = 20240505
MEDIAN = 1.6783469900166608
OMEGA_STAR = 2 * MEDIAN * math.exp(-MEDIAN)
LEVEL = 0.95


def median_example(rng: np.random.Generator, replications: int, B: int) -> xr.Dataset:
    """Plug-in, Holmes-Walker and GPC omegas for R data sets of n = 50."""
    y = rng.gamma(2.0, 1.0, size=(replications, 50))
    plugin = calibrate(y).calibration["omega"].values
    hw = information_matching(y).calibration["omega"].values
    gp = np.array(
        [
            float(gpc(row, bounds=(0, 8), B=B, seed=r, grid_points=401).calibration["omega"])
            for r, row in enumerate(y)
        ]
    )
    omegas = np.stack([plugin, hw, gp])
    theta = np.linspace(0, 8, 801)
    sums = grid.loss_sums(theta, y, loss_function("absolute"))
    covered = []
    for k in range(3):
        ends = np.array(
            [
                grid.interval(grid.posterior(theta, sums[r], omegas[k][r]), LEVEL)
                for r in range(len(y))
            ]
        )
        covered.append(np.mean((ends[:, 0] <= MEDIAN) & (MEDIAN <= ends[:, 1])))
    return xr.Dataset(
        {
            "omega": (("calibrator", "replicate"), omegas),
            "coverage": (("calibrator",), np.array(covered)),
        },
        coords={"calibrator": ["plugin", "holmes_walker", "gpc"]},
        attrs={"n": 50, "omega_star": OMEGA_STAR, "B": B, "level": LEVEL},
    )


def quantreg_example(rng: np.random.Generator, with_stan: bool, B: int) -> xr.Dataset:
    """Plug-in, Holmes-Walker and (optionally) Stan GPC on one quantile regression."""
    n = 50
    x = rng.chisquare(2, size=n) - 2
    y = 2 + x + rng.normal(0, 2, size=n)
    X = np.column_stack([np.ones(n), x])
    from stanflow.gibbs.gpc import risk_minimiser

    beta = risk_minimiser(y, X, loss_function("check", {"tau": 0.5}))
    kw = dict(loss="check", loss_params={"tau": 0.5}, X=X, estimate=beta)
    methods = {
        "plugin": float(calibrate(y, **kw).calibration["omega"]),
        "holmes_walker": float(information_matching(y, **kw).calibration["omega"]),
    }
    if with_stan:
        c = gpc(y, **kw, prior="normal", prior_params={"mean": 0, "sd": 10},
                backend="stan", B=B, seed=1, draws=1000, warmup=300).calibration
        methods["gpc"] = float(c["omega"])
    return xr.Dataset(
        {"omega": (("calibrator",), list(methods.values())), "estimate": (("coef",), beta)},
        coords={"calibrator": list(methods), "coef": ["intercept", "slope"]},
        attrs={"n": n, "tau": 0.5},
    )


def safebayes_example(rng: np.random.Generator, replications: int) -> xr.Dataset:
    """SafeBayes R-log / I-log on Grunwald-van Ommen wrong-model data."""
    chosen = []
    for _ in range(replications):
        x = rng.uniform(-1, 1, 100)
        X = np.polynomial.legendre.legvander(x, 50)
        y = 0.1 * (x + x**2) + rng.normal(0, 1 / math.sqrt(40), 100)
        easy = rng.random(100) < 0.5
        X[easy], y[easy] = 0.0, 0.0
        chosen.append(safebayes(y, X).calibration["omega"].values)
    return xr.Dataset(
        {"omega": (("replicate", "variant"), np.array(chosen))},
        coords={"variant": ["r-log", "i-log"]},
        attrs={"n": 100, "degree": 50},
    )


def run(out: Path, quick: bool) -> dict:
    """Run the three examples, save the InferenceData, return the summary."""
    rng = np.random.default_rng(SEED)
    med = median_example(rng, 20 if quick else 200, 200)
    qr = quantreg_example(rng, with_stan=not quick, B=200)
    sb = safebayes_example(rng, 5 if quick else 50)
    table = {
        "median": {str(m): float(med["omega"].sel(calibrator=m).median()) for m in med["calibrator"].values},
        "quantreg": {str(m): float(v) for m, v in zip(qr["calibrator"].values, qr["omega"].values)},
        "safebayes": {str(v): float(sb["omega"].sel(variant=v).median()) for v in sb["variant"].values},
    }
    save(
        az.InferenceData(
            calibration_median=med, calibration_quantreg=qr, calibration_safebayes=sb
        ),
        out / "gibbs_calibrate.nc",
    )
    print(f"{'example':<10} {'method':<14} omega (median over replications)")
    for example, row in table.items():
        for method, value in row.items():
            print(f"{example:<10} {method:<14} {value:.4f}")
    coverage = {str(m): float(med["coverage"].sel(calibrator=m)) for m in med["calibrator"].values}
    print("coverage of the true median (n = 50):", coverage)
    return {
        "table": table,
        "coverage_median": coverage,
        "omega_star_median": OMEGA_STAR,
        "replications_median": int(med.sizes["replicate"]),
        "quick": quick,
        "seed": SEED,
    }


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
