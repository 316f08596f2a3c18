"""q-path SMC for Bayesian logistic regression on Pima and Sonar: error in log Z.

The SMC experiment of Masrani, Brekelmans et al. (UAI 2021), "q-Paths:
Generalizing the geometric annealing path using power means": predictors
scaled to mean 0 and sd 0.5, intercept, labels +-1, prior ``N(0, 5^2 I)`` (``stanflow.qpaths.logistic``). SMC
(``stanflow.qpaths.smc.smc``, random-walk moves) with ``M`` moves per
temperature, a fixed schedule of 10 linearly spaced temperatures and the
adaptive schedule (ESS = N/2), ``R`` independent runs for each path:

- ``geometric``: q = 1;
- ``heuristic``: the ESS heuristic (``stanflow.qpaths.choose_q.heuristic_q``),
  fitted once per dataset on fresh prior draws so that the first step of the
  fixed schedule (beta_1 = 1/9) keeps ESS = N/2; the same q is used with the
  adaptive schedule;
- ``best_grid``: the grid ``1 - q = logspace(-1, -5, 20)`` (plus q = 1), the q
  with the smallest median error (chosen with hindsight, as in the paper).

Errors are ``|log Z_hat - log Z|`` per run, summarised by the median and the
MAD (median absolute deviation from the median, unscaled). ``log Z`` is our
own long geometric SMC run (adaptive, ESS 0.8 N, many moves), checked against
importance sampling from a Laplace-fitted Student-t and the paper's values.

``summary.json``: ``errors`` as ``dataset -> schedule -> M -> {geometric,
heuristic, best_grid} -> {median, mad, q}``, ``log_z_truth`` and its checks,
``grid_median_errors`` (dataset -> schedule -> M -> list over ``q_grid``), the
settings. ``qpaths_smc.png``: median error against 1 - q; ``qpaths_smc.nc``:
the per-run estimates (group per dataset).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from stanflow.idata import save
from stanflow.qpaths.choose_q import heuristic_q, q_grid
from stanflow.qpaths.logistic import DATASETS, LogisticTarget, load_uci
from stanflow.qpaths.smc import smc
from stanflow.workflows import main, save_figure

DESCRIPTION = (
    "q-path SMC on Bayesian logistic regression (Pima, Sonar): error in log Z for "
    "the geometric path, the ESS heuristic q and the best grid q"
)

SEED = 20201214
N_TEMPERATURES = 10
REFERENCE_LOG_Z = {"pima": -391.494, "sonar": -123.667}
REFERENCE_ERRORS = {  # paper, fixed schedule, M = 1: geometric vs best q
    "pima": {"geometric": 79.0, "best_q": 10.8},
    "sonar": {"geometric": 228.7, "best_q": 93.3},
}
SETTINGS = {
    False: {
        "n_particles": 250,
        "n_runs": 10,
        "moves": (1, 3, 5),
        "grid": q_grid(),
        "truth": {"n_particles": 5000, "n_moves": 20, "target_ess": 0.8, "n_runs": 2},
        "importance_draws": 200_000,
    },
    True: {
        "n_particles": 100,
        "n_runs": 3,
        "moves": (1,),
        "grid": q_grid(3),
        "truth": {"n_particles": 400, "n_moves": 5, "target_ess": 0.5, "n_runs": 2},
        "importance_draws": 20_000,
    },
}
"""Full and quick (``--quick``) settings. The particle count of the full run is
what lets the whole grid (2 datasets x 2 schedules x 3 M x 22 paths x 10 runs)
finish in about 30 min of wall time (12.5 min CPU) on the shared 2-core machine."""


def truth(
    target: LogisticTarget, settings: dict, draws: int, rng: np.random.Generator
) -> dict:
    """Long geometric adaptive SMC run, with an importance-sampling check."""
    start = time.perf_counter()
    group = smc(
        target.log_pi0,
        target.sample_pi0,
        target.log_pi1,
        seed=int(rng.integers(2**31)),
        **settings,
    ).smc
    seconds = time.perf_counter() - start
    check, check_se = target.importance_log_z(rng, draws)
    return {
        "log_z": group.attrs["log_z"],
        "se": group.attrs["log_z_se"],
        "runs": group.log_z.values.tolist(),
        "seconds": seconds,
        "importance_sampling": {"log_z": check, "se": check_se},
    }


def errors_for(
    target: LogisticTarget,
    q: float,
    schedule: np.ndarray | None,
    moves: int,
    settings: dict,
    log_z: float,
    seed: int,
) -> np.ndarray:
    """``|log Z_hat - log Z|`` of ``n_runs`` independent SMC runs, shape (R,)."""
    group = smc(
        target.log_pi0,
        target.sample_pi0,
        target.log_pi1,
        q=q,
        n_particles=settings["n_particles"],
        n_moves=moves,
        schedule=schedule,
        n_runs=settings["n_runs"],
        seed=seed,
    ).smc
    return np.abs(group.log_z.values - log_z)


def median_mad(errors: np.ndarray) -> dict:
    median = float(np.median(errors))
    return {"median": median, "mad": float(np.median(np.abs(errors - median)))}


def run(out: Path, quick: bool) -> dict:
    """Truth, SMC errors on every path, figure, per-run estimates and summary."""
    targets = {name: load_uci(name) for name in DATASETS}  # fails before any work
    settings = SETTINGS[quick]
    grid = settings["grid"]
    schedules = {"fixed": np.linspace(0, 1, N_TEMPERATURES), "adaptive": None}
    rng = np.random.default_rng(SEED)
    summary: dict = {
        "errors": {},
        "grid_median_errors": {},
        "log_z_truth": {},
        "truth_checks": {},
        "heuristic_q": {},
        "q_grid": grid.tolist(),
        "n_particles": settings["n_particles"],
        "n_runs": settings["n_runs"],
        "moves": list(settings["moves"]),
        "truth_settings": settings["truth"],
        "reference_log_z": REFERENCE_LOG_Z,
        "reference_errors_fixed_m1": REFERENCE_ERRORS,
        "seconds": {},
    }
    groups = {}
    for name, target in targets.items():
        start = time.perf_counter()
        reference = truth(target, settings["truth"], settings["importance_draws"], rng)
        log_z = reference.pop("log_z")
        summary["log_z_truth"][name] = log_z
        summary["truth_checks"][name] = reference
        draws = target.sample_pi0(rng, settings["n_particles"])
        q_heuristic = heuristic_q(
            target.log_pi0(draws), target.log_pi1(draws), 1 / (N_TEMPERATURES - 1)
        )
        summary["heuristic_q"][name] = q_heuristic
        paths = np.append(grid, q_heuristic)
        table = np.zeros(
            (len(schedules), len(settings["moves"]), len(paths), settings["n_runs"])
        )
        for i, schedule in enumerate(schedules.values()):
            for j, moves in enumerate(settings["moves"]):
                for k, q in enumerate(paths):
                    table[i, j, k] = errors_for(
                        target,
                        q,
                        schedule,
                        moves,
                        settings,
                        log_z,
                        seed=int(rng.integers(2**31)),
                    )
        for i, schedule_name in enumerate(schedules):
            for j, moves in enumerate(settings["moves"]):
                medians = np.median(table[i, j, :-1], axis=1)
                best = int(np.argmin(medians))
                cell = {
                    "geometric": median_mad(table[i, j, len(grid) - 1]) | {"q": 1.0},
                    "heuristic": median_mad(table[i, j, -1]) | {"q": q_heuristic},
                    "best_grid": median_mad(table[i, j, best])
                    | {"q": float(grid[best])},
                }
                summary["errors"].setdefault(name, {}).setdefault(schedule_name, {})[
                    str(moves)
                ] = cell
                summary["grid_median_errors"].setdefault(name, {}).setdefault(
                    schedule_name, {}
                )[str(moves)] = medians.tolist()
        groups[name] = xr.Dataset(
            {"abs_error": (("schedule", "moves", "path", "run"), table)},
            coords={
                "schedule": list(schedules),
                "moves": list(settings["moves"]),
                "path": [f"q={q:.10g}" for q in grid] + ["heuristic"],
                "q": ("path", paths),
            },
            attrs={"log_z_truth": log_z},
        )
        summary["seconds"][name] = time.perf_counter() - start
    save(az.InferenceData(**groups), out / "qpaths_smc.nc")
    _plot(summary, grid, out / "qpaths_smc.png")
    return summary


def _plot(summary: dict, grid: np.ndarray, path: Path) -> None:
    datasets = list(summary["errors"])
    schedules = ("fixed", "adaptive")
    figure, axes = plt.subplots(
        len(datasets), len(schedules), figsize=(11, 4 * len(datasets)), squeeze=False
    )
    x = 1 - grid[:-1]
    for row, name in enumerate(datasets):
        for col, schedule in enumerate(schedules):
            ax = axes[row, col]
            cells = summary["errors"][name][schedule]
            for moves, colour in zip(cells, ("C0", "C1", "C2"), strict=False):
                medians = summary["grid_median_errors"][name][schedule][moves]
                ax.plot(x, medians[:-1], "o-", color=colour, ms=3, label=f"M = {moves}")
                ax.axhline(medians[-1], color=colour, ls=":", lw=1)
                ax.plot(
                    1 - cells[moves]["heuristic"]["q"],
                    cells[moves]["heuristic"]["median"],
                    "*",
                    color=colour,
                    ms=12,
                    mec="k",
                )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("1 - q")
            ax.set_ylabel("median |log Z_hat - log Z|")
            ax.set_title(f"{name}, {schedule} schedule, N = {summary['n_particles']}")
            ax.legend(fontsize=8)
    figure.suptitle(
        "SMC error in log Z: dots on the q grid, dotted lines the geometric path "
        "(q = 1), stars the heuristic q"
    )
    figure.tight_layout()
    save_figure(figure, path)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
