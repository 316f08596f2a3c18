"""Start here: a Gibbs posterior, its learning rate calibrated, from a template and from your file.

The data are built in: n = 100 draws of Gamma(2, 1), simulated inside the
workflow from a fixed seed (``SEED``). The parameter is their median (the
population's is m = 1.6783, a skewed distribution's, not its mean 2), learnt
through the absolute loss with a uniform prior on [0, 8]: the Gibbs posterior
``pi(theta) ∝ exp(-omega sum_i |y_i - theta|)`` on [0, 8]. The learning rate
omega sets the posterior's width; the one at which its credible intervals
have their nominal coverage is ``omega* = H / J = 2 f(m) = 0.6266`` (f the
Gamma(2, 1) density; ``docs/gibbs.md``), a closed form printed beside the
estimates.

The same posterior is calibrated by two routes, each on one learning-rate path
(``gibbs.calibrate_path``: every omega from 0 in one SMC sweep; GPC, Syring and
Martin's bootstrap calibration, as the root of the bootstrap coverage on the
path; the plug-in and Holmes-Walker rates and omega* marked on it):

1. ``template``: the shipped template, ``gibbs.location_program(y,
   loss="absolute", bounds=(0, 8))``;
2. ``own_program``: the same model as one Stan file a user writes
   (``OUT/stan/median.stan``, the contract of ``docs/your-own-model.md``;
   its data in ``OUT/stan/median_data.json``), bound by
   ``gibbs.LossProgram(file, data)``.

Both routes use the same bootstrap resamples (the same seed), so their GPC
roots, and their ``log Z_n`` at any omega, differ by the paths' Monte Carlo
errors only. Their plug-in rates differ by construction: the template knows
its loss is a function of the residuals and estimates the curvature ``2 f(m)``
with a Gaussian kernel of Silverman's bandwidth, while a program of yours gets
it from Stan's gradients by central differences over two standard errors
either side (a uniform kernel on fewer observations, noisier at this n).

Writes ``OUT/stan/``, ``quickstart.png`` (per route: the posterior mean and 95%
interval against omega with every rule's omega marked, and ``log Z_n(omega)``)
and ``summary.json``: ``omega_star``, ``median``, ``sample_median``, per route
(``template``, ``own_program``) ``omega`` (``gpc``, ``plugin``,
``holmes_walker``), ``omega_gpc_se``, ``converged``, ``estimate``,
``mean_at_gpc``, ``interval_at_gpc``, ``log_z_at_omega_star`` (with its
``log_z_se_at_omega_star``) and ``plugin`` (``H``, ``J``, ``bandwidth``,
``curvature``), and ``own_program.file``; ``gpc_difference_in_se`` (the two
roots' difference over its standard error) and ``seconds`` (building each
program, compiles included, and calibrating it; the two routes run side by
side, one core each). Each route's path is kept in ``path_<route>.nc``, and
each route is a cell of the workflow runner (:mod:`stanflow.experiment`), so a
rerun into the same folder reads them back. ``--quick``: 1000 particles
instead of 4000.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.experiment import Cell, CellRun, Experiment, Records, own_fields
from stanflow.gibbs import (
    LossProgram,
    PathSampler,
    calibrate_path,
    calibrate_plugin,
    location_program,
)
from stanflow.gibbs.path import plot_path, reweight
from stanflow.idata import load, save
from stanflow.workflows import main, save_figure, write_text

DESCRIPTION = (
    "Start here: the median of skewed data as a Gibbs posterior, its learning rate "
    "calibrated (GPC on the path, plug-in), from a template and from your own Stan file"
)

SEED = 20250101
N = 100
BOUNDS = (0.0, 8.0)
MEDIAN = 1.6783469900166608
"""The median of Gamma(2, 1): ``F(m) = 1 - exp(-m) (1 + m) = 1/2``."""
OMEGA_STAR = 2 * MEDIAN * math.exp(-MEDIAN)
"""``H / J = 2 f(m)`` for the absolute loss, ``f(m) = m exp(-m)``: 0.6266."""
SETTINGS = {
    "quick": {"B": 200, "particles": 1000, "moves": 3, "omega_max": 3.0},
    "full": {"B": 200, "particles": 4000, "moves": 3, "omega_max": 3.0},
}
"""Bootstrap resamples, the path's particles and moves per step, its largest omega."""
ROUTES = {"template": "the template (location_program)", "own_program": "your own Stan file"}

PROGRAM = """\
// The median of y as a Gibbs posterior: loss_i = |y[i] - theta|, uniform prior on [0, 8].
data {
  int<lower=1> N;
  vector[N] y;
  real<lower=0> omega;         // the learning rate: stanflow sets it
  vector<lower=0>[N] weights;  // one weight per observation: stanflow sets them
}
parameters {
  real<lower=0, upper=8> theta;
}
model {
  target += -omega * dot_product(weights, abs(y - theta));
  target += uniform_lpdf(theta | 0, 8);
}
"""


def simulate() -> np.ndarray:
    """The built-in data: ``N`` draws of Gamma(2, 1) from ``SEED``."""
    return np.random.default_rng(SEED).gamma(2.0, 1.0, size=N)


def write_program(folder: Path, y: np.ndarray) -> None:
    """The user's program and its data, written into ``folder`` (``OUT/stan``)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = {"N": len(y), "y": y.tolist()}
    write_text(folder / "median_data.json", json.dumps(data, indent=1) + "\n")
    write_text(folder / "median.stan", PROGRAM)


def own_program(stan_file: Path, data: dict[str, Any]) -> LossProgram:
    """The user's program, with the executable its path needs (NUTS draws of its prior)."""
    program = LossProgram(stan_file, data)
    program.model()
    return program


def timed(work: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``work(*args, **kwargs)`` and its wall seconds."""
    start = time.perf_counter()
    return work(*args, **kwargs), time.perf_counter() - start


def build_program(route: str, out: Path) -> LossProgram:
    """The route's program: the template on the data, or the user's file in ``OUT/stan``."""
    stan_file = out / "stan" / "median.stan"
    data = json.loads((out / "stan" / "median_data.json").read_text())
    if route == "template":
        return location_program(np.asarray(data["y"]), loss="absolute", bounds=BOUNDS)
    return own_program(stan_file, data)


def calibrate(program: LossProgram, settings: dict[str, Any], seed: int
              ) -> tuple[Results, dict[str, Any]]:
    """The path's calibration (GPC root, plug-in, Holmes-Walker, omega* marked) and its record."""
    result = calibrate_path(program, B=settings["B"], seed=seed, omega_max=settings["omega_max"],
                            sampler=PathSampler(n_particles=settings["particles"],
                                                n_moves=settings["moves"]),
                            marks={"omega_star": OMEGA_STAR})
    c = arviz_compat.group(result, "calibration")
    estimate = c["estimate"].values
    plugin = arviz_compat.group(calibrate_plugin(program, estimate=estimate), "calibration")
    at_star = reweight(arviz_compat.group(result, "path"), OMEGA_STAR)
    rates = c["rule_omega"]
    record = {
        "omega": {"gpc": float(c["omega"]), "plugin": float(rates.sel(rule="plugin")),
                  "holmes_walker": float(rates.sel(rule="holmes_walker"))},
        "omega_gpc_se": float(c["omega_se"]),
        "converged": bool(c["converged"]),
        "estimate": float(estimate[0]),
        "mean_at_gpc": float(c["rule_mean"].sel(rule="gpc_path")[0]),
        "interval_at_gpc": c["rule_interval"].sel(rule="gpc_path").values[:, 0].tolist(),
        "log_z_at_omega_star": at_star.log_z,
        "log_z_se_at_omega_star": at_star.log_z_se,
        "plugin": {"H": float(plugin["sensitivity"].values.squeeze()),
                   "J": float(plugin["variability"].values.squeeze()),
                   "bandwidth": float(plugin["bandwidth"].values[0]),
                   "curvature": str(plugin.attrs["curvature"])},
    }
    return result, record


def figure(results: dict[str, Results], out: Path) -> None:
    """Per route, the posterior against omega with the rules marked, and ``log Z_n``."""
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for row, (route, result) in zip(axes, results.items(), strict=True):
        plot_path(result, 0, row, truth=MEDIAN,
                  title=f"median of Gamma(2, 1), n = {N}: {ROUTES[route]}")
    fig.tight_layout()
    save_figure(fig, out / "quickstart.png")


def report(summary: dict[str, Any]) -> None:
    """The two routes side by side on stdout, omega* beside them."""
    print(f"omega* = 2 f(m) = {OMEGA_STAR:.4f} (closed form); median m = {MEDIAN:.4f}, "
          f"sample median {summary['sample_median']:.4f}")
    for route, label in ROUTES.items():
        r = summary[route]
        low, high = r["interval_at_gpc"]
        print(f"{label:>32}: GPC {r['omega']['gpc']:.4f} (se {r['omega_gpc_se']:.4f}), "
              f"plug-in {r['omega']['plugin']:.4f}, Holmes-Walker "
              f"{r['omega']['holmes_walker']:.4f}; at GPC's omega the median's 95% interval "
              f"is [{low:.3f}, {high:.3f}]")


def cells(settings: dict[str, Any]) -> list[Cell]:
    """One cell per route."""
    return [Cell(route, {"route": route, **settings}) for route in ROUTES]


def compute(run: CellRun) -> dict:
    """Build the route's program, calibrate it, keep the path in ``path_<route>.nc``."""
    route = run.params["route"]
    program, build_seconds = timed(build_program, route, run.out)
    (result, record), calibrate_seconds = timed(calibrate, program, run.settings, run.seed)
    save(result, run.out / f"path_{route}.nc")
    return record | {"seconds_program": build_seconds, "seconds_calibration": calibrate_seconds,
                     "files": [f"path_{route}.nc"]}


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """Both routes, omega* and the roots' difference over its standard error."""
    y = simulate()
    summary: dict[str, Any] = {
        route: {k: v for k, v in own_fields(records[route]).items()
                if k not in ("seconds_program", "seconds_calibration", "files")}
        for route in ROUTES}
    template, own = summary["template"], summary["own_program"]
    own["file"] = "stan/median.stan"
    summary |= {
        "omega_star": OMEGA_STAR,
        "median": MEDIAN,
        "sample_median": float(np.median(y)),
        "gpc_difference_in_se": abs(template["omega"]["gpc"] - own["omega"]["gpc"])
        / math.hypot(template["omega_gpc_se"], own["omega_gpc_se"]),
        "n": N,
        "seconds": {route: {"program": records[route]["seconds_program"],
                            "calibration": records[route]["seconds_calibration"]}
                    for route in ROUTES},
    }
    return summary


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``quickstart.png`` from both routes' paths."""
    figure({route: load(out / f"path_{route}.nc") for route in ROUTES}, out)


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, report=report, seed=SEED, jobs=2)


def run(out: Path, quick: bool) -> dict:
    """Write the user's Stan file and data, then both routes: build, calibrate, summarise."""
    write_program(out / "stan", simulate())
    return EXPERIMENT.run(out, quick)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
