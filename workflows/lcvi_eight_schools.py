"""Loss-calibrated VI on eight schools: NUTS, plain mean-field ADVI and LCVI, check loss tau = 0.2.

Centred eight schools (``mu ~ N(0, 5)``, ``tau ~ half-Cauchy(0, 5)``). The
decision for school ``j`` is ``h_j``, judged by the check (pinball) loss with
``tau = 0.2`` (the paper's tilted loss with ``q = 0.2``)
on the observed effect ``y_j``; the empirical risk is ``mean_j l(y_j, h_j)`` at the
Bayes decisions (the 0.2-quantiles of each method's posterior predictive, the
likelihood's noise integrated out). There is no test split: eight points.

- HMC baseline: NUTS on the non-centred form (the same posterior, no funnel),
  4 chains of 1000 + 1000 (``--quick``: 200 + 200), CmdStan seed 8;
- plain VI and LCVI: :func:`stanflow.lcvi.run_lcvi` with the linearised
  utility ``M - l``, ``M`` the 90th percentile of the plain-VI losses (M90),
  mean-field ADVI with the loop's defaults (10000 iterations, 10 gradient
  samples): LCVI branches off plain VI after 5000 iterations and takes the
  Bayes decisions every 1000; if they still move by more than 0.1 at 10000,
  LCVI goes on (at most to 20000) and plain VI with it. One seed per
  repetition: 10 seeds (``--quick``: 2 seeds, 2000 ADVI iterations). VI and
  LCVI of one seed share the trajectory to the branch and the budget, so
  their risks are paired.

Seed ``r`` of the run (``r = 0, 1, ...``) is ``SEED + r = 1, 2, ...``, given to
the loop as is. NUTS and every seed are cells of an experiment
(:mod:`stanflow.experiment`), each kept in ``OUT/runs/*.json`` when done, so a
stopped run resumes; two run at a time. The records of NUTS and of the first
seed keep the draws of ``mu``, ``tau`` and ``theta`` that ``marginals.png``
shows.

Writes ``lcvi_eight_schools.nc`` (the first seed's LCVI fit and its
``decisions`` group) and ``hmc.nc`` (each by the cell that computes it),
``marginals.png`` (mu, tau, theta for HMC, VI, LCVI), ``risk.png`` (risk per
ADVI iteration, each seed) and ``summary.json``: ``risk_hmc``, ``risk_vi``,
``risk_lcvi`` (means over seeds), ``risk_reduction_pct_mean``,
``risk_reduction_pct_sd`` (over seeds, ``100 (risk_vi - risk_lcvi) /
risk_vi``), ``n_seeds``, ``seeds`` (the seeds given to the loop) and more, and
the runner's ``settings``, ``seed`` (:data:`SEED`) and ``compute_seconds``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.idata import save, to_inference_data
from stanflow.lcvi import Utility, eight_schools, empirical_risk, run_lcvi, to_idata
from stanflow.losses import BoundLoss, bound_loss
from stanflow.models import compile_model, program_path
from stanflow.workflows import DATA_DIR, main, save_figure

DESCRIPTION = (
    "Loss-calibrated VI on eight schools (check loss tau=0.2, M90): "
    "risk of NUTS, mean-field ADVI and LCVI over 10 seeds"
)

SEED = 1
"""The experiment's seed: the run's seed ``r = 0, 1, ...`` is ``SEED + r``."""
NUTS_SEED = 8
TAU = 0.2
TOL = 0.1  # decisions settle when none moves by more than this in a block
MARGINALS = ("mu", "tau", "theta")  # the variables of marginals.png
REFERENCE_REDUCTION_PCT = (0.9, 0.4)  # mean, sd over seeds
REFERENCE_SOURCE = (
    "Kusmierczyk et al. (2019): the authors' stored results of their code, 11 seeds"
)

SETTINGS = {
    "quick": {"seeds": 2, "nuts_iterations": 200, "advi_iter": 2000},
    "full": {"seeds": 10, "nuts_iterations": 1000, "advi_iter": 10_000},
}


def cells(settings: dict[str, Any]) -> list[Cell]:
    """NUTS, then one cell per seed."""
    return [Cell("hmc", {"iterations": settings["nuts_iterations"], "tau": TAU})] + [
        Cell(f"seed-{SEED + r}", {"advi_iter": settings["advi_iter"], "tau": TAU, "tol": TOL,
                                  "r": r})
        for r in range(settings["seeds"])
    ]


def compute(run: CellRun) -> dict:
    """One cell: NUTS, or plain VI and LCVI of one seed."""
    data = json.loads((DATA_DIR / "eight_schools.json").read_text())
    loss = bound_loss("check", tau=run.params["tau"])
    if run.cell.name == "hmc":
        return hmc_record(run.out, data, loss, run.params["iterations"])
    return seed_record(run.out, data, loss, run.params, run.seed + run.params["r"])


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """The risks over seeds beside NUTS's and the reference's, and the loops' details."""
    seeds = [records[f"seed-{SEED + r}"] for r in range(settings["seeds"])]
    risk_vi = np.array([r["risk_vi"] for r in seeds])
    risk_lcvi = np.array([r["risk_lcvi"] for r in seeds])
    reduction = 100 * (risk_vi - risk_lcvi) / risk_vi
    return {
        "risk_hmc": records["hmc"]["risk_hmc"],
        "risk_vi": float(risk_vi.mean()),
        "risk_lcvi": float(risk_lcvi.mean()),
        "risk_reduction_pct_mean": float(reduction.mean()),
        "risk_reduction_pct_sd": float(reduction.std(ddof=1)),
        "n_seeds": len(seeds),
        "seeds": [SEED + r for r in range(settings["seeds"])],
        "risk_vi_per_seed": risk_vi,
        "risk_lcvi_per_seed": risk_lcvi,
        "risk_reduction_pct_per_seed": reduction,
        "risk_vi_range": _range(risk_vi),
        "risk_reduction_pct_range": _range(reduction),
        "seeds_reduced": int(np.sum(reduction > 0)),
        "scale_M90_range": _range([r["scale_M90"] for r in seeds]),
        "advi_iterations_range": _range([r["advi_iterations"] for r in seeds]),
        "lcvi_blocks": [r["lcvi_blocks"] for r in seeds],
        "advi_iterations": [r["advi_iterations"] for r in seeds],
        "settled": [r["settled"] for r in seeds],
        "tol": TOL,
        "scale_M90": [r["scale_M90"] for r in seeds],
        **{key: seeds[0][key] for key in ("eta", "advi_iter", "grad_samples", "n_outcomes")},
        "seconds_vi_mean": float(np.mean([r["seconds_vi"] for r in seeds])),
        # plain VI included
        "seconds_lcvi_loop_mean": float(np.mean([r["seconds_lcvi"] for r in seeds])),
        "reference_reduction_pct": {
            "mean": REFERENCE_REDUCTION_PCT[0],
            "sd": REFERENCE_REDUCTION_PCT[1],
            "source": REFERENCE_SOURCE,
        },
        "quick": settings == SETTINGS["quick"],
    }


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``marginals.png`` (NUTS and the first seed) and ``risk.png`` (every seed)."""
    first = records[f"seed-{SEED}"]["draws"]
    _plot_marginals(records["hmc"]["draws"], first["vi"], first["lcvi"], out / "marginals.png")
    seeds = [record for name, record in records.items() if name != "hmc"]
    _plot_risk(seeds, summary["risk_hmc"], out / "risk.png")


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, seed=SEED, jobs=2)


def run(out: Path, quick: bool) -> dict:
    """NUTS, then VI and LCVI for each seed (resumed from ``out/runs``); figures; the summary."""
    return EXPERIMENT.run(out, quick)


def hmc_record(out: Path, data: dict, loss: BoundLoss, iterations: int) -> dict:
    """NUTS's risk and draws; its fit written to ``out/hmc.nc``."""
    hmc = _nuts(data, iterations)
    decisions = loss.mixture_decision(hmc.stan_variable("theta"), np.asarray(data["sigma"], float))
    save(
        to_inference_data(hmc, dims={"theta": ["school"], "theta_tilde": ["school"]}),
        out / "hmc.nc",
    )
    return {
        "risk_hmc": empirical_risk(eight_schools(data).y, decisions, loss),
        "draws": {name: hmc.stan_variable(name) for name in MARGINALS},
    }


def seed_record(out: Path, data: dict, loss: BoundLoss, params: dict, seed: int) -> dict:
    """Plain VI and LCVI of one seed; the first seed's draws, and its fit in ``out``."""
    problem = eight_schools(data)
    loop = run_lcvi(
        problem,
        loss,
        utility=Utility(kind="linear", estimator="linearised", percentile=90),
        seed=seed,
        tol=params["tol"],
        max_iter=2 * params["advi_iter"],
        advi_args={"iter": params["advi_iter"]},
    )
    lcvi_blocks, vi_points = loop.steps[1:], [loop.steps[0], loop.baseline]
    record = {
        "risk_vi": loop.baseline.risk,
        "risk_lcvi": loop.steps[-1].risk,
        "scale_M90": loop.utility.scale,
        "lcvi_blocks": len(lcvi_blocks),
        "advi_iterations": loop.steps[-1].state.iteration,
        "settled": loop.settled,
        "eta": loop.args["eta"],
        "advi_iter": loop.args["iter"],
        "grad_samples": loop.args["grad_samples"],
        "n_outcomes": loop.eps_y.shape[0],
        # plain VI to its budget, continued as far as LCVI went
        "seconds_vi": loop.vi.seconds
        + (loop.baseline.seconds if loop.baseline is not loop.steps[0] else 0),
        "seconds_lcvi": loop.vi.seconds + sum(s.seconds for s in lcvi_blocks),
        "trajectory": {
            name: {"iteration": [s.state.iteration for s in steps],
                   "risk": [s.risk for s in steps]}
            for name, steps in (("lcvi", lcvi_blocks), ("vi", vi_points))
        },
    }
    if params["r"] == 0:
        save(to_idata(problem, loop), out / "lcvi_eight_schools.nc")
        record["draws"] = {
            method: {name: step.fit.stan_variable(name, mean=False) for name in MARGINALS}
            for method, step in (("vi", loop.baseline), ("lcvi", loop.steps[-1]))
        }
    return record


def _range(values) -> dict:
    """Smallest and largest of ``values``."""
    return {"min": float(np.min(values)), "max": float(np.max(values))}


def _nuts(data: dict, iterations: int):
    model = compile_model(program_path("models/eight_schools_noncentered"))
    return model.sample(
        data=data,
        chains=4,
        parallel_chains=2,
        iter_warmup=iterations,
        iter_sampling=iterations,
        seed=NUTS_SEED,
        show_progress=False,
    )


def _plot_marginals(hmc: dict, vi: dict, lcvi: dict, path: Path) -> None:
    """Histograms of mu, tau and each theta: NUTS's draws and the first seed's VI and LCVI."""
    names = ["mu", "tau"] + [f"theta[{j}]" for j in range(1, 9)]
    figure, axes = plt.subplots(2, 5, figsize=(16, 6))
    for axis, name in zip(axes.ravel(), names, strict=True):
        base, _, index = name.partition("[")
        draws = {
            label: np.asarray(source[base])
            for label, source in (("HMC (NUTS)", hmc), ("VI", vi), ("LCVI", lcvi))
        }
        if index:
            draws = {k: v[:, int(index[:-1]) - 1] for k, v in draws.items()}
        high = np.quantile(draws["HMC (NUTS)"], 0.995)
        low = min(np.quantile(d, 0.005) for d in draws.values())
        bins = np.linspace(
            low, max(high, *(np.quantile(d, 0.995) for d in draws.values())), 60
        )
        for (label, d), style in zip(draws.items(), ["-", "--", ":"], strict=True):
            axis.hist(
                d,
                bins=bins,
                density=True,
                histtype="step",
                linestyle=style,
                label=label,
                linewidth=1.5,
            )
        axis.set_title(name)
    axes[0, 0].legend()
    figure.suptitle(
        "Eight schools: marginals under NUTS, mean-field VI and LCVI (check tau=0.2, first seed)"
    )
    save_figure(figure, path)


def _plot_risk(seeds: list[dict], risk_hmc: float, path: Path) -> None:
    """Each seed's LCVI risk after every block, beside plain VI's at the branch and its budget."""
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for i, record in enumerate(seeds):
        lcvi, vi = record["trajectory"]["lcvi"], record["trajectory"]["vi"]
        axis.plot(
            lcvi["iteration"],
            lcvi["risk"],
            marker="o",
            markersize=3,
            color="C0",
            alpha=0.6,
            label="LCVI after each block" if i == 0 else None,
        )
        axis.plot(
            vi["iteration"],
            vi["risk"],
            marker="s",
            linestyle="--",
            color="C1",
            alpha=0.7,
            label="plain VI" if i == 0 else None,
        )
    axis.axhline(risk_hmc, color="C3", linestyle="--", label="NUTS posterior")
    axis.set_xlabel("ADVI iteration")
    axis.set_ylabel("empirical check risk (tau = 0.2)")
    axis.set_title("Eight schools: risk along the LCVI trajectory, one line per seed")
    axis.legend()
    save_figure(figure, path)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
