"""Learning-rate calibrations side by side: plug-in, Holmes-Walker, GPC.

Two examples (SafeBayes on Grunwald and van Ommen's misspecified regression is
the workflow ``gibbs-safebayes``):

(a) the median of Gamma(2, 1) data (n = 50; absolute loss, uniform prior on
    [0, 8], exact grid posteriors; omega* = 2 f(m) = 0.6266): plug-in,
    Holmes-Walker (``tr(H) / tr(J)``) and GPC (grid backend, B = 200) on each of
    R replications; then the coverage of the true median by the 95% intervals
    at each method's own omega, over the same replications;
(b) the quantile regression n = 50, X ~ chi2_2 - 2, Y = 2 + X + N(0, 2^2),
    tau = 0.5 (check loss, coefficients (intercept, slope), N(0, 10^2) priors):
    plug-in, Holmes-Walker and GPC through Stan (reweight design, B = 200) on
    each of R data sets (40; ``--quick``: 2), then each method's Gibbs posterior
    (Stan, run layer) and the coverage of the true (2, 1) by the 95% ellipsoid
    and of the slope by its 95% interval.

Writes ``gibbs_calibrate.nc`` (groups ``calibration_median``,
``calibration_quantreg``) and
``summary.json`` (``table``: example -> method -> omega, medians over the
replications; ``coverage_median``: method -> coverage; ``coverage_quantreg``:
method -> {joint, slope}), and prints the table.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.gibbs import (
    GridBackend,
    StanBackend,
    calibrate_gpc,
    calibrate_holmes_walker,
    calibrate_plugin,
    grid,
    linear_program,
    location_program,
)
from stanflow.gibbs.information import omega_from_traces
from stanflow.gibbs.plugin import replicate_location_plugin
from stanflow.idata import save
from stanflow.losses import loss_function
from stanflow.workflows import main

DESCRIPTION = (
    "Learning-rate calibrations side by side (plug-in, Holmes-Walker, GPC) on a "
    "median and a quantile regression"
)

SEED = 20240505
MEDIAN = 1.6783469900166608
OMEGA_STAR = 2 * MEDIAN * math.exp(-MEDIAN)
LEVEL = 0.95


def median_example(rng: np.random.Generator, replications: int, B: int) -> xr.Dataset:
    """Plug-in, Holmes-Walker and GPC omegas for R data sets of n = 50."""
    y = rng.gamma(2.0, 1.0, size=(replications, 50))
    rates = replicate_location_plugin(y)
    plugin = rates["omega"].values
    hw = omega_from_traces(rates["sensitivity"].values, rates["variability"].values)
    gp = np.array(
        [
            float(arviz_compat.group(calibrate_gpc(
                location_program(row, bounds=(0, 8)), backend=GridBackend(401), B=B, seed=r),
                "calibration")["omega"])
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
        covered.append(np.mean((ends[:, 0] <= MEDIAN) & (ends[:, 1] >= MEDIAN)))
    return xr.Dataset(
        {
            "omega": (("calibrator", "replicate"), omegas),
            "coverage": (("calibrator",), np.array(covered)),
        },
        coords={"calibrator": ["plugin", "holmes_walker", "gpc"]},
        attrs={"n": 50, "omega_star": OMEGA_STAR, "B": B, "level": LEVEL},
    )


def quantreg_example(rng: np.random.Generator, replications: int, B: int) -> xr.Dataset:
    """Plug-in, Holmes-Walker and Stan GPC omegas on R quantile regressions, and
    the coverage of the true coefficients (2, 1) by each method's Gibbs posterior."""
    from stanflow.gibbs.gpc import draws_coverage
    from stanflow.gibbs.templates import glm_minimiser
    from stanflow.runs import RunSet, RunSpec

    n, truth = 50, np.array([2.0, 1.0])
    programs, omegas, estimates = [], [], []
    for r in range(replications):
        x = rng.chisquare(2, size=n) - 2
        y = 2 + x + rng.normal(0, 2, size=n)
        X = np.column_stack([np.ones(n), x])
        program = linear_program(y, X, loss="check", loss_params={"tau": 0.5}, prior="normal",
                                 prior_params={"mean": 0, "sd": 10})
        beta = glm_minimiser(y, X, loss_function("check", {"tau": 0.5}))
        omegas.append([
            float(calibrate_plugin(program, estimate=beta).calibration["omega"]),
            float(calibrate_holmes_walker(program, estimate=beta).calibration["omega"]),
            float(calibrate_gpc(program, estimate=beta, backend=StanBackend(), B=B,
                                seed=r).calibration["omega"]),
        ])
        programs.append(program)
        estimates.append(beta)
    omegas = np.array(omegas).T  # (calibrator, replicate)
    specs = [
        RunSpec(data=program.stan_data(omegas[k, r]), args={"num_samples": 2000, "num_warmup": 500})
        for k in range(3)
        for r, program in enumerate(programs)
    ]
    with tempfile.TemporaryDirectory() as folder:
        runset = RunSet(programs[0].model("stanflow"), specs, out_dir=folder, root_seed=SEED)
        failed = [result.index for result in runset.run(progress=False) if not result.ok]
        if failed:
            raise RuntimeError(f"quantile regression posteriors {failed} failed")
        beta_draws = runset.to_inference_data().posterior["beta"]
    draws = beta_draws.stack(sample=("chain", "draw")).transpose("run", "sample", ...).values
    draws = draws.reshape(3, replications, *draws.shape[1:])
    joint = [draws_coverage(draws[k], truth, 1 - LEVEL) for k in range(3)]
    slope = [draws_coverage(draws[k][:, :, 1], truth[1], 1 - LEVEL) for k in range(3)]
    return xr.Dataset(
        {
            "omega": (("calibrator", "replicate"), omegas),
            "estimate": (("replicate", "coef"), np.array(estimates)),
            "coverage_joint": (("calibrator",), joint),
            "coverage_slope": (("calibrator",), slope),
        },
        coords={"calibrator": ["plugin", "holmes_walker", "gpc"], "coef": ["intercept", "slope"]},
        attrs={"n": n, "tau": 0.5, "truth": truth, "B": B, "level": LEVEL,
               "region": "joint: Mahalanobis ellipsoid of the draws; slope: equal-tailed"},
    )


def run(out: Path, quick: bool) -> dict:
    """Run the two examples, save the InferenceData, return the summary."""
    rng = np.random.default_rng(SEED)
    med = median_example(rng, 20 if quick else 200, 200)
    qr = quantreg_example(rng, 2 if quick else 40, 200)
    table = {
        "median": {str(m): float(med["omega"].sel(calibrator=m).median()) for m in med["calibrator"].values},
        "quantreg": {str(m): float(qr["omega"].sel(calibrator=m).median()) for m in qr["calibrator"].values},
    }
    save(
        arviz_compat.build(
            {
                "calibration_median": med,
                "calibration_quantreg": qr,
            }
        ),
        out / "gibbs_calibrate.nc",
    )
    print(f"{'example':<10} {'method':<14} omega (median over replications)")
    for example, row in table.items():
        for method, value in row.items():
            print(f"{example:<10} {method:<14} {value:.4f}")
    coverage = {str(m): float(med["coverage"].sel(calibrator=m)) for m in med["calibrator"].values}
    print("coverage of the true median (n = 50):", coverage)
    coverage_qr = {
        str(m): {"joint": float(qr["coverage_joint"].sel(calibrator=m)),
                 "slope": float(qr["coverage_slope"].sel(calibrator=m))}
        for m in qr["calibrator"].values
    }
    print("coverage of the true quantile-regression coefficients (n = 50):", coverage_qr)
    return {
        "table": table,
        "coverage_median": coverage,
        "coverage_quantreg": coverage_qr,
        "replications_quantreg": int(qr.sizes["replicate"]),
        "omega_star_median": OMEGA_STAR,
        "replications_median": int(med.sizes["replicate"]),
        "quick": quick,
        "seed": SEED,
    }


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
