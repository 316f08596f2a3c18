"""Loss-calibrated VI for probabilistic matrix factorisation of Last.fm counts: test risk of LCVI vs VI.

``Y = log(1 + C)`` for all 992 users and the first 100 artists of
``$STANFLOW_DATA_DIR/lastfm/lastfm_counts_992x1003.csv``;
``Y[i, j] ~ N((U V')[i, j], noise_sd^2)``, ``K = 20``, ``N(0, prior_sd^2)``
priors on all entries of ``U`` and ``V``. The training and test cells are the
authors' split (:func:`stanflow.lcvi.mf.reference_split`), so the test risks
compare with their published ones (``data/lcvi_mf_reference.json``); the seeds
vary the ADVI trajectory, as theirs varied the initialisation.

Two settings of the model and utility (:data:`MODELS`), each run in full:

- ``code``: the authors' code, which made the published risks: likelihood sd 1
  (about 0.57 of the sd of ``Y``), prior sd 10, utility ``exp(-gamma l)`` with
  ``gamma = 1 / M90``;
- ``text``: the paper's text: all sigma = 10 (likelihood and priors), utility
  ``M - l`` with ``M = M90``; the matrix is the data's 992 users (the text
  says 1000 x 100).

Per seed and setting, one plain mean-field ADVI run of 30000 iterations (one
gradient sample, ``eta`` adapted) is shared by the four losses (check, the
paper's tilted, with tau = 0.2, 0.5, 0.8; squared): for each, LCVI branches
off it after 15000 iterations and runs the remaining 15000 with the utility
term, taking the Bayes decisions every 1500 iterations
(:func:`stanflow.lcvi.run_lcvi`). The linearised estimator (``-gamma mean_s l``
or ``-mean_s l / M``) on ``S = 2`` stratified outcome samples per draw, which
is what the authors' naive estimator with one outcome sample per draw
computes. The decisions are for the training cells; the risk that counts is
the empirical risk on the test cells at the Bayes decisions of each fitted
``q`` (200 draws of the state, the noise integrated out);
``risk_reduction_pct = 100 (risk_vi - risk_lcvi) / risk_vi``.

``--quick``: the first 200 users x 30 artists (the same rule for the split),
``K = 5``, 2 seeds, 2000 ADVI iterations branching at 1000.

Seed ``r`` of the run (``r = 0, 1, ...``) is ``SEED + r = 1, 2, ...``, given to
the loop as is. Every setting and seed (its plain VI and the four losses'
LCVI) is a cell of an experiment (:mod:`stanflow.experiment`), kept in
``runs/<setting>/seed-<seed>.json`` when done: a rerun into the same folder
continues with the cells not kept; two run at a time. The first cell (code
setting, first seed) writes ``lcvi_mf.nc`` (its LCVI fit for the first loss,
with its ``decisions`` group) and ``decision_shift.png`` (LCVI minus VI test
decisions against the VI decisions: every test cell, more than its record
keeps), and its record keeps what the paper's Fig. 3 needs.

Writes, besides, ``reductions.png`` (reduction per loss, both settings, with
the reference), ``risks.png`` (test risks of VI and LCVI, ours and, for the
full problem, the reference's), the paper's Fig. 3 middle and right:
``intervals.png`` (90 % predictive intervals of VI and LCVI with their
decisions and the observed value, for 12 test cells drawn at random, first
seed) and ``user_shifts.png`` (the distribution over users of each user's
mean decision shift, LCVI minus VI, on their test cells, first seed) (all but
``reductions.png`` for the code setting), and ``summary.json``: for the code
setting ``risk_reduction_pct`` (loss -> ``mean``, ``sd``), ``n_seeds``,
``seeds`` (the seeds given to the loop), ``test_risk`` (loss -> VI and LCVI
mean and sd, ours and the reference's), ``user_mean_shift`` (loss -> mean, sd
and 5/50/95 % quantiles over users), ``interval_width`` (loss -> mean 90 %
width of VI and LCVI over the 12 cells), ``utility_scale_M90`` (loss ->
``gamma`` mean and sd over seeds), ``advi_seconds`` (ADVI seconds in the
records, summed), ``runs``; for the text setting ``text`` (its
``risk_reduction_pct``, ``test_risk``, ``utility_scale_M90`` (``M``),
``advi_seconds``, ``runs``); and the runner's ``settings`` (sizes, seeds and
the two settings: name -> sds, utility, source), ``seed`` (:data:`SEED`) and
``compute_seconds`` (every cell's wall seconds, both settings). Without the
data file the first cells stop at once, naming the file and where it comes
from.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.idata import save
from stanflow.lcvi import Loop, Step, Utility, empirical_risk, run_lcvi, to_idata
from stanflow.lcvi.mf import (
    Split,
    cell_locations,
    load_lastfm,
    matrix_factorisation,
    reference_split,
    reference_test_risks,
)
from stanflow.losses import BoundLoss, bound_loss, mixture_quantile
from stanflow.workflows import main, save_figure

DESCRIPTION = (
    "Loss-calibrated VI for matrix factorisation of Last.fm counts "
    "(check tau=0.2/0.5/0.8, squared): test risk of LCVI vs VI"
)

SEED = 1
"""The experiment's seed: the run's seed ``r = 0, 1, ...`` is ``SEED + r``."""
# Keys are the paper's experiment labels (its "tilted" loss is stanflow's check loss).
LOSSES = {
    "tilted_0.2": ("check", {"tau": 0.2}),
    "tilted_0.5": ("check", {"tau": 0.5}),
    "tilted_0.8": ("check", {"tau": 0.8}),
    "squared": ("squared", {}),
}
INTERVAL_CELLS = 12  # test cells shown with their predictive intervals (Fig. 3 middle)
INTERVAL = (0.05, 0.95)

MODELS = {
    "code": {
        "noise_sd": 1.0,
        "prior_sd": 10.0,
        "utility": "exp",
        "source": "the authors' code, which made the published risks: likelihood sd 1, "
        "prior sd 10, u = exp(-gamma l) with gamma = 1 / M90",
    },
    "text": {
        "noise_sd": 10.0,
        "prior_sd": 10.0,
        "utility": "linear",
        "source": "the paper's text: all sigma = 10 (likelihood and priors), u = M - l "
        "with M = M90; the matrix is the data's 992 users (the text rounds to 1000)",
    },
}
"""The two settings: the model's standard deviations and the utility (``"exp"``:
``exp(-gamma l)``, ``gamma = 1 / M90``; ``"linear"``: ``M - l``, ``M = M90``)."""

SETTINGS = {
    "quick": {"shape": [200, 30], "K": 5, "iter": 2000, "seeds": 2, **MODELS},
    "full": {"shape": [992, 100], "K": 20, "iter": 30_000, "seeds": 5, **MODELS},
}


class Data(NamedTuple):
    """A cell's data: the matrix, its split, the rank and the test cells shown with intervals."""

    Y: np.ndarray
    split: Split
    K: int
    shown: np.ndarray  # indices into the test cells

    @property
    def shape(self) -> tuple[int, int, int]:
        """Users, artists and the rank."""
        return (*self.Y.shape, self.K)

    @property
    def y_test(self) -> np.ndarray:
        """The observed values of the test cells."""
        return self.Y[self.split.test_rows, self.split.test_cols]


def cells(settings: dict[str, Any]) -> list[Cell]:
    """One cell per setting and seed, the code's setting first."""
    load_lastfm(1)  # missing data are named before any work
    fitted = {key: settings[key] for key in ("shape", "K", "iter")}
    return [
        Cell(f"{name}/seed-{SEED + r}", fitted | {"setting": name, "model": settings[name], "r": r})
        for name in MODELS
        for r in range(settings["seeds"])
    ]


def compute(run: CellRun) -> dict:
    """Plain VI once and LCVI per loss for one setting and seed.

    The first cell (code setting, first seed) also writes ``lcvi_mf.nc`` and
    ``decision_shift.png`` into ``OUT`` and keeps what Fig. 3 needs.
    """
    out, params, model = run.out, run.params, run.params["model"]
    data = load_data(params["shape"], params["K"])
    problem = matrix_factorisation(
        data.Y, data.split, K=data.K, prior_sd=model["prior_sd"], noise_sd=model["noise_sd"]
    )
    seed = run.seed + params["r"]
    first = params["setting"] == "code" and params["r"] == 0
    losses, kept, vi = {}, {}, None
    with tempfile.TemporaryDirectory(prefix=f"stanflow-lcvi-mf-{seed}-") as tmp:
        for name, (family, loss_params) in LOSSES.items():
            loss = bound_loss(family, **loss_params)
            loop = run_lcvi(
                problem,
                loss,
                utility=Utility(kind=model["utility"], estimator="linearised", n_outcomes=2),
                n_draws=200,
                decision_every=params["iter"] // 20,
                seed=seed,
                advi_args=advi_args(params["iter"]),
                out_dir=Path(tmp) / name,
                vi=vi,
            )
            vi = loop.vi
            (h_vi, interval_vi), (h_lcvi, interval_lcvi) = (
                decisions_and_intervals(data, loop, step, loss, model["noise_sd"])
                for step in (loop.baseline, loop.steps[-1])
            )
            losses[name] = loss_record(
                loop, seed, empirical_risk(data.y_test, h_vi, loss),
                empirical_risk(data.y_test, h_lcvi, loss),
            )
            if first:
                if name == next(iter(LOSSES)):
                    save(to_idata(problem, loop), out / "lcvi_mf.nc")
                kept[name] = {"vi": h_vi, "lcvi": h_lcvi, "interval_vi": interval_vi,
                              "interval_lcvi": interval_lcvi}
    if not first:
        return {"losses": losses}
    return {"losses": losses, "first_seed": first_seed(out, data, kept),
            "files": ["lcvi_mf.nc", "decision_shift.png"]}


def first_seed(out: Path, data: Data, kept: dict[str, dict]) -> dict:
    """``decision_shift.png`` from every test cell's decisions; what Fig. 3 needs of them.

    ``kept``: per loss the test decisions of VI and LCVI and the shown cells'
    intervals.
    """
    _plot_shift(kept, out / "decision_shift.png")
    return {
        "interval_cells": data.shown,
        "observed": data.y_test[data.shown],
        "losses": {
            name: {
                "user_shifts": user_mean_shift(h["lcvi"] - h["vi"], data.split.test_rows),
                "interval_vi": h["interval_vi"],
                "interval_lcvi": h["interval_lcvi"],
                "decision_vi": h["vi"][data.shown],
                "decision_lcvi": h["lcvi"][data.shown],
            }
            for name, h in kept.items()
        },
    }


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """The code setting's risks, shifts and widths beside the reference; the text's risks."""
    seeds = [SEED + r for r in range(settings["seeds"])]
    results, text_results = (setting_runs(records, name, seeds) for name in MODELS)
    ours, text = _risks(results), _risks(text_results)
    published = reference_test_risks(LOSSES)
    first = records[f"code/seed-{SEED}"]["first_seed"]
    n_iter = settings["iter"]
    return {
        "setting": "code",
        "risk_reduction_pct": {name: ours[name]["reduction_pct"] for name in LOSSES},
        "n_seeds": len(seeds),
        "seeds": seeds,
        "test_risk": {
            name: {"stanflow": ours[name], "reference": published[name]}
            for name in LOSSES
        },
        "reference_risk_reduction_pct": {
            name: published[name]["reduction_pct"] for name in LOSSES
        },
        "user_mean_shift": {
            name: _spread(np.asarray(kept["user_shifts"]))
            for name, kept in first["losses"].items()
        },
        "interval_width": {
            name: {
                method: float(np.mean(np.diff(kept[f"interval_{method}"], axis=0)))
                for method in ("vi", "lcvi")
            }
            for name, kept in first["losses"].items()
        },
        "interval_cells": first["interval_cells"],
        "utility_scale_M90": _scales(results),
        "advi_seconds": _advi_seconds(results),
        "runs": results,
        "text": {
            "setting": "text",
            "risk_reduction_pct": {name: text[name]["reduction_pct"] for name in LOSSES},
            "test_risk": text,
            "utility_scale_M90": _scales(text_results),
            "advi_seconds": _advi_seconds(text_results),
            "runs": text_results,
        },
        "shape": settings["shape"],
        "K": settings["K"],
        "noise_sd": settings["code"]["noise_sd"],
        "prior_sd": settings["code"]["prior_sd"],
        "advi": advi_args(n_iter) | {"branch_iter": n_iter // 2, "decision_every": n_iter // 20},
        "quick": settings == SETTINGS["quick"],
    }


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``reductions.png``, ``risks.png``, ``user_shifts.png`` and ``intervals.png``."""
    published = {name: summary["test_risk"][name]["reference"] for name in LOSSES}
    _plot_reductions(summary["runs"], summary["text"]["runs"], published, out / "reductions.png")
    ours = {name: summary["test_risk"][name]["stanflow"] for name in LOSSES}
    # the published risks are of the full 992 x 100 problem only
    _plot_risks(ours, None if summary["quick"] else published, out / "risks.png")
    first = records[f"code/seed-{SEED}"]["first_seed"]
    _plot_user_shifts(
        {name: kept["user_shifts"] for name, kept in first["losses"].items()},
        out / "user_shifts.png",
    )
    _plot_intervals(first, out / "intervals.png")


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, seed=SEED, jobs=None)


def run(out: Path, quick: bool) -> dict:
    """VI once and LCVI per loss for each setting and seed (resumed from ``out/runs``); figures."""
    return EXPERIMENT.run(out, quick)


def load_data(shape: list[int], K: int) -> Data:
    """The first ``shape[0]`` users x ``shape[1]`` artists, the authors' split and the shown cells."""
    users, artists = shape
    Y = load_lastfm(artists)[:users]  # stops at once, naming the file, without the data
    split = reference_split(Y.shape)
    shown = np.random.default_rng(0).choice(split.test_rows.size, INTERVAL_CELLS, replace=False)
    return Data(Y, split, K, np.sort(shown))


def advi_args(n_iter: int) -> dict[str, int]:
    """The ADVI settings of every run: ``n_iter`` iterations of one gradient sample."""
    return {"iter": n_iter, "grad_samples": 1, "output_samples": 20}


def decisions_and_intervals(
    data: Data, loop: Loop, step: Step, loss: BoundLoss, noise_sd: float
) -> tuple[np.ndarray, np.ndarray]:
    """A step's test-cell decisions, and the 90 % predictive intervals of the shown cells."""
    z = step.state.draws(loop.eps_theta)
    loc = cell_locations(z, data.shape, data.split.test_rows, data.split.test_cols)
    h = loss.mixture_decision(loc, np.full(data.y_test.size, noise_sd))
    sd = np.full(data.shown.size, noise_sd)
    interval = np.stack([mixture_quantile(loc[:, data.shown], sd, p) for p in INTERVAL])
    return h, interval


def loss_record(loop: Loop, seed: int, risk_vi: float, risk_lcvi: float) -> dict:
    """One loss of a seed: test and training risks, the utility's scale, the loop's details."""
    return {
        "seed": seed,
        "risk_vi": risk_vi,
        "risk_lcvi": risk_lcvi,
        "reduction_pct": 100 * (risk_vi - risk_lcvi) / risk_vi,
        "train_risk_vi": loop.baseline.risk,
        "train_risk_lcvi": loop.steps[-1].risk,
        "utility_scale": loop.utility.scale,
        "lcvi_blocks": len(loop.steps) - 1,
        "advi_iterations": loop.steps[-1].state.iteration,
        "settled": loop.settled,
        "seconds_vi": loop.vi.seconds,
        "seconds_lcvi": sum(step.seconds for step in loop.steps[1:]),
        "eta": loop.args["eta"],
    }


def setting_runs(records: Records, setting: str, seeds: list[int]) -> dict[str, list[dict]]:
    """Per loss, the records of one setting's seeds."""
    return {
        name: [records[f"{setting}/seed-{seed}"]["losses"][name] for seed in seeds]
        for name in LOSSES
    }


def _scales(results: dict[str, list[dict]]) -> dict:
    """Per loss: the utility's scale (``gamma`` or ``M`` from M90), mean and sd over seeds."""
    return {
        name: _mean_sd([r["utility_scale"] for r in runs]) for name, runs in results.items()
    }


def _advi_seconds(results: dict[str, list[dict]]) -> float:
    """Seconds of ADVI in the records: each seed's shared plain VI once, every LCVI part."""
    plain = {r["seed"]: r["seconds_vi"] for runs in results.values() for r in runs}
    return float(
        sum(plain.values()) + sum(r["seconds_lcvi"] for runs in results.values() for r in runs)
    )


def _risks(results: dict[str, list[dict]]) -> dict:
    """Per loss: VI and LCVI test risk and the reduction, mean and sd over seeds."""
    return {
        name: {
            "vi": _mean_sd([r["risk_vi"] for r in runs]),
            "lcvi": _mean_sd([r["risk_lcvi"] for r in runs]),
            "reduction_pct": _mean_sd([r["reduction_pct"] for r in runs]),
        }
        for name, runs in results.items()
    }


def user_mean_shift(shift: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Each user's mean of ``shift`` over their cells (users with none left out).

    Parameters
    ----------
    shift : ndarray, shape (n,)
        One value per cell.
    rows : ndarray of int, shape (n,)
        The user (row) of each cell.

    Returns
    -------
    ndarray, shape (number of users with a cell,)
    """
    counts = np.bincount(rows)
    sums = np.bincount(rows, weights=shift)
    has = counts > 0
    return sums[has] / counts[has]


def _spread(values: np.ndarray) -> dict:
    q05, q50, q95 = np.quantile(values, [0.05, 0.5, 0.95])
    return _mean_sd(values) | {"q05": float(q05), "q50": float(q50), "q95": float(q95)}


def _mean_sd(values) -> dict:
    values = np.asarray(values, dtype=float)
    sd = float(values.std(ddof=1)) if values.size > 1 else 0.0
    return {"mean": float(values.mean()), "sd": sd}


def _plot_reductions(
    results: dict, text_results: dict, published: dict, path: Path
) -> None:
    """Reduction per loss and seed: both settings beside the reference's."""
    figure, axis = plt.subplots(figsize=(7.5, 4.5))
    names = list(results)
    sources = [
        (0.0, results, "C0", "o", "stanflow, the code's setting (seeds, mean +- sd)"),
        (0.25, text_results, "C2", "^", "stanflow, the text's setting (seeds, mean +- sd)"),
    ]
    for i, name in enumerate(names):
        for offset, source, color, marker, label in sources:
            values = [r["reduction_pct"] for r in source[name]]
            axis.scatter(np.full(len(values), i + offset), values, color=color, alpha=0.4)
            axis.errorbar(
                i + offset,
                np.mean(values),
                yerr=np.std(values, ddof=1) if len(values) > 1 else 0,
                fmt=marker,
                color=color,
                capsize=4,
                label=label if i == 0 else None,
            )
        ref = published[name]["reduction_pct"]
        axis.errorbar(
            i - 0.25,
            ref["mean"],
            yerr=ref["sd"],
            fmt="x",
            color="C3",
            capsize=4,
            label="reference (the authors' code, 10 seeds)" if i == 0 else None,
        )
    axis.axhline(0, color="grey", linewidth=0.8)
    axis.set_xticks(range(len(names)), names)
    axis.set_ylabel("test risk reduction of LCVI over VI (%)")
    axis.set_title("Last.fm matrix factorisation: LCVI vs mean-field VI")
    axis.legend(fontsize=8)
    save_figure(figure, path)


def _plot_risks(ours: dict, published: dict | None, path: Path) -> None:
    """Test risks of VI and LCVI per loss, ours beside the reference's (full problem only)."""
    figure, axes = plt.subplots(1, len(ours), figsize=(4 * len(ours), 3.8))
    sources = [("stanflow", ours, "C0")]
    if published is not None:
        sources.append(("reference", published, "C3"))
    for axis, name in zip(axes, ours, strict=True):
        for x, (_, source, color) in enumerate(sources):
            for offset, method in [(-0.1, "vi"), (0.1, "lcvi")]:
                value = source[name][method]
                axis.errorbar(
                    x + offset,
                    value["mean"],
                    yerr=value["sd"],
                    fmt="o" if method == "lcvi" else "s",
                    color=color,
                    capsize=4,
                )
                axis.annotate(
                    method.upper(),
                    (x + offset, value["mean"]),
                    textcoords="offset points",
                    xytext=(6, 0),
                    fontsize=8,
                )
        axis.set_xticks(range(len(sources)), [label for label, _, _ in sources])
        axis.set_xlim(-0.5, len(sources) - 0.5)
        axis.set_title(name)
    axes[0].set_ylabel("empirical test risk (mean +- sd over seeds)")
    figure.suptitle(
        "Last.fm matrix factorisation: test risk of VI and LCVI"
        + ("" if published is not None else " (quick run: no reference)")
    )
    save_figure(figure, path)


def _plot_shift(first: dict, path: Path) -> None:
    """LCVI minus VI decision against the VI decision, every test cell (first seed)."""
    figure, axes = plt.subplots(
        1, len(first), figsize=(4 * len(first), 3.8), sharey=True
    )
    for axis, (name, saved) in zip(np.ravel(axes), first.items(), strict=True):
        h_vi, h_lcvi = saved["vi"], saved["lcvi"]
        axis.scatter(h_vi, h_lcvi - h_vi, s=2, alpha=0.3)
        axis.axhline(0, color="grey", linewidth=0.8)
        axis.set_title(name)
        axis.set_xlabel("VI decision (test cell)")
    np.ravel(axes)[0].set_ylabel("LCVI minus VI decision")
    figure.suptitle("Shift of the test-cell decisions by LCVI (first seed)")
    save_figure(figure, path)


def _plot_user_shifts(shifts: dict, path: Path) -> None:
    """Fig. 3 right: the distribution over users of their mean decision shift."""
    figure, axis = plt.subplots(figsize=(7, 4))
    for name, values in shifts.items():
        axis.hist(values, bins=40, density=True, histtype="step", linewidth=1.5, label=name)
    axis.axvline(0, color="grey", linewidth=0.8)
    axis.set_xlabel("user's mean decision shift, LCVI minus VI (test cells)")
    axis.set_ylabel("density over users")
    axis.set_title("Per-user mean shift of the decisions (first seed)")
    axis.legend()
    save_figure(figure, path)


def _plot_intervals(first: dict, path: Path) -> None:
    """Fig. 3 middle: 90 % predictive intervals and decisions of VI and LCVI."""
    losses = first["losses"]
    figure, axes = plt.subplots(1, len(losses), figsize=(4 * len(losses), 4), sharey=True)
    x = np.arange(len(first["interval_cells"]))
    for axis, (name, kept) in zip(np.ravel(axes), losses.items(), strict=True):
        for offset, method, color in [(-0.15, "vi", "C0"), (0.15, "lcvi", "C3")]:
            low, high = kept[f"interval_{method}"]
            axis.vlines(x + offset, low, high, color=color, linewidth=2,
                        label=f"{method.upper()}: 90 % interval, decision")
            axis.scatter(x + offset, kept[f"decision_{method}"], color=color, marker="o", s=14)
        axis.scatter(x, first["observed"], color="k", marker="x", s=20, label="observed",
                     zorder=3)
        axis.set_title(name)
        axis.set_xticks(x)
        axis.set_xlabel(f"test cell ({x.size} drawn at random)")
    np.ravel(axes)[0].set_ylabel("log(1 + count)")
    np.ravel(axes)[0].legend(fontsize=8)
    figure.suptitle("Predictive intervals and decisions of VI and LCVI, sample user-artist pairs")
    save_figure(figure, path)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
