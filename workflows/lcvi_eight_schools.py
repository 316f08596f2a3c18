"""Loss-calibrated VI on eight schools: NUTS, plain mean-field ADVI and LCVI, check loss tau = 0.2.

Centred eight schools (``mu ~ N(0, 5)``, ``tau ~ half-Cauchy(0, 5)``). The
decision for school ``j`` is ``h_j``, judged by the check (pinball) loss with
``tau = 0.2`` (the paper's tilted loss with ``q = 0.2``)
on the observed effect ``y_j``; the empirical risk is ``mean_j l(y_j, h_j)`` at the
Bayes decisions (the 0.2-quantiles of each method's posterior predictive, the
likelihood's noise integrated out). There is no test split: eight points.

- HMC baseline: NUTS on the non-centred form (the same posterior, no funnel),
  4 chains of 1000 + 1000 (``--quick``: 200 + 200);
- plain VI and LCVI: :func:`stanflow.lcvi.run_lcvi` with the linearised
  utility ``M - l``, ``M`` the 90th percentile of the plain-VI losses (M90),
  mean-field ADVI with the loop's defaults (10000 iterations, 10 gradient
  samples): LCVI branches off plain VI after 5000 iterations and takes the
  Bayes decisions every 1000; if they still move by more than 0.1 at 10000,
  LCVI goes on (at most to 20000) and plain VI with it. One seed per
  repetition: 10 seeds (``--quick``: 2 seeds, 2000 ADVI iterations). VI and
  LCVI of one seed share the trajectory to the branch and the budget, so
  their risks are paired.

Writes ``lcvi_eight_schools.nc`` (the first seed's LCVI fit and its
``decisions`` group), ``hmc.nc``, ``marginals.png`` (mu, tau, theta for
HMC, VI, LCVI), ``risk.png`` (risk per ADVI iteration, each seed) and
``summary.json``: ``risk_hmc``, ``risk_vi``, ``risk_lcvi`` (means over seeds),
``risk_reduction_pct_mean``, ``risk_reduction_pct_sd`` (over seeds,
``100 (risk_vi - risk_lcvi) / risk_vi``), ``n_seeds`` and more.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from stanflow.idata import save, to_inference_data
from stanflow.lcvi import (
    ADVI_DEFAULTS,
    eight_schools,
    empirical_risk,
    run_lcvi,
    to_idata,
)
from stanflow.losses import bound_loss
from stanflow.models import compile_model, program_path
from stanflow.workflows import DATA_DIR, main, save_figure

DESCRIPTION = (
    "Loss-calibrated VI on eight schools (check loss tau=0.2, M90): "
    "risk of NUTS, mean-field ADVI and LCVI over 10 seeds"
)

TAU = 0.2
TOL = 0.1  # decisions settle when none moves by more than this in a block
REFERENCE_REDUCTION_PCT = (0.9, 0.4)  # mean, sd over seeds
REFERENCE_SOURCE = (
    "Kusmierczyk et al. (2019): the authors' stored results of their code, 11 seeds"
)


def run(out: Path, quick: bool) -> dict:
    """Run NUTS, then VI and LCVI for each seed; write figures; return the summary."""
    data = json.loads((DATA_DIR / "eight_schools.json").read_text())
    problem = eight_schools(data)
    loss = bound_loss("check", tau=TAU)
    seeds = range(1, 3 if quick else 11)
    advi = {"iter": 2000} if quick else {}

    hmc = _nuts(data, 200 if quick else 1000)
    hmc_theta = hmc.stan_variable("theta")
    risk_hmc = empirical_risk(
        problem.y, loss.mixture_decision(hmc_theta, np.asarray(data["sigma"], float)), loss
    )

    loops = [
        run_lcvi(
            problem,
            loss,
            kind="linear",
            estimator="linearised",
            percentile=90,
            seed=seed,
            tol=TOL,
            max_iter=2 * advi.get("iter", ADVI_DEFAULTS["iter"]),
            advi_args=advi,
        )
        for seed in seeds
    ]
    risk_vi = np.array([loop.baseline.risk for loop in loops])
    risk_lcvi = np.array([loop.steps[-1].risk for loop in loops])
    reduction = 100 * (risk_vi - risk_lcvi) / risk_vi

    save(to_idata(problem, loops[0]), out / "lcvi_eight_schools.nc")
    save(
        to_inference_data(hmc, dims={"theta": ["school"], "theta_tilde": ["school"]}),
        out / "hmc.nc",
    )
    _plot_marginals(hmc, loops[0], out / "marginals.png")
    _plot_risk(loops, risk_hmc, out / "risk.png")

    seconds_vi = [  # plain VI to its budget, continued as far as LCVI went
        loop.vi.seconds + (loop.baseline.seconds if loop.baseline is not loop.steps[0] else 0)
        for loop in loops
    ]
    seconds_lcvi = [
        loop.vi.seconds + sum(s.seconds for s in loop.steps[1:]) for loop in loops
    ]
    return {
        "risk_hmc": risk_hmc,
        "risk_vi": float(risk_vi.mean()),
        "risk_lcvi": float(risk_lcvi.mean()),
        "risk_reduction_pct_mean": float(reduction.mean()),
        "risk_reduction_pct_sd": float(reduction.std(ddof=1)),
        "n_seeds": len(loops),
        "seed": list(seeds),
        "risk_vi_per_seed": risk_vi,
        "risk_lcvi_per_seed": risk_lcvi,
        "risk_reduction_pct_per_seed": reduction,
        "risk_vi_range": _range(risk_vi),
        "risk_reduction_pct_range": _range(reduction),
        "seeds_reduced": int(np.sum(reduction > 0)),
        "scale_M90_range": _range([loop.scale for loop in loops]),
        "advi_iterations_range": _range([loop.steps[-1].state.iteration for loop in loops]),
        "lcvi_blocks": [len(loop.steps) - 1 for loop in loops],
        "advi_iterations": [loop.steps[-1].state.iteration for loop in loops],
        "settled": [loop.settled for loop in loops],
        "tol": TOL,
        "scale_M90": [loop.scale for loop in loops],
        "eta": loops[0].args["eta"],
        "advi_iter": loops[0].args["iter"],
        "grad_samples": loops[0].args["grad_samples"],
        "n_outcomes": loops[0].eps_y.shape[0],
        "seconds_vi_mean": float(np.mean(seconds_vi)),
        "seconds_lcvi_loop_mean": float(np.mean(seconds_lcvi)),  # plain VI included
        "reference_reduction_pct": {
            "mean": REFERENCE_REDUCTION_PCT[0],
            "sd": REFERENCE_REDUCTION_PCT[1],
            "source": REFERENCE_SOURCE,
        },
        "quick": quick,
    }


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
        seed=8,
        show_progress=False,
    )


def _plot_marginals(hmc, loop, path: Path) -> None:
    vi, lcvi = loop.baseline.fit, loop.steps[-1].fit
    names = ["mu", "tau"] + [f"theta[{j}]" for j in range(1, 9)]
    figure, axes = plt.subplots(2, 5, figsize=(16, 6))
    for axis, name in zip(axes.ravel(), names, strict=True):
        base, _, index = name.partition("[")
        draws = {
            "HMC (NUTS)": hmc.stan_variable(base),
            "VI": vi.stan_variable(base, mean=False),
            "LCVI": lcvi.stan_variable(base, mean=False),
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


def _plot_risk(loops, risk_hmc: float, path: Path) -> None:
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for i, loop in enumerate(loops):
        blocks = loop.steps[1:]
        axis.plot(
            [s.state.iteration for s in blocks],
            [s.risk for s in blocks],
            marker="o",
            markersize=3,
            color="C0",
            alpha=0.6,
            label="LCVI after each block" if i == 0 else None,
        )
        vi = [loop.steps[0], loop.baseline]
        axis.plot(
            [s.state.iteration for s in vi],
            [s.risk for s in vi],
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
