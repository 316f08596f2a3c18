"""Your own Stan model as an LCVI program: loss-calibrated decisions, each against its truth.

Two programs a user would write, each one Stan file meeting the LCVI-program
contract (``docs/your-own-model.md``, "LCVI"); the workflow writes them into
``OUT/stan/`` and nothing of them is shipped in ``stan/``:

- ``conjugate``: a Bayesian linear regression with known noise, ``y = X beta +
  N(0, sigma^2)``, ``beta ~ N(0, s0^2 I)``, an orthogonal design (``X' X = n
  I``, so the posterior factorises and mean-field VI is exact), check loss
  ``tau = 0.2`` with the linearised utility ``M - l`` at a fixed ``M``, one
  decision per observation (normal outcomes). For a normal ``q`` the ELBO and
  the utility term with the loop's fixed base samples are closed forms, so the
  calibrated optimum is a fixed point found by brute force (scipy), as in
  ``tests/test_lcvi_conjugate_e2e.py``: ``conjugate.decision_max_abs_error`` is
  LCVI's decisions against it.
- ``lognormal``: a log-normal regression ``log y_i ~ N(alpha + x_i' beta,
  sigma^2)`` with two covariates, its outcomes at held-out points written in
  Stan as ``exp(mu + sigma z)`` (outcomes of any form), check loss ``tau =
  0.8``: per seed a new data set (n = 100 training, 50 held-out points), NUTS
  with the utility off, plain VI and LCVI on one ADVI trajectory;
  ``lognormal.risk.{vi,lcvi,nuts}`` is the empirical risk on the held-out
  outcomes (mean and sd over the seeds), and
  ``lognormal.bayes_decision_max_rel_error`` stanflow's numerical Bayes
  decisions from NUTS draws (read from the program's outcomes) against the
  empirical 0.8-quantiles of the program's own predictive draws
  (``lognormal_rng``), the largest relative difference over points and seeds.

The conjugate regression and every seed are cells of an experiment
(:mod:`stanflow.experiment`), each kept in ``OUT/runs/*.json``, so a stopped
run resumes; two run at a time. ``--quick`` runs two seeds with short ADVI
runs in about a minute.
Writes ``own_model_lcvi.png`` (risks per seed; the conjugate decisions against
the brute force) and ``summary.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from scipy.optimize import minimize
from scipy.stats import norm

from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.lcvi import LcviProgram, Utility, nuts_baseline, run_lcvi
from stanflow.workflows import main, save_figure, write_text

DESCRIPTION = (
    "Your own model as an LCVI program: a conjugate regression against its brute-force "
    "optimum, a log-normal regression's held-out check-loss risk (VI, LCVI, NUTS)"
)
SEED = 2026

CONJUGATE = """// A Bayesian linear regression with known noise as an LCVI program:
// y ~ N(X beta, sigma^2), beta ~ N(0, prior_sd^2), one decision per
// observation for its outcome y_rep[n] ~ N(X[n] beta, sigma^2).
functions {
  #include lcvi.stanfunctions
}
data {
  int<lower=1> N;
  int<lower=1> K;
  matrix[N, K] X;
  vector[N] y;
  real<lower=0> sigma;
  real<lower=0> prior_sd;
  #include lcvi_data.stan
}
parameters {
  vector[K] beta;
}
model {
  beta ~ normal(0, prior_sd);
  y ~ normal(X * beta, sigma);
  target += lcvi_utility(X * beta, sigma, lcvi_z, lcvi_h, lcvi);
}
"""

LOGNORMAL = """// A log-normal regression as an LCVI program: log y ~ N(alpha + X beta,
// sigma^2), decisions for the outcomes at M held-out points, written in Stan
// from the normal base samples: y_new = exp(alpha + X_new beta + sigma z).
functions {
  #include lcvi.stanfunctions
}
data {
  int<lower=1> N;
  int<lower=1> K;
  matrix[N, K] X;
  vector<lower=0>[N] y;
  int<lower=1> M;
  matrix[M, K] X_new;
  #include lcvi_data.stan
}
parameters {
  real alpha;
  vector[K] beta;
  real<lower=0> sigma;
}
model {
  alpha ~ normal(0, 5);
  beta ~ normal(0, 5);
  sigma ~ normal(0, 2);
  y ~ lognormal(alpha + X * beta, sigma);
  vector[M] mu_new = alpha + X_new * beta;
  target += lcvi_utility(exp(rep_matrix(mu_new', lcvi_S) + sigma * lcvi_z), lcvi_h, lcvi);
}
generated quantities {
  array[M] real y_rep = lognormal_rng(alpha + X_new * beta, sigma);
}
"""

PROGRAMS = {"conjugate": CONJUGATE, "lognormal": LOGNORMAL}


SETTINGS = {
    "quick": {
        "conjugate": {"n": 8, "K": 2, "sigma": 1.0, "prior_sd": 10.0, "tau": 0.2, "M": 0.5,
                      "iter": 4000, "branch_iter": 1000, "decision_every": 500, "eta": 0.1,
                      "grad_samples": 50, "n_draws": 4000, "tol": 0.1},
        "lognormal": {"n": 100, "M": 50, "K": 2, "alpha": 0.5, "beta": [0.8, -0.4],
                      "sigma": 0.6, "tau": 0.8, "seeds": 2, "iter": 2000, "nuts_draws": 500,
                      "tol": 0.05},
    },
    "full": {
        "conjugate": {"n": 8, "K": 2, "sigma": 1.0, "prior_sd": 10.0, "tau": 0.2, "M": 0.5,
                      "iter": 10000, "branch_iter": 2000, "decision_every": 500, "eta": 0.1,
                      "grad_samples": 50, "n_draws": 4000, "tol": 0.01},
        "lognormal": {"n": 100, "M": 50, "K": 2, "alpha": 0.5, "beta": [0.8, -0.4],
                      "sigma": 0.6, "tau": 0.8, "seeds": 10, "iter": 10000, "nuts_draws": 1000,
                      "tol": 0.05},
    },
}


def program_files(folder: Path) -> dict[str, Path]:
    """Where the example programs go in ``folder``: ``<name>.stan``."""
    return {name: folder / f"{name}.stan" for name in PROGRAMS}


def write_programs(folder: Path) -> dict[str, Path]:
    """The example programs as Stan files in ``folder`` (``OUT/stan``)."""
    folder.mkdir(parents=True, exist_ok=True)
    return {name: write_text(path, PROGRAMS[name]) for name, path in program_files(folder).items()}


def cells(settings: dict[str, Any]) -> list[Cell]:
    """The conjugate regression, then one cell per seed of the log-normal regression."""
    lognormal = {k: v for k, v in settings["lognormal"].items() if k != "seeds"}
    return [Cell("conjugate", {"example": "conjugate", **settings["conjugate"]})] + [
        Cell(f"lognormal-seed-{r}", {"example": "lognormal", **lognormal, "r": r})
        for r in range(1, settings["lognormal"]["seeds"] + 1)
    ]


def compute(run: CellRun) -> dict:
    """One cell, from its example's program in ``OUT/stan``."""
    example = run.params["example"]
    path = program_files(run.out / "stan")[example]
    if example == "conjugate":
        return conjugate_record(path, run.params)
    return lognormal_record(path, run.params, run.params["r"])


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """The conjugate checks, the log-normal risks and where the programs are."""
    return {
        "conjugate": {k: v for k, v in records["conjugate"].items() if k != "config"},
        "lognormal": summarise_lognormal(lognormal_records(records)),
        "programs": {name: str(path) for name, path in program_files(Path("stan")).items()},
    }


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``own_model_lcvi.png``."""
    figure(summary, lognormal_records(records), out / "own_model_lcvi.png")


def lognormal_records(records: Records) -> list[dict]:
    """The log-normal regression's records, by seed."""
    return [record for name, record in records.items() if name != "conjugate"]


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, seed=SEED, jobs=2)


def run(out: Path, quick: bool) -> dict:
    """The programs into ``out/stan``, every cell (resumed from ``out/runs``), figure and summary."""
    write_programs(out / "stan")
    return EXPERIMENT.run(out, quick)


# -- the conjugate regression ------------------------------------------------------


def conjugate_data(config: dict) -> dict:
    """An orthogonal design (``X' X = n I``) and its outcomes."""
    rng = np.random.default_rng(SEED)
    n, K = config["n"], config["K"]
    q, _ = np.linalg.qr(rng.standard_normal((n, K)))
    X = q * np.sqrt(n)
    beta = rng.normal(0, 1, K)
    y = X @ beta + config["sigma"] * rng.standard_normal(n)
    return {"N": n, "K": K, "X": X, "y": y, "sigma": config["sigma"],
            "prior_sd": config["prior_sd"]}


def conjugate_record(path: Path, config: dict) -> dict:
    """LCVI on the conjugate regression against its brute-force calibrated optimum."""
    data = conjugate_data(config)
    program = LcviProgram(path, data, y=data["y"], name="conjugate")
    loop = run_lcvi(program, "check", tau=config["tau"], utility=Utility(scale=config["M"]),
                    tol=config["tol"], max_iter=2 * config["iter"], seed=SEED,
                    branch_iter=config["branch_iter"], n_draws=config["n_draws"],
                    decision_every=config["decision_every"],
                    advi_args={"iter": config["iter"], "eta": config["eta"],
                               "grad_samples": config["grad_samples"]})
    m_star, s_star, h_star = calibrated_optimum(data, config, loop.eps_y)
    precision = 1 / config["prior_sd"] ** 2 + data["N"] / config["sigma"] ** 2
    m_post = data["X"].T @ data["y"] / config["sigma"] ** 2 / precision
    vi, last = loop.steps[0], loop.steps[-1]
    return {
        "decision_max_abs_error": float(np.max(np.abs(last.decisions - h_star))),
        "mean_max_abs_error": float(np.max(np.abs(last.state.mu - m_star))),
        "sd_max_rel_error": float(np.max(np.abs(np.exp(last.state.scale) / s_star - 1))),
        "plain_vi_mean_max_abs_error": float(np.max(np.abs(vi.state.mu - m_post))),
        "plain_vi_sd_max_rel_error": float(
            np.max(np.abs(np.exp(vi.state.scale) * np.sqrt(precision) - 1))),
        "sd_shrinkage": float(np.mean(s_star) * np.sqrt(precision)),
        "settled": bool(loop.settled),
        "decisions": last.decisions.tolist(),
        "decisions_brute_force": h_star.tolist(),
    }


def calibrated_optimum(data: dict, config: dict, eps_y: np.ndarray):
    """The fixed point of ``(m, s) = argmax ELBO + U(h)``, ``h`` the predictive's tau-quantiles."""
    X, y, sigma, s0 = data["X"], data["y"], config["sigma"], config["prior_sd"]
    tau, M, K = config["tau"], config["M"], data["K"]

    def negative_objective(x: np.ndarray, h: np.ndarray) -> float:
        m, s = x[:K], np.exp(x[K:])
        elbo = (-(m @ m + s @ s) / (2 * s0**2)
                - (np.sum((y - X @ m) ** 2) + np.sum(X**2 @ s**2)) / (2 * sigma**2)
                + np.sum(np.log(s)))
        v = np.sqrt(X**2 @ s**2)  # sd of x_n' beta under q
        z = (h - X @ m - sigma * eps_y) / v  # (S, N)
        expected_loss = v * (norm.pdf(z) + z * (norm.cdf(z) - tau))
        return -(elbo - expected_loss.mean(axis=0).sum() / M)

    precision = 1 / s0**2 + data["N"] / sigma**2
    m, s = X.T @ y / sigma**2 / precision, np.full(K, precision**-0.5)
    for _ in range(200):
        h = X @ m + np.sqrt(X**2 @ s**2 + sigma**2) * norm.ppf(tau)
        result = minimize(negative_objective, np.concatenate([m, np.log(s)]), args=(h,),
                          method="Nelder-Mead",
                          options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000})
        m_new, s_new = result.x[:K], np.exp(result.x[K:])
        done = np.max(np.abs(m_new - m)) < 1e-9 and np.max(np.abs(s_new - s)) < 1e-9
        m, s = m_new, s_new
        if done:
            break
    return m, s, X @ m + np.sqrt(X**2 @ s**2 + sigma**2) * norm.ppf(tau)


# -- the log-normal regression -------------------------------------------------------


def lognormal_data(config: dict, seed: int) -> tuple[dict, np.ndarray]:
    """Training data and held-out points of one seed, and the held-out outcomes."""
    rng = np.random.default_rng([SEED, seed])
    n, M, K = config["n"], config["M"], config["K"]
    X, X_new = rng.uniform(-1, 1, (n, K)), rng.uniform(-1, 1, (M, K))

    def draw(design: np.ndarray) -> np.ndarray:
        mu = config["alpha"] + design @ np.asarray(config["beta"])
        return np.exp(mu + config["sigma"] * rng.standard_normal(design.shape[0]))

    return {"N": n, "K": K, "X": X, "y": draw(X), "M": M, "X_new": X_new}, draw(X_new)


def lognormal_record(path: Path, config: dict, seed: int) -> dict:
    """One seed's data set: NUTS, plain VI and LCVI, their held-out risks, the Bayes decisions."""
    data, y_new = lognormal_data(config, seed)
    program = LcviProgram(path, data, y=y_new, name="lognormal")
    hmc = nuts_baseline(program, "check", tau=config["tau"], draws=config["nuts_draws"],
                        seed=seed)
    y_rep, tau = hmc.fit.stan_variable("y_rep"), config["tau"]
    quantiles = np.quantile(y_rep, tau, axis=0)
    # Monte Carlo error of an empirical quantile: sqrt(tau (1 - tau) / n) / density,
    # the density from the quantiles 0.02 either side
    spread = np.quantile(y_rep, tau + 0.02, axis=0) - np.quantile(y_rep, tau - 0.02, axis=0)
    quantile_se = np.sqrt(tau * (1 - tau) / y_rep.shape[0]) * spread / 0.04
    loop = run_lcvi(program, "check", tau=config["tau"], seed=seed, tol=config["tol"],
                    max_iter=2 * config["iter"], advi_args={"iter": config["iter"]})
    return {
        "seed": seed,
        "risk_vi": loop.baseline.risk,
        "risk_lcvi": loop.steps[-1].risk,
        "risk_nuts": hmc.risk,
        "bayes_decision_max_rel_error": float(np.max(np.abs(hmc.decisions / quantiles - 1))),
        "bayes_decision_max_z": float(np.max(np.abs(hmc.decisions - quantiles) / quantile_se)),
        "settled": bool(loop.settled),
        "advi_iterations": int(loop.steps[-1].state.iteration),
        "seconds_lcvi": float(sum(s.seconds for s in loop.steps[1:])),
        "seconds_vi": float(loop.steps[0].seconds),
    }


def summarise_lognormal(records: list[dict]) -> dict:
    """Risks (mean, sd over seeds), the paired reduction and the decision check."""
    risks = {name: np.array([r[f"risk_{name}"] for r in records]) for name in ("vi", "lcvi",
                                                                                 "nuts")}
    reduction = 100 * (risks["vi"] - risks["lcvi"]) / risks["vi"]
    return {
        "seeds": len(records),
        "risk": {name: {"mean": float(v.mean()), "sd": float(v.std(ddof=1))}
                 for name, v in risks.items()},
        "reduction_pct": {"mean": float(reduction.mean()), "sd": float(reduction.std(ddof=1))},
        "bayes_decision_max_rel_error": max(r["bayes_decision_max_rel_error"] for r in records),
        "bayes_decision_max_z": max(r["bayes_decision_max_z"] for r in records),
        "settled": sum(r["settled"] for r in records),
    }


def figure(summary: dict, lognormal: list[dict], path: Path) -> None:
    """Held-out risks per seed; the conjugate decisions against the brute force."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    seeds = [r["seed"] for r in lognormal]
    for name, marker in (("nuts", "s"), ("vi", "o"), ("lcvi", "^")):
        left.plot(seeds, [r[f"risk_{name}"] for r in lognormal], marker, label=name.upper())
    left.set(xlabel="seed (data set)", ylabel="held-out check-loss risk (tau = 0.8)",
             title="log-normal regression")
    left.legend()
    conjugate = summary["conjugate"]
    brute, got = conjugate["decisions_brute_force"], conjugate["decisions"]
    right.plot(brute, got, "o")
    low, high = min(brute), max(brute)
    right.plot([low, high], [low, high], "k-", lw=0.8)
    right.set(xlabel="calibrated optimum (brute force)", ylabel="LCVI's decision",
              title=f"conjugate regression (max error {conjugate['decision_max_abs_error']:.3f})")
    fig.tight_layout()
    save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
