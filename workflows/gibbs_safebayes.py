"""SafeBayes's repair of Bayesian model averaging under misspecification.

Grunwald and van Ommen's (2017) wrong-model experiment as we read it:

- models ``M_0..M_50``: polynomial regression of degree ``p`` with intercept,
  ``y = sum_{j<=p} beta_j P_j(u) + e``, ``e ~ N(0, sigma^2)``, ``P_j`` the Legendre
  polynomials (the degree-``p`` polynomials, in an orthogonal basis), each with
  the conjugate prior ``beta | sigma^2 ~ N(0, sigma^2 I)``,
  ``sigma^2 ~ InvGamma(1, 1/40)``, and a prior over degrees (uniform on 0..50;
  ``pi(p) ∝ 1 / ((p + 1)(p + 2))`` as a check);
- data: with probability 1/2 a point from the model with
  ``beta* = (0, 0.1, 0.1, 0.1, 0.1, 0, ...)`` (``u ~ U[-1, 1]``, noise variance
  1/40), otherwise an "easy point" ``(x, y) = (0, 0)`` (all covariates zero but
  the intercept, ``y = 0``): the homoskedastic models are wrong, yet ``beta*``
  is the best of them. The model-correct control has no easy points.

For each replication one sequential pass (``stanflow.gibbs.safebayes_averaging``,
closed-form power posteriors and marginal likelihoods of every degree, 17
learning rates ``2^(-k/2)``, k = 0..16) gives, at the sample sizes in ``SIZES``:
the R-log and I-log SafeBayes learning rates, and the square risk
``E (Y - x' beta_bar)^2`` under the data distribution of the posterior-mean
regression function at those rates, at ``eta = 1`` (standard Bayes) and at the
best rate of the grid in hindsight (oracle); the risk of ``beta*`` itself, the
smallest possible, is ``(1 - easy fraction) / 40`` (1/80 with easy points, 1/40
without). Also the posterior mean degree. Risks are exact (Gauss-Legendre
quadrature over ``u``).

Every data set is a piece (``OUT/runs/{wrong_model,correct_model}/NNN.json``),
so a stopped run resumes. Writes ``gibbs_safebayes.png`` (risk, chosen rates
and posterior mean degree against n), ``gibbs_safebayes.nc`` and
``summary.json`` (the model's constants under ``model``).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr
from numpy.polynomial import legendre

from stanflow import arviz_compat
from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.gibbs.safebayes import VARIANTS, choose_eta, default_etas
from stanflow.gibbs.safebayes_averaging import (
    mean_degree,
    mixture_losses,
    mixture_means,
    sequential_models,
)
from stanflow.idata import save
from stanflow.workflows import main, save_figure

DESCRIPTION = (
    "SafeBayes (R-log, I-log) with model averaging over polynomial degrees on "
    "Grunwald and van Ommen's wrong-model data: chosen learning rates and square risk"
)

SEED = 20240519
DEGREES = 50
SIGMA2 = 1 / 40
EASY_FRACTION = 0.5
BETA_TRUE = np.r_[0.0, np.full(4, 0.1), np.zeros(DEGREES - 4)]
PRIOR = {"prior_scale": 1.0, "a0": 1.0, "b0": 1 / 40}
MODELS = {"wrong_model": ("wrong", EASY_FRACTION), "correct_model": ("correct", 0.0)}
"""Summary key: (key of ``replications``, share of easy points)."""
FITS = (*VARIANTS, "bayes", "oracle")

SETTINGS = {
    "quick": {"sizes": [25, 50, 100], "replications": {"wrong": 4, "correct": 2}},
    "full": {"sizes": [25, 50, 100, 200, 400], "replications": {"wrong": 100, "correct": 40}},
}


def degree_priors() -> dict[str, np.ndarray]:
    """``log pi(p)``, p = 0..DEGREES: uniform, and ``∝ 1 / ((p + 1)(p + 2))``."""
    p = np.arange(DEGREES + 1, dtype=float)
    return {"uniform": np.zeros(DEGREES + 1), "decreasing": -np.log((p + 1) * (p + 2))}


def sample(rng: np.random.Generator, n: int, easy_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points of the data distribution: (X with Legendre columns 0..DEGREES, y)."""
    u = rng.uniform(-1, 1, n)
    X = legendre.legvander(u, DEGREES)
    y = X @ BETA_TRUE + rng.normal(0, math.sqrt(SIGMA2), n)
    easy = rng.random(n) < easy_fraction
    X[easy, 1:] = 0.0
    y[easy] = 0.0
    return X, y


def data_set(seed: int, n: int, draw: int, easy_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Data set ``draw`` (from 0) of the seed's one stream of data sets of ``n`` points.

    The wrong-model data sets come first, then the control's; a data set
    takes as many numbers from the stream whatever its share of easy points.
    """
    rng = np.random.default_rng(seed)
    for _ in range(draw):
        sample(rng, n, easy_fraction)
    return sample(rng, n, easy_fraction)


def square_risk(beta: np.ndarray, easy_fraction: float) -> np.ndarray:
    """``E (Y - x' beta)^2`` under the data distribution, for coefficients ``beta`` (..., K).

    Easy points contribute ``beta_0^2``; the others ``sigma^2`` plus the mean
    over ``u ~ U[-1, 1]`` of the squared error of the regression function
    (Gauss-Legendre, exact for these polynomials).
    """
    nodes, weights = legendre.leggauss(2 * DEGREES + 2)
    basis = legendre.legvander(nodes, DEGREES)
    error = (beta - BETA_TRUE) @ basis.T  # (..., nodes)
    hard = SIGMA2 + 0.5 * np.sum(weights * error**2, axis=-1)
    return easy_fraction * beta[..., 0] ** 2 + (1 - easy_fraction) * hard


def cells(settings: dict[str, Any]) -> list[Cell]:
    """One cell per data set: the wrong model's, then the control's."""
    out, draw = [], 0
    for model, (key, easy_fraction) in MODELS.items():
        for r in range(settings["replications"][key]):
            params = {"easy_fraction": easy_fraction, "sizes": settings["sizes"], "draw": draw}
            out.append(Cell(f"{model}/{r:03d}", params))
            draw += 1
    return out


def compute(run: CellRun) -> dict:
    """One data set: per degree prior, chosen rates, risks and mean degrees at every size."""
    sizes, easy_fraction = tuple(run.params["sizes"]), run.params["easy_fraction"]
    X, y = data_set(run.seed, max(sizes), run.params["draw"], easy_fraction)
    return replicate(X, y, easy_fraction, sizes)


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """Per model and degree prior, the rates, risks and degrees at every size."""
    stacks = {model: stacked(records, model, settings["sizes"]) for model in MODELS}
    return {
        **{model: {p: _summarise(stack.sel(prior=p)) for p in stack["prior"].values}
           for model, stack in stacks.items()},
        "model": {
            "degrees": DEGREES,
            "sigma2": SIGMA2,
            "easy_fraction": EASY_FRACTION,
            "beta_true": "0.1 for P_1..P_4, 0 otherwise",
            "prior_scale": PRIOR["prior_scale"],
            "a0": PRIOR["a0"],
            "b0": PRIOR["b0"],
            "etas": [float(e) for e in default_etas()],
        },
        "sizes": list(settings["sizes"]),
        "replications": settings["replications"],
        "quick": settings == SETTINGS["quick"],
    }


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``gibbs_safebayes.png``, and ``gibbs_safebayes.nc``: every data set's rates, risks, degrees."""
    sizes = summary["settings"]["sizes"]
    groups = {model: stacked(records, model, sizes) for model in MODELS}
    save(arviz_compat.build(groups), out / "gibbs_safebayes.nc")
    save_figure(_figure(summary, tuple(sizes)), out / "gibbs_safebayes.png")


def report(summary: dict[str, Any]) -> None:
    """Print the wrong model's rates and risks (uniform prior on degrees) at every size."""
    for n in summary["sizes"]:
        row = summary["wrong_model"]["uniform"][f"n{n}"]
        print(
            f"n = {n:>3}: eta R-log {row['eta_median']['r-log']:.3f}, "
            f"I-log {row['eta_median']['i-log']:.3f}; "
            f"risk Bayes {row['risk']['bayes']:.4f}, R-log {row['risk']['r-log']:.4f}, "
            f"I-log {row['risk']['i-log']:.4f}, oracle {row['risk']['oracle']:.4f} "
            f"(floor {row['risk_floor']:.4f})"
        )


def replicate(X: np.ndarray, y: np.ndarray, easy_fraction: float, sizes: tuple[int, ...]) -> dict:
    """Per degree prior: eta (n, variant), risk (n, fit) and degree (n, degree fit) at ``sizes``."""
    etas = default_etas()
    sequences = sequential_models(y, X, etas, checkpoints=sizes, **PRIOR)
    bayes = int(np.argmax(etas))
    out = {}
    for name, log_prior in degree_priors().items():
        losses = mixture_losses(sequences, y, log_prior)
        risks = square_risk(mixture_means(sequences, log_prior), easy_fraction)  # (C, E)
        degree = mean_degree(sequences, log_prior)  # (C, E)
        chosen = np.array(
            [[choose_eta(losses[v][:, :n].sum(1), etas) for v in VARIANTS] for n in sizes]
        )  # (C, variant)
        index = np.searchsorted(etas, chosen)
        rows = np.arange(len(sizes))
        out[name] = {
            "eta": chosen,
            "risk": np.column_stack(
                [risks[rows, index[:, 0]], risks[rows, index[:, 1]], risks[:, bayes], risks.min(1)]
            ),
            "degree": np.column_stack(
                [degree[rows, index[:, 0]], degree[rows, index[:, 1]], degree[:, bayes]]
            ),
        }
    return out


def stacked(records: Records, model: str, sizes: list[int]) -> xr.Dataset:
    """A model's data sets: eta (prior, replicate, n, variant), risk (.., fit), degree (.., fit)."""
    runs = [record for name, record in records.items() if name.startswith(f"{model}/")]
    easy_fraction = MODELS[model][1]
    priors = list(degree_priors())
    stack = {
        key: np.array([[run[p][key] for run in runs] for p in priors])
        for key in ("eta", "risk", "degree")
    }
    return xr.Dataset(
        {
            "eta": (("prior", "replicate", "n", "variant"), stack["eta"]),
            "risk": (("prior", "replicate", "n", "fit"), stack["risk"]),
            "degree": (("prior", "replicate", "n", "degree_fit"), stack["degree"]),
        },
        coords={
            "prior": priors,
            "n": list(sizes),
            "variant": list(VARIANTS),
            "fit": list(FITS),
            "degree_fit": [*VARIANTS, "bayes"],
        },
        attrs={"easy_fraction": easy_fraction, "risk_floor": (1 - easy_fraction) * SIGMA2},
    )


def _summarise(group: xr.Dataset) -> dict:
    replications = group.sizes["replicate"]
    floor = float(group.attrs["risk_floor"])
    rows = {}
    for n in group["n"].values:
        at = group.sel(n=n)
        eta, risk, degree = at["eta"], at["risk"], at["degree"]
        excess = risk - floor
        row = {
            "risk_floor": floor,
            "eta_median": {v: float(eta.sel(variant=v).median()) for v in VARIANTS},
            "eta_quartiles": {
                v: [float(q) for q in np.quantile(eta.sel(variant=v), [0.25, 0.75])] for v in VARIANTS
            },
            "eta_below_one": {v: int((eta.sel(variant=v) < 1).sum()) for v in VARIANTS},
            "risk": {f: float(risk.sel(fit=f).mean()) for f in FITS},
            "risk_se": {f: _se(risk.sel(fit=f).values) for f in FITS},
            "mean_degree": {f: float(degree.sel(degree_fit=f).mean()) for f in degree["degree_fit"].values},
        }
        for v in VARIANTS:
            cut = (risk.sel(fit="bayes") - risk.sel(fit=v)).values
            row[f"risk_cut_{v}"] = float(cut.mean())
            row[f"risk_cut_{v}_se"] = _se(cut)
            row[f"excess_ratio_{v}"] = float(excess.sel(fit="bayes").mean() / excess.sel(fit=v).mean())
            row[f"safebayes_better_{v}"] = int((cut > 0).sum())
        rows[f"n{int(n)}"] = row
    return {**rows, "replications": int(replications)}


def _se(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(values.size)) if values.size > 1 else math.nan


def _figure(summary: dict, sizes: tuple[int, ...]) -> plt.Figure:
    figure, axes = plt.subplots(1, 4, figsize=(19, 4.6))
    n = np.array(sizes, dtype=float)
    labels = {"bayes": "Bayes (eta = 1)", "r-log": "R-log SafeBayes", "i-log": "I-log SafeBayes",
              "oracle": "best eta in hindsight"}
    panels = ((axes[0], "wrong_model", "wrong model"), (axes[3], "correct_model", "correct model"))
    for axis, model, title in panels:
        rows = [summary[model]["uniform"][f"n{s}"] for s in sizes]
        for fit, marker in (("bayes", "o"), ("r-log", "s"), ("i-log", "^"), ("oracle", "x")):
            axis.errorbar(n, [r["risk"][fit] for r in rows], yerr=[2 * r["risk_se"][fit] for r in rows],
                          marker=marker, capsize=3, label=labels[fit])
        axis.axhline(rows[0]["risk_floor"], color="black", lw=1, label="risk of beta* (the smallest)")
        _sizes_axis(axis, sizes)
        axis.set_ylabel("square risk of the posterior mean (+-2 se)")
        axis.set_title(f"{title}: square risk (uniform prior on degrees)")
        axis.legend(fontsize=8)
    rows = [summary["wrong_model"]["uniform"][f"n{s}"] for s in sizes]
    axis = axes[1]
    for shift, v in ((0.97, "r-log"), (1.03, "i-log")):
        median = np.array([r["eta_median"][v] for r in rows])
        low = np.array([r["eta_quartiles"][v][0] for r in rows])
        high = np.array([r["eta_quartiles"][v][1] for r in rows])
        axis.errorbar(n * shift, median, yerr=[median - low, high - median], marker="o", capsize=3,
                      label=f"{labels[v]} (median, quartiles)")
    axis.axhline(1, color="grey", ls="--", label="Bayes")
    _sizes_axis(axis, sizes)
    axis.set_yscale("log", base=2)
    axis.set_ylabel("learning rate eta")
    axis.set_title("wrong model: chosen learning rate")
    axis.legend(fontsize=8)
    axis = axes[2]
    for fit, marker in (("bayes", "o"), ("r-log", "s"), ("i-log", "^")):
        axis.plot(n, [r["mean_degree"][fit] for r in rows], marker=marker, label=labels[fit])
    axis.axhline(4, color="black", lw=1, label="degree of beta*")
    _sizes_axis(axis, sizes)
    axis.set_ylabel("posterior mean degree")
    axis.set_title("wrong model: posterior mean degree")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def _sizes_axis(axis, sizes: tuple[int, ...]) -> None:
    axis.set_xscale("log")
    axis.set_xticks(sizes, [str(n) for n in sizes])
    axis.minorticks_off()
    axis.set_xlabel("sample size n")


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, report=report, seed=SEED)


def run(out: Path, quick: bool) -> dict:
    """Every data set (resumed from ``out/runs``), the figure, the InferenceData and the summary."""
    return EXPERIMENT.run(out, quick)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
