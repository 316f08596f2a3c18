"""Loss-calibrated VI for probabilistic matrix factorisation of Last.fm counts: test risk of LCVI vs VI.

``Y = log(1 + C)`` for all 992 users and the first 100 artists of
``$STANFLOW_DATA_DIR/lastfm/lastfm_counts_992x1003.csv``;
``Y[i, j] ~ N((U V')[i, j], noise_sd^2)``, ``K = 20``, ``N(0, prior_sd^2)``
priors on all entries of ``U`` and ``V``. The training and test cells are the
authors' split (:func:`stanflow.lcvi.mf.reference_split`), so the test risks
compare with their published ones (``data/lcvi_mf_reference.json``); the seeds
vary the ADVI trajectory, as theirs varied the initialisation.

Two settings (:data:`SETTINGS`), each run in full:

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

Writes ``lcvi_mf.nc`` (first seed's LCVI fit for the first loss, code setting,
with its ``decisions`` group), ``reductions.png`` (reduction per loss, both
settings, with the reference), ``risks.png`` (test risks of VI and LCVI, ours
and, for the full problem, the reference's), ``decision_shift.png`` (LCVI minus
VI test decisions against the VI decisions, first seed), the paper's Fig. 3
middle and right: ``intervals.png`` (90 % predictive intervals of VI and LCVI
with their decisions and the observed value, for 12 test cells drawn at
random, first seed) and ``user_shifts.png`` (the distribution over users of
each user's mean decision shift, LCVI minus VI, on their test cells, first
seed) (all but ``reductions.png`` for the code setting), ``runs/<setting>/``
(one record per seed and loss: a rerun into the same folder continues where it
stopped) and ``summary.json``: ``settings`` (name -> sds, utility, source);
for the code setting ``risk_reduction_pct`` (loss -> ``mean``, ``sd``),
``n_seeds``, ``test_risk`` (loss -> VI and LCVI mean and sd, ours and the
reference's), ``user_mean_shift`` (loss -> mean, sd and 5/50/95 % quantiles
over users), ``interval_width`` (loss -> mean 90 % width of VI and LCVI over
the 12 cells), ``utility_scale_M90`` (loss -> ``gamma`` mean and sd over
seeds), ``compute_seconds`` (ADVI seconds in the records, summed: a resumed run's
wall time is not its cost), ``runs``; for the text setting ``text`` (its
``risk_reduction_pct``, ``test_risk``, ``utility_scale_M90`` (``M``),
``compute_seconds``, ``runs``).
Without the data file the workflow stops at once, naming the file and where
it comes from.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from stanflow.atomic import write_npz
from stanflow.idata import save
from stanflow.lcvi import empirical_risk, run_lcvi, to_idata
from stanflow.lcvi.mf import (
    Split,
    cell_locations,
    load_lastfm,
    matrix_factorisation,
    reference_split,
    reference_test_risks,
)
from stanflow.losses import bound_loss, mixture_quantile
from stanflow.workflows import main, save_figure, write_json

DESCRIPTION = (
    "Loss-calibrated VI for matrix factorisation of Last.fm counts "
    "(check tau=0.2/0.5/0.8, squared): test risk of LCVI vs VI"
)

# Keys are the paper's experiment labels (its "tilted" loss is stanflow's check loss).
LOSSES = {
    "tilted_0.2": ("check", {"tau": 0.2}),
    "tilted_0.5": ("check", {"tau": 0.5}),
    "tilted_0.8": ("check", {"tau": 0.8}),
    "squared": ("squared", {}),
}
INTERVAL_CELLS = 12  # test cells shown with their predictive intervals (Fig. 3 middle)
INTERVAL = (0.05, 0.95)


class Setting(NamedTuple):
    """The model's standard deviations and the utility of one setting."""

    noise_sd: float
    prior_sd: float
    utility: str  # "exp": exp(-gamma l), gamma = 1 / M90; "linear": M - l, M = M90
    source: str


SETTINGS = {
    "code": Setting(
        1.0,
        10.0,
        "exp",
        "the authors' code, which made the published risks: likelihood sd 1, "
        "prior sd 10, u = exp(-gamma l) with gamma = 1 / M90",
    ),
    "text": Setting(
        10.0,
        10.0,
        "linear",
        "the paper's text: all sigma = 10 (likelihood and priors), u = M - l "
        "with M = M90; the matrix is the data's 992 users (the text rounds to 1000)",
    ),
}


class Experiment(NamedTuple):
    """What the settings share: the data, its split and the ADVI budget."""

    Y: np.ndarray
    split: Split
    K: int
    n_iter: int
    seeds: range
    cells: np.ndarray  # test cells with predictive intervals (first seed, code setting)

    @property
    def advi(self) -> dict:
        return {"iter": self.n_iter, "grad_samples": 1, "output_samples": 20}

    @property
    def y_test(self) -> np.ndarray:
        return self.Y[self.split.test_rows, self.split.test_cols]


def run(out: Path, quick: bool) -> dict:
    """Fit VI once and LCVI per loss, for each seed and setting; write figures; return the summary."""
    Y = load_lastfm(30 if quick else 100)
    if quick:
        Y = Y[:200]
    split = reference_split(Y.shape)
    experiment = Experiment(
        Y=Y,
        split=split,
        K=5 if quick else 20,
        n_iter=2000 if quick else 30_000,
        seeds=range(1, 3 if quick else 6),
        cells=np.sort(
            np.random.default_rng(0).choice(
                split.test_rows.size, INTERVAL_CELLS, replace=False
            )
        ),
    )
    results, first = run_setting(experiment, "code", out)
    text_results, _ = run_setting(experiment, "text", out)

    ours, text = _risks(results), _risks(text_results)
    published = reference_test_risks(LOSSES)
    _plot_reductions(results, text_results, published, out / "reductions.png")
    # the published risks are of the full 992 x 100 problem only
    _plot_risks(ours, None if quick else published, out / "risks.png")
    _plot_shift(first, out / "decision_shift.png")
    user_shifts = {
        name: user_mean_shift(saved["lcvi"] - saved["vi"], split.test_rows)
        for name, saved in first.items()
    }
    _plot_user_shifts(user_shifts, out / "user_shifts.png")
    cells = experiment.cells
    _plot_intervals(first, cells, experiment.y_test[cells], out / "intervals.png")
    code = SETTINGS["code"]
    return {
        "setting": "code",
        "settings": {name: setting._asdict() for name, setting in SETTINGS.items()},
        "risk_reduction_pct": {name: ours[name]["reduction_pct"] for name in LOSSES},
        "n_seeds": len(experiment.seeds),
        "seed": list(experiment.seeds),
        "test_risk": {
            name: {"stanflow": ours[name], "reference": published[name]}
            for name in LOSSES
        },
        "reference_risk_reduction_pct": {
            name: published[name]["reduction_pct"] for name in LOSSES
        },
        "user_mean_shift": {
            name: _spread(shifts) for name, shifts in user_shifts.items()
        },
        "interval_width": {
            name: {
                method: float(np.mean(np.diff(saved[f"interval_{method}"], axis=0)))
                for method in ("vi", "lcvi")
            }
            for name, saved in first.items()
        },
        "interval_cells": cells.tolist(),
        "utility_scale_M90": _scales(results),
        "compute_seconds": _compute_seconds(results),
        "runs": results,
        "text": {
            "setting": "text",
            "risk_reduction_pct": {name: text[name]["reduction_pct"] for name in LOSSES},
            "test_risk": text,
            "utility_scale_M90": _scales(text_results),
            "compute_seconds": _compute_seconds(text_results),
            "runs": text_results,
        },
        "shape": list(Y.shape),
        "K": experiment.K,
        "noise_sd": code.noise_sd,
        "prior_sd": code.prior_sd,
        "advi": experiment.advi
        | {"branch_iter": experiment.n_iter // 2, "decision_every": experiment.n_iter // 20},
        "quick": quick,
    }


def run_setting(
    experiment: Experiment, setting_name: str, out: Path
) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """VI and LCVI for every seed and loss under one setting, resuming from ``out/runs``.

    Returns the per-loss run records and, for the code setting, the first
    seed's test decisions and intervals (loss -> arrays; empty otherwise).
    """
    setting = SETTINGS[setting_name]
    split, y_test, cells = experiment.split, experiment.y_test, experiment.cells
    problem = matrix_factorisation(
        experiment.Y,
        split,
        K=experiment.K,
        prior_sd=setting.prior_sd,
        noise_sd=setting.noise_sd,
    )
    shape = (*experiment.Y.shape, experiment.K)
    keep_first = setting_name == "code"

    def test_decisions(loop, step, loss):
        """Test-cell decisions, and the 90 % predictive intervals of ``cells``."""
        z = step.state.draws(loop.eps_theta)
        loc = cell_locations(z, shape, split.test_rows, split.test_cols)
        h = loss.mixture_decision(loc, np.full(y_test.size, setting.noise_sd))
        sd = np.full(cells.size, setting.noise_sd)
        interval = np.stack([mixture_quantile(loc[:, cells], sd, p) for p in INTERVAL])
        return h, interval

    results = {name: [] for name in LOSSES}
    first = {}
    config = {
        "shape": list(experiment.Y.shape),
        "K": experiment.K,
        "iter": experiment.n_iter,
        "record": 3,
        "setting": setting._asdict(),
    }
    done = out / "runs" / setting_name  # one record per (seed, loss): a rerun skips what is done
    done.mkdir(parents=True, exist_ok=True)
    seeds = experiment.seeds
    for seed in seeds:
        vi = None
        with tempfile.TemporaryDirectory(prefix=f"stanflow-lcvi-mf-{seed}-") as tmp:
            for name, (family, params) in LOSSES.items():
                record_file = done / f"seed-{seed}-{name}.json"
                shift_file = done / f"seed-{seed}-{name}-test-decisions.npz"
                if record_file.is_file():
                    record = json.loads(record_file.read_text())
                    if record.get("config") != config:
                        raise ValueError(
                            f"{record_file} is from another setting "
                            f"({record.get('config')}, not {config}): "
                            "choose another --out or remove it"
                        )
                    results[name].append(record)
                    if keep_first and seed == seeds[0]:
                        with np.load(shift_file) as saved:
                            first[name] = {key: saved[key] for key in saved.files}
                    continue
                loss = bound_loss(family, **params)
                loop = run_lcvi(
                    problem,
                    loss,
                    kind=setting.utility,
                    estimator="linearised",
                    n_outcomes=2,
                    n_draws=200,
                    decision_every=experiment.n_iter // 20,
                    seed=seed,
                    advi_args=experiment.advi,
                    out_dir=Path(tmp) / name,
                    vi=vi,
                )
                vi = loop.vi
                (h_vi, interval_vi), (h_lcvi, interval_lcvi) = (
                    test_decisions(loop, step, loss)
                    for step in (loop.baseline, loop.steps[-1])
                )
                risk_vi, risk_lcvi = (
                    empirical_risk(y_test, h_vi, loss),
                    empirical_risk(y_test, h_lcvi, loss),
                )
                record = {
                    "config": config,
                    "seed": seed,
                    "risk_vi": risk_vi,
                    "risk_lcvi": risk_lcvi,
                    "reduction_pct": 100 * (risk_vi - risk_lcvi) / risk_vi,
                    "train_risk_vi": loop.baseline.risk,
                    "train_risk_lcvi": loop.steps[-1].risk,
                    "utility_scale": loop.scale,
                    "lcvi_blocks": len(loop.steps) - 1,
                    "advi_iterations": loop.steps[-1].state.iteration,
                    "settled": loop.settled,
                    "seconds_vi": loop.vi.seconds,
                    "seconds_lcvi": sum(step.seconds for step in loop.steps[1:]),
                    "eta": loop.args["eta"],
                }
                results[name].append(record)
                if keep_first and seed == seeds[0]:
                    first[name] = {
                        "vi": h_vi,
                        "lcvi": h_lcvi,
                        "interval_vi": interval_vi,
                        "interval_lcvi": interval_lcvi,
                    }
                    _save_arrays(shift_file, first[name])
                    if not (out / "lcvi_mf.nc").exists():
                        save(to_idata(problem, loop), out / "lcvi_mf.nc")
                write_json(record_file, record)
    return results, first


def _scales(results: dict[str, list[dict]]) -> dict:
    """Per loss: the utility's scale (``gamma`` or ``M`` from M90), mean and sd over seeds."""
    return {
        name: _mean_sd([r["utility_scale"] for r in runs]) for name, runs in results.items()
    }


def _compute_seconds(results: dict[str, list[dict]]) -> float:
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


def _save_arrays(path: Path, arrays: dict) -> None:
    """The first seed's test decisions and intervals, for the figures of a resumed run."""
    write_npz(path, arrays)


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


def _plot_intervals(first: dict, cells: np.ndarray, observed: np.ndarray, path: Path) -> None:
    """Fig. 3 middle: 90 % predictive intervals and decisions of VI and LCVI."""
    figure, axes = plt.subplots(1, len(first), figsize=(4 * len(first), 4), sharey=True)
    x = np.arange(cells.size)
    for axis, (name, saved) in zip(np.ravel(axes), first.items(), strict=True):
        for offset, method, color in [(-0.15, "vi", "C0"), (0.15, "lcvi", "C3")]:
            low, high = saved[f"interval_{method}"]
            axis.vlines(x + offset, low, high, color=color, linewidth=2,
                        label=f"{method.upper()}: 90 % interval, decision")
            axis.scatter(x + offset, saved[method][cells], color=color, marker="o", s=14)
        axis.scatter(x, observed, color="k", marker="x", s=20, label="observed", zorder=3)
        axis.set_title(name)
        axis.set_xticks(x)
        axis.set_xlabel(f"test cell ({cells.size} drawn at random)")
    np.ravel(axes)[0].set_ylabel("log(1 + count)")
    np.ravel(axes)[0].legend(fontsize=8)
    figure.suptitle("Predictive intervals and decisions of VI and LCVI, sample user-artist pairs")
    save_figure(figure, path)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
