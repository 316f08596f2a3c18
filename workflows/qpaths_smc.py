"""q-path SMC for Bayesian logistic regression on Pima and Sonar: error in log Z.

The SMC experiment of Masrani, Brekelmans et al. (UAI 2021), "q-Paths:
Generalizing the geometric annealing path using power means": predictors
scaled to mean 0 and sd 0.5, intercept, labels +-1, prior ``N(0, 5^2 I)``
(``stanflow.qpaths.logistic``, float32 kernel). SMC (``stanflow.qpaths.annealing.smc``,
random-walk moves) with 10^4 particles, ``M`` moves per temperature, the fixed
schedule of 10 linearly spaced temperatures and the adaptive schedule (ESS =
N/2), ``R`` independent runs of every path:

- ``geometric``: q = 1;
- ``heuristic``: ours (``stanflow.qpaths.choose_q.heuristic_q``), the largest
  ``delta`` whose first step of the fixed schedule (beta_1 = 1/9) keeps ESS =
  N/2, fitted once per dataset on fresh prior draws, used for both schedules;
- ``joint``: the authors' (``stanflow.qpaths.choose_q_joint.joint_heuristic``),
  ``delta = log10 max |log pi1 / pi0|`` with beta_1 from the same ESS target,
  fitted the same way;
- ``best_grid``: the q of the grid ``1 - q = logspace(-1, -5, 20)`` plus q = 1
  with the smallest median error in a cheaper pilot (1000 particles, M = 1,
  per dataset and schedule), then run at full size for every M.

Errors are ``|log Z_hat - log Z|`` per run, summarised by the median, the MAD
(median absolute deviation from the median, unscaled) and the range.
``log Z`` is a reference per dataset (``stanflow.qpaths.reference``):
geometric adaptive SMC runs with independence Metropolis-Hastings moves
(``stanflow.qpaths.independence``), then importance sampling from a Student-t
fitted to each run's final particles; the runs' estimates, with their
standard errors, are its own error. Pima is also checked against importance
sampling from a Laplace-fitted Student-t.

Every finished cell (reference, heuristics, pilot q, table entry) is kept in
``runs/`` with its per-run estimates (:mod:`stanflow.experiment`); a rerun into
the same folder takes the finished cells from it and computes only the rest.

``summary.json``: ``errors`` as ``dataset -> schedule -> M -> {geometric,
heuristic, joint, best_grid} -> {q, median, mad, min, max, median_signed,
temperatures, seconds_per_run}``, ``ratios`` (geometric over each other path's
median), ``log_z_truth`` and ``truth``, the heuristics, the pilot's median
errors and the settings. ``qpaths_smc.png``: median errors against ``1 - q``.
"""

from __future__ import annotations

import sys
import time
from functools import cache
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.qpaths.annealing import smc
from stanflow.qpaths.choose_q import heuristic_q, q_grid
from stanflow.qpaths.choose_q_joint import joint_heuristic
from stanflow.qpaths.independence import gaussian_independence_moves
from stanflow.qpaths.kernels import rwm_moves
from stanflow.qpaths.logistic import DATASETS, LogisticTarget, load_uci
from stanflow.qpaths.reference import reference_log_z
from stanflow.workflows import main, save_figure

DESCRIPTION = (
    "q-path SMC on Bayesian logistic regression (Pima, Sonar), 10^4 particles: error "
    "in log Z for the geometric path, our and the authors' heuristic q and the best grid q"
)

SEED = 20201214
N_TEMPERATURES = 10
PATHS = ("geometric", "heuristic", "joint", "best_grid")
SCHEDULES = ("fixed", "adaptive")
REFERENCE_LOG_Z = {"pima": -391.494, "sonar": -123.667}
REFERENCE_ERRORS = {  # paper, fixed schedule, M = 1: geometric vs best q
    "pima": {"geometric": 79.0, "best_q": 10.8},
    "sonar": {"geometric": 228.7, "best_q": 93.3},
}
SETTINGS = {
    "full": {
        "n_particles": 10_000,
        "n_runs": 5,
        "moves": [1, 3, 5],
        "kernel_dtype": "float32",
        "pilot": {"n_particles": 1000, "n_runs": 3, "n_moves": 1, "grid_size": 20},
        "truth": {
            "n_particles": 10_000,
            "n_moves": 10,
            "target_ess": 0.5,
            "n_runs": 2,
            "importance_draws": 200_000,
        },
        "heuristic_draws": 10_000,
        "heuristic_repeats": 5,
        "laplace_draws": 200_000,
    },
    "quick": {
        "n_particles": 100,
        "n_runs": 3,
        "moves": [1],
        "kernel_dtype": "float32",
        "pilot": {"n_particles": 100, "n_runs": 2, "n_moves": 1, "grid_size": 3},
        "truth": {
            "n_particles": 400,
            "n_moves": 2,
            "target_ess": 0.5,
            "n_runs": 2,
            "importance_draws": 5000,
        },
        "heuristic_draws": 100,
        "heuristic_repeats": 2,
        "laplace_draws": 20_000,
    },
}
"""Full and quick (``--quick``) settings. The full table (2 datasets x 2
schedules x 3 M x 4 paths x 5 runs of 10^4 particles) was sized from the
measured cost of one run on the loaded 2-core machine (Pima, fixed schedule,
M = 1: 3.7 s wall; Sonar: 6-10 s) to at most 90 minutes of wall time (the stored run: 61)."""


def cell_seed(*key: int) -> int:
    """A seed for one piece of work, from :data:`SEED` and integers naming it."""
    return int(np.random.SeedSequence([SEED, *key]).generate_state(1)[0])


def q_key(q: float) -> int:
    """The bits of ``q`` as an integer (a seed component that tells every q apart)."""
    return int(np.float64(q).view(np.uint64))


def smc_runs(
    target: LogisticTarget, q: float, schedule: np.ndarray | None, seed: int, **options
) -> dict:
    """``n_runs`` independent SMC runs: per-run log Z, temperatures, wall seconds per run."""
    start = time.perf_counter()
    group = smc(
        target.log_pi0,
        target.sample_pi0,
        target.log_pi1,
        q=q,
        schedule=schedule,
        seed=seed,
        moves=rwm_moves,
        **options,
    ).smc
    return {
        "log_z": group.log_z.values.tolist(),
        "temperatures": group.n_steps.values.tolist(),
        "seconds_per_run": (time.perf_counter() - start) / len(group.log_z),
        "acceptance": float(np.nanmean(group.acceptance.values)),
    }


def truth(target: LogisticTarget, settings: dict, index: int) -> dict:
    """Reference log Z: t importance sampling on the particles of geometric SMC runs."""
    options = dict(settings)
    return reference_log_z(
        target.log_pi0,
        target.sample_pi0,
        target.log_pi1,
        seed=cell_seed(0, index),
        n_draws=options.pop("importance_draws"),
        moves=gaussian_independence_moves,
        **options,
    )


def heuristics(target: LogisticTarget, settings: dict, index: int) -> dict:
    """Our and the authors' q on fresh prior draws; the first draw set is the one used."""
    ours, joint = [], []
    for repeat in range(settings["heuristic_repeats"]):
        rng = np.random.default_rng(cell_seed(2, index, repeat))
        draws = target.sample_pi0(rng, settings["heuristic_draws"])
        log_pi0, log_pi1 = target.log_pi0(draws), target.log_pi1(draws)
        ours.append(heuristic_q(log_pi0, log_pi1, 1 / (N_TEMPERATURES - 1)))
        joint.append(joint_heuristic(log_pi0, log_pi1)._asdict())
    deltas = [c["delta"] for c in joint]
    return {
        "heuristic_q": ours[0],
        "heuristic_q_repeats": ours,
        "joint": joint[0],
        "joint_delta_repeats": deltas,
        "joint_delta_range": [min(deltas), max(deltas)],
    }


def errors(log_z: list[float], truth_log_z: float) -> dict:
    """Median, MAD, range and median signed error of per-run estimates."""
    signed = np.asarray(log_z) - truth_log_z
    absolute = np.abs(signed)
    median = float(np.median(absolute))
    return {
        "median": median,
        "mad": float(np.median(np.abs(absolute - median))),
        "min": float(absolute.min()),
        "max": float(absolute.max()),
        "median_signed": float(np.median(signed)),
    }


def laplace_check(target: LogisticTarget, draws: int, index: int) -> dict:
    """``log Z`` by importance sampling from a Laplace-fitted Student-t (Pima's check)."""
    rng = np.random.default_rng(cell_seed(3, index))
    return dict(zip(("log_z", "se"), target.importance_log_z(rng, draws), strict=True))


@cache
def uci_target(name: str, kernel_dtype: str) -> LogisticTarget:
    """The logistic target of data set ``name`` (loaded once)."""
    return load_uci(name, kernel_dtype=kernel_dtype)


def cells(settings: dict[str, Any]) -> list[Cell]:
    """Per data set: reference, heuristics, the pilot grid and the table's entries."""
    grid = q_grid(settings["pilot"]["grid_size"])
    pilot = {k: v for k, v in settings["pilot"].items() if k != "grid_size"}
    full = {"n_particles": settings["n_particles"], "n_runs": settings["n_runs"]}
    declared = []
    for index, name in enumerate(DATASETS):
        uci_target(name, settings["kernel_dtype"])  # a missing data file fails before any work
        data = {"dataset": name, "index": index, "kernel_dtype": settings["kernel_dtype"]}
        declared.append(Cell(f"{name}/truth", data | {"truth": settings["truth"]}))
        if name == "pima":
            declared.append(Cell(f"{name}/importance", data | {"draws": settings["laplace_draws"]}))
        declared.append(Cell(f"{name}/heuristics", data | {
            key: settings[key] for key in ("heuristic_draws", "heuristic_repeats")}))
        for s_index, schedule in enumerate(SCHEDULES):
            runs = data | {"schedule": schedule, "s_index": s_index}
            pilots = [Cell(f"{name}/pilot/{schedule}/q-{i:02d}",
                           runs | {"path": "grid", "q": float(q), "options": pilot})
                      for i, q in enumerate(grid)]
            declared += pilots
            needs = {"geometric": (), "heuristic": (f"{name}/heuristics",),
                     "joint": (f"{name}/heuristics",),
                     "best_grid": (f"{name}/truth", *(c.name for c in pilots))}
            declared += [Cell(f"{name}/{schedule}/M={moves}/{path}",
                              runs | {"path": path, "options": full | {"n_moves": moves}},
                              needs=needs[path])
                         for moves in settings["moves"] for path in PATHS]
    return declared


def compute(run: CellRun) -> dict:
    """One cell: a reference, the heuristics, or one q's SMC runs."""
    params = run.params
    target = uci_target(params["dataset"], params["kernel_dtype"])
    index, last = params["index"], run.cell.name.rsplit("/", 1)[-1]
    if last == "truth":
        return truth(target, params["truth"], index)
    if last == "importance":
        return laplace_check(target, params["draws"], index)
    if last == "heuristics":
        return heuristics(target, params, index)
    schedule = np.linspace(0, 1, N_TEMPERATURES) if params["schedule"] == "fixed" else None
    if params["path"] == "grid":
        q, key = params["q"], (1, index, params["s_index"])
    else:
        q = path_q(params["path"], run.needed)
        key = (4, index, params["s_index"], params["options"]["n_moves"])
    runs = smc_runs(target, q, schedule, cell_seed(*key, q_key(q)), **params["options"])
    return {"q": q} | runs


def path_q(path: str, needed: Records) -> float:
    """The q of a table entry's ``path``, from the cells it needs."""
    if path == "geometric":
        return 1.0
    by_kind = {name.rsplit("/", 1)[-1]: record for name, record in needed.items()}
    if path == "heuristic":
        return float(by_kind["heuristics"]["heuristic_q"])
    if path == "joint":
        return float(by_kind["heuristics"]["joint"]["q"])
    pilots = [record for name, record in needed.items() if "/pilot/" in name]
    medians = [errors(r["log_z"], by_kind["truth"]["log_z"])["median"] for r in pilots]
    return float(pilots[int(np.argmin(medians))]["q"])


def summarise(settings: dict[str, Any], records: Records) -> dict:
    """Errors per data set, schedule, M and path; the references, heuristics and pilot errors."""
    summary: dict = {
        "errors": {}, "ratios": {}, "log_z_truth": {}, "truth": {},
        "importance_sampling": {}, "heuristics": {}, "pilot_median_errors": {},
        "q_grid": q_grid(settings["pilot"]["grid_size"]).tolist(),
        "reference_log_z": REFERENCE_LOG_Z,
        "reference_errors_fixed_m1": REFERENCE_ERRORS,
    }
    for name in DATASETS:
        reference = _fields(records[f"{name}/truth"])
        log_z = reference["log_z"]
        summary["log_z_truth"][name] = log_z
        summary["truth"][name] = reference | {"minus_paper": log_z - REFERENCE_LOG_Z[name]}
        if name == "pima":
            check = _fields(records[f"{name}/importance"])
            summary["importance_sampling"][name] = check | {"minus_truth": check["log_z"] - log_z}
        summary["heuristics"][name] = _fields(records[f"{name}/heuristics"])
        for schedule in SCHEDULES:
            pilots = [r for key, r in records.items() if key.startswith(f"{name}/pilot/{schedule}/")]
            summary["pilot_median_errors"].setdefault(name, {})[schedule] = [
                errors(r["log_z"], log_z)["median"] for r in pilots]
            for moves in settings["moves"]:
                row = {path: entry(records[f"{name}/{schedule}/M={moves}/{path}"], log_z)
                       for path in PATHS}
                summary["errors"].setdefault(name, {}).setdefault(schedule, {})[str(moves)] = row
                summary["ratios"].setdefault(name, {}).setdefault(schedule, {})[str(moves)] = {
                    path: row["geometric"]["median"] / row[path]["median"] for path in PATHS[1:]}
    return summary


def entry(record: dict, log_z: float) -> dict:
    """One path's table entry: its q, errors, median temperatures and seconds per run."""
    return ({"q": record["q"]} | errors(record["log_z"], log_z) | {
        "temperatures": float(np.median(record["temperatures"])),
        "seconds_per_run": record["seconds_per_run"]})


def _fields(record: dict) -> dict:
    """A cell's record without the configuration it was computed with."""
    return {k: v for k, v in record.items() if k != "config"}


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``qpaths_smc.png``."""
    _plot(summary, np.array(summary["q_grid"]), out / "qpaths_smc.png")


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, seed=SEED)


def run(out: Path, quick: bool) -> dict:
    """Reference log Z, heuristics, pilot grid, the table at full size, figure, summary."""
    return EXPERIMENT.run(out, quick)


def _plot(summary: dict, grid: np.ndarray, path: Path) -> None:
    datasets = list(summary["errors"])
    figure, axes = plt.subplots(
        len(datasets), len(SCHEDULES), figsize=(11, 4 * len(datasets)), squeeze=False
    )
    markers = {"heuristic": "*", "joint": "D", "best_grid": "o"}
    for row, name in enumerate(datasets):
        for col, schedule in enumerate(SCHEDULES):
            ax = axes[row, col]
            pilot = summary["pilot_median_errors"][name][schedule]
            ax.plot(
                1 - grid[:-1],
                pilot[:-1],
                "-",
                color="0.6",
                lw=1,
                label=f"pilot, N = {summary['settings']['pilot']['n_particles']}, M = 1",
            )
            ax.axhline(pilot[-1], color="0.6", ls=":", lw=1)
            cells = summary["errors"][name][schedule]
            for moves, colour in zip(cells, ("C0", "C1", "C2"), strict=False):
                ax.axhline(
                    cells[moves]["geometric"]["median"], color=colour, ls=":", lw=1
                )
                for key, marker in markers.items():
                    cell = cells[moves][key]
                    ax.plot(
                        max(1 - cell["q"], 1e-6),
                        cell["median"],
                        marker,
                        color=colour,
                        mec="k",
                        ms=8,
                        label=f"M = {moves}, {key}",
                    )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("1 - q")
            ax.set_ylabel("median |log Z_hat - log Z|")
            ax.set_title(
                f"{name}, {schedule} schedule, N = {summary['settings']['n_particles']}"
            )
            ax.legend(fontsize=6, ncol=2)
    figure.suptitle(
        "SMC error in log Z: dotted lines the geometric path (q = 1); star ours, "
        "diamond the authors' heuristic, circle the best pilot grid q"
    )
    figure.tight_layout()
    save_figure(figure, path)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
