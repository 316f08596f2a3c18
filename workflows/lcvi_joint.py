"""LCVI's loop against the paper's joint optimisation, and fixed against fresh outcome samples.

Three ways to maximise the same ``ELBO + U`` (check loss, the paper's
tilted), each against plain VI by the same optimiser:

- ``loop``: :func:`stanflow.lcvi.run_lcvi`, stanflow's (CmdStan's ADVI with
  fixed stratified antithetic outcome samples, exact Bayes decision steps
  between blocks), with the settings of the workflows ``lcvi-eight-schools``
  and ``lcvi-mf`` (code setting), so its numbers are theirs;
- ``fresh``: :func:`stanflow.lcvi.run_lcvi_joint`, the paper's: Adam on the
  variational parameters and the decisions together, last iterate, fresh
  outcome samples at every step (double reparameterisation);
- ``fixed``: the same Adam with one fixed stratified antithetic set of outcome
  samples, as the loop's: against ``fresh``, what fixed samples cost with the
  optimiser held equal.

Every method uses the loop's scale (``M = M90`` on eight schools, ``gamma =
1/M90`` on Last.fm, from the loop's plain VI), so all optimise one
objective. ``fresh`` and ``fixed`` share one plain VI by Adam per seed (plain
VI has no outcome samples), so their reductions are paired.

- **Eight schools** (10 seeds; check ``tau = 0.2``, linearised ``M - l``): the
  loop as ``lcvi-eight-schools``; Adam ``lr = 0.05`` (the authors'), 20000
  steps of 10 draws with 5 outcome samples each. Risk: the empirical risk on
  the eight observations at each ``q``'s Bayes decisions; also the risk at the
  decisions ``h`` Adam optimised, and the paper's objective
  ``J = ELBO + max_h U`` of each LCVI end state, evaluated precisely (4000
  draws, 1000 stratified antithetic outcome samples each, one set per seed
  for all methods) and the mean of ``mu`` under it (``mu_mean``).
- **Last.fm** (5 seeds; the ``lcvi-mf`` code setting: 992 x 100, ``K = 20``,
  the authors' split, likelihood sd 1, ``exp(-gamma l)`` linearised on 2
  outcome samples; check ``tau = 0.2`` and ``0.8``, ``fixed`` for 0.2 only):
  the loop's 30000 ADVI iterations of 1 gradient sample, LCVI branching at
  15000; Adam ``lr = 0.01`` (the authors'), 30000 steps of 1 draw for plain
  VI and again for LCVI. Risk: the empirical test risk at each ``q``'s Bayes
  decisions (200 draws).

``--quick``: 2 seeds; eight schools with 2000 ADVI iterations and 2000 Adam
steps, ``J`` from 400 draws x 100 outcomes; Last.fm's first 200 users x 30
artists, ``K = 5``, 2000 iterations and steps.

Each piece (seed x part) is written to ``runs/`` when done, and a rerun into
the same folder continues where it stopped. Seeds run in parallel, one per
core. Writes ``risks.png`` (LCVI and VI risk per method and seed, with the
reference) and ``summary.json``: ``eight_schools`` and ``lastfm`` (loss ->)
``methods`` (method -> ``risk_vi``, ``risk_lcvi``, ``reduction_pct``,
``seconds`` and on eight schools ``objective``, ``risk_lcvi_at_h``, ``mu_mean``: each
``mean``, ``sd``, ``per_seed``; ``seeds_reduced``), ``paired`` (differences
per seed: fresh minus loop, fixed minus fresh), the reference
(``lastfm``: the authors' 10 seeds, ``data/lcvi_mf_reference.json``),
``settings``, ``n_seeds``, ``seed``, ``compute_seconds`` (the pieces' seconds
summed) and ``runs`` (the records).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from stanflow.lcvi import eight_schools, empirical_risk, run_lcvi, run_lcvi_joint
from stanflow.lcvi.joint import joint_model
from stanflow.lcvi.mf import (
    cell_locations,
    load_lastfm,
    matrix_factorisation,
    reference_split,
)
from stanflow.lcvi.utility import outcome_base_samples, utility_at_locations
from stanflow.losses import bound_loss
from stanflow.models import log_density_rows
from stanflow.workflows import DATA_DIR, main, save_figure, write_json

DESCRIPTION = (
    "LCVI's loop against the paper's joint Adam optimisation, fresh and fixed outcome "
    "samples: risk, spread over seeds and wall time on eight schools and Last.fm"
)

METHODS = ("loop", "fresh", "fixed")
LASTFM_PIECES = {  # the paper's label -> (tau, joint outcome modes)
    "tilted_0.2": (0.2, ("fresh", "fixed")),
    "tilted_0.8": (0.8, ("fresh",)),
}


class EightSchools(NamedTuple):
    """The eight-schools part's budgets."""

    seeds: range
    advi_iter: int  # the loop's budget (LCVI settles up to twice as far)
    adam_iter: int
    eval_draws: int
    eval_outcomes: int
    tau: float = 0.2
    lr: float = 0.05
    tol: float = 0.1

    def config(self) -> dict:
        return self._asdict() | {"seeds": list(self.seeds), "record": 1}


class LastFm(NamedTuple):
    """The Last.fm part's data and budgets."""

    Y: np.ndarray
    K: int
    n_iter: int  # the loop's ADVI iterations and Adam's steps
    seeds: range
    lr: float = 0.01

    def config(self) -> dict:
        return {
            "shape": list(self.Y.shape),
            "K": self.K,
            "n_iter": self.n_iter,
            "lr": self.lr,
            "losses": {name: tau for name, (tau, _) in LASTFM_PIECES.items()},
            "record": 1,
        }


def run(out: Path, quick: bool) -> dict:
    """Run every piece (resuming from ``out/runs``), plot, and return the summary."""
    seeds = range(1, 3 if quick else 6)
    schools = EightSchools(
        seeds=range(1, 3 if quick else 11),
        advi_iter=2000 if quick else 10_000,
        adam_iter=2000 if quick else 20_000,
        eval_draws=400 if quick else 4000,
        eval_outcomes=100 if quick else 1000,
    )
    Y = load_lastfm(30 if quick else 100)  # stops at once, naming the file, without the data
    lastfm = LastFm(Y=Y[:200] if quick else Y, K=5 if quick else 20,
                    n_iter=2000 if quick else 30_000, seeds=seeds)
    pieces = Pieces(out / "runs")
    tasks = [lambda s=s: eight_schools_seed(schools, s, pieces) for s in schools.seeds]
    tasks += [lambda s=s: lastfm_seed(lastfm, s, pieces) for s in lastfm.seeds]
    jobs = min(len(os.sched_getaffinity(0)), len(tasks))
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = [pool.submit(task) for task in tasks]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for future in done:  # the first failure stops the run at once
            if future.exception() is not None:
                raise future.exception()
        finished = [future.result() for future in futures]
    finally:  # after an error or Ctrl-C, no new piece starts; the running ones finish and are kept
        pool.shutdown(cancel_futures=True)
    school_runs = finished[: len(schools.seeds)]
    lastfm_runs = finished[len(schools.seeds) :]

    summary_schools = summarise(school_runs, METHODS, ("objective", "risk_lcvi_at_h", "mu_mean"))
    reference = _reference()
    summary_lastfm = {
        name: summarise([run[name] for run in lastfm_runs], ("loop", *modes), ())
        | {"reference": reference[name]}
        for name, (_, modes) in LASTFM_PIECES.items()
    }
    _plot(summary_schools, summary_lastfm, out / "risks.png", with_reference=not quick)
    records = school_runs + lastfm_runs
    return {
        "eight_schools": summary_schools
        | {"settings": schools.config() | {"problem": "eight schools, centred"}},
        "lastfm": summary_lastfm
        | {"settings": lastfm.config() | {"problem": "lcvi-mf, the authors' code's setting"}},
        "n_seeds": {"eight_schools": len(schools.seeds), "lastfm": len(lastfm.seeds)},
        "seed": {"eight_schools": list(schools.seeds), "lastfm": list(lastfm.seeds)},
        "jobs": jobs,
        "compute_seconds": float(sum(record["compute_seconds"] for record in records)),
        "runs": {"eight_schools": school_runs, "lastfm": lastfm_runs},
        "quick": quick,
    }


class Pieces:
    """Finished pieces, one JSON file each under ``folder``: a rerun reads them back.

    A file written under another configuration is an error naming it, so two
    runs' pieces never mix.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def get(self, name: str, config: dict, compute: Callable[[], dict]) -> dict:
        """The piece ``name``: read back, or computed (its wall ``seconds`` added) and written."""
        path = self.folder / f"{name}.json"
        if path.is_file():
            record = json.loads(path.read_text())
            if record.get("config") != json.loads(json.dumps(config)):
                raise ValueError(
                    f"{path} is from another configuration ({record.get('config')}, "
                    f"not {config}): choose another --out or remove it"
                )
            return record
        start = time.perf_counter()
        record = compute()
        record = {"config": config} | record | {"seconds": time.perf_counter() - start}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, record)
        print(f"lcvi-joint: {name} done in {record['seconds']:.0f} s", file=sys.stderr, flush=True)
        return json.loads(path.read_text())


def eight_schools_seed(part: EightSchools, seed: int, pieces: Pieces) -> dict:
    """One seed on eight schools: the loop, Adam's plain VI, LCVI fresh and fixed, ``J``."""
    problem = eight_schools(json.loads((DATA_DIR / "eight_schools.json").read_text()))
    loss = bound_loss("check", tau=part.tau)
    config = part.config()
    name = f"eight_schools/seed-{seed}"

    def loop() -> dict:
        fit = run_lcvi(problem, loss, kind="linear", estimator="linearised", seed=seed,
                       tol=part.tol, max_iter=2 * part.advi_iter,
                       advi_args={"iter": part.advi_iter})
        end = fit.steps[-1]
        return {
            "risk_vi": fit.baseline.risk,
            "risk_lcvi": end.risk,
            "scale": fit.scale,
            "iterations": int(end.state.iteration),
            "settled": bool(fit.settled),
            "end": {"mu": end.state.mu, "omega": end.state.scale},
        }

    looped = pieces.get(f"{name}-loop", config, loop)
    common = {"kind": "linear", "estimator": "linearised", "scale": looped["scale"],
              "n_outcomes": 5, "grad_samples": 10, "iter": part.adam_iter, "lr": part.lr,
              "record_every": part.adam_iter, "seed": seed}

    def adam(parts: str, outcomes: str = "fresh") -> Callable[[], dict]:
        def compute() -> dict:
            joint = run_lcvi_joint(problem, loss, parts=parts, outcomes=outcomes, **common)
            fit = joint.vi if parts == "vi" else joint.lcvi
            return {"risk": fit.risk, "risk_h": fit.risk_h,
                    "end": {"mu": fit.mu, "omega": fit.omega}}
        return compute

    vi = pieces.get(f"{name}-adam-vi", config, adam("vi"))
    lcvi = {mode: pieces.get(f"{name}-{mode}", config, adam("lcvi", mode))
            for mode in ("fresh", "fixed")}
    objective = _objective(problem, loss, looped["scale"], part, seed)
    record = {
        "seed": seed,
        "scale": looped["scale"],
        "loop": {
            "risk_vi": looped["risk_vi"], "risk_lcvi": looped["risk_lcvi"],
            "objective": objective(looped["end"]), "mu_mean": looped["end"]["mu"][0],
            "seconds": looped["seconds"],
            "iterations": looped["iterations"], "settled": looped["settled"],
        },
    }
    for mode, fit in lcvi.items():
        record[mode] = {
            "risk_vi": vi["risk"], "risk_lcvi": fit["risk"], "risk_lcvi_at_h": fit["risk_h"],
            "objective": objective(fit["end"]), "mu_mean": fit["end"]["mu"][0],
            "seconds": vi["seconds"] + fit["seconds"],
        }
    record["compute_seconds"] = sum(p["seconds"] for p in [looped, vi, *lcvi.values()])
    return _with_reductions(record)


def _objective(problem, loss, scale: float, part: EightSchools, seed: int):
    """``{"mu", "omega"} -> ELBO + max_h U`` of a mean-field end state, from one precise set of draws."""
    model = joint_model(problem, loss, "linear", scale, "linearised", 1, 0.0)
    rng = np.random.default_rng(10_000 + seed)
    D = model.param_unc_num() - 2 * problem.n
    eps_theta = rng.standard_normal((part.eval_draws, D))
    eps_y = outcome_base_samples(part.eval_outcomes, problem.n, rng)

    def objective(end: dict) -> float:
        mu, omega = np.asarray(end["mu"]), np.asarray(end["omega"])
        z = mu + np.exp(omega) * eps_theta
        points = np.hstack([z, np.zeros((part.eval_draws, 2 * problem.n))])
        log_p = log_density_rows(model, points, propto=False).mean()
        loc = problem.location(z)
        h = loss.mixture_decision(loc, problem.sd)
        u = utility_at_locations(loc, problem.sd, eps_y, h, loss, "linear", scale)
        entropy = np.sum(omega) + 0.5 * D * (1 + np.log(2 * np.pi))
        return float(log_p + entropy + u.mean())

    return objective


def lastfm_seed(part: LastFm, seed: int, pieces: Pieces) -> dict:
    """One seed on Last.fm: the loop (both losses), Adam's plain VI, Adam's LCVI per piece."""
    split = reference_split(part.Y.shape)
    problem = matrix_factorisation(part.Y, split, K=part.K, prior_sd=10.0, noise_sd=1.0)
    y_test = part.Y[split.test_rows, split.test_cols]
    shape = (*part.Y.shape, part.K)
    losses = {name: bound_loss("check", tau=tau) for name, (tau, _) in LASTFM_PIECES.items()}
    config = part.config()
    name = f"lastfm/seed-{seed}"

    def test_risk(draws: np.ndarray, loss) -> float:
        loc = cell_locations(draws, shape, split.test_rows, split.test_cols)
        return empirical_risk(y_test, loss.mixture_decision(loc, np.ones(y_test.size)), loss)

    def loop() -> dict:
        record, vi = {}, None
        with tempfile.TemporaryDirectory(prefix=f"stanflow-lcvi-joint-{seed}-") as tmp:
            for label, loss in losses.items():
                fit = run_lcvi(
                    problem, loss, kind="exp", estimator="linearised", n_outcomes=2,
                    n_draws=200, decision_every=part.n_iter // 20, seed=seed,
                    advi_args={"iter": part.n_iter, "grad_samples": 1, "output_samples": 20},
                    output_dir=Path(tmp) / label, vi=vi,
                )
                vi = fit.vi
                record[label] = {
                    "risk_vi": test_risk(fit.baseline.state.draws(fit.eps_theta), loss),
                    "risk_lcvi": test_risk(fit.steps[-1].state.draws(fit.eps_theta), loss),
                    "scale": fit.scale,
                    "seconds_lcvi": sum(step.seconds for step in fit.steps[1:]),
                }
        return record | {"seconds_vi": vi.seconds}

    looped = pieces.get(f"{name}-loop", config, loop)
    first = next(iter(losses))

    def adam(parts: str, label: str, outcomes: str = "fresh") -> Callable[[], dict]:
        def compute() -> dict:
            joint = run_lcvi_joint(
                problem, losses[label], kind="exp", estimator="linearised",
                scale=looped[label]["scale"], outcomes=outcomes, n_outcomes=2, grad_samples=1,
                iter=part.n_iter, lr=part.lr, n_draws=200, record_every=part.n_iter,
                seed=seed, parts=parts,
            )
            if parts == "vi":  # plain VI does not depend on the loss: one run serves all
                draws = joint.vi.draws(joint.eps_theta)
                return {"risk": {k: test_risk(draws, loss) for k, loss in losses.items()}}
            return {"risk": test_risk(joint.lcvi.draws(joint.eps_theta), losses[label]),
                    "train_risk": joint.lcvi.risk}
        return compute

    vi = pieces.get(f"{name}-adam-vi", config, adam("vi", first))
    record: dict[str, Any] = {"seed": seed}
    spent = [looped["seconds"], vi["seconds"]]
    for label, (_, modes) in LASTFM_PIECES.items():
        looped_loss = looped[label]
        result = {
            "scale": looped_loss["scale"],
            "loop": {
                "risk_vi": looped_loss["risk_vi"], "risk_lcvi": looped_loss["risk_lcvi"],
                "seconds": looped["seconds_vi"] + looped_loss["seconds_lcvi"],
            },
        }
        for mode in modes:
            fit = pieces.get(f"{name}-{mode}-{label}", config, adam("lcvi", label, mode))
            spent.append(fit["seconds"])
            result[mode] = {
                "risk_vi": vi["risk"][label], "risk_lcvi": fit["risk"],
                "train_risk_lcvi": fit["train_risk"], "seconds": vi["seconds"] + fit["seconds"],
            }
        record[label] = _with_reductions(result)
    record["compute_seconds"] = sum(spent)
    return record


def _with_reductions(record: dict) -> dict:
    for method in METHODS:
        if method in record:
            r = record[method]
            r["reduction_pct"] = 100 * (r["risk_vi"] - r["risk_lcvi"]) / r["risk_vi"]
    return record


def summarise(runs: list[dict], methods: tuple[str, ...], extra: tuple[str, ...]) -> dict:
    """Per method: each quantity's mean, sd and per-seed values; paired differences."""

    def spread(values) -> dict:
        values = np.asarray(values, dtype=float)
        sd = float(values.std(ddof=1)) if values.size > 1 else 0.0
        return {"mean": float(values.mean()), "sd": sd, "per_seed": values.tolist()}

    summary: dict[str, Any] = {"methods": {}, "paired": {}}
    for method in methods:
        keys = ("risk_vi", "risk_lcvi", "reduction_pct", "seconds") + tuple(
            key for key in extra if key in runs[0][method]
        )
        summary["methods"][method] = {
            key: spread([run[method][key] for run in runs]) for key in keys
        } | {"seeds_reduced": int(sum(run[method]["reduction_pct"] > 0 for run in runs))}
    for a, b in (("fresh", "loop"), ("fixed", "fresh")):
        if a in methods and b in methods:
            summary["paired"][f"{a}_minus_{b}"] = {
                key: spread([run[a][key] - run[b][key] for run in runs])
                for key in ("risk_lcvi", "reduction_pct") + tuple(
                    key for key in extra if key in runs[0][a] and key in runs[0][b]
                )
            }
    return summary


def _reference() -> dict:
    """The authors' 10 seeds per Last.fm loss: VI and LCVI test risk and the reduction."""
    published = json.loads((DATA_DIR / "lcvi_mf_reference.json").read_text())
    reference = {}
    for name in LASTFM_PIECES:
        vi = np.array(published["test_risk_vi"][name])
        lcvi = np.array(published["test_risk_lcvi"][name])
        reference[name] = {
            key: {"mean": float(values.mean()), "sd": float(values.std(ddof=1))}
            for key, values in (("risk_vi", vi), ("risk_lcvi", lcvi),
                                ("reduction_pct", 100 * (vi - lcvi) / vi))
        } | {"n_seeds": int(vi.size)}
    return reference


def _plot(schools: dict, lastfm: dict, path: Path, with_reference: bool) -> None:
    """VI (open) and LCVI (filled) risk per method and seed, one panel per problem.

    The reference (the authors' published risks) is of the full Last.fm
    problem only, so a quick run leaves it out.
    """
    panels = [("eight schools, tilted 0.2", schools, None)] + [
        (f"Last.fm, {name.replace('_', ' ')} (test)", part,
         part["reference"] if with_reference else None)
        for name, part in lastfm.items()
    ]
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4))
    for axis, (title, part, reference) in zip(axes, panels, strict=True):
        methods = list(part["methods"])
        for x, method in enumerate(methods):
            values = part["methods"][method]
            vi, lcvi = values["risk_vi"]["per_seed"], values["risk_lcvi"]["per_seed"]
            axis.plot([x - 0.12, x + 0.12], [vi, lcvi], color="C0", alpha=0.3, linewidth=0.8)
            axis.scatter(np.full(len(vi), x - 0.12), vi, marker="s", facecolors="none",
                         edgecolors="C0", label="VI (seed)" if x == 0 else None)
            axis.scatter(np.full(len(lcvi), x + 0.12), lcvi, marker="o", color="C0",
                         label="LCVI (seed)" if x == 0 else None)
        labels = methods
        if reference is not None:
            x = len(methods)
            for key, marker in (("risk_vi", "s"), ("risk_lcvi", "o")):
                axis.errorbar(x + (0.12 if key == "risk_lcvi" else -0.12),
                              reference[key]["mean"], yerr=reference[key]["sd"], fmt=marker,
                              color="C3", capsize=4)
            labels = [*methods, "reference"]
        axis.set_xticks(range(len(labels)), labels)
        axis.set_title(title)
    axes[0].set_ylabel("empirical risk at the Bayes decisions (per seed)")
    axes[0].legend(fontsize=8)
    figure.suptitle("LCVI: stanflow's loop against the paper's joint optimisation")
    save_figure(figure, path)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
