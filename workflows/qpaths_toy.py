"""q-paths between toy endpoints: intermediate densities and log Z by TI, AIS and SMC.

Two figures' worth of panels in ``qpaths_toy.png``:

- the normalised intermediate density ``pi_{beta,q}`` at ``beta = 0.5`` between
  ``N(-10, 1)`` and ``N(10, 1)``, and between Student-t (3 degrees of freedom)
  endpoints at -10 and 10, for the mixture (q = 0), q-paths in between and the
  geometric path (q = 1), computed exactly on a grid
  (``stanflow.qpaths.log_qpath``);
- the path at several beta for one intermediate q.

``qpaths_toy_moment_averaging.png`` (the q-paths paper's comparison with moment
averaging): between ``N(-4, 3)`` and ``N(4, 1)`` (variances; the endpoints of
the paper's toy code), the intermediate densities at several beta of the
mixture (q = 0), q-paths (q = 0.5, 0.9, 2), the geometric path (q = 1) and the
moment-averaging path of Grosse et al. (2013) in closed form
(``stanflow.qpaths.gaussian_moment_average``). Each q-path density is
normalised exactly on a fine grid; ``summary.json`` ``moment_averaging`` gives
the mean, variance and number of modes of every intermediate from that grid.

Then ``log Z`` of unnormalised Gaussian targets, with the exact value known:

- ``gauss1d``: base ``N(-10, 1)``, target ``exp(3) N(10, 1)`` (log Z = 3);
- ``gauss5d``: base ``N(0, I_5)``, target ``exp(-2) N(3, 0.5^2 I_5)`` (log Z = -2);

estimated by thermodynamic integration, AIS and adaptive SMC
(``stanflow.qpaths.annealing``) on the geometric path and a q-path. AIS runs on
the TI schedule (quick: 41 betas, 2 moves) or, in the full run, on it refined
twice (401 betas, 5 moves): AIS has no resampling, and on the coarse quick
schedule its estimate is biased low (``AIS_NOTE``, ``final_ess_fraction``).
Every estimate (problem, method, q) is a cell (:mod:`stanflow.experiment`),
kept with its run's diagnostics in ``runs/<problem>/<method>/q=<q>.json``; a
rerun into the same folder reads them back.
``summary.json``: ``log_z`` as ``problem -> method -> q -> {estimate, se,
error, seconds}`` (``seconds``: the cell's wall time), ``log_z_truth``,
``moment_averaging`` and the runner's ``settings``, ``seed`` and
``compute_seconds``; ``qpaths_toy.nc`` holds the SMC diagnostics (``smc``
group) of each run as groups ``<problem>_<method>_<q>``.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr
from scipy import stats

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.idata import save
from stanflow.qpaths import gaussian_moment_average, log_qpath
from stanflow.qpaths.annealing import ais, smc
from stanflow.qpaths.kernels import rwm_moves
from stanflow.qpaths.ti import thermodynamic_integration
from stanflow.workflows import main, save_figure

DESCRIPTION = (
    "q-paths between toy endpoints: intermediate densities (with the moment-averaging "
    "path), and log Z of Gaussian targets by TI, AIS and SMC against the exact value"
)

SEED = 20240611
SHOWN_Q = (0.0, 0.5, 0.9, 0.99, 0.999, 1.0)
PATH_Q = (1.0, 0.999)
MA_ENDPOINTS = ((-4.0, 3.0), (4.0, 1.0))
"""(mean, variance) of the base and target of the moment-averaging comparison, as
in the q-paths authors' toy code (``Gaussian1D(mean=-4.0, variance=3)`` and
``Gaussian1D(mean=4.0, variance=1)``)."""
MA_Q = (0.0, 0.5, 0.9, 1.0, 2.0)
MA_BETAS = (0.1, 0.25, 0.5, 0.75, 0.9)
MA_GRID = np.linspace(-30.0, 30.0, 12_001)
"""Grid of the exact normalisation; every intermediate is below 1e-10 of its peak
at the ends."""


def gaussian_problem(
    d: int, base: tuple[float, float], target: tuple[float, float], log_z: float
) -> dict:
    """Isotropic Gaussian base and ``exp(log_z)``-scaled Gaussian target in ``d``."""

    def log_pi0(z: np.ndarray) -> np.ndarray:
        return stats.norm.logpdf(z, *base).sum(axis=1)

    def sample_pi0(rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.normal(base[0], base[1], size=(n, d))

    def log_pi1(z: np.ndarray) -> np.ndarray:
        return log_z + stats.norm.logpdf(z, *target).sum(axis=1)

    return {"functions": (log_pi0, sample_pi0, log_pi1), "log_z": log_z}


PROBLEMS = {
    "gauss1d": gaussian_problem(1, (-10.0, 1.0), (10.0, 1.0), 3.0),
    "gauss5d": gaussian_problem(5, (0.0, 1.0), (3.0, 0.5), -2.0),
}
SCHEDULE_POWER = {"gauss1d": 1, "gauss5d": 3}
"""TI/AIS schedules ``linspace(0, 1, K)^power``: a shifted Gaussian moves linearly
in beta; a narrower target needs small steps near 0."""


AIS_NOTE = (
    "AIS has no resampling: with a coarse schedule and few moves the particles lag "
    "behind the moving intermediate density, the log weights spread out (final ESS "
    "a few % of N, see final_ess_fraction) and log(mean w) falls below log Z "
    "(Jensen; the delta-method se underestimates a heavy-tailed mean). Not a bug: "
    "the bias vanishes with finer schedules and more moves (docs/qpaths.md)."
)


SETTINGS = {
    # AIS needs a finer schedule and more moves than TI (see AIS_NOTE).
    "quick": {"particles": 300, "betas": 41, "ti_draws": 20, "ais_refine": 1, "ais_moves": 2},
    "full": {"particles": 2000, "betas": 201, "ti_draws": 100, "ais_refine": 2, "ais_moves": 5},
}
METHODS = {"ti": ("betas", "ti_draws"), "ais": ("betas", "ais_refine", "ais_moves"), "smc": ()}
"""The estimators and the settings each depends on (besides ``particles``)."""


def cell_name(problem: str, method: str, q: float) -> str:
    """The cell of one estimate: ``"<problem>/<method>/q=<q>"``."""
    return f"{problem}/{method}/q={q:g}"


def cells(settings: Mapping[str, Any]) -> list[Cell]:
    """One cell per problem, method and q."""
    return [
        Cell(cell_name(problem, method, q),
             {"problem": problem, "method": method, "q": q, "particles": settings["particles"]}
             | {key: settings[key] for key in keys})
        for problem in PROBLEMS for method, keys in METHODS.items() for q in PATH_Q
    ]


def estimator(params: Mapping[str, Any], seed: int) -> Results:
    """The run of the cell's method (TI, AIS on the refined schedule, or adaptive SMC)."""
    functions, q, n = PROBLEMS[params["problem"]]["functions"], params["q"], params["particles"]
    if params["method"] == "smc":  # adaptive: no schedule
        return smc(*functions, q=q, n_particles=n, n_moves=5, moves=rwm_moves, n_runs=4, seed=seed)
    schedule = np.linspace(0, 1, params["betas"]) ** SCHEDULE_POWER[params["problem"]]
    if params["method"] == "ti":
        return thermodynamic_integration(*functions, schedule, q=q, chains=n // 4, warmup=10,
                                         draws=params["ti_draws"], seed=seed)
    return ais(*functions, _refine(schedule, params["ais_refine"]), q=q, n_particles=n,
               n_moves=params["ais_moves"], moves=rwm_moves, n_runs=4, seed=seed)


def compute(run: CellRun) -> dict:
    """One estimate of log Z, its error against the truth and the run's diagnostics."""
    group = arviz_compat.group(estimator(run.params, run.seed), "smc")
    estimate = group.attrs["log_z"]
    record = {
        "estimate": estimate,
        "se": group.attrs["log_z_se"],
        "error": estimate - PROBLEMS[run.params["problem"]]["log_z"],
        "diagnostics": group.to_dict(data="list"),
    }
    if run.params["method"] == "ais":
        record["final_ess_fraction"] = float(np.mean(group.ess.values[:, -1]) / run.params["particles"])
    return record


def summarise(settings: Mapping[str, Any], records: Records) -> dict:
    """The log Z table, the truths and the moment-averaging comparison."""
    table: dict = {}
    for problem, method, q in itertools.product(PROBLEMS, METHODS, PATH_Q):
        record = records[cell_name(problem, method, q)]
        table.setdefault(problem, {}).setdefault(method, {})[f"{q:g}"] = {
            key: record[key] for key in ("estimate", "se", "error", "seconds", "final_ess_fraction")
            if key in record
        }
    return {
        "log_z_truth": {name: spec["log_z"] for name, spec in PROBLEMS.items()},
        "log_z": table,
        "q_values": list(PATH_Q),
        "moment_averaging": moment_averaging_summary(MA_GRID, intermediate_densities(MA_GRID)),
        "ais_note": AIS_NOTE,
        "error_estimates": (
            "SMC/AIS: delta-method standard error of the pooled Z over 4 independent "
            "runs; TI: Monte Carlo error and |T_K - T_K/2| in quadrature"
        ),
    }


def figures(out: Path, summary: Mapping[str, Any], records: Records) -> None:
    """``qpaths_toy.png``, ``qpaths_toy_moment_averaging.png`` and the diagnostics, ``qpaths_toy.nc``."""
    figure = plt.figure(figsize=(17, 4.8))
    _plot(figure)
    save_figure(figure, out / "qpaths_toy.png")
    figure = plt.figure(figsize=(20, 3.8))
    _plot_moment_averaging(figure, MA_GRID, intermediate_densities(MA_GRID))
    save_figure(figure, out / "qpaths_toy_moment_averaging.png")
    groups = {f"{problem}_{method}_{q:g}":
              xr.Dataset.from_dict(records[cell_name(problem, method, q)]["diagnostics"])
              for problem, method, q in itertools.product(PROBLEMS, METHODS, PATH_Q)}
    save(arviz_compat.build(groups), out / "qpaths_toy.nc")


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, seed=SEED)


def run(out: Path, quick: bool) -> dict:
    """Estimate log Z (resumed from ``out/runs``), plot the paths, save diagnostics, summarise."""
    return EXPERIMENT.run(out, quick)


def _refine(schedule: np.ndarray, factor: int) -> np.ndarray:
    """``factor - 1`` equally spaced betas inserted in every interval of ``schedule``."""
    if factor == 1:
        return schedule
    fine = [np.linspace(a, b, factor + 1)[:-1] for a, b in itertools.pairwise(schedule)]
    return np.append(np.concatenate(fine), schedule[-1])


def _student_t(x: np.ndarray, loc: float) -> np.ndarray:
    return stats.t.logpdf(x, 3, loc=loc)


def _plot(figure: plt.Figure) -> None:
    x = np.linspace(-20, 20, 4001)
    endpoints = {
        "N(-10, 1) to N(10, 1)": (stats.norm.logpdf(x, -10), stats.norm.logpdf(x, 10)),
        "t3(-10) to t3(10)": (_student_t(x, -10.0), _student_t(x, 10.0)),
    }
    axes = figure.subplots(1, 3)
    colours = plt.cm.viridis(np.linspace(0, 0.9, len(SHOWN_Q)))
    for ax, (title, (lp0, lp1)) in zip(axes[:2], endpoints.items(), strict=True):
        ax.plot(x, np.exp(lp0), color="0.6", ls=":", lw=1, label="endpoints")
        ax.plot(x, np.exp(lp1), color="0.6", ls=":", lw=1)
        for q, colour in zip(SHOWN_Q, colours, strict=True):
            density = np.exp(log_qpath(lp0, lp1, 0.5, q))
            density /= np.trapezoid(density, x)
            name = {0.0: "q = 0 (mixture)", 1.0: "q = 1 (geometric)"}.get(
                q, f"q = {q:g}"
            )
            ax.plot(x, density, color=colour, lw=1.8, label=name)
        ax.set_title(f"{title}, beta = 0.5")
        ax.set_xlabel("z")
        ax.set_ylabel("normalised density")
    axes[0].legend(fontsize=8, loc="upper left")
    lp0, lp1 = endpoints["N(-10, 1) to N(10, 1)"]
    betas = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
    for beta, colour in zip(
        betas, plt.cm.plasma(np.linspace(0, 0.9, len(betas))), strict=True
    ):
        density = np.exp(log_qpath(lp0, lp1, beta, 0.99))
        density /= np.trapezoid(density, x)
        axes[2].plot(x, density, color=colour, lw=1.6, label=f"beta = {beta:g}")
    axes[2].set_title("N(-10, 1) to N(10, 1), q = 0.99")
    axes[2].set_xlabel("z")
    axes[2].legend(fontsize=8)


def intermediate_densities(x: np.ndarray) -> dict[str, np.ndarray]:
    """Normalised densities on ``x`` of every compared path at ``MA_BETAS``.

    Keys ``q=<q>`` (q-paths by :func:`log_qpath`, normalised by the trapezoid
    rule on ``x``) and ``moment_averaging`` (the closed-form Gaussian); values
    of shape ``(len(MA_BETAS), len(x))``.
    """
    (mean0, var0), (mean1, var1) = MA_ENDPOINTS
    lp0 = stats.norm.logpdf(x, mean0, np.sqrt(var0))
    lp1 = stats.norm.logpdf(x, mean1, np.sqrt(var1))
    betas = np.asarray(MA_BETAS)[:, None]
    paths = {}
    for q in MA_Q:
        log_density = log_qpath(lp0, lp1, betas, q)
        density = np.exp(log_density - log_density.max(axis=1, keepdims=True))
        paths[f"q={q:g}"] = density / np.trapezoid(density, x, axis=1)[:, None]
    mean, var = gaussian_moment_average(mean0, var0, mean1, var1, betas)
    paths["moment_averaging"] = stats.norm.pdf(x, mean, np.sqrt(var))
    return paths


def moment_averaging_summary(x: np.ndarray, paths: dict[str, np.ndarray]) -> dict:
    """Grid moments and mode counts of every intermediate, and the closed form."""
    (mean0, var0), (mean1, var1) = MA_ENDPOINTS
    table = {}
    for name, density in paths.items():
        mean = np.trapezoid(density * x, x, axis=1)
        var = np.trapezoid(density * (x - mean[:, None]) ** 2, x, axis=1)
        table[name] = {"mean": mean, "variance": var, "n_modes": _n_modes(density)}
    closed_mean, closed_var = gaussian_moment_average(
        mean0, var0, mean1, var1, np.asarray(MA_BETAS)
    )
    mixture = table["q=0"]
    return {
        "endpoints": {
            "base": {"mean": mean0, "variance": var0},
            "target": {"mean": mean1, "variance": var1},
        },
        "beta": list(MA_BETAS),
        "paths": table,
        "path_names": {"q=0": "mixture", "q=1": "geometric"},
        "moment_averaging_closed_form": {"mean": closed_mean, "variance": closed_var},
        "mixture_minus_moment_averaging": {
            "max_abs_mean": float(np.max(np.abs(mixture["mean"] - closed_mean))),
            "max_abs_variance": float(np.max(np.abs(mixture["variance"] - closed_var))),
        },
    }


def _n_modes(density: np.ndarray) -> list[int]:
    """Local maxima per row above 1e-3 of the row's peak (ignores grid ripples)."""
    inner = density[:, 1:-1]
    peak = (inner > density[:, :-2]) & (inner >= density[:, 2:])
    high = inner > 1e-3 * density.max(axis=1, keepdims=True)
    return (peak & high).sum(axis=1).tolist()


def _plot_moment_averaging(
    figure: plt.Figure, x: np.ndarray, paths: dict[str, np.ndarray]
) -> None:
    (mean0, var0), (mean1, var1) = MA_ENDPOINTS
    axes = figure.subplots(1, len(paths))
    colours = plt.cm.plasma(np.linspace(0.05, 0.85, len(MA_BETAS)))
    shown = (x >= -12) & (x <= 10)
    titles = {"q=0": "q = 0 (mixture)", "q=1": "q = 1 (geometric)",
              "moment_averaging": "moment averaging"}
    for ax, (name, density) in zip(axes, paths.items(), strict=True):
        for mean, var in ((mean0, var0), (mean1, var1)):
            ax.plot(x[shown], stats.norm.pdf(x[shown], mean, np.sqrt(var)),
                    color="0.6", ls=":", lw=1)
        for row, beta, colour in zip(density, MA_BETAS, colours, strict=True):
            ax.plot(x[shown], row[shown], color=colour, lw=1.6, label=f"beta = {beta:g}")
        ax.set_title(titles.get(name, name.replace("=", " = ")))
        ax.set_xlabel("z")
    axes[0].set_ylabel("normalised density")
    axes[0].legend(fontsize=8, loc="upper left")
    figure.suptitle(
        f"N({mean0:g}, {var0:g}) to N({mean1:g}, {var1:g}) (variances): "
        "intermediate densities per path"
    )


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
