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
VI has no outcome samples) and the same draws of ``theta``, so they differ
only in the outcome samples; the loop and Adam share no random numbers, so
``fresh_minus_loop`` is paired by seed only. Times (``seconds``) are each
procedure's optimisation, plain VI included: the ADVI runs (CmdStan calls,
reading their output included) and Adam's steps, without compiling, loading
and the risks, as wall time with ``jobs`` cells running at once.

- **Eight schools** (10 seeds; check ``tau = 0.2``, linearised ``M - l``): the
  loop as ``lcvi-eight-schools``; Adam ``lr = 0.05`` (the authors'), 20000
  steps of 10 draws with 5 outcome samples each. Risk: the empirical risk on
  the eight observations at each ``q``'s Bayes decisions; also the risk at the
  decisions ``h`` Adam optimised, and the paper's objective
  ``J = ELBO + max_h U`` of each LCVI end state, evaluated precisely (4000
  draws, 1000 stratified antithetic outcome samples each, one set per seed
  for all methods, ``h`` at each draw's Bayes decisions) and the mean of
  ``mu`` under it (``mu_mean``).
- **Last.fm** (2 seeds, about 100 minutes of one core each; the ``lcvi-mf``
  code setting: 992 x 100, ``K = 20``, the authors' split, likelihood sd 1,
  ``exp(-gamma l)`` linearised on 2 outcome samples; check ``tau = 0.2`` and
  ``0.8``, ``fixed`` for 0.2 only): the loop's 30000 ADVI iterations of 1
  gradient sample, LCVI branching at 15000; Adam ``lr = 0.01`` (the
  authors'), 30000 steps of 1 draw for plain VI and again for LCVI. Risk: the
  empirical test risk at each ``q``'s Bayes decisions (200 draws).

``--quick``: 2 seeds of eight schools, with 2000 ADVI iterations and 2000 Adam
steps, ``J`` from 400 draws x 100 outcomes; Last.fm's first 200 users x 30
artists, ``K = 5``, 2000 iterations and steps.

Seed ``r`` of a part (``r = 0, 1, ...``) is ``SEED + r = 1, 2, ...``, given to
CmdStan and Adam as is. Every cell (a seed's loop, plain VI or LCVI run, each
with its risks and, on eight schools, its ``J``) is kept in ``runs/`` when
done (:mod:`stanflow.experiment`), and a rerun into the same folder continues
where it stopped; Last.fm's Adam runs also save their state every 1000 steps
in their scratch folders (``runs/<cell>.partial``), so a rerun continues
inside them. Cells run in parallel, one per core, Last.fm's first, each once
its loop is done; after a failure or Ctrl-C no new cell starts (the running
ones finish and are kept). Writes ``risks.png`` (LCVI and VI risk per method
and seed, with the reference) and ``summary.json``: ``eight_schools`` and
``lastfm`` (loss ->) ``methods`` (method -> ``risk_vi``, ``risk_lcvi``,
``reduction_pct``, ``seconds`` and on eight schools ``objective``,
``risk_lcvi_at_h``, ``mu_mean``: each ``mean``, ``sd``, ``per_seed``;
``seeds_reduced``), ``paired`` (differences per seed: fresh minus loop, fixed
minus fresh), the reference (``lastfm``: the authors' 10 seeds,
``data/lcvi_mf_reference.json``), and each part's ``settings``; ``n_seeds``,
``seeds`` (per part, the seeds given to CmdStan and Adam), ``jobs`` (cells at
a time), ``runs`` (per part, the records per seed, each with its cells'
``compute_seconds``), ``quick``, and the runner's ``settings``, ``seed``
(:data:`SEED`) and ``compute_seconds`` (every cell's wall seconds summed,
loading, risks and ``J`` included).
"""


from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.lcvi import (
    LcviProgram,
    Loop,
    Predictive,
    Utility,
    eight_schools,
    empirical_risk,
    run_lcvi,
    run_lcvi_joint,
)
from stanflow.lcvi.joint_optimiser import joint_model
from stanflow.lcvi.mf import (
    cell_locations,
    load_lastfm,
    matrix_factorisation,
    reference_split,
    reference_test_risks,
)
from stanflow.lcvi.utility import outcome_base_samples
from stanflow.losses import BoundLoss, bound_loss
from stanflow.models import log_density_rows
from stanflow.models.evaluation import default_threads
from stanflow.workflows import DATA_DIR, main, save_figure, seed_spread

DESCRIPTION = (
    "LCVI's loop against the paper's joint Adam optimisation, fresh and fixed outcome "
    "samples: risk, spread over seeds and wall time on eight schools and Last.fm"
)

SEED = 1
"""The experiment's seed: a part's seed ``r = 0, 1, ...`` is ``SEED + r``."""
METHODS = ("loop", "fresh", "fixed")
LASTFM_PIECES = {  # the paper's label -> (tau, joint outcome modes)
    "tilted_0.2": (0.2, ("fresh", "fixed")),
    "tilted_0.8": (0.8, ("fresh",)),
}
NOISE_SD, PRIOR_SD = 1.0, 10.0  # Last.fm: lcvi-mf's code setting
PROBLEMS = {"eight_schools": "eight schools, centred",
            "lastfm": "lcvi-mf, the authors' code's setting"}
JOBS = default_threads()
"""Cells at a time: one per core."""

# eight schools: advi_iter is the loop's budget (LCVI settles up to twice as far);
# Last.fm: the first shape[0] users and shape[1] artists, n_iter the loop's ADVI
# iterations and Adam's steps
SETTINGS = {
    "quick": {
        "eight_schools": {"seeds": 2, "advi_iter": 2000, "adam_iter": 2000, "eval_draws": 400,
                          "eval_outcomes": 100, "tau": 0.2, "lr": 0.05, "tol": 0.1},
        "lastfm": {"seeds": 2, "shape": [200, 30], "K": 5, "n_iter": 2000, "lr": 0.01},
    },
    "full": {
        "eight_schools": {"seeds": 10, "advi_iter": 10_000, "adam_iter": 20_000,
                          "eval_draws": 4000, "eval_outcomes": 1000, "tau": 0.2, "lr": 0.05,
                          "tol": 0.1},
        "lastfm": {"seeds": 2, "shape": [992, 100], "K": 20, "n_iter": 30_000, "lr": 0.01},
    },
}


def part_settings(settings: dict[str, Any], part: str) -> dict[str, Any]:
    """What every cell of ``part`` depends on: its settings but the number of seeds."""
    own = {k: v for k, v in settings[part].items() if k != "seeds"}
    if part == "lastfm":
        own["losses"] = {name: tau for name, (tau, _) in LASTFM_PIECES.items()}
    return own


def adam_runs(part: str) -> dict[str, dict[str, str]]:
    """A seed's Adam cells of ``part`` by name suffix: plain VI, then LCVI per mode (and loss)."""
    if part == "eight_schools":
        return {"adam-vi": {"method": "vi"}} | {mode: {"method": mode} for mode in ("fresh", "fixed")}
    first = next(iter(LASTFM_PIECES))  # plain VI needs no loss; it runs at this one's scale
    return {"adam-vi": {"method": "vi", "loss": first}} | {
        f"{mode}-{label}": {"method": mode, "loss": label}
        for label, (_, modes) in LASTFM_PIECES.items() for mode in modes
    }


def cells(settings: dict[str, Any]) -> list[Cell]:
    """Per seed its loop, then Adam's runs (they need the loop's scale); Last.fm's, long, first."""
    declared = []
    for part in ("lastfm", "eight_schools"):
        base = part_settings(settings, part) | {"part": part}
        for r in range(settings[part]["seeds"]):
            name = f"{part}/seed-{SEED + r}"
            loop = Cell(f"{name}-loop", base | {"r": r, "method": "loop"})
            declared.append(loop)
            declared += [Cell(f"{name}-{suffix}", base | {"r": r} | extra, needs=(loop.name,))
                         for suffix, extra in adam_runs(part).items()]
    return declared


def compute(run: CellRun) -> dict:
    """One cell: a seed's loop, or Adam's plain VI or LCVI at the loop's scale."""
    seed = run.seed + run.params["r"]
    looped = next(iter(run.needed.values()), None)  # the seed's loop, for Adam's cells
    if run.params["part"] == "lastfm":
        return lastfm_cell(run.params, seed, looped, run.scratch)
    return schools_cell(run.params, seed, looped)


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """Per part and loss the methods over seeds and their paired differences; the records."""
    seeds = {part: [SEED + r for r in range(settings[part]["seeds"])] for part in PROBLEMS}
    school_runs = [schools_seed(records, seed) for seed in seeds["eight_schools"]]
    lastfm_runs = [lastfm_seed(records, seed) for seed in seeds["lastfm"]]
    summary_schools = by_method(school_runs, METHODS, ("objective", "risk_lcvi_at_h", "mu_mean"))
    reference = reference_test_risks(LASTFM_PIECES)
    summary_lastfm = {
        name: by_method([run[name] for run in lastfm_runs], ("loop", *modes), ())
        | {"reference": reference[name]}
        for name, (_, modes) in LASTFM_PIECES.items()
    }
    parts = {"eight_schools": summary_schools, "lastfm": summary_lastfm}
    return {
        part: parts[part] | {"settings": part_settings(settings, part) | {"problem": problem}}
        for part, problem in PROBLEMS.items()
    } | {
        "n_seeds": {part: len(values) for part, values in seeds.items()},
        "seeds": seeds,
        "jobs": JOBS,
        "runs": {"eight_schools": school_runs, "lastfm": lastfm_runs},
        "quick": settings == SETTINGS["quick"],
    }


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``risks.png``, with the authors' risks for the full Last.fm problem only."""
    lastfm = {name: summary["lastfm"][name] for name in LASTFM_PIECES}
    _plot(summary["eight_schools"], lastfm, out / "risks.png", with_reference=not summary["quick"])


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, seed=SEED, jobs=JOBS)


def run(out: Path, quick: bool) -> dict:
    """Run every cell (resuming from ``out/runs``), plot, and return the summary."""
    return EXPERIMENT.run(out, quick)


# --- eight schools ------------------------------------------------------------------------


def schools_seed(records: Records, seed: int) -> dict:
    """One seed on eight schools from its cells: the loop, Adam's plain VI, LCVI fresh and fixed."""
    name = f"eight_schools/seed-{seed}"
    looped, vi = records[f"{name}-loop"], records[f"{name}-adam-vi"]
    lcvi = {mode: records[f"{name}-{mode}"] for mode in ("fresh", "fixed")}
    record = {
        "seed": seed,
        "scale": looped["scale"],
        "loop": {
            "risk_vi": looped["risk_vi"],
            "risk_lcvi": looped["risk_lcvi"],
            "objective": looped["objective"],
            "mu_mean": looped["end"]["mu"][0],
            "seconds": looped["seconds_optimise"],
            "iterations": looped["iterations"],
            "settled": looped["settled"],
        },
    }
    for mode, fit in lcvi.items():
        record[mode] = {
            "risk_vi": vi["risk"],
            "risk_lcvi": fit["risk"],
            "risk_lcvi_at_h": fit["risk_h"],
            "objective": fit["objective"],
            "mu_mean": fit["end"]["mu"][0],
            "seconds": vi["seconds_optimise"] + fit["seconds_optimise"],
        }
    record["compute_seconds"] = sum(p["seconds"] for p in [looped, vi, *lcvi.values()])
    return _with_reductions(record)


def schools_cell(params: dict, seed: int, looped: dict | None) -> dict:
    """A cell on eight schools: the loop or an LCVI run with its ``J``, or Adam's plain VI."""
    problem = eight_schools(json.loads((DATA_DIR / "eight_schools.json").read_text()))
    loss = bound_loss("check", tau=params["tau"])
    method = params["method"]
    if method == "vi":
        return _schools_adam(problem, loss, params, seed, looped["scale"], "vi", "fresh")
    if method == "loop":
        record = _schools_loop(problem, loss, params, seed)
        scale = record["scale"]
    else:
        scale = looped["scale"]
        record = _schools_adam(problem, loss, params, seed, scale, "lcvi", method)
    return record | {"objective": _objective(problem, loss, scale, params, seed, record["end"])}


def _schools_loop(problem: LcviProgram, loss: BoundLoss, part: dict, seed: int) -> dict:
    """The loop as ``lcvi-eight-schools`` runs it."""
    fit = run_lcvi(problem, loss, utility=Utility(kind="linear", estimator="linearised"),
                   seed=seed, tol=part["tol"], max_iter=2 * part["advi_iter"],
                   advi_args={"iter": part["advi_iter"]})
    end = fit.steps[-1]
    return {
        "risk_vi": fit.baseline.risk,
        "risk_lcvi": end.risk,
        "scale": fit.utility.scale,
        "iterations": int(end.state.iteration),
        "settled": bool(fit.settled),
        "end": {"mu": end.state.mu, "omega": end.state.scale},
        "seconds_optimise": _loop_seconds(fit),
    }


def _schools_adam(
    problem: LcviProgram, loss: BoundLoss, part: dict, seed: int, scale: float,
    parts: str, outcomes: str,
) -> dict:
    """Adam's plain VI or LCVI: risks at the Bayes decisions and at ``h``, the end state."""
    joint = run_lcvi_joint(
        problem, loss,
        utility=Utility(kind="linear", scale=scale, estimator="linearised", n_outcomes=5),
        outcomes=outcomes, grad_samples=10, iter=part["adam_iter"], lr=part["lr"],
        record_every=part["adam_iter"], seed=seed, parts=parts,
    )
    fit = joint.vi if parts == "vi" else joint.lcvi
    return {
        "risk": fit.risk,
        "risk_h": fit.risk_h,
        "end": {"mu": fit.mu, "omega": fit.omega},
        "seconds_optimise": fit.seconds,
    }


def _objective(
    problem: LcviProgram, loss: BoundLoss, scale: float, part: dict, seed: int, end: dict
) -> float:
    """``ELBO + U`` of ``end`` (``mu``, ``omega``) at the Bayes decisions, from the seed's draws.

    The draws (of ``theta`` and the outcomes) are one precise set per seed, the
    same for every method. The Bayes decision of each draw's predictive
    maximises ``U`` up to the outcome samples' error, so this is the paper's
    ``ELBO + max_h U``.
    """
    model = problem.bind(loss)
    utility = Utility(kind="linear", scale=scale, estimator="linearised", n_outcomes=1)
    joint = joint_model(model, utility, 0.0)
    rng = np.random.default_rng(10_000 + seed)
    D = model.dim
    eps_theta = rng.standard_normal((part["eval_draws"], D))
    eps_y = outcome_base_samples(part["eval_outcomes"], problem.n, rng)
    mu, omega = np.asarray(end["mu"]), np.asarray(end["omega"])
    z = mu + np.exp(omega) * eps_theta
    points = np.zeros((part["eval_draws"], joint.parts["lcvi"].stop))
    points[:, joint.parts["theta"]] = z
    points[:, joint.parts["lcvi"]] = joint.settings
    log_p = log_density_rows(joint.library, points, propto=False).mean()
    predictive = Predictive(model, z)
    h = predictive.bayes_decisions()
    u = predictive.utility(h, eps_y, np.full(eps_y.shape, 0.5), utility)
    entropy = np.sum(omega) + 0.5 * D * (1 + np.log(2 * np.pi))
    return float(log_p + entropy + u.mean())


# --- Last.fm ------------------------------------------------------------------------------


class LastFmProblem(NamedTuple):
    """The Last.fm problem of one part: the model, the test cells and the losses."""

    problem: LcviProgram
    shape: tuple[int, int, int]
    test_rows: np.ndarray
    test_cols: np.ndarray
    y_test: np.ndarray
    losses: dict[str, BoundLoss]

    @classmethod
    def of(cls, part: dict) -> LastFmProblem:
        """The problem of ``part``'s ``shape`` (the first users and artists) and ``K``."""
        users, artists = part["shape"]
        Y = load_lastfm(artists)[:users]  # stops at once, naming the file, without the data
        split = reference_split(Y.shape)
        problem = matrix_factorisation(Y, split, K=part["K"], prior_sd=PRIOR_SD,
                                       noise_sd=NOISE_SD)
        losses = {name: bound_loss("check", tau=tau) for name, (tau, _) in LASTFM_PIECES.items()}
        return cls(problem, (*Y.shape, part["K"]), split.test_rows, split.test_cols,
                   Y[split.test_rows, split.test_cols], losses)

    def test_risk(self, draws: np.ndarray, loss: BoundLoss) -> float:
        """Empirical test risk at the Bayes decisions of ``draws`` (the noise integrated out)."""
        loc = cell_locations(draws, self.shape, self.test_rows, self.test_cols)
        h = loss.mixture_decision(loc, np.full(self.y_test.size, NOISE_SD))
        return empirical_risk(self.y_test, h, loss)


def lastfm_cell(params: dict, seed: int, looped: dict | None, scratch: Path) -> dict:
    """A cell on Last.fm: the loop, or an Adam run keeping its state in ``scratch``."""
    mf = LastFmProblem.of(params)
    method = params["method"]
    if method == "loop":
        return _lastfm_loop(mf, params, seed)
    label = params["loss"]
    parts, outcomes = ("vi", "fresh") if method == "vi" else ("lcvi", method)
    return _lastfm_adam(mf, params, seed, label, looped[label]["scale"], parts, outcomes, scratch)


def lastfm_seed(records: Records, seed: int) -> dict:
    """One seed on Last.fm from its cells: the loop (both losses), Adam's plain VI and LCVI runs."""
    name = f"lastfm/seed-{seed}"
    looped, vi = records[f"{name}-loop"], records[f"{name}-adam-vi"]
    record: dict[str, Any] = {"seed": seed}
    spent = [looped["seconds"], vi["seconds"]]
    for label, (_, modes) in LASTFM_PIECES.items():
        at_loss = looped[label]
        result = {
            "scale": at_loss["scale"],
            "loop": {
                "risk_vi": at_loss["risk_vi"],
                "risk_lcvi": at_loss["risk_lcvi"],
                "seconds": looped["seconds_vi"] + at_loss["seconds_lcvi"],
            },
        }
        for mode in modes:
            fit = records[f"{name}-{mode}-{label}"]
            spent.append(fit["seconds"])
            result[mode] = {
                "risk_vi": vi["risk"][label],
                "risk_lcvi": fit["risk"],
                "train_risk_lcvi": fit["train_risk"],
                "seconds": vi["seconds_optimise"] + fit["seconds_optimise"],
            }
        record[label] = _with_reductions(result)
    record["compute_seconds"] = sum(spent)
    return record


def _lastfm_loop(mf: LastFmProblem, part: dict, seed: int) -> dict:
    """The loop as ``lcvi-mf`` runs it (code setting), one plain VI for both losses."""
    record, vi = {}, None
    with tempfile.TemporaryDirectory(prefix=f"stanflow-lcvi-joint-{seed}-") as tmp:
        for label, loss in mf.losses.items():
            fit = run_lcvi(
                mf.problem, loss,
                utility=Utility(kind="exp", estimator="linearised", n_outcomes=2),
                n_draws=200, decision_every=part["n_iter"] // 20, seed=seed,
                advi_args={"iter": part["n_iter"], "grad_samples": 1, "output_samples": 20},
                out_dir=Path(tmp) / label, vi=vi,
            )
            vi = fit.vi
            record[label] = {
                "risk_vi": mf.test_risk(fit.baseline.state.draws(fit.eps_theta), loss),
                "risk_lcvi": mf.test_risk(fit.steps[-1].state.draws(fit.eps_theta), loss),
                "scale": fit.utility.scale,
                "seconds_lcvi": _loop_seconds(fit) - fit.vi.seconds,
            }
    return record | {"seconds_vi": vi.seconds}


def _lastfm_adam(
    mf: LastFmProblem, part: dict, seed: int, label: str, scale: float, parts: str,
    outcomes: str, state: Path,
) -> dict:
    """Adam's plain VI (test risks for every loss) or LCVI for ``label``, resuming from ``state``."""
    joint = run_lcvi_joint(
        mf.problem, mf.losses[label],
        utility=Utility(kind="exp", scale=scale, estimator="linearised", n_outcomes=2),
        outcomes=outcomes, grad_samples=1, iter=part["n_iter"], lr=part["lr"], n_draws=200,
        record_every=part["n_iter"], seed=seed, parts=parts, checkpoint=state,
    )
    if parts == "vi":  # plain VI does not depend on the loss: one run serves all
        draws = joint.vi.draws(joint.eps_theta)
        return {
            "risk": {name: mf.test_risk(draws, loss) for name, loss in mf.losses.items()},
            "seconds_optimise": joint.vi.seconds,
        }
    return {
        "risk": mf.test_risk(joint.lcvi.draws(joint.eps_theta), mf.losses[label]),
        "train_risk": joint.lcvi.risk,
        "seconds_optimise": joint.lcvi.seconds,
    }


# --- summary ------------------------------------------------------------------------------


def _loop_seconds(fit: Loop) -> float:
    """The loop's ADVI seconds: plain VI, its continuation as far as LCVI went, LCVI's blocks."""
    extension = fit.baseline.seconds if fit.baseline is not fit.steps[0] else 0.0
    return fit.vi.seconds + extension + sum(step.seconds for step in fit.steps[1:])


def _with_reductions(record: dict) -> dict:
    """``record`` with each method's ``reduction_pct = 100 (risk_vi - risk_lcvi) / risk_vi``."""
    for method in METHODS:
        if method in record:
            r = record[method]
            r["reduction_pct"] = 100 * (r["risk_vi"] - r["risk_lcvi"]) / r["risk_vi"]
    return record


def by_method(runs: list[dict], methods: tuple[str, ...], extra: tuple[str, ...]) -> dict:
    """Per method: each quantity's mean, sd and per-seed values; differences per seed."""
    summary: dict[str, Any] = {"methods": {}, "paired": {}}
    for method in methods:
        keys = (
            "risk_vi", "risk_lcvi", "reduction_pct", "seconds",
            *(key for key in extra if key in runs[0][method]),
        )
        summary["methods"][method] = {
            key: seed_spread([run[method][key] for run in runs]) for key in keys
        } | {"seeds_reduced": int(sum(run[method]["reduction_pct"] > 0 for run in runs))}
    for a, b in (("fresh", "loop"), ("fixed", "fresh")):
        if a in methods and b in methods:
            shared = [key for key in extra if key in runs[0][a] and key in runs[0][b]]
            summary["paired"][f"{a}_minus_{b}"] = {
                key: seed_spread([run[a][key] - run[b][key] for run in runs])
                for key in ("risk_lcvi", "reduction_pct", *shared)
            }
    return summary


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
            for key, marker in (("vi", "s"), ("lcvi", "o")):  # reference_test_risks' keys
                axis.errorbar(x + (0.12 if key == "lcvi" else -0.12),
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
