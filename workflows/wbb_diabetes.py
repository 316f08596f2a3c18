"""Weighted Bayesian bootstrap of the lasso on the diabetes data, against the Bayesian bridge.

Data: scikit-learn's diabetes data (Efron et al. 2004), 442 patients x 10
baseline variables, each column standardised (mean 0, sd 1), the response
(disease progression after a year) centred.

- **Lasso penalty, by 10-fold cross-validation.** On a grid of 100 values of
  ``a`` from ``a_max`` (all coefficients zero) down to ``a_max / 1000`` (log
  spaced), the lasso ``sum_i (y_i - c - x_i'b)^2 / 2 + m a |b|_1`` is fitted on
  each training fold of size ``m`` (``a`` is the per-observation level,
  scikit-learn's ``alpha``; ``stanflow.wbb.lasso_path``), and ``a`` minimising
  the mean held-out squared error is kept (folds from a fixed seed). The WBB
  then uses ``lam = n a``.
- **WBB** (``stanflow.wbb.wbb_lasso``): 1000 draws (``--quick``: 200) with an
  unpenalised intercept, with a fixed prior weight (``w_p = 1``) and a random
  one (``w_p ~ Exp(1)``); both variants share their observation weights.
- **Bayesian bridge** by NUTS (``stan/wbb/bridge.stan``): prior
  ``exp(-|b_j / tau|^(1/2))``, ``nu = tau^(-1/2) ~ Gamma(2, 2)``, Gaussian
  likelihood with ``sigma ~ half-t_3(0, sd(y))``, intercept ``~ N(0, sd(y))``,
  sampled through the scale mixture of uniforms (smooth, unlike the cusp at 0);
  4 chains x 1000 draws after 1000 warm-up (``--quick``: 2 x 200 after 200).
- **Shape of each marginal** (``stanflow.wbb.shape_summary``), per coefficient
  and method (WBB fixed, WBB random, bridge): the mass at exactly 0, the mass
  within ``EPS_SMALL sd(y)`` of 0, the standard deviation and the number of
  modes off the atom (peaks of a Gaussian KDE of the non-zero draws,
  Silverman's bandwidth, prominence at least 5% of the highest;
  ``stanflow.wbb.count_modes``). The claims "WBB is sparser" and "the fixed
  prior weight is more concentrated" are counted over the ten coefficients.
- **Lasso penalty by the marginal likelihood**, beside CV: the Bayesian lasso
  ``y ~ N(X b, s^2 I)``, ``b_j ~ Laplace(rate lam / s^2)``, whose posterior
  mode is the lasso at ``lam`` (``stanflow.wbb.bayes_lasso``), with ``s`` the
  least-squares residual sd (``n - p - 1`` degrees of freedom) and the
  intercept under a flat prior (with centred data it contributes the same
  factor at every ``lam``); ``log p(y | lam)`` on 31 log-spaced levels
  (``--quick``: 11) from ``lam_max / 1000`` to ``lam_max`` by bridge sampling
  (Meng and Wong's iterative estimator, normal proposal fitted to half of each
  chain's Gibbs draws; 4 chains x 2000 draws after 500, ``--quick``: 2 x 400
  after 200), ``lam_ml`` its grid maximum. Then the WBB (both variants) and
  the Bayesian lasso posterior (4 chains x 2000 Gibbs draws after 500,
  ``--quick``: 2 x 400 after 500) at ``lam_ml`` and at the CV ``lam``.

Four cells (:mod:`stanflow.experiment`), kept in ``runs/`` when done and read
back by a rerun into the same folder: ``cv`` (the CV penalty), ``marginals``
(the WBB draws and the bridge, written as ``wbb_fixed.nc``, ``wbb_random.nc``
and ``bridge.nc``, their shapes and the figure's histograms),
``marginal_likelihood`` and ``posteriors`` (at both penalties). Writes
``wbb_diabetes_marginals.png`` (the ten marginal posteriors, three methods),
``wbb_diabetes_lambda.png`` (``log p(y | lam)`` and the CV error against
``lam``) and a summary with, per coefficient, the mean and shape of each
method's marginal, the claims' counts, both penalties with the posteriors they
give, the WBB draws per second, the bridge's effective samples per second and
the runner's ``settings``, ``seed`` and ``compute_seconds``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.idata import save, to_inference_data
from stanflow.models import compile_model, program_path
from stanflow.wbb import (
    gibbs_lasso,
    lambda_max,
    lasso_log_marginal,
    lasso_path,
    shape_summary,
    solve_lasso,
    wbb_lasso,
)
from stanflow.workflows import main, save_figure

DESCRIPTION = (
    "WBB of the lasso (fixed and random prior weight, CV penalty) on the diabetes data "
    "against the Bayesian bridge by NUTS"
)

SEED = 20240707
FOLDS = 10
GRID = 100
EPS_SMALL = 0.01
"""Half-width of "near zero", in units of sd(y): 0.77 on the diabetes response."""
METHODS = ("wbb_fixed", "wbb_random", "bridge")
SETTINGS = {
    "quick": {"n_draws": 200, "bridge": {"chains": 2, "iterations": 200},
              "marginal_likelihood": {"levels": 11, "chains": 2, "draws": 400, "warmup": 200},
              "posteriors": {"chains": 2, "draws": 400, "warmup": 500}},
    "full": {"n_draws": 1000, "bridge": {"chains": 4, "iterations": 1000},
             "marginal_likelihood": {"levels": 31, "chains": 4, "draws": 2000, "warmup": 500},
             "posteriors": {"chains": 4, "draws": 2000, "warmup": 500}},
}


def diabetes() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Standardised X (442, 10), centred y and the feature names."""
    try:
        from sklearn.datasets import load_diabetes
    except ImportError:
        raise ImportError(
            "wbb-diabetes reads the diabetes data shipped with scikit-learn: "
            "pip install 'stanflow[examples]'"
        ) from None
    data = load_diabetes(scaled=False)
    X = (data.data - data.data.mean(axis=0)) / data.data.std(axis=0)
    return X, data.target - data.target.mean(), list(data.feature_names)


def cv_alpha(
    X: np.ndarray, y: np.ndarray, folds: int = FOLDS, seed: int = SEED
) -> tuple[float, np.ndarray, np.ndarray]:
    """The per-observation lasso level minimising the K-fold CV squared error.

    Returns
    -------
    alpha : float
    grid : ndarray
        The levels tried, decreasing.
    cv_error : ndarray
        Mean held-out squared error per level.
    """
    n = len(y)
    top = float(lambda_max(X, y, fit_intercept=True)[0]) / n
    grid = np.geomspace(top, top / 1000, GRID)
    fold = np.random.default_rng(seed).permutation(n) % folds
    # All folds at once: fold k is a draw with weight 1 on its training rows and
    # 0 on its held-out rows; prior weight m_k / n turns lam = n a into m_k a.
    train = (fold[None, :] != np.arange(folds)[:, None]).astype(float)
    path = lasso_path(X, y, grid * n, weights=train, prior_weight=train.sum(axis=1) / n,
                      fit_intercept=True)
    errors = np.zeros((folds, GRID))
    for i, fit in enumerate(path):
        prediction = fit.intercept[:, None] + fit.beta @ X.T
        errors[:, i] = np.sum((1 - train) * (y - prediction) ** 2, axis=1) / (1 - train).sum(axis=1)
    cv_error = errors.mean(axis=0)
    return float(grid[cv_error.argmin()]), grid, cv_error


def bridge(
    X: np.ndarray, y: np.ndarray, chains: int, iterations: int, seed: int = SEED
) -> tuple[Results, float]:
    """Bridge posterior by NUTS (``iterations`` warm-up and draws per chain) and the sampling
    wall time (seconds, without compiling)."""
    model = compile_model(program_path("wbb/bridge"))
    data = {
        "N": len(y), "K": X.shape[1], "X": X, "y": y, "bridge_alpha": 0.5, "nu_shape": 2.0,
        "nu_rate": 2.0, "sigma_scale": float(y.std()), "a_scale": float(y.std()),
    }
    start = time.perf_counter()
    fit = model.sample(data=data, chains=chains, iter_warmup=iterations,
                       iter_sampling=iterations, seed=seed, show_progress=False,
                       adapt_delta=0.95)
    seconds = time.perf_counter() - start
    return to_inference_data(fit), seconds


def cells(settings: Mapping[str, Any]) -> list[Cell]:
    """The CV penalty, the marginals at it, the marginal likelihood, the posteriors at both penalties."""
    return [
        Cell("cv", {"folds": FOLDS, "levels": GRID}),
        Cell("marginals", {"n_draws": settings["n_draws"], "bridge": settings["bridge"],
                           "eps_small": EPS_SMALL}, needs=("cv",)),
        Cell("marginal_likelihood", settings["marginal_likelihood"]),
        Cell("posteriors", {"n_draws": settings["n_draws"]} | settings["posteriors"],
             needs=("cv", "marginal_likelihood")),
    ]


def compute(run: CellRun) -> dict:
    """One cell (the marginals write their draws into ``out``)."""
    out = run.out
    X, y, names = diabetes()
    if run.cell.name == "cv":
        alpha, grid, cv_error = cv_alpha(X, y, seed=run.seed)
        return {"n": len(y), "alpha": alpha, "grid": grid, "cv_error": cv_error}
    if run.cell.name == "marginals":
        return marginals(out, X, y, names, cv_lam(run.needed["cv"]), run)
    if run.cell.name == "marginal_likelihood":
        return marginal_likelihood_lambda(X, y, run.params, run.seed)
    lams = {"ml": run.needed["marginal_likelihood"]["lam_ml"], "cv": cv_lam(run.needed["cv"])}
    return penalty_posteriors(X, y, names, lams, run.params, run.seed)


def cv_lam(cv: Mapping[str, Any]) -> float:
    """The CV penalty ``lam = n a`` of the ``cv`` cell's record."""
    return cv["n"] * cv["alpha"]


def marginals(out: Path, X: np.ndarray, y: np.ndarray, names: list[str], lam: float,
              run: CellRun) -> dict:
    """WBB draws of both variants and the bridge by NUTS (written to ``out``): per coefficient
    the mean and shape of each method's marginal, the figure's histograms, the rates."""
    B = run.params["n_draws"]
    samples, rates = {}, {}
    for prior in ("fixed", "random"):
        start = time.perf_counter()
        draws = wbb_lasso(X, y, lam, B, seed=run.seed, prior=prior, fit_intercept=True,
                          feature_names=names, on_failure="raise")
        rates[f"wbb_{prior}"] = B / (time.perf_counter() - start)
        save(draws, out / f"wbb_{prior}.nc")
        samples[f"wbb_{prior}"] = draws.posterior["beta"].values[0]
    posterior, seconds = bridge(X, y, seed=run.seed, **run.params["bridge"])
    save(posterior, out / "bridge.nc")
    samples["bridge"] = posterior.posterior["beta"].values.reshape(-1, X.shape[1])
    ess = arviz_compat.ess(posterior, var_names=["beta"])["beta"].values
    rhat = arviz_compat.rhat(posterior, var_names=["beta", "nu", "sigma"])
    eps = EPS_SMALL * float(y.std())
    return {
        "eps_small": eps,
        "coefficients": {
            name: {k: {"mean": float(v[:, j].mean()), **shape_summary(v[:, j], eps)}
                   for k, v in samples.items()}
            for j, name in enumerate(names)
        },
        "histograms": {name: histograms(samples, j) for j, name in enumerate(names)},
        "draws_per_second": rates,
        "bridge": {
            "chains": int(posterior.posterior.sizes["chain"]),
            "draws_per_chain": int(posterior.posterior.sizes["draw"]),
            "wall_seconds": seconds,
            "min_ess_bulk_beta": float(ess.min()),
            "ess_per_second": float(ess.min() / seconds),
            "max_rhat": float(max(rhat[v].values.max() for v in rhat.data_vars)),
            "divergences": int(posterior.sample_stats["diverging"].values.sum()),
        },
    }


def histograms(samples: Mapping[str, np.ndarray], j: int) -> dict:
    """Coefficient ``j``'s histogram per method: 50 edges over the 0.2% to 99.8% quantiles of
    every method's draws together, and each method's density on them."""
    values = np.concatenate([v[:, j] for v in samples.values()])
    edges = np.linspace(*np.quantile(values, [0.002, 0.998]), 50)
    return {"edges": edges} | {
        k: np.histogram(v[:, j], bins=edges, density=True)[0] for k, v in samples.items()
    }


def summarise(settings: Mapping[str, Any], records: Records) -> dict:
    """The penalties, the marginals and their shapes, the claims, the marginal likelihood."""
    cv, found, marginal = records["cv"], records["marginals"], records["marginal_likelihood"]
    lam = cv_lam(cv)
    return {
        "n": cv["n"],
        "lambda_rule": f"{FOLDS}-fold CV minimum over {GRID} log-spaced levels",
        "alpha_per_observation": cv["alpha"],
        "lam": lam,
        "cv_error_min": float(np.min(cv["cv_error"])),
        "n_draws": settings["n_draws"],
        "eps_small": found["eps_small"],
        "coefficients": {name: entry | {"bridge_mean": entry["bridge"]["mean"]}
                         for name, entry in found["coefficients"].items()},
        "claims": claims(found["coefficients"]),
        "marginal_likelihood": {
            **{k: v for k, v in marginal.items()
               if k not in ("lams", "log_marginal", "config", "seconds")},
            "grid": {"lam": marginal["lams"], "log_marginal": marginal["log_marginal"]},
            "log_marginal_at_lam_cv": _interpolate_log_marginal(marginal, lam),
            "posteriors": {label: records["posteriors"][label] for label in ("ml", "cv")},
        },
        "draws_per_second": found["draws_per_second"],
        "bridge": found["bridge"],
    }


def figures(out: Path, summary: Mapping[str, Any], records: Records) -> None:
    """``wbb_diabetes_marginals.png`` and ``wbb_diabetes_lambda.png``."""
    _figure(out, summary["coefficients"], records["marginals"]["histograms"])
    cv = records["cv"]
    _lambda_figure(out, summary["marginal_likelihood"], summary["lam"],
                   cv["n"] * np.asarray(cv["grid"]), np.asarray(cv["cv_error"]))


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, seed=SEED)


def run(out: Path, quick: bool) -> dict:
    """CV penalty, WBB draws of both variants, bridge by NUTS, shapes; the
    marginal-likelihood penalty and the posteriors of both penalties (every cell
    resumed from ``out/runs``); figures and summary."""
    return EXPERIMENT.run(out, quick)


def claims(shapes: Mapping[str, Mapping[str, dict]]) -> dict:
    """The paper's two statements as counts over the coefficients.

    "WBB is sparser": coefficients with an atom at 0 (``p_zero > 0``) per
    method, and those where a WBB variant's mass within ``eps`` of 0 exceeds
    the bridge's. "Fixed prior weight is more concentrated": coefficients whose
    fixed-weight sd is below the random-weight sd, and the median sd ratio.
    Modes: coefficients with more than one mode, per method.
    """
    per = {m: [entry[m] for entry in shapes.values()] for m in METHODS}
    ratio = [entry["wbb_fixed"]["sd"] / entry["wbb_random"]["sd"] for entry in shapes.values()]
    return {
        "n_coefficients": len(shapes),
        "with_atom": {m: sum(s["p_zero"] > 0 for s in per[m]) for m in METHODS},
        "p_small_above_bridge": {
            m: sum(e[m]["p_small"] > e["bridge"]["p_small"] for e in shapes.values())
            for m in ("wbb_fixed", "wbb_random")
        },
        "mean_p_small": {m: float(np.mean([s["p_small"] for s in per[m]])) for m in METHODS},
        "sd_fixed_below_random": sum(r < 1 for r in ratio),
        "median_sd_ratio_fixed_to_random": float(np.median(ratio)),
        "sd_wbb_below_bridge": {
            m: sum(e[m]["sd"] < e["bridge"]["sd"] for e in shapes.values())
            for m in ("wbb_fixed", "wbb_random")
        },
        "multimodal": {m: sum(s["n_modes"] > 1 for s in per[m]) for m in METHODS},
        "max_modes": {m: max(s["n_modes"] for s in per[m]) for m in METHODS},
    }


def residual_sd(X: np.ndarray, y: np.ndarray) -> float:
    """Least-squares residual sd with an intercept (``n - p - 1`` degrees of freedom)."""
    design = np.column_stack([np.ones(len(y)), X])
    residual = y - design @ np.linalg.lstsq(design, y, rcond=None)[0]
    return float(np.sqrt(residual @ residual / (len(y) - design.shape[1])))


def marginal_likelihood_lambda(
    X: np.ndarray, y: np.ndarray, settings: Mapping[str, Any], seed: int
) -> dict:
    """``log p(y | lam)`` of the Bayesian lasso on a log grid by bridge sampling; its maximiser."""
    sigma = residual_sd(X, y)
    top = float(lambda_max(X, y, fit_intercept=True)[0])
    grid = np.geomspace(top / 1000, top, settings["levels"])
    chains, n_draws, warmup = settings["chains"], settings["draws"], settings["warmup"]
    start = time.perf_counter()
    fit = lasso_log_marginal(X, y - y.mean(), grid, sigma, n_draws, seed=seed, chains=chains,
                             warmup=warmup)
    best = int(np.argmax(fit.log_marginal))
    near = grid[fit.log_marginal >= fit.log_marginal[best] - 1]
    return {
        "rule": (
            f"grid maximum of log p(y | lam) over {grid.size} log-spaced levels, "
            "lam_max / 1000 to lam_max"
        ),
        "sigma": sigma,
        "lam_max": top,
        "lam_ml": float(grid[best]),
        "log_marginal_max": float(fit.log_marginal[best]),
        "chain_se_at_max": float(fit.chain_se[best]),
        "max_chain_se": float(np.max(fit.chain_se)),
        "max_relative_error": float(np.max(fit.relative_error)),
        "lam_within_1_of_max": [float(near.min()), float(near.max())],
        "chains": chains,
        "draws_per_chain": n_draws,
        "warmup": warmup,
        "wall_seconds": time.perf_counter() - start,
        "lams": grid,
        "log_marginal": fit.log_marginal,
    }


def _interpolate_log_marginal(marginal: Mapping[str, Any], lam: float) -> float:
    """``log p(y | lam)`` at the CV penalty, linear in ``log lam`` between grid points."""
    return float(np.interp(np.log(lam), np.log(marginal["lams"]), marginal["log_marginal"]))


def penalty_posteriors(X: np.ndarray, y: np.ndarray, names: list[str], lams: dict[str, float],
                       settings: Mapping[str, Any], seed: int) -> dict:
    """Per penalty: WBB (both variants) and Bayesian lasso means, sds and atoms per coefficient."""
    sigma = residual_sd(X, y)
    B = settings["n_draws"]
    gibbs = gibbs_lasso(X, y - y.mean(), list(lams.values()), sigma, settings["draws"], seed=seed + 1,
                        chains=settings["chains"], warmup=settings["warmup"])
    result = {}
    for (label, lam), bayes in zip(lams.items(), gibbs, strict=True):
        samples = {
            f"wbb_{prior}": wbb_lasso(X, y, lam, B, seed=seed, prior=prior, fit_intercept=True,
                                      on_failure="raise").posterior["beta"].values[0]
            for prior in ("fixed", "random")
        }
        samples["bayes_lasso"] = bayes.reshape(-1, X.shape[1])
        result[label] = {
            "lam": float(lam),
            "coefficients": {
                name: {k: {"mean": float(v[:, j].mean()), "sd": float(v[:, j].std(ddof=1)),
                           "p_zero": float(np.mean(v[:, j] == 0))} for k, v in samples.items()}
                for j, name in enumerate(names)
            },
            "n_zero_at_mode": int(np.sum(solve_lasso(X, y, lam, fit_intercept=True).beta[0] == 0)),
        }
    return result


def _figure(out: Path, coefficients: Mapping[str, dict], histograms: Mapping[str, dict]) -> None:
    """``wbb_diabetes_marginals.png``: each coefficient's histogram per method."""
    labels = {"wbb_fixed": "WBB fixed prior", "wbb_random": "WBB random prior",
              "bridge": "Bayesian bridge (NUTS)"}
    figure, axes = plt.subplots(2, 5, figsize=(18, 6.5))
    for ax, (name, histogram) in zip(axes.ravel(), histograms.items(), strict=True):
        for method, colour in zip(METHODS, ("C0", "C1", "C2"), strict=True):
            zero = coefficients[name][method]["p_zero"]
            tag = labels[method] if method == "bridge" else f"{labels[method]} (P0 = {zero:.2f})"
            ax.stairs(histogram[method], histogram["edges"], lw=1.6, color=colour, label=tag)
        ax.axvline(0, color="0.6", lw=0.8, ls=":")
        ax.set_title(name)
        ax.legend(fontsize=6.5, loc="upper left")
    figure.suptitle("Diabetes: marginal posteriors of the ten coefficients")
    figure.tight_layout()
    save_figure(figure, out / "wbb_diabetes_marginals.png")


def _lambda_figure(
    out: Path, marginal: Mapping[str, Any], lam_cv: float, cv_lams: np.ndarray, cv_error: np.ndarray
) -> None:
    """``wbb_diabetes_lambda.png``: ``log p(y | lam)`` (the summary's) and the CV error against ``lam``."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(marginal["grid"]["lam"], marginal["grid"]["log_marginal"], "o-", ms=3)
    left.set_ylabel("log p(y | lam), bridge sampling")
    right.plot(cv_lams, cv_error)
    right.set_ylabel(f"{FOLDS}-fold CV squared error")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xlabel("lam")
        ml_label = f"marginal likelihood: {marginal['lam_ml']:.0f}"
        ax.axvline(marginal["lam_ml"], color="C1", ls="--", label=ml_label)
        ax.axvline(lam_cv, color="C2", ls=":", label=f"CV: {lam_cv:.0f}")
        ax.legend(fontsize=8)
    figure.suptitle("Diabetes: the lasso penalty by the marginal likelihood and by cross-validation")
    figure.tight_layout()
    save_figure(figure, out / "wbb_diabetes_lambda.png")


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
