"""The WBB paper's exact toy: one observation ``y ~ N(theta, 1)``, Laplace prior with rate ``lam``.

A WBB draw minimises ``w1 (y - theta)^2 / 2 + w2 lam |theta|``, which is soft
thresholding at ``lam w2 / w1`` (``stanflow.wbb.wbb_normal_means``), with
``w1 ~ Exp(1)`` and ``w2 ~ Exp(1)`` (random prior weight, the paper's) or
``w2 = 1`` (fixed). For every ``lam`` in ``LAMS`` and ``y`` on a grid over
``[0, 8]`` (the problem is odd in ``y``), the mean of ``B`` WBB draws (1000;
``--quick``: 200) is compared with

- the exact posterior mean (Pericchi and Smith 1992, Mitchell 1994;
  ``stanflow.wbb.laplace_posterior_mean``), and
- the exact expectation of the WBB draw over the weights
  (``stanflow.wbb.wbb_mean``), which checks the Monte Carlo average and shows
  that the gap to the posterior mean is no Monte Carlo error.

All pairs ``(lam, y)`` share the weights of draw ``b`` (common random numbers).
Each prior weight is a cell (:mod:`stanflow.experiment`): it writes its draws,
``wbb_normal_means_<prior>.nc``, and keeps their mean, Monte Carlo error and
share of zeros per ``(lam, y)`` in ``runs/<prior>.json``, which a rerun into
the same folder reads back. Writes ``wbb_normal_means.png`` (means against
``y``, and WBB mean minus posterior mean) and a summary: the WBB mean of the
draws along ``y`` per ``lam`` and prior, the largest difference to the
posterior mean (from the draws and exact), a table at ``TABLE_Y`` with the
exact values beside the draws', and the runner's ``settings``, ``seed`` and
``compute_seconds``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.idata import save
from stanflow.wbb import (
    laplace_posterior_mean,
    soft_threshold,
    wbb_mean,
    wbb_normal_means,
    wbb_prob_zero,
)
from stanflow.workflows import main, save_figure

DESCRIPTION = (
    "WBB of the normal-means toy with a Laplace prior (soft thresholding): WBB mean "
    "against the exact posterior mean over observations and penalties"
)

SEED = 20211
LAMS = (0.5, 1.0, 2.0, 4.0)
TABLE_Y = (0.5, 1.0, 2.0, 4.0, 8.0)
PRIORS = ("random", "fixed")


SETTINGS = {
    "quick": {"n_draws": 200, "y_points": 17},
    "full": {"n_draws": 1000, "y_points": 81},
}


def y_grid(settings: Mapping[str, Any]) -> np.ndarray:
    """The observations ``y``: ``settings["y_points"]`` evenly spaced over ``[0, 8]``."""
    return np.linspace(0.0, 8.0, settings["y_points"])


def cells(settings: Mapping[str, Any]) -> list[Cell]:
    """One cell per prior weight."""
    return [Cell(prior, {"prior": prior, "lam": list(LAMS)} | dict(settings)) for prior in PRIORS]


def compute(run: CellRun) -> dict:
    """The draws of one prior weight (written to ``out``): their mean, mcse and P(0) per (lam, y)."""
    out = run.out
    prior, B = run.params["prior"], run.params["n_draws"]
    idata = wbb_normal_means(y_grid(run.params), np.asarray(LAMS), B, seed=run.seed, prior=prior)
    save(idata, out / f"wbb_normal_means_{prior}.nc")
    theta = idata.posterior["theta"].values[0]  # (B, lam, y)
    return {
        "mean": theta.mean(axis=0),
        "mcse": theta.std(axis=0, ddof=1) / np.sqrt(B),
        "p_zero": (theta == 0).mean(axis=0),
    }


def statistics(settings: Mapping[str, Any], records: Records) -> dict[str, dict]:
    """Per prior weight: the draws' statistics (lam, y) and the exact WBB mean and P(0)."""
    y, lams = y_grid(settings)[None, :], np.asarray(LAMS)[:, None]
    return {
        prior: {key: np.asarray(records[prior][key]) for key in ("mean", "mcse", "p_zero")}
        | {"exact": wbb_mean(y, lams, prior), "p_zero_exact": wbb_prob_zero(y, lams, prior)}
        for prior in PRIORS
    }


def posterior_means(settings: Mapping[str, Any]) -> np.ndarray:
    """The exact posterior mean per (lam, y)."""
    return laplace_posterior_mean(y_grid(settings)[None, :], np.asarray(LAMS)[:, None])


def summarise(settings: Mapping[str, Any], records: Records) -> dict:
    """The WBB means along ``y``, their gaps to the posterior mean, the table at ``TABLE_Y``."""
    y, posterior, per_prior = y_grid(settings), posterior_means(settings), statistics(settings, records)
    return {
        "model": "y ~ N(theta, 1), theta ~ Laplace(rate lam); WBB: w1 ~ Exp(1), "
        "w2 ~ Exp(1) (random) or 1 (fixed)",
        "n_draws": settings["n_draws"],
        "y": y,
        "lam": list(LAMS),
        "wbb": {prior: _prior_summary(y, posterior, stats) for prior, stats in per_prior.items()},
        "at_y": _table(y, posterior, per_prior),
    }


def figures(out: Path, summary: Mapping[str, Any], records: Records) -> None:
    """``wbb_normal_means.png``."""
    settings = summary["settings"]
    _figure(out, y_grid(settings), np.asarray(LAMS), posterior_means(settings),
            statistics(settings, records), settings["n_draws"])


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, seed=SEED)


def run(out: Path, quick: bool) -> dict:
    """WBB draws (resumed from ``out/runs``), exact means, figure and summary."""
    return EXPERIMENT.run(out, quick)


def _prior_summary(y: np.ndarray, posterior: np.ndarray, stats: dict) -> dict:
    """Per ``lam``: the WBB mean of the draws along ``y`` and its largest gap to the
    posterior mean (the exact curves are closed forms, not stored)."""
    summary = {}
    for i, lam in enumerate(LAMS):
        gap = stats["mean"][i] - posterior[i]
        exact_gap = stats["exact"][i] - posterior[i]
        worst, worst_exact = np.argmax(np.abs(gap)), np.argmax(np.abs(exact_gap))
        positive = stats["mcse"][i] > 0
        summary[f"{lam:g}"] = {
            "mean": stats["mean"][i],
            "max_abs_difference": abs(gap[worst]),
            "difference_at_max": gap[worst],
            "y_at_max": y[worst],
            "max_abs_difference_exact": abs(exact_gap[worst_exact]),
            "y_at_max_exact": y[worst_exact],
            "max_mc_error_in_mcse": np.max(
                np.abs(stats["mean"][i] - stats["exact"][i])[positive]
                / stats["mcse"][i][positive]
            ),
        }
    return summary


def _table(y: np.ndarray, posterior: np.ndarray, per_prior: dict) -> dict:
    """Rows at ``TABLE_Y`` per ``lam``: posterior mean and mode, WBB means and P(0)."""
    table = {}
    for i, lam in enumerate(LAMS):
        rows = []
        for value in TABLE_Y:
            j = int(np.flatnonzero(np.isclose(y, value))[0])
            row = {
                "y": value,
                "posterior_mean": posterior[i, j],
                "posterior_mode": soft_threshold(value, lam),
            }
            for prior, stats in per_prior.items():
                row[f"wbb_{prior}"] = stats["mean"][i, j]
                row[f"wbb_{prior}_mcse"] = stats["mcse"][i, j]
                row[f"wbb_{prior}_exact"] = stats["exact"][i, j]
                row[f"p_zero_{prior}"] = stats["p_zero"][i, j]
                row[f"p_zero_{prior}_exact"] = stats["p_zero_exact"][i, j]
            rows.append(row)
        table[f"{lam:g}"] = rows
    return table


def _figure(
    out: Path, y: np.ndarray, lams: np.ndarray, posterior: np.ndarray, per_prior: dict, B: int
) -> None:
    figure, axes = plt.subplots(2, len(lams), figsize=(4.2 * len(lams), 7.5), sharex=True)
    colours = {"random": "tab:blue", "fixed": "tab:orange"}
    for i, lam in enumerate(lams):
        top, bottom = axes[0, i], axes[1, i]
        top.plot(y, y, color="0.8", lw=1, ls=":", label="y (no shrinkage)")
        top.plot(y, soft_threshold(y, lam), color="0.5", lw=1, ls="--", label="posterior mode")
        top.plot(y, posterior[i], color="k", lw=2, label="exact posterior mean")
        bottom.axhline(0, color="k", lw=1)
        for prior, stats in per_prior.items():
            colour = colours[prior]
            top.plot(y, stats["exact"][i], color=colour, lw=1.5,
                     label=f"WBB mean, w2 {prior} (exact)")
            top.plot(y, stats["mean"][i], "o", ms=2.5, color=colour,
                     label=f"WBB mean, w2 {prior} ({B} draws)")
            bottom.plot(y, stats["exact"][i] - posterior[i], color=colour, lw=1.5)
            bottom.errorbar(y, stats["mean"][i] - posterior[i], yerr=2 * stats["mcse"][i],
                            fmt="o", ms=2.5, color=colour, elinewidth=0.6)
        top.set_title(f"lam = {lam:g}")
        bottom.set_xlabel("y")
    axes[0, 0].set_ylabel("E[theta]")
    axes[1, 0].set_ylabel("WBB mean - posterior mean (+- 2 mcse)")
    axes[0, 0].legend(fontsize=7, loc="upper left")
    save_figure(figure, out / "wbb_normal_means.png")


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
