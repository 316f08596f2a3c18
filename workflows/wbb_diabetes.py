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

Writes ``wbb_diabetes_marginals.png`` (the ten marginal posteriors, three
methods), ``wbb_fixed.nc``, ``wbb_random.nc``, ``bridge.nc`` and a summary with,
per coefficient, the mean and the probability of exactly zero of each WBB
variant and the bridge posterior mean, the WBB draws per second and the
bridge's effective samples per second.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import arviz as az
import matplotlib.pyplot as plt
import numpy as np

from stanflow.idata import save, to_inference_data
from stanflow.models import compile_model, program_path
from stanflow.wbb import lambda_max, lasso_path, wbb_lasso
from stanflow.workflows import main, save_figure

DESCRIPTION = (
    "WBB of the lasso (fixed and random prior weight, CV penalty) on the diabetes data "
    "against the Bayesian bridge by NUTS"
)

SEED = 20240707
FOLDS = 10
GRID = 100


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


def cv_alpha(X: np.ndarray, y: np.ndarray, folds: int = FOLDS, seed: int = SEED) -> tuple[float, np.ndarray, np.ndarray]:
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


def bridge(X: np.ndarray, y: np.ndarray, quick: bool) -> tuple[az.InferenceData, float]:
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
    """CV penalty, WBB draws of both variants, bridge by NUTS; figure and summary."""
    X, y, names = diabetes()
    n = len(y)
    alpha, _, cv_error = cv_alpha(X, y)
    lam = n * alpha
    B = 200 if quick else 1000
    draws, rates = {}, {}
    for prior in ("fixed", "random"):
        start = time.perf_counter()
        draws[prior] = wbb_lasso(X, y, lam, B, root_seed=SEED, prior=prior, fit_intercept=True,
                                 feature_names=names, on_failure="raise")
        rates[prior] = B / (time.perf_counter() - start)
        save(draws[prior], out / f"wbb_{prior}.nc")
    posterior, seconds = bridge(X, y, quick)
    save(posterior, out / "bridge.nc")
    bridge_beta = posterior.posterior["beta"].values.reshape(-1, X.shape[1])
    ess = az.ess(posterior, var_names=["beta"])["beta"].values
    coefficients = {}
    for j, name in enumerate(names):
        entry = {}
        for prior, idata in draws.items():
            values = idata.posterior["beta"].values[0, :, j]
            entry[f"wbb_{prior}"] = {"mean": float(values.mean()), "p_zero": float(np.mean(values == 0))}
        entry["bridge_mean"] = float(bridge_beta[:, j].mean())
        coefficients[name] = entry
    _figure(out, names, draws, bridge_beta)
    rhat = az.rhat(posterior, var_names=["beta", "nu", "sigma"])
    return {
        "n": n,
        "lambda_rule": f"{FOLDS}-fold CV minimum over {GRID} log-spaced levels",
        "alpha_per_observation": alpha,
        "lam": lam,
        "cv_error_min": float(cv_error.min()),
        "n_draws": B,
        "coefficients": coefficients,
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


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
