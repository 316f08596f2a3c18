"""The learning-rate path: every Gibbs posterior from omega = 0 on one SMC sweep, and calibration from it.

Two examples, R replications each (full: 20 and 10; ``--quick``: 1):

(a) the median of Gamma(2, 1) data, n = 100 and n = 400 (absolute loss, uniform
    prior on [0, 8]; omega* = 2 f(m) = 0.6266). On every data set: one path
    (4000 particles, random-walk moves) read at its schedule points against
    the exact grid posteriors (CDF and ``log Z_n``); GPC by root finding on the
    path, today's Robbins-Monro GPC from the same start (grid backend, the
    paper's rule: eps = 0.01, 16 steps, omega0 = 1) and the bootstrap fixed
    point (the same rule with eps = 0, up to 300 steps), all on the same
    B = 200 resamples; the exact grid coverage at the path's root; plug-in and
    Holmes-Walker marked on the path.
(b) the quantile regression of ``gibbs-calibrate`` (n = 50, X ~ chi2_2 - 2,
    Y = 2 + X + N(0, 2^2), tau = 0.5, N(0, 10^2) priors; two coefficients):
    GPC on the path against Robbins-Monro GPC through Stan (reweight design)
    and its fixed point (eps = 0, up to 200 steps); the path's posterior means
    and 2.5% / 97.5% quantiles checked against Stan NUTS at several omegas.

Writes ``gibbs_path.png`` (posterior mean and 95% interval against omega with
every rule's omega marked, and ``log Z_n(omega)``: top the median, n = 400;
bottom the quantile regression's slope), ``gibbs_path.nc`` (the first median
data set's path and calibration, and per example the rules' omegas by
replicate) and ``summary.json``: the issue's keys at the top (the median
example, n = 400, medians over replications; the CDF and ``log Z`` errors are
the largest over both n, all replications and schedule points), per example
details under ``median`` and ``quantile_regression``. The full run is stored
in ``results/gibbs-path/``, which docs/gibbs.md quotes (docs/results.md).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs import (
    GridBackend,
    StanBackend,
    TemplateProgram,
    calibrate_gpc,
    grid,
    linear_program,
    location_program,
    posterior,
)
from stanflow.gibbs.gpc import bootstrap_indices
from stanflow.gibbs.gpc.grid_backend import grid_coverage
from stanflow.gibbs.path import calibrate_path, cdf, plot_path, reweight, weighted_quantile
from stanflow.gibbs.plugin import location_estimate
from stanflow.gibbs.templates import glm_minimiser
from stanflow.idata import save
from stanflow.losses import loss_function
from stanflow.workflows import main, save_figure

DESCRIPTION = (
    "The learning-rate path: every Gibbs posterior from omega = 0 in one SMC sweep; "
    "GPC by root finding vs Robbins-Monro, plug-in and Holmes-Walker on the same particles"
)

SEED = 20240507
MEDIAN = 1.6783469900166608
OMEGA_STAR = 2 * MEDIAN * math.exp(-MEDIAN)
B = 200
PARTICLES = 4000
MOVES = 3
DKW_DELTA = 1e-3
RULES = ["gpc_path", "gpc_robbins_monro", "gpc_fixed_point", "plugin", "holmes_walker"]
QUANTREG = {"loss": "check", "loss_params": {"tau": 0.5}, "prior": "normal",
            "prior_params": {"mean": 0, "sd": 10}}


def median_example(rng: np.random.Generator, n: int, replications: int) -> tuple[xr.Dataset, Results]:
    """Path, GPC (root, Robbins-Monro, fixed point), plug-in and Holmes-Walker on R data sets."""
    absolute = loss_function("absolute")
    theta = np.linspace(0, 8, 4001)
    rows, first = [], None
    for r in range(replications):
        y = rng.gamma(2.0, 1.0, n)
        estimate = float(location_estimate(y, absolute, 0.0, 8.0))
        program = location_program(y, bounds=(0, 8))
        grid_backend = GridBackend(801)
        start = time.perf_counter()
        rm = calibrate_gpc(program, backend=grid_backend, estimate=estimate, seed=r).calibration
        wall_rm = time.perf_counter() - start
        fixed = calibrate_gpc(program, backend=grid_backend, estimate=estimate, seed=r,
                              eps=0.0, max_steps=300).calibration
        idata = calibrate_path(
            program, estimate=[estimate], B=B, seed=r, omega_max=3.0,
            n_particles=PARTICLES, n_moves=MOVES, resamples="reweight",
            marks={"gpc_robbins_monro": float(rm["omega"]), "gpc_fixed_point": float(fixed["omega"])},
        )
        c, path = arviz_compat.group(idata, "calibration"), arviz_compat.group(idata, "path")
        sums = grid.loss_sums(theta, y, absolute)
        cdf_errors, tolerances, log_z_errors, log_z_z = [], [], [], []
        omegas, ess = path["omega"].values[1:], path["ess"].values[1:]
        for omega, level_ess in zip(omegas, ess, strict=True):
            exact = grid.posterior(theta, sums, float(omega))
            read = reweight(path, float(omega))
            cdf_errors.append(float(np.max(np.abs(cdf(read, theta)[0] - grid.cdf(exact)))))
            tolerances.append(math.sqrt(math.log(2 * len(omegas) / DKW_DELTA) / (2 * level_ess)))
            log_z_errors.append(abs(read.log_z - float(exact.log_z)))
            log_z_z.append(log_z_errors[-1] / read.log_z_se)
        resamples = y[bootstrap_indices(n, B, np.random.SeedSequence(r))]
        exact_coverage, _ = grid_coverage(theta[::5], grid.loss_sums(theta[::5], resamples, absolute),
                                          float(c["omega"]), estimate, 0.05)
        rows.append({
            **{rule: float(c["rule_omega"].sel(rule=rule)) for rule in RULES},
            "omega_se": float(c["omega_se"]),
            "converged_path": float(c["converged"]),
            "converged_robbins_monro": float(rm["converged"]),
            "steps_robbins_monro": float(rm["steps"]),
            "steps_fixed_point": float(fixed["steps"]),
            "evaluations_path": float(c["evaluations"]),
            "exact_coverage_at_path_root": exact_coverage,
            "wall_path": float(c["wall_time"]),
            "wall_robbins_monro": wall_rm,
            "schedule_points": float(len(omegas)),
            "max_cdf_error": max(cdf_errors),
            "max_cdf_error_over_dkw": max(e / t for e, t in zip(cdf_errors, tolerances, strict=True)),
            "max_log_z_error": max(log_z_errors),
            "max_log_z_z": max(log_z_z),
        })
        if first is None:
            first = idata
    names = list(rows[0])
    table = xr.Dataset(
        {name: ("replicate", np.array([row[name] for row in rows])) for name in names},
        attrs={"n": n, "omega_star": OMEGA_STAR, "B": B, "particles": PARTICLES},
    )
    return table, first


def quantreg_data(rng: np.random.Generator) -> tuple[TemplateProgram, np.ndarray]:
    """A median regression's program and its risk minimiser (Nelder-Mead from least squares)."""
    x = rng.chisquare(2, size=50) - 2
    y = 2 + x + rng.normal(0, 2, size=50)
    X = np.column_stack([np.ones(50), x])
    return linear_program(y, X, **QUANTREG), glm_minimiser(y, X, loss_function("check", {"tau": 0.5}))


def quantreg_example(
    rng: np.random.Generator, replications: int, fixed_steps: int
) -> tuple[xr.Dataset, Results]:
    """GPC on the path against Stan Robbins-Monro GPC (reweight design) and its fixed point."""
    rows, first = [], None
    for r in range(replications):
        program, beta = quantreg_data(rng)
        kwargs = {"estimate": beta, "backend": StanBackend(), "B": B, "seed": r}
        start = time.perf_counter()
        rm = calibrate_gpc(program, **kwargs).calibration
        wall_rm = time.perf_counter() - start
        fixed = calibrate_gpc(program, **kwargs, eps=0.0, max_steps=fixed_steps).calibration
        idata = calibrate_path(
            program, estimate=beta, B=B, seed=r, omega_max=3.0,
            n_particles=PARTICLES, n_moves=MOVES, resamples="reweight",
            marks={"gpc_robbins_monro": float(rm["omega"]), "gpc_fixed_point": float(fixed["omega"])},
        )
        c = idata.calibration
        rows.append({
            **{rule: float(c["rule_omega"].sel(rule=rule)) for rule in RULES},
            "omega_se": float(c["omega_se"]),
            "converged_path": float(c["converged"]),
            "converged_robbins_monro": float(rm["converged"]),
            "converged_fixed_point": float(fixed["converged"]),
            "steps_robbins_monro": float(rm["steps"]),
            "evaluations_path": float(c["evaluations"]),
            "ess_min_at_root": float(c["ess_min"][-1]),
            "wall_path": float(c["wall_time"]),
            "wall_robbins_monro": wall_rm,
        })
        if first is None:
            first = (idata, program)
    names = list(rows[0])
    table = xr.Dataset(
        {name: ("replicate", np.array([row[name] for row in rows])) for name in names},
        attrs={"n": 50, "tau": 0.5, "B": B, "particles": PARTICLES},
    )
    return table, first


def nuts_check(idata: Results, program: TemplateProgram, omegas: list[float], draws: int) -> dict:
    """The path's means and 2.5% / 97.5% quantiles against Stan NUTS at each omega.

    z = (path - NUTS) / sqrt(se_path^2 + se_NUTS^2): the path's errors from its
    reading ESS (a mean's ``sqrt(sum w^2 (x - m)^2)``, a quantile's CDF band
    divided by the density), NUTS's from ArviZ's MCSE."""
    path = arviz_compat.group(idata, "path")
    rows = {}
    for omega in omegas:
        fit = posterior(program, omega=omega, chains=4, iter_sampling=draws,
                        iter_warmup=500, seed=SEED)
        beta = fit.posterior["beta"]
        mcse_mean = arviz_compat.mcse(fit, var_names=["beta"])["beta"]
        read = reweight(path, omega)
        z_mean, z_quantile = [], []
        for k in range(program.X.shape[1]):
            x = read.theta[:, k]
            mean = read.weights @ x
            se = math.sqrt(np.sum(read.weights**2 * (x - mean) ** 2))
            nuts = beta.isel(coef=k)
            z_mean.append((mean - float(nuts.mean())) / math.hypot(se, float(mcse_mean.isel(coef=k))))
            for p in (0.025, 0.975):
                value = weighted_quantile(x, read.weights, np.array([p]))[0]
                # The quantile's se: the CDF's se over the density (a kernel estimate).
                h = 0.9 * x.std() * read.ess ** -0.2
                kernel = np.exp(-0.5 * ((x - value) / h) ** 2) / (h * math.sqrt(2 * math.pi))
                density = read.weights @ kernel
                se_q = math.sqrt(p * (1 - p) / read.ess) / density
                mcse_all = arviz_compat.mcse(fit, var_names=["beta"], method="quantile", prob=p)
                mcse = float(mcse_all["beta"].isel(coef=k))
                z_quantile.append((value - float(nuts.quantile(p))) / math.hypot(se_q, mcse))
        rows[f"{omega:g}"] = {"z_mean": z_mean, "z_quantile": z_quantile, "path_ess": read.ess}
    worst_mean = max(abs(z) for row in rows.values() for z in row["z_mean"])
    worst_quantile = max(abs(z) for row in rows.values() for z in row["z_quantile"])
    return {"by_omega": rows, "max_abs_z_mean": worst_mean, "max_abs_z_quantile": worst_quantile}


def summarise(table: xr.Dataset) -> dict:
    """Medians of the rules' omegas, distances to the fixed point, walls, checks.

    ``robbins_monro_over_path``: Robbins-Monro's median distance to the fixed
    point and median wall time, each divided by the path's (None where the
    path's is 0)."""
    fixed = table["gpc_fixed_point"].values
    distance = {rule: np.abs(table[rule].values - fixed) for rule in ("gpc_path", "gpc_robbins_monro")}
    out = {f"omega_{rule}": float(np.median(table[rule])) for rule in RULES}
    out |= {
        "median_abs_distance_to_fixed_point": {rule: float(np.median(d)) for rule, d in distance.items()},
        "max_abs_distance_to_fixed_point": {rule: float(np.max(d)) for rule, d in distance.items()},
        "wall_seconds_path": float(np.median(table["wall_path"])),
        "wall_seconds_robbins_monro": float(np.median(table["wall_robbins_monro"])),
        "converged_count_path": int(np.sum(table["converged_path"])),
        "converged_count_robbins_monro": int(np.sum(table["converged_robbins_monro"])),
        "median_omega_se_path": float(np.nanmedian(table["omega_se"])),
        "replications": int(table.sizes["replicate"]),
    }
    medians = out["median_abs_distance_to_fixed_point"]
    out["robbins_monro_over_path"] = {
        "median_abs_distance_to_fixed_point": ratio(medians["gpc_robbins_monro"], medians["gpc_path"]),
        "wall_seconds": ratio(out["wall_seconds_robbins_monro"], out["wall_seconds_path"]),
    }
    for name in ("max_cdf_error", "max_cdf_error_over_dkw", "max_log_z_error", "max_log_z_z"):
        if name in table:
            out[name] = float(table[name].max())
    if "exact_coverage_at_path_root" in table:
        values = table["exact_coverage_at_path_root"].values
        out["exact_coverage_at_path_root"] = [float(values.min()), float(values.max())]
    return out


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, or None when the denominator is 0."""
    return numerator / denominator if denominator > 0 else None


def figure(median: Results, quantreg: Results, out: Path) -> None:
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    plot_path(median, 0, axes[0], title="median of Gamma(2, 1), n = 400 (absolute loss)", truth=MEDIAN)
    plot_path(quantreg, 1, axes[1], title="quantile regression, n = 50: slope", truth=1.0)
    fig.tight_layout()
    save_figure(fig, out / "gibbs_path.png")


def run(out: Path, quick: bool) -> dict:
    """Both examples; the figure, the InferenceData and the summary."""
    rng = np.random.default_rng(SEED)
    replications = 1 if quick else 20
    median = {}
    for n in (100, 400):
        median[n] = median_example(rng, n, replications)
    qr_table, (qr_idata, qr_program) = quantreg_example(rng, 1 if quick else 10,
                                                        30 if quick else 200)
    check = nuts_check(qr_idata, qr_program, [0.5, 1.0] if quick else [0.25, 0.5, 1.0, 2.0],
                       1000 if quick else 5000)
    figure(median[400][1], qr_idata, out)
    save(
        arviz_compat.build(
            {
                **{name: arviz_compat.group(median[400][1], name)
                   for name in ("path", "path_functionals", "calibration")},
                "replications_median_n100": median[100][0],
                "replications_median_n400": median[400][0],
                "replications_quantreg": qr_table,
            }
        ),
        out / "gibbs_path.nc",
    )
    details = {f"n{n}": summarise(table) for n, (table, _) in median.items()}
    quantile_regression = summarise(qr_table) | {"nuts_check": check}
    top = details["n400"]
    summary = {
        "max_cdf_error_vs_grid": max(d["max_cdf_error"] for d in details.values()),
        "log_z_error_vs_grid": max(d["max_log_z_error"] for d in details.values()),
        "omega_gpc_path": top["omega_gpc_path"],
        "omega_gpc_robbins_monro": top["omega_gpc_robbins_monro"],
        "omega_gpc_fixed_point": top["omega_gpc_fixed_point"],
        "omega_star": OMEGA_STAR,
        "wall_seconds_path": top["wall_seconds_path"],
        "wall_seconds_robbins_monro": top["wall_seconds_robbins_monro"],
        "median": details,
        "quantile_regression": quantile_regression,
        "particles": PARTICLES,
        "moves": MOVES,
        "B": B,
        "quick": quick,
        "seed": SEED,
    }
    for name, row in (*details.items(), ("quantreg", quantile_regression)):
        print(f"{name}: path {row['omega_gpc_path']:.4f}  "
              f"Robbins-Monro {row['omega_gpc_robbins_monro']:.4f}  "
              f"fixed point {row['omega_gpc_fixed_point']:.4f}  plug-in {row['omega_plugin']:.4f}  "
              f"wall path {row['wall_seconds_path']:.3f} s, RM {row['wall_seconds_robbins_monro']:.3f} s")
    print(f"max CDF error {summary['max_cdf_error_vs_grid']:.4f}, max log Z error "
          f"{summary['log_z_error_vs_grid']:.4f}; NUTS check max |z| mean "
          f"{check['max_abs_z_mean']:.2f}, quantiles {check['max_abs_z_quantile']:.2f}")
    return summary


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
