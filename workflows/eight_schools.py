"""Eight schools (Rubin 1981; BDA3 section 5.5), non-centred, sampled with NUTS.

Four chains of 1000 warm-up and 1000 sampling iterations (``--quick``: 200 and
200) on ``stan/models/eight_schools_noncentered.stan`` with the data of
``data/eight_schools.json``. Writes into ``--out``:

- ``eight_schools.nc``: the InferenceData (posterior, sample_stats,
  posterior_predictive ``y_rep``, log_likelihood, observed and constant data),
  with the schools as the ``school`` coordinate;
- ``stansummary.csv`` and ``diagnose.txt``: CmdStan's summary and diagnosis;
- ``forest_theta.png``: the school effects theta, posterior means and 90% intervals;
- ``pair_theta_tilde_log_tau.png``: log tau against theta_tilde for the first
  school, divergent transitions marked (the funnel the non-centred form avoids);
- ``summary.json``: ``mu_mean``, ``tau_mean``, ``max_rhat``, ``min_ess_bulk``,
  ``divergences`` and more.

The fit is one cell of the workflow runner (:mod:`stanflow.experiment`): a rerun
into a folder holding it draws the figures again from ``eight_schools.nc``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.experiment import Cell, CellRun, Experiment, Records, own_fields
from stanflow.idata import load, save, to_inference_data
from stanflow.models import compile_model, program_path
from stanflow.workflows import DATA_DIR, main, save_figure, write_text

DESCRIPTION = (
    "Eight schools (Rubin 1981), non-centred hierarchical model, NUTS with 4 chains"
)

SCHOOLS = [
    "Choate",
    "Deerfield",
    "Phillips Andover",
    "Phillips Exeter",
    "Hotchkiss",
    "Lawrenceville",
    "St. Paul's",
    "Mt. Hermon",
]
SEED = 8
PARAMETERS = ["mu", "tau", "theta_tilde", "theta"]


SETTINGS = {"quick": {"chains": 4, "iterations": 200}, "full": {"chains": 4, "iterations": 1000}}
"""Warm-up and sampling iterations per chain."""


def cells(settings: dict[str, Any]) -> list[Cell]:
    """One cell: the NUTS fit."""
    return [Cell("nuts", dict(settings))]


def compute(run: CellRun) -> dict:
    """Sample the model; write the InferenceData, CmdStan's summary and diagnosis; the numbers."""
    data = json.loads((DATA_DIR / "eight_schools.json").read_text())
    model = compile_model(program_path("models/eight_schools_noncentered"))
    fit = model.sample(
        data=data,
        chains=run.params["chains"],
        parallel_chains=run.params["chains"],
        iter_warmup=run.params["iterations"],
        iter_sampling=run.params["iterations"],
        seed=run.seed,
        show_progress=False,
    )
    stansummary = fit.summary()
    write_text(run.out / "stansummary.csv", stansummary.to_csv())
    write_text(run.out / "diagnose.txt", fit.diagnose() or "")

    per_school = ["theta", "theta_tilde", "log_lik", "y_rep", "y", "sigma"]
    idata = to_inference_data(
        fit,
        coords={"school": SCHOOLS},
        dims={name: ["school"] for name in per_school},
        observed_data={"y": data["y"]},
        constant_data={"sigma": data["sigma"]},
        posterior_predictive="y_rep",
    )
    save(idata, run.out / "eight_schools.nc")
    posterior = idata.posterior
    rhat = arviz_compat.rhat(idata, var_names=PARAMETERS)
    ess_bulk = arviz_compat.ess(idata, var_names=PARAMETERS, method="bulk")
    ess_tail = arviz_compat.ess(idata, var_names=PARAMETERS, method="tail")
    return {
        "mu_mean": float(posterior["mu"].mean()),
        "tau_mean": float(posterior["tau"].mean()),
        "max_rhat": _extreme(rhat, np.nanmax),
        "min_ess_bulk": _extreme(ess_bulk, np.nanmin),
        "divergences": int(idata.sample_stats["diverging"].sum()),
        "mu_sd": float(posterior["mu"].std()),
        "tau_sd": float(posterior["tau"].std()),
        "theta_mean": dict(
            zip(SCHOOLS, posterior["theta"].mean(("chain", "draw")).values, strict=True)
        ),
        "min_ess_tail": _extreme(ess_tail, np.nanmin),
        "stansummary_max_rhat": float(stansummary["R_hat"].max()),
        "chains": posterior.sizes["chain"],
        "draws_per_chain": posterior.sizes["draw"],
        "files": ["eight_schools.nc", "stansummary.csv", "diagnose.txt"],
    }


def summarise(settings: dict[str, Any], records: Records) -> dict:
    """The fit's numbers."""
    return {k: v for k, v in own_fields(records["nuts"]).items() if k != "files"}


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """The school effects' forest plot and the funnel, from ``eight_schools.nc``."""
    idata = load(out / "eight_schools.nc")
    _plot_forest(idata, out / "forest_theta.png")
    _plot_funnel(idata, out / "pair_theta_tilde_log_tau.png")


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, seed=SEED)


def run(out: Path, quick: bool) -> dict:
    """Sample the model, write the InferenceData and figures, return the summary."""
    return EXPERIMENT.run(out, quick)


def _extreme(ds, pick) -> float:
    """``pick`` (``np.nanmax`` or ``np.nanmin``) over all elements of all of ``ds``."""
    return float(pick(np.concatenate([np.ravel(ds[v].values) for v in ds.data_vars])))


def _plot_forest(idata: Results, path: Path) -> None:
    figure = arviz_compat.plot_forest(idata, ["theta"], ci_prob=0.9, figsize=(8, 5))
    figure.suptitle("Eight schools: school effects theta (mean, 90% HDI)")
    save_figure(figure, path)


def _plot_funnel(idata: Results, path: Path) -> None:
    posterior = arviz_compat.group(idata, "posterior")
    funnel = arviz_compat.build(
        {
            "posterior": posterior[["theta_tilde"]].assign(
                log_tau=np.log(posterior["tau"])
            ),
            "sample_stats": arviz_compat.group(idata, "sample_stats"),
        }
    )
    figure = arviz_compat.plot_pair(
        funnel,
        "theta_tilde",
        "log_tau",
        coords={"school": [SCHOOLS[0]]},
        labels=(f"theta_tilde[{SCHOOLS[0]}]", "log tau"),
    )
    figure.suptitle(
        "Eight schools, non-centred: log tau against theta_tilde (divergences marked)"
    )
    save_figure(figure, path)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
