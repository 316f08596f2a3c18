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
  factor at every ``lam``); ``log p(y | lam)`` on ``ML_GRID`` log-spaced levels
  from ``lam_max / 1000`` to ``lam_max`` by bridge sampling (Meng and Wong's
  iterative estimator, normal proposal fitted to half of each chain's Gibbs
  draws; ``CHAINS`` chains x ``ML_DRAWS`` draws after ``ML_WARMUP``,
  ``--quick``: fewer), ``lam_ml`` its grid maximum. Then the WBB (both
  variants) and the Bayesian lasso posterior at ``lam_ml`` and at the CV
  ``lam``.

Writes ``wbb_diabetes_marginals.png`` (the ten marginal posteriors, three
methods), ``wbb_diabetes_lambda.png`` (``log p(y | lam)`` and the CV error
against ``lam``), ``wbb_fixed.nc``, ``wbb_random.nc``, ``bridge.nc`` and a
summary with, per coefficient, the mean and shape of each method's marginal,
the claims' counts, both penalties with the posteriors they give, the WBB
draws per second and the bridge's effective samples per second.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
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
ML_GRID = 31
CHAINS = 4
ML_DRAWS = 2000
ML_WARMUP = 500


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


def bridge(X: np.ndarray, y: np.ndarray, quick: bool) -> tuple[Results, float]:
    """Bridge posterior by NUTS and the sampling wall time (seconds, without compiling)."""
    model = compile_model(program_path("wbb/bridge"))
    data = {
        "N": len(y), "K": X.shape[1], "X": X, "y": y, "bridge_alpha": 0.5, "nu_shape": 2.0,
        "nu_rate": 2.0, "sigma_scale": float(y.std()), "a_scale": float(y.std()),
    }
    iterations = 200 if quick else 1000
    start = time.perf_counter()
    fit = model.sample(data=data, chains=2 if quick else 4, iter_warmup=iterations,
                       iter_sampling=iterations, seed=SEED, show_progress=False,
                       adapt_delta=0.95)
    seconds = time.perf_counter() - start
    return to_inference_data(fit), seconds


def run(out: Path, quick: bool) -> dict:
    """CV penalty, WBB draws of both variants, bridge by NUTS, shapes; the
    marginal-likelihood penalty and the posteriors of both penalties; figures and summary."""
    X, y, names = diabetes()
    n = len(y)
    alpha, alpha_grid, cv_error = cv_alpha(X, y)
    lam = n * alpha
    B = 200 if quick else 1000
    draws, rates = {}, {}
    for prior in ("fixed", "random"):
        start = time.perf_counter()
        draws[prior] = wbb_lasso(X, y, lam, B, seed=SEED, prior=prior, fit_intercept=True,
                                 feature_names=names, on_failure="raise")
        rates[prior] = B / (time.perf_counter() - start)
        save(draws[prior], out / f"wbb_{prior}.nc")
    posterior, seconds = bridge(X, y, quick)
    save(posterior, out / "bridge.nc")
    bridge_beta = posterior.posterior["beta"].values.reshape(-1, X.shape[1])
    ess = arviz_compat.ess(posterior, var_names=["beta"])["beta"].values
    samples = {f"wbb_{prior}": idata.posterior["beta"].values[0] for prior, idata in draws.items()}
    samples["bridge"] = bridge_beta
    coefficients, shapes = {}, {}
    for j, name in enumerate(names):
        shapes[name] = {k: shape_summary(v[:, j], EPS_SMALL * y.std()) for k, v in samples.items()}
        entry = {k: {"mean": float(v[:, j].mean()), **shapes[name][k]} for k, v in samples.items()}
        entry["bridge_mean"] = entry["bridge"]["mean"]
        coefficients[name] = entry
    _figure(out, names, draws, bridge_beta)
    rhat = arviz_compat.rhat(posterior, var_names=["beta", "nu", "sigma"])
    marginal = marginal_likelihood_lambda(X, y, quick)
    _lambda_figure(out, marginal, lam, n * alpha_grid, cv_error)
    return {
        "n": n,
        "seed": SEED,
        "lambda_rule": f"{FOLDS}-fold CV minimum over {GRID} log-spaced levels",
        "alpha_per_observation": alpha,
        "lam": lam,
        "cv_error_min": float(cv_error.min()),
        "n_draws": B,
        "eps_small": EPS_SMALL * float(y.std()),
        "coefficients": coefficients,
        "claims": claims(shapes),
        "marginal_likelihood": {
            **{k: v for k, v in marginal.items() if k not in ("lams", "log_marginal")},
            "grid": {"lam": marginal["lams"].tolist(), "log_marginal": marginal["log_marginal"].tolist()},
            "log_marginal_at_lam_cv": _interpolate_log_marginal(marginal, lam),
            "posteriors": penalty_posteriors(X, y, names, {"ml": marginal["lam_ml"], "cv": lam}, B, quick),
        },
        "draws_per_second": {f"wbb_{k}": v for k, v in rates.items()},
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


def claims(shapes: dict[str, dict[str, dict]]) -> dict:
    """The paper's two statements as counts over the coefficients.

    "WBB is sparser": coefficients with an atom at 0 (``p_zero > 0``) per
    method, and those where a WBB variant's mass within ``eps`` of 0 exceeds
    the bridge's. "Fixed prior weight is more concentrated": coefficients whose
    fixed-weight sd is below the random-weight sd, and the median sd ratio.
    Modes: coefficients with more than one mode, per method.
    """
    methods = ("wbb_fixed", "wbb_random", "bridge")
    per = {m: [entry[m] for entry in shapes.values()] for m in methods}
    ratio = [entry["wbb_fixed"]["sd"] / entry["wbb_random"]["sd"] for entry in shapes.values()]
    return {
        "n_coefficients": len(shapes),
        "with_atom": {m: sum(s["p_zero"] > 0 for s in per[m]) for m in methods},
        "p_small_above_bridge": {
            m: sum(e[m]["p_small"] > e["bridge"]["p_small"] for e in shapes.values())
            for m in ("wbb_fixed", "wbb_random")
        },
        "mean_p_small": {m: float(np.mean([s["p_small"] for s in per[m]])) for m in methods},
        "sd_fixed_below_random": sum(r < 1 for r in ratio),
        "median_sd_ratio_fixed_to_random": float(np.median(ratio)),
        "sd_wbb_below_bridge": {
            m: sum(e[m]["sd"] < e["bridge"]["sd"] for e in shapes.values())
            for m in ("wbb_fixed", "wbb_random")
        },
        "multimodal": {m: sum(s["n_modes"] > 1 for s in per[m]) for m in methods},
        "max_modes": {m: max(s["n_modes"] for s in per[m]) for m in methods},
    }


def residual_sd(X: np.ndarray, y: np.ndarray) -> float:
    """Least-squares residual sd with an intercept (``n - p - 1`` degrees of freedom)."""
    design = np.column_stack([np.ones(len(y)), X])
    residual = y - design @ np.linalg.lstsq(design, y, rcond=None)[0]
    return float(np.sqrt(residual @ residual / (len(y) - design.shape[1])))


def marginal_likelihood_lambda(X: np.ndarray, y: np.ndarray, quick: bool) -> dict:
    """``log p(y | lam)`` of the Bayesian lasso on a log grid by bridge sampling; its maximiser."""
    sigma = residual_sd(X, y)
    top = float(lambda_max(X, y, fit_intercept=True)[0])
    grid, chains, n_draws, warmup = (np.geomspace(top / 1000, top, 11), 2, 400, 200) if quick else \
        (np.geomspace(top / 1000, top, ML_GRID), CHAINS, ML_DRAWS, ML_WARMUP)
    start = time.perf_counter()
    fit = lasso_log_marginal(X, y - y.mean(), grid, sigma, n_draws, seed=SEED, chains=chains, warmup=warmup)
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


def _interpolate_log_marginal(marginal: dict, lam: float) -> float:
    """``log p(y | lam)`` at the CV penalty, linear in ``log lam`` between grid points."""
    return float(np.interp(np.log(lam), np.log(marginal["lams"]), marginal["log_marginal"]))


def penalty_posteriors(X: np.ndarray, y: np.ndarray, names: list[str], lams: dict[str, float],
                       B: int, quick: bool) -> dict:
    """Per penalty: WBB (both variants) and Bayesian lasso means, sds and atoms per coefficient."""
    sigma = residual_sd(X, y)
    chains, n_draws = (2, 400) if quick else (CHAINS, ML_DRAWS)
    gibbs = gibbs_lasso(X, y - y.mean(), list(lams.values()), sigma, n_draws, seed=SEED + 1,
                        chains=chains, warmup=ML_WARMUP)
    result = {}
    for (label, lam), bayes in zip(lams.items(), gibbs, strict=True):
        samples = {
            f"wbb_{prior}": wbb_lasso(X, y, lam, B, seed=SEED, prior=prior, fit_intercept=True,
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


def _figure(out: Path, names: list[str], draws: dict, bridge_beta: np.ndarray) -> None:
    figure, axes = plt.subplots(2, 5, figsize=(18, 6.5))
    for j, (ax, name) in enumerate(zip(axes.ravel(), names, strict=True)):
        series = {
            "WBB fixed prior": draws["fixed"].posterior["beta"].values[0, :, j],
            "WBB random prior": draws["random"].posterior["beta"].values[0, :, j],
            "Bayesian bridge (NUTS)": bridge_beta[:, j],
        }
        values = np.concatenate(list(series.values()))
        bins = np.linspace(*np.quantile(values, [0.002, 0.998]), 50)
        for (label, v), colour in zip(series.items(), ("C0", "C1", "C2"), strict=True):
            zero = np.mean(v == 0)
            tag = f"{label} (P0 = {zero:.2f})" if label.startswith("WBB") else label
            ax.hist(v, bins=bins, density=True, histtype="step", lw=1.6, color=colour, label=tag)
        ax.axvline(0, color="0.6", lw=0.8, ls=":")
        ax.set_title(name)
        ax.legend(fontsize=6.5, loc="upper left")
    figure.suptitle("Diabetes: marginal posteriors of the ten coefficients")
    figure.tight_layout()
    save_figure(figure, out / "wbb_diabetes_marginals.png")


def _lambda_figure(
    out: Path, marginal: dict, lam_cv: float, cv_lams: np.ndarray, cv_error: np.ndarray
) -> None:
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(marginal["lams"], marginal["log_marginal"], "o-", ms=3)
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
