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
    and its fixed point (eps = 0, up to 200 steps); the first data set's path
    (its posterior means and 2.5% / 97.5% quantiles) checked against Stan NUTS
    at several omegas.

Every data set is a piece (``OUT/runs/median/n{100,400}/NNN.json``,
``OUT/runs/quantreg/NNN.json``), so a stopped run resumes. Writes
``gibbs_path.png`` (posterior mean and 95% interval against omega with every
rule's omega marked, and ``log Z_n(omega)``: top the median, n = 400; bottom
the quantile regression's slope), ``gibbs_path.nc`` (the first median data
set's path functionals, schedule and calibration, without the particles, and
per example the rules' omegas by replicate) and ``summary.json``: the issue's
keys at the top (the median example, n = 400, medians over replications; the
CDF and ``log Z`` errors are the largest over both n, all replications and
schedule points), per example details under ``median`` and
``quantile_regression``. The full run is stored in ``results/gibbs-path/``,
which docs/gibbs.md quotes (docs/results.md).
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.gibbs import (
    GridBackend,
    PathSampler,
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
SIZES = (100, 400)
B = 200
SAMPLER = PathSampler(n_particles=4000, n_moves=3)
"""Every path's sampler: 4000 particles, 3 random-walk moves per schedule point."""
DKW_DELTA = 1e-3
RULES = ["gpc_path", "gpc_robbins_monro", "gpc_fixed_point", "plugin", "holmes_walker"]
QUANTREG = {"loss": "check", "loss_params": {"tau": 0.5}, "prior": "normal",
            "prior_params": {"mean": 0, "sd": 10}}
DRAWN = ("median/n400/000", "quantreg/000")
"""The data sets whose path the figure draws (and ``gibbs_path.nc`` keeps, the first)."""

SETTINGS = {
    "quick": {"median_replications": 1, "quantreg_replications": 1, "fixed_steps": 30,
              "nuts_omegas": [0.5, 1.0], "nuts_draws": 1000},
    "full": {"median_replications": 20, "quantreg_replications": 10, "fixed_steps": 200,
             "nuts_omegas": [0.25, 0.5, 1.0, 2.0], "nuts_draws": 5000},
}


def cells(settings: dict[str, Any]) -> list[Cell]:
    """One cell per data set: the median's (n = 100, then 400), then the regression's.

    The data sets are drawn one after another from the seed's one generator
    (:func:`data_stream`), so all but the first size's depend on the number
    of median data sets; the first regression's cell also checks its path
    against NUTS.
    """
    R = settings["median_replications"]
    first = [Cell(f"median/n{SIZES[0]}/{r:03d}", {"n": SIZES[0], "r": r}) for r in range(R)]
    later = [Cell(f"median/n{n}/{r:03d}", {"n": n, "r": r, "median_replications": R})
             for n in SIZES[1:] for r in range(R)]
    regression = {"median_replications": R, "fixed_steps": settings["fixed_steps"]}
    nuts = {key: settings[key] for key in ("nuts_omegas", "nuts_draws")}
    quantreg = [Cell(f"quantreg/{r:03d}", {"r": r} | regression | (nuts if r == 0 else {}))
                for r in range(settings["quantreg_replications"])]
    return first + later + quantreg


def compute(run: CellRun) -> dict:
    """One data set; the drawn ones keep their groups, the first regression its NUTS check."""
    # (the first size's data sets come first in the stream: theirs do not depend on the count)
    data = data_set(run.seed, run.settings["median_replications"], run.cell.name)
    if run.cell.name.startswith("median/"):
        record, idata = median_data_set(data, run.params["r"])
    else:
        program, beta = quantreg_program(*data)
        record, idata = quantreg_data_set(program, beta, run.params["r"], run.params["fixed_steps"])
        if "nuts_omegas" in run.params:
            record["nuts_check"] = nuts_check(idata, program, run.params["nuts_omegas"],
                                              run.params["nuts_draws"])
    if run.cell.name in DRAWN:
        record["groups"] = drawn_groups(idata)
    return record


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """The headline keys (the median, n = 400), and both examples' details."""
    details = {f"n{n}": summarise_table(median_table(records, n)) for n in SIZES}
    quantile_regression = summarise_table(quantreg_table(records)) | {
        "nuts_check": records["quantreg/000"]["nuts_check"]}
    top = details["n400"]
    return {
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
        "particles": SAMPLER.n_particles,
        "moves": SAMPLER.n_moves,
        "B": B,
        "quick": settings == SETTINGS["quick"],
    }


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``gibbs_path.png`` and ``gibbs_path.nc``."""
    median, quantreg = (drawn_results(records[name]["groups"]) for name in DRAWN)
    figure(median, quantreg, out)
    save(
        arviz_compat.build(
            {
                **{name: arviz_compat.group(median, name)
                   for name in ("path", "path_functionals", "calibration")},
                "replications_median_n100": median_table(records, 100),
                "replications_median_n400": median_table(records, 400),
                "replications_quantreg": quantreg_table(records),
            }
        ),
        out / "gibbs_path.nc",
    )


# -- the data sets ----------------------------------------------------------------

def data_stream(seed: int, median_replications: int) -> Iterator[tuple[str, Any]]:
    """The data sets by cell name, in the order drawn from the seed's one generator."""
    rng = np.random.default_rng(seed)
    for n in SIZES:
        for r in range(median_replications):
            yield f"median/n{n}/{r:03d}", rng.gamma(2.0, 1.0, n)
    for r in itertools.count():
        yield f"quantreg/{r:03d}", quantreg_data(rng)


def data_set(seed: int, median_replications: int, name: str) -> Any:
    """The data set of the cell ``name``."""
    return next(data for key, data in data_stream(seed, median_replications) if key == name)


def median_data_set(y: np.ndarray, r: int) -> tuple[dict, Results]:
    """Path, GPC (root, Robbins-Monro, fixed point), plug-in and Holmes-Walker on one data set."""
    n = len(y)
    absolute = loss_function("absolute")
    theta = np.linspace(0, 8, 4001)
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
        sampler=SAMPLER, resamples="reweight",
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
    row = {
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
    }
    return {"row": row}, idata


def quantreg_data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A regression's data ``(X, y)``: ``x ~ chi2_2 - 2``, ``y = 2 + x + N(0, 2^2)``, n = 50."""
    x = rng.chisquare(2, size=50) - 2
    y = 2 + x + rng.normal(0, 2, size=50)
    return np.column_stack([np.ones(50), x]), y


def quantreg_program(X: np.ndarray, y: np.ndarray) -> tuple[TemplateProgram, np.ndarray]:
    """A median regression's program and its risk minimiser (Nelder-Mead from least squares)."""
    beta = glm_minimiser(y, X, loss_function("check", {"tau": 0.5}))
    return linear_program(y, X, **QUANTREG), beta


def quantreg_data_set(
    program: TemplateProgram, beta: np.ndarray, r: int, fixed_steps: int
) -> tuple[dict, Results]:
    """GPC on the path against Stan Robbins-Monro GPC (reweight design) and its fixed point."""
    kwargs = {"estimate": beta, "backend": StanBackend(), "B": B, "seed": r}
    start = time.perf_counter()
    rm = calibrate_gpc(program, **kwargs).calibration
    wall_rm = time.perf_counter() - start
    fixed = calibrate_gpc(program, **kwargs, eps=0.0, max_steps=fixed_steps).calibration
    idata = calibrate_path(
        program, estimate=beta, B=B, seed=r, omega_max=3.0,
        sampler=SAMPLER, resamples="reweight",
        marks={"gpc_robbins_monro": float(rm["omega"]), "gpc_fixed_point": float(fixed["omega"])},
    )
    c = idata.calibration
    row = {
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
    }
    return {"row": row}, idata


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


def summarise_table(table: xr.Dataset) -> dict:
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
    """``gibbs_path.png``: the median's path (n = 400) above the regression's slope's."""
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    plot_path(median, 0, axes[0], title="median of Gamma(2, 1), n = 400 (absolute loss)", truth=MEDIAN)
    plot_path(quantreg, 1, axes[1], title="quantile regression, n = 50: slope", truth=1.0)
    fig.tight_layout()
    save_figure(fig, out / "gibbs_path.png")


# -- tables, the figure's groups, the printout ---------------------------------------

def replication_table(rows: list[dict], attrs: dict[str, Any]) -> xr.Dataset:
    """The data sets' rows as variables along ``replicate``."""
    return xr.Dataset({name: ("replicate", np.array([row[name] for row in rows], dtype=float))
                       for name in rows[0]}, attrs=attrs)


def median_table(records: Records, n: int) -> xr.Dataset:
    """The median example's data sets of size ``n``."""
    rows = [record["row"] for name, record in records.items() if name.startswith(f"median/n{n}/")]
    attrs = {"n": n, "omega_star": OMEGA_STAR, "B": B, "particles": SAMPLER.n_particles}
    return replication_table(rows, attrs)


def quantreg_table(records: Records) -> xr.Dataset:
    """The regression's data sets."""
    rows = [record["row"] for name, record in records.items() if name.startswith("quantreg/")]
    return replication_table(rows, {"n": 50, "tau": 0.5, "B": B, "particles": SAMPLER.n_particles})


def drawn_groups(idata: Results) -> dict[str, dict]:
    """The groups the figure reads, as JSON-like dicts: the path without its particles."""
    groups = {name: arviz_compat.group(idata, name)
              for name in ("path", "path_functionals", "calibration")}
    groups["path"] = groups["path"].drop_dims("particle")
    return {name: group.to_dict(data="list") for name, group in groups.items()}


def drawn_results(groups: dict[str, dict]) -> Results:
    """:func:`drawn_groups` read back (``null``, a NaN in JSON, a NaN again)."""
    datasets = {name: xr.Dataset.from_dict(group) for name, group in groups.items()}
    return arviz_compat.build({
        name: dataset.map(lambda v: v.astype(float) if v.dtype == object else v)
        for name, dataset in datasets.items()
    })


def report(summary: dict[str, Any]) -> None:
    """Print every example's rules and walls, the largest errors and the NUTS check's |z|."""
    quantile_regression = summary["quantile_regression"]
    for name, row in (*summary["median"].items(), ("quantreg", quantile_regression)):
        print(f"{name}: path {row['omega_gpc_path']:.4f}  "
              f"Robbins-Monro {row['omega_gpc_robbins_monro']:.4f}  "
              f"fixed point {row['omega_gpc_fixed_point']:.4f}  plug-in {row['omega_plugin']:.4f}  "
              f"wall path {row['wall_seconds_path']:.3f} s, "
              f"RM {row['wall_seconds_robbins_monro']:.3f} s")
    check = quantile_regression["nuts_check"]
    print(f"max CDF error {summary['max_cdf_error_vs_grid']:.4f}, max log Z error "
          f"{summary['log_z_error_vs_grid']:.4f}; NUTS check max |z| mean "
          f"{check['max_abs_z_mean']:.2f}, quantiles {check['max_abs_z_quantile']:.2f}")


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, report=report, seed=SEED)


def run(out: Path, quick: bool) -> dict:
    """Every data set (resumed from ``out/runs``); the figure, the InferenceData and the summary."""
    return EXPERIMENT.run(out, quick)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
