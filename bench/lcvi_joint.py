"""Benchmark: stanflow's LCVI loop against the paper's joint optimisation, and fixed against fresh outcome samples.

Per seed, on one problem, three ways to maximise ``ELBO + U`` (check loss, the
paper's tilted), each with its own plain VI by the same optimiser:

- ``loop``: :func:`stanflow.lcvi.run_lcvi` (CmdStan's ADVI with fixed
  stratified antithetic outcome samples, exact Bayes decision steps between
  blocks), with the workflow's settings;
- ``fresh``: :func:`stanflow.lcvi.run_lcvi_joint` with ``outcomes="fresh"``:
  Adam on the variational parameters and the decisions together, fresh
  outcome samples at every step (the paper's double reparameterisation);
- ``fixed``: the same optimiser with the loop's fixed outcome samples
  (``outcomes="fixed"``): against ``fresh``, the cost of fixed samples with the
  optimiser held equal.

All three use the loop's scale (M90 or gamma = 1/M90 from the loop's plain VI),
so they optimise the same objective. Reported per method: the risk of VI and
LCVI at each fitted ``q``'s Bayes decisions (eight schools: on the eight
observations, as the workflow; Last.fm: on the test cells of the authors'
split), the reduction, its spread over seeds, the wall time of the whole
procedure (plain VI included), and on eight schools the paper's objective
``ELBO + max_h U`` of each LCVI end state, evaluated precisely (4000 draws of
``theta``, 1000 stratified antithetic outcome samples each, one set for all
methods): how well each method optimises the objective it is meant to.

Usage::

    .venv/bin/python bench/lcvi_joint.py --problem eight_schools --seeds 10
    STANFLOW_DATA_DIR=../shared/data .venv/bin/python bench/lcvi_joint.py \\
        --problem lastfm --seeds 1 --iter 30000 --lr 0.01
    STANFLOW_DATA_DIR=../shared/data .venv/bin/python bench/lcvi_joint.py \\
        --problem lastfm --seeds 1 --tau 0.8 --joint fresh

``--tau`` is the check loss's level (default 0.2, the workflows' and every
stored result's); another level writes ``lcvi_joint_<problem>_tau<level>.json``
(``--tau 0.8``: ``_tau08``), so the default results are not overwritten.
"""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np
from _common import REPO, machine_info, print_table, timed_call, write_results

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

EVAL_DRAWS, EVAL_OUTCOMES = 4000, 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", choices=("eight_schools", "lastfm"), default="eight_schools")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--iter", type=int, default=None, help="steps of every optimisation")
    parser.add_argument("--tau", type=float, default=0.2,
                        help="level of the check loss (the paper's tilted q), in (0, 1)")
    parser.add_argument("--lr", type=float, default=None, help="Adam's learning rate (joint)")
    parser.add_argument("--average", type=float, default=0.0,
                        help="joint: average the iterates of this last fraction (0: the paper's)")
    parser.add_argument("--joint", nargs="+", choices=("fresh", "fixed"), default=["fresh", "fixed"],
                        help="joint variants to run (the loop always runs: it sets the scale)")
    args = parser.parse_args()
    if not 0 < args.tau < 1:
        parser.error(f"--tau must be in (0, 1), got {args.tau}")
    logging.getLogger("cmdstanpy").setLevel(logging.ERROR)
    setting = EightSchools(args) if args.problem == "eight_schools" else LastFm(args)
    methods = ("loop", *args.joint)

    per_seed, rows = [], []
    for seed in range(1, args.seeds + 1):
        record = {"seed": seed}
        loop, wall, _ = timed_call(lambda: setting.loop(seed))  # noqa: B023
        record["loop"] = {
            "risk_vi": setting.loop_risk(loop, loop.baseline),
            "risk_lcvi": setting.loop_risk(loop, loop.steps[-1]),
            "seconds": wall,
            "iterations": int(loop.steps[-1].state.iteration),
            "settled": bool(loop.settled),
        }
        ends = {"loop": (loop.steps[-1].state.mu, loop.steps[-1].state.scale)}
        print(f"seed {seed}: loop {wall:.1f} s", flush=True)
        for outcomes in args.joint:
            joint, wall, _ = timed_call(
                lambda: setting.joint(seed, outcomes, loop.scale)  # noqa: B023
            )
            record[outcomes] = {
                "risk_vi": setting.joint_risk(joint, joint.vi),
                "risk_lcvi": setting.joint_risk(joint, joint.lcvi),
                "risk_lcvi_at_h": joint.lcvi.risk_h if setting.in_sample else None,
                "seconds": wall,
            }
            ends[outcomes] = (joint.lcvi.mu, joint.lcvi.omega)
            print(f"seed {seed}: {outcomes} {wall:.1f} s {record[outcomes]}", flush=True)
        record["scale"] = loop.scale
        if setting.in_sample:
            objective = setting.objective_evaluator(loop.scale, seed)
            for method, (mu, omega) in ends.items():
                record[method]["objective"] = objective(mu, omega)
        for method in methods:
            r = record[method]
            r["reduction_pct"] = 100 * (r["risk_vi"] - r["risk_lcvi"]) / r["risk_vi"]
        per_seed.append(record)
        rows.append(
            [seed]
            + [f"{record[m]['risk_lcvi']:.4f} ({record[m]['reduction_pct']:+.2f} %)" for m in methods]
            + [f"{record[m]['seconds']:.1f}" for m in methods]
        )
        print_table(
            ["seed"] + [f"{m}: LCVI risk (red.)" for m in methods] + [f"{m} s" for m in methods],
            rows,
        )

    def spread(method, key):
        values = np.array([r[method][key] for r in per_seed], dtype=float)
        sd = float(values.std(ddof=1)) if values.size > 1 else None
        return {"mean": float(values.mean()), "sd": sd, "per_seed": values.tolist()}

    summary = {
        method: {
            key: spread(method, key)
            for key in ("risk_vi", "risk_lcvi", "reduction_pct", "seconds")
            + (("objective",) if setting.in_sample else ())
        }
        for method in methods
    }
    if setting.in_sample:
        for method in args.joint:
            summary[method]["risk_lcvi_at_h"] = spread(method, "risk_lcvi_at_h")
    results = {
        "problem": args.problem,
        "seeds": args.seeds,
        "tau": args.tau,
        "settings": setting.settings,
        "summary": summary,
        "per_seed": per_seed,
        "machine": machine_info(),
    }
    print(json.dumps(summary, indent=2))
    suffix = f"_tau{args.tau:g}".replace(".", "") if args.tau != 0.2 else ""
    suffix += f"_average{args.average:g}" if args.average else ""
    write_results(f"lcvi_joint_{args.problem}{suffix}", results)


class EightSchools:
    """The ``lcvi-eight-schools`` workflow's setting: check (``--tau``, 0.2), linearised ``M - l``."""

    in_sample = True

    def __init__(self, args: argparse.Namespace) -> None:
        self.problem = eight_schools(json.loads((REPO / "data" / "eight_schools.json").read_text()))
        self.loss = bound_loss("check", tau=args.tau)
        self.iter = args.iter or 20_000
        self.lr = args.lr or 0.05
        self.average = args.average
        self.settings = {
            "loop": "run_lcvi: 10000 iterations, 10 gradient samples, branch at 5000, "
            "decisions every 1000, tol 0.1, max_iter 20000, 5 outcome samples",
            "joint": {"iter": self.iter, "lr": self.lr, "grad_samples": 10, "n_outcomes": 5,
                      "average": self.average},
            "utility": "linear, linearised, M from the loop's plain VI (M90)",
        }

    def loop(self, seed: int):
        return run_lcvi(self.problem, self.loss, kind="linear", estimator="linearised",
                        seed=seed, tol=0.1, max_iter=20_000)

    def joint(self, seed: int, outcomes: str, scale: float):
        return run_lcvi_joint(self.problem, self.loss, kind="linear", estimator="linearised",
                              scale=scale, outcomes=outcomes, n_outcomes=5, grad_samples=10,
                              iter=self.iter, lr=self.lr, average=self.average,
                              record_every=self.iter, seed=seed)

    def loop_risk(self, loop, step) -> float:
        return step.risk

    def joint_risk(self, joint, fit) -> float:
        return fit.risk

    def objective_evaluator(self, scale: float, seed: int):
        """``(mu, omega) -> ELBO + max_h U``, from one precise set of draws."""
        problem, loss = self.problem, self.loss
        model = joint_model(problem, loss, "linear", scale, "linearised", 1, 0.0)
        rng = np.random.default_rng(10_000 + seed)
        D = model.param_unc_num() - 2 * problem.n
        eps_theta = rng.standard_normal((EVAL_DRAWS, D))
        eps_y = outcome_base_samples(EVAL_OUTCOMES, problem.n, rng)

        def objective(mu: np.ndarray, omega: np.ndarray) -> float:
            z = mu + np.exp(omega) * eps_theta
            points = np.hstack([z, np.zeros((EVAL_DRAWS, 2 * problem.n))])
            log_p = log_density_rows(model, points, propto=False).mean()
            loc = problem.location(z)
            h = loss.mixture_decision(loc, problem.sd)
            u = utility_at_locations(loc, problem.sd, eps_y, h, loss, "linear", scale)
            entropy = np.sum(omega) + 0.5 * D * (1 + np.log(2 * np.pi))
            return float(log_p + entropy + u.mean())

        return objective


class LastFm:
    """The ``lcvi-mf`` workflow's setting for check ``--tau`` (0.2): exp, linearised, 2 outcomes."""

    in_sample = False

    def __init__(self, args: argparse.Namespace) -> None:
        Y = load_lastfm(100)
        self.K = 20
        self.split = reference_split(Y.shape)
        self.problem = matrix_factorisation(Y, self.split, K=self.K, prior_sd=10.0, noise_sd=1.0)
        self.y_test = Y[self.split.test_rows, self.split.test_cols]
        self.shape = (*Y.shape, self.K)
        self.loss = bound_loss("check", tau=args.tau)
        self.iter = args.iter or 30_000
        self.lr = args.lr or 0.01
        self.average = args.average
        self.settings = {
            "loop": f"run_lcvi: {self.iter} iterations, 1 gradient sample, branch at half, "
            f"decisions every {self.iter // 20}, 2 outcome samples, 200 draws",
            "joint": {"iter": self.iter, "lr": self.lr, "grad_samples": 1, "n_outcomes": 2,
                      "average": self.average},
            "utility": "exp, linearised, gamma from the loop's plain VI (1/M90)",
            "data": "Last.fm 992 x 100, K = 20, the authors' split, likelihood sd 1",
        }

    def loop(self, seed: int):
        return run_lcvi(
            self.problem, self.loss, kind="exp", estimator="linearised", n_outcomes=2,
            n_draws=200, decision_every=self.iter // 20, seed=seed,
            advi_args={"iter": self.iter, "grad_samples": 1, "output_samples": 20},
        )

    def joint(self, seed: int, outcomes: str, scale: float):
        return run_lcvi_joint(self.problem, self.loss, kind="exp", estimator="linearised",
                              scale=scale, outcomes=outcomes, n_outcomes=2, grad_samples=1,
                              iter=self.iter, lr=self.lr, average=self.average, n_draws=200,
                              record_every=self.iter, seed=seed)

    def _test_risk(self, z: np.ndarray) -> float:
        loc = cell_locations(z, self.shape, self.split.test_rows, self.split.test_cols)
        h = self.loss.mixture_decision(loc, np.ones(self.y_test.size))
        return empirical_risk(self.y_test, h, self.loss)

    def loop_risk(self, loop, step) -> float:
        return self._test_risk(step.state.draws(loop.eps_theta))

    def joint_risk(self, joint, fit) -> float:
        return self._test_risk(fit.draws(joint.eps_theta))


if __name__ == "__main__":
    main()
