"""Your own Stan model as a loss program, taken through every method, each against its truth.

Four programs a user would write, each one Stan file meeting the loss-program
contract (``docs/your-own-model.md``); the workflow writes them into
``OUT/stan/`` and nothing of them is shipped in ``stan/``:

- ``spatial_median``: ``loss_i = ||x_i - theta||_2`` in the plane, data
  ``x_i ~ N(0, s^2 I)`` with ``s = 2``, prior ``N(0, 10^2)`` per coordinate.
  ``H = E[1/r]/2 I = sqrt(pi/2)/(2 s) I`` and ``J = I/2``, so ``omega* =
  sqrt(pi/2)/s = 0.6267``, and the 95% credible region of ``theta`` covers
  ``theta* = 0`` with asymptotic probability ``1 - exp(-(omega*/omega) 5.991/2)``
  (0.847 at ``omega = 1``, 0.95 at ``omega*``). Per data set (n = 200): the
  plug-in, Holmes-Walker, Robbins-Monro GPC (Stan, reweight design) and the
  path's GPC root; the region's coverage at ``omega = 1`` and at each rule
  (weighted Mahalanobis ellipsoids read from one path); 1000 WBB draws, whose
  covariance's trace over the sandwich's ``tr(H^-1 J H^-1) / n`` is 1 in truth
  (a draw whose optimum sits on a data point, at the loss's kink, does not
  converge: it is counted and left out).
- ``power_normal``: the power posterior of a normal mean with known ``sigma``
  and a normal prior, ``loss_i = -normal_lpdf(y_i | theta, sigma)``: its
  posterior mean, sd and ``log Z(omega)`` are closed forms, checked along the
  whole path and at ``omega = 0.5`` by NUTS.
- ``nonlinear_median``: ``y_i = a exp(-b x_i) + e_i``, ``x_i ~ U(0, 2)``, errors
  ``Gamma(2, 1)`` minus their median (skewed, median 0), absolute loss, so
  ``theta* = (a, b) = (2, 1)`` and ``omega* = 2 f_e(0) = 0.6266`` (``H = 2
  f_e(0) E[grad f grad f']``, ``J = E[grad f grad f']``); the coverage of
  ``theta*`` at ``omega = 1``, at Robbins-Monro GPC's rate and at the path's root.
- ``safebayes``: Grunwald and van Ommen's "easy points": a normal polynomial
  regression (Legendre polynomials of degrees 0..19, unknown variance,
  conjugate prior, ``sigma^2 ~ InvGamma(3, 0.025)``) for data of which half
  are ``y = N(0, 1/40)`` at ``x ~ U(-1, 1)`` and half the easy point ``(0, 0)``:
  misspecified. SafeBayes' R-log
  rate from the program (SMC over the data) against the closed form of the
  conjugate model, and the true excess risk ``E_x (x' beta_bar)^2`` of the
  posterior mean at ``eta = 1`` over that at SafeBayes' ``eta``.

The power posterior and every data set are cells of an experiment
(:mod:`stanflow.experiment`), each kept in ``OUT/runs/*.json``, so a stopped
run resumes; two run at a time. ``--quick`` shrinks the replications to run
in about a minute.
Writes ``own_model.png`` (coverage against the asymptotic formula for the two
medians, the path's ``log Z(omega)`` against the closed form, SafeBayes'
cumulative loss against ``eta``) and ``summary.json``.
"""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullFormatter
from numpy.polynomial import legendre

from stanflow import arviz_compat
from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.gibbs import (
    LossProgram,
    PathSampler,
    StanBackend,
    calibrate_gpc,
    calibrate_holmes_walker,
    calibrate_path,
    calibrate_plugin,
    calibrate_safebayes,
    calibrate_safebayes_conjugate,
    gibbs_path,
    posterior,
)
from stanflow.gibbs.gpc.reweighting import ellipsoid_coverage
from stanflow.gibbs.path import reweight
from stanflow.runs import LocalExecutor
from stanflow.wbb import wbb_program
from stanflow.workflows import main, save_figure, write_text

DESCRIPTION = (
    "Your own Stan model as a loss program: a spatial median, a power posterior, a "
    "nonlinear median and SafeBayes, each against its closed form"
)

SEED = 20261202
OMEGA_TICKS = (0.2, 0.3, 0.5, 1.0, 2.0)
CHI2_2_95 = 5.991464547107979
"""The 0.95 quantile of chi-squared with 2 degrees of freedom."""
GAMMA_MEDIAN = 1.6783469900166608
"""The median of Gamma(2, 1): F(m) = 1 - exp(-m)(1 + m) = 1/2."""
OMEGA_STAR_SPATIAL = math.sqrt(math.pi / 2) / 2.0
OMEGA_STAR_NONLINEAR = 2 * GAMMA_MEDIAN * math.exp(-GAMMA_MEDIAN)
ALPHA = 0.05

PROGRAMS = {
    "spatial_median": """\
// The spatial median of points in the plane: loss_i = ||x[i] - theta||_2,
// prior N(0, 10^2) per coordinate.
data {
  int<lower=1> N;
  array[N] vector[2] x;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
}
parameters {
  vector[2] theta;
}
model {
  vector[N] loss;
  for (i in 1 : N) {
    loss[i] = distance(x[i], theta);
  }
  target += -omega * dot_product(weights, loss);
  target += normal_lpdf(theta | 0, 10);
}
""",
    "power_normal": """\
// The power posterior of a normal mean with known sd: loss_i = -log_lik[i].
data {
  int<lower=1> N;
  vector[N] y;
  real<lower=0> sigma;
  real prior_mean;
  real<lower=0> prior_sd;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
}
parameters {
  real theta;
}
model {
  target += omega * dot_product(weights, normal_log_lik(y, theta, sigma));
  target += normal_lpdf(theta | prior_mean, prior_sd);
}
generated quantities {
  vector[N] log_lik = normal_log_lik(y, theta, sigma);
}
""",
    "nonlinear_median": """\
// A nonlinear median regression y = a exp(-b x) + e: absolute loss,
// priors N(0, 10^2).
data {
  int<lower=1> N;
  vector[N] x;
  vector[N] y;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
}
parameters {
  real a;
  real b;
}
model {
  target += -omega * dot_product(weights, abs(y - a * exp(-b * x)));
  target += normal_lpdf(a | 0, 10) + normal_lpdf(b | 0, 10);
}
""",
    "safebayes": """\
// A normal linear regression with unknown variance and the conjugate prior
// beta | sigma2 ~ N(0, sigma2 prior_scale^2 I), sigma2 ~ InvGamma(a0, b0), as a
// power posterior: loss_i = -normal_lpdf(y[i] | X[i] beta, sqrt(sigma2)).
data {
  int<lower=1> N;
  int<lower=1> K;
  matrix[N, K] X;
  vector[N] y;
  real<lower=0> prior_scale;
  real<lower=0> a0;
  real<lower=0> b0;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
}
parameters {
  vector[K] beta;
  real<lower=0> sigma2;
}
model {
  vector[N] mu = X * beta;
  vector[N] log_lik;
  for (i in 1 : N) {
    log_lik[i] = normal_lpdf(y[i] | mu[i], sqrt(sigma2));
  }
  target += omega * dot_product(weights, log_lik);
  target += normal_lpdf(beta | 0, sqrt(sigma2) * prior_scale);
  target += inv_gamma_lpdf(sigma2 | a0, b0);
}
""",
}
POWER_NORMAL_FUNCTIONS = """\
functions {
  vector normal_log_lik(vector y, real theta, real sigma) {
    int N = num_elements(y);
    vector[N] out;
    for (i in 1 : N) {
      out[i] = normal_lpdf(y[i] | theta, sigma);
    }
    return out;
  }
}
"""


SETTINGS = {
    "quick": {
        "spatial_median": {"n": 200, "datasets": 2, "B": 40, "particles": 1000, "wbb_draws": 200,
                           "wbb_draws_kept": "converged",
                           "gpc": {"proposal_draws": 4000, "draws": 300, "max_steps": 5}},
        "nonlinear_median": {"n": 200, "datasets": 2, "B": 40, "particles": 1000,
                             "gpc": {"proposal_draws": 4000, "draws": 300, "max_steps": 5}},
        "power_normal": {"n": 50, "particles": 1000, "nuts_draws": 500, "sigma": 1.5,
                         "prior_mean": 0.5, "prior_sd": 3.0, "omega_max": 2.0, "nuts_omega": 0.5},
        "safebayes": {"n": 50, "datasets": 1, "degree": 19, "noise_var": 1 / 40, "easy_share": 0.5,
                      "prior_scale": 10.0, "a0": 3.0, "b0": 0.025, "particles": 400,
                      "etas": [2.0**-k for k in range(8, -1, -2)], "nuts_draws": 400},
    },
    "full": {
        "spatial_median": {"n": 200, "datasets": 200, "B": 200, "particles": 4000,
                           "wbb_draws": 1000, "wbb_draws_kept": "converged",
                           "gpc": {"proposal_draws": 20000, "draws": 1000, "max_steps": 16}},
        "nonlinear_median": {"n": 200, "datasets": 200, "B": 200, "particles": 4000,
                             "gpc": {"proposal_draws": 20000, "draws": 1000, "max_steps": 16}},
        "power_normal": {"n": 50, "particles": 4000, "nuts_draws": 4000, "sigma": 1.5,
                         "prior_mean": 0.5, "prior_sd": 3.0, "omega_max": 2.0, "nuts_omega": 0.5},
        "safebayes": {"n": 100, "datasets": 10, "degree": 19, "noise_var": 1 / 40,
                      "easy_share": 0.5, "prior_scale": 10.0, "a0": 3.0, "b0": 0.025,
                      "particles": 2000, "etas": [2.0**-k for k in range(8, -1, -1)],
                      "nuts_draws": 2000},
    },
}


def program_files(folder: Path) -> dict[str, Path]:
    """Where the example programs go in ``folder``: ``<name>.stan``."""
    return {name: folder / f"{name}.stan" for name in PROGRAMS}


def write_programs(folder: Path) -> dict[str, Path]:
    """The example programs as Stan files in ``folder`` (``OUT/stan``)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, path in program_files(folder).items():
        functions = POWER_NORMAL_FUNCTIONS if name == "power_normal" else ""
        paths[name] = write_text(path, functions + PROGRAMS[name])
    return paths


def cells(settings: dict[str, Any]) -> list[Cell]:
    """The power posterior, then one cell per data set of each other example."""

    def params(example: str, **extra: Any) -> dict[str, Any]:
        # what a cell depends on: its example's settings but the number of data sets
        config = {k: v for k, v in settings[example].items() if k != "datasets"}
        return config | {"example": example, **extra}

    return [Cell("power_normal", params("power_normal"))] + [
        Cell(f"{example}-{r:03d}", params(example, r=r))
        for example in ("spatial_median", "nonlinear_median", "safebayes")
        for r in range(settings[example]["datasets"])
    ]


def compute(run: CellRun) -> dict:
    """One cell, from its example's program in ``OUT/stan``."""
    example = run.params["example"]
    example_record = {"power_normal": power_normal_record, "spatial_median": spatial_record,
                      "nonlinear_median": nonlinear_record, "safebayes": safebayes_record}[example]
    return {"example": example} | example_record(program_files(run.out / "stan")[example], run)


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """Every example's checks and where the programs are."""
    normal = records["power_normal"]
    return {
        "spatial_median": summarise_spatial(example_records(records, "spatial_median")),
        "power_normal": {k: v for k, v in normal.items() if k not in ("config", "example")},
        "nonlinear_median": summarise_nonlinear(example_records(records, "nonlinear_median")),
        "safebayes": summarise_safebayes(example_records(records, "safebayes")),
        "programs": {name: str(path) for name, path in program_files(Path("stan")).items()},
    }


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``own_model.png``."""
    figure(summary, records["power_normal"], example_records(records, "safebayes"),
           out / "own_model.png")


def example_records(records: Records, example: str) -> list[dict]:
    """The records of ``example``'s data sets, in order."""
    return [record for record in records.values() if record["example"] == example]


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, seed=SEED, jobs=2)


def run(out: Path, quick: bool) -> dict:
    """The programs into ``out/stan``, every cell (resumed from ``out/runs``), figure and summary."""
    write_programs(out / "stan")
    return EXPERIMENT.run(out, quick)


# -- the cells -------------------------------------------------------------------

def spatial_record(path: Path, run: CellRun) -> dict:
    """One spatial-median data set: every rule, the coverage at each, WBB."""
    config, r = run.params, run.params["r"]
    rng = run.rng(1, r)
    x = rng.normal(0.0, 2.0, size=(config["n"], 2))
    program = LossProgram(path, {"N": config["n"], "x": x})
    record = rules_and_coverage(program, np.zeros(2), config, seed=r)
    # A weighted spatial median can sit on a data point, where the loss has a kink
    # and L-BFGS cannot certify its optimum: such a draw is NaN, counted and left out.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "(?s).*WBB solves did not converge")
        draws = wbb_program(program, config["wbb_draws"], seed=r)
    converged = draws.sample_stats["converged"].values.reshape(-1)
    theta = draws.posterior["theta"].values.reshape(-1, 2)[converged]
    sandwich_trace = 2 * 2 / (OMEGA_STAR_SPATIAL**2 * config["n"])  # tr(H^-1 J H^-1)/n
    record["wbb_cov_ratio"] = float(np.trace(np.cov(theta.T)) / sandwich_trace)
    record["wbb_unconverged"] = int(np.count_nonzero(~converged))
    return record


def nonlinear_record(path: Path, run: CellRun) -> dict:
    """One nonlinear-median data set: GPC two ways, the coverage at each and at omega = 1."""
    config, r = run.params, run.params["r"]
    rng = run.rng(2, r)
    x = rng.uniform(0.0, 2.0, size=config["n"])
    y = 2.0 * np.exp(-x) + rng.gamma(2.0, 1.0, size=config["n"]) - GAMMA_MEDIAN
    program = LossProgram(path, {"N": config["n"], "x": x, "y": y})
    return rules_and_coverage(program, np.array([2.0, 1.0]), config, seed=r, plugin=False)


def rules_and_coverage(program: LossProgram, truth: np.ndarray, config: dict, *, seed: int,
                       plugin: bool = True) -> dict:
    """The learning rates of a data set and whether each rate's 95% region holds ``truth``.

    Robbins-Monro GPC runs the program's executable (reweight design); the
    path's GPC root, the plug-in rules and every region come from one path,
    whose particles at each rate are a weighted Mahalanobis ellipsoid.
    """
    estimate = program.estimate()
    rates: dict[str, float] = {}
    if plugin:
        for name, rule in (("plugin", calibrate_plugin), ("holmes_walker", calibrate_holmes_walker)):
            rates[name] = float(arviz_compat.group(
                rule(program, estimate=estimate.theta), "calibration")["omega"])
    gpc = config["gpc"]
    backend = StanBackend(draws=gpc["draws"], proposal_draws=gpc["proposal_draws"],
                          executor=LocalExecutor(1))
    rates["gpc"] = float(arviz_compat.group(calibrate_gpc(
        program, backend=backend, estimate=estimate.theta, B=config["B"], seed=seed,
        max_steps=gpc["max_steps"]), "calibration")["omega"])
    result = calibrate_path(program, estimate=estimate.theta, B=config["B"], seed=seed,
                            rules=(), marks={"omega_1": 1.0, **rates},
                            sampler=PathSampler(n_particles=config["particles"], n_moves=3),
                            resamples="reweight")
    rates["path"] = float(arviz_compat.group(result, "calibration")["omega"])
    path = arviz_compat.group(result, "path")
    covered, ess = {}, {}
    for name, omega in {"omega_1": 1.0, **rates}.items():
        read = reweight(path, omega)
        covered[name] = bool(ellipsoid_coverage(read.theta, read.weights[None], truth, ALPHA)[0])
        ess[name] = read.ess
    return {"omega": rates, "covered": covered, "ess": ess,
            "estimate": estimate.theta.tolist()}


def power_normal_record(path: Path, run: CellRun) -> dict:
    """The power-normal program's path and NUTS against the closed forms."""
    config = run.params
    rng = run.rng(3)
    y = rng.normal(2.0, 2.0, size=config["n"])
    program = LossProgram(path, {"N": config["n"], "y": y, "sigma": config["sigma"],
                                 "prior_mean": config["prior_mean"],
                                 "prior_sd": config["prior_sd"]})
    result = gibbs_path(program, omega_max=config["omega_max"],
                        sampler=PathSampler(n_particles=config["particles"]), seed=run.seed)
    steps, table = arviz_compat.group(result, "path"), arviz_compat.group(result, "path_functionals")
    exact_steps = np.array([normal_closed_form(y, w, config)[2] for w in steps["omega"].values])
    omegas = table["omega"].values[1:]  # omega = 0 is the prior itself
    exact = np.array([normal_closed_form(y, w, config) for w in omegas])
    mean = table["mean"].sel(param="theta").values[1:]
    q = table["quantile"].sel(param="theta")
    sd = (q.sel(prob=0.975) - q.sel(prob=0.025)).values[1:] / (2 * 1.959963984540054)
    error = np.abs(steps["log_z"].values - exact_steps)
    fit = posterior(program, omega=config["nuts_omega"], chains=4,
                    iter_sampling=config["nuts_draws"] // 4, seed=run.seed)
    draws = fit.posterior["theta"].values.ravel()
    nuts_mean, nuts_sd, _ = normal_closed_form(y, config["nuts_omega"], config)
    mcse = float(arviz_compat.mcse(fit, var_names=["theta"])["theta"])
    return {
        "log_z_max_abs_error": float(error.max()),
        "log_z_max_error_in_se": float(np.max(error / np.maximum(steps["log_z_se"].values,
                                                                 1e-12))),
        "mean_max_abs_error": float(np.max(np.abs(mean - exact[:, 0]))),
        "sd_max_rel_error": float(np.max(np.abs(sd / exact[:, 1] - 1))),
        "nuts": {"omega": config["nuts_omega"],
                 "mean_abs_error": float(abs(draws.mean() - nuts_mean)),
                 "mean_error_in_mcse": float(abs(draws.mean() - nuts_mean) / mcse),
                 "sd_rel_error": float(abs(draws.std() / nuts_sd - 1))},
        "path": {"omega": steps["omega"].values.tolist(), "log_z": steps["log_z"].values.tolist(),
                 "log_z_se": steps["log_z_se"].values.tolist(),
                 "log_z_exact": exact_steps.tolist()},
    }


def normal_closed_form(y: np.ndarray, omega: float, config: dict) -> tuple[float, float, float]:
    """Posterior mean, sd and log Z(omega) of the power posterior of a normal mean."""
    sigma, m0, s0 = config["sigma"], config["prior_mean"], config["prior_sd"]
    a, s1, s2 = omega * len(y), omega * y.sum(), omega * (y**2).sum()
    precision = a / sigma**2 + 1 / s0**2
    b = s1 / sigma**2 + m0 / s0**2
    c = s2 / sigma**2 + m0**2 / s0**2
    log_z = (-a * math.log(sigma * math.sqrt(2 * math.pi)) - math.log(s0)
             - 0.5 * math.log(precision) + 0.5 * b**2 / precision - 0.5 * c)
    return b / precision, precision**-0.5, log_z


def safebayes_record(path: Path, run: CellRun) -> dict:
    """One easy-points data set: SafeBayes from the program and in closed form, and the risks."""
    config, r = run.params, run.params["r"]
    rng = run.rng(4, r)
    n = config["n"]
    easy = rng.uniform(size=n) < config["easy_share"]
    x = np.where(easy, 0.0, rng.uniform(-1, 1, size=n))
    y = np.where(easy, 0.0, rng.normal(0.0, math.sqrt(config["noise_var"]), size=n))
    X = legendre.legvander(x, config["degree"])
    program = LossProgram(path, {"N": n, "K": X.shape[1], "X": X, "y": y,
                                 "prior_scale": config["prior_scale"], "a0": config["a0"],
                                 "b0": config["b0"]})
    etas = np.array(config["etas"])
    found = arviz_compat.group(calibrate_safebayes(
        program, etas=etas, n_particles=config["particles"], seed=r), "calibration")
    exact = arviz_compat.group(calibrate_safebayes_conjugate(
        y, X, etas=etas, prior_scale=config["prior_scale"], a0=config["a0"],
        b0=config["b0"]), "calibration")
    eta = float(found["omega"].sel(variant="r-log"))
    risks = {}
    for name, rate in (("eta_1", 1.0), ("safebayes", eta)):
        fit = posterior(program, omega=rate, chains=4, iter_sampling=config["nuts_draws"] // 4,
                        seed=run.seed + r)
        beta = fit.posterior["beta"].values.reshape(-1, X.shape[1]).mean(axis=0)
        risks[name] = excess_risk(beta, config)
    return {
        "eta": eta,
        "eta_closed_form": float(exact["omega"].sel(variant="r-log")),
        "cumulative_r_log": found["cumulative_loss"].sel(variant="r-log").values.tolist(),
        "cumulative_r_log_closed_form":
            exact["cumulative_loss"].sel(variant="r-log").values.tolist(),
        "risk": risks,
        "risk_ratio": risks["eta_1"] / risks["safebayes"],
    }


def excess_risk(beta: np.ndarray, config: dict) -> float:
    """``E_x (x' beta)^2`` under the data's x: the easy point 0 or ``U(-1, 1)``.

    The truth is 0, so this is the excess squared-error risk of the regression
    function ``sum_k beta_k P_k(x)``; ``E P_j P_k = delta_jk / (2k + 1)`` on ``U(-1, 1)``.
    """
    share = config["easy_share"]
    at_zero = legendre.legval(0.0, beta) ** 2
    spread = np.sum(beta**2 / (2 * np.arange(len(beta)) + 1))
    return float(share * at_zero + (1 - share) * spread)


# -- summaries and the figure ----------------------------------------------------

def coverage_summary(records: list[dict], names: list[str], omega_star: float) -> dict:
    """Coverage per rate with its Monte Carlo standard error, and the asymptotic truths."""
    out: dict[str, Any] = {"coverage": {}, "coverage_se": {}}
    for name in names:
        hits = np.array([record["covered"][name] for record in records], dtype=float)
        out["coverage"][name] = float(hits.mean())
        out["coverage_se"][name] = float(math.sqrt(hits.mean() * (1 - hits.mean()) / len(hits)))
    out["coverage_asymptotic"] = {"omega_1": asymptotic_coverage(omega_star, 1.0),
                                  "omega_star": 1 - ALPHA}
    return out


def asymptotic_coverage(omega_star: float, omega: float) -> float:
    """``1 - exp(-(omega*/omega) 5.991/2)``: the 95% ellipse of a 2-D posterior at ``omega``."""
    return 1 - math.exp(-(omega_star / omega) * CHI2_2_95 / 2)


def rate_summary(records: list[dict], names: list[str]) -> dict:
    return {"omega": {n: float(np.median([r["omega"][n] for r in records])) for n in names},
            "omega_quartiles": {n: np.quantile([r["omega"][n] for r in records],
                                               [0.25, 0.75]).tolist() for n in names}}


def summarise_spatial(records: list[dict]) -> dict:
    rates = ["plugin", "holmes_walker", "gpc", "path"]
    ratios = np.array([r["wbb_cov_ratio"] for r in records])
    return {"omega_star": OMEGA_STAR_SPATIAL, "datasets": len(records),
            **rate_summary(records, rates),
            **coverage_summary(records, ["omega_1", *rates], OMEGA_STAR_SPATIAL),
            "wbb_cov_ratio": float(ratios.mean()),
            "wbb_unconverged_share": float(np.mean([r["wbb_unconverged"] for r in records]))
            / records[0]["config"]["wbb_draws"],
            "wbb_cov_ratio_se": float(ratios.std(ddof=1) / math.sqrt(len(ratios)))
            if len(ratios) > 1 else 0.0}


def summarise_nonlinear(records: list[dict]) -> dict:
    return {"omega_star": OMEGA_STAR_NONLINEAR, "datasets": len(records),
            **rate_summary(records, ["gpc", "path"]),
            **coverage_summary(records, ["omega_1", "gpc", "path"], OMEGA_STAR_NONLINEAR)}


def summarise_safebayes(records: list[dict]) -> dict:
    return {"datasets": len(records),
            "eta": float(np.median([r["eta"] for r in records])),
            "eta_closed_form": float(np.median([r["eta_closed_form"] for r in records])),
            "eta_agrees": float(np.mean([r["eta"] == r["eta_closed_form"] for r in records])),
            "risk_ratio": float(np.median([r["risk_ratio"] for r in records])),
            "per_dataset": [{k: r[k] for k in ("eta", "eta_closed_form", "risk_ratio")}
                            for r in records]}


def figure(summary: dict, normal: dict, safe: list[dict], path: Path) -> None:
    fig, axes = plt.subplots(1, 4, figsize=(17, 4.2))
    for ax, key, names in ((axes[0], "spatial_median", ["omega_1", "plugin", "holmes_walker",
                                                         "gpc", "path"]),
                           (axes[1], "nonlinear_median", ["omega_1", "gpc", "path"])):
        part = summary[key]
        grid = np.geomspace(0.2, 2.0, 200)
        ax.plot(grid, [asymptotic_coverage(part["omega_star"], w) for w in grid], "k-", lw=1,
                label="asymptotic")
        for name in names:
            omega = 1.0 if name == "omega_1" else part["omega"][name]
            ax.errorbar([omega], [part["coverage"][name]], yerr=[2 * part["coverage_se"][name]],
                        fmt="o", capsize=3, label=f"{name} ({part['datasets']} data sets)")
        ax.axhline(1 - ALPHA, color="grey", ls=":", lw=1)
        ax.axvline(part["omega_star"], color="grey", ls="--", lw=1, label="omega*")
        ax.set(xscale="log", xlabel="omega (median over data sets)", ylabel="coverage of theta*",
               title=key.replace("_", " "))
        ax.set_xticks(OMEGA_TICKS, labels=[f"{t:g}" for t in OMEGA_TICKS])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=7)
    path_record = normal["path"]
    omega = np.array(path_record["omega"])
    axes[2].axhline(0.0, color="k", lw=1, label="closed form")
    axes[2].errorbar(omega, np.subtract(path_record["log_z"], path_record["log_z_exact"]),
                     yerr=2 * np.array(path_record["log_z_se"]), fmt="o", capsize=3,
                     label="path (2 se)")
    axes[2].set(xlabel="omega", ylabel="log Z(omega): path - closed form",
                title="power posterior of a normal mean")
    axes[2].legend(fontsize=7)
    etas = np.array(summary["settings"]["safebayes"]["etas"])
    for record in safe:
        ours = np.array(record["cumulative_r_log"])
        exact = np.array(record["cumulative_r_log_closed_form"])
        axes[3].plot(etas, ours - ours.min(), "C0-", alpha=0.6)
        axes[3].plot(etas, exact - exact.min(), "k:", alpha=0.6)
    axes[3].plot([], [], "C0-", label="program (SMC)")
    axes[3].plot([], [], "k:", label="closed form")
    axes[3].set_yscale("symlog", linthresh=1.0)
    axes[3].set(xscale="log", xlabel="eta", ylim=(0, None),
                ylabel="cumulative R-log - its minimum", title="SafeBayes, easy points")
    axes[3].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
