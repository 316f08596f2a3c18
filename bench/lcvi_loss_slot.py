"""Benchmark: the cost of LCVI's scalar loss slot against a vectorised one.

Every method's loss slot is ``real loss(real y, real f, vector loss_params)``,
so the LCVI templates call it once per outcome sample and decision
(``stan/lcvi/utility.stanfunctions``). LCVI once had a vectorised slot,
``vector loss(vector y, vector h, vector loss_params)``, called once for all
of them. This measures what the one-file rule costs: the gradient of the
matrix-factorisation template (the ``lcvi-mf`` setting: 992 x 100 Last.fm
cells, half for training, K = 20, 2 outcome samples per cell, check loss
tau = 0.2, linearised exp utility) with the shipped scalar slot and with a
vectorised twin of the same helper (written below, bound over the helper's
include name), as model libraries in process, side by side and interleaved.

Usage::

    STANFLOW_DATA_DIR=../shared/data .venv/bin/python bench/lcvi_loss_slot.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import machine_info, median, print_table, write_results

from stanflow.lcvi import stan_data
from stanflow.lcvi.mf import load_lastfm, matrix_factorisation, reference_split
from stanflow.losses import bound_loss
from stanflow.models import load, program_path

VECTORISED_HELPER = """\
vector loss(vector y, vector h, vector loss_params) {
  vector[rows(y)] u = y - h;
  return loss_params[1] * u - fmin(u, 0);
}
"""
"""The old vectorised check loss; the helper's ``utility_term`` is appended unchanged."""

VECTORISED_OUTCOMES = """\
matrix outcome_losses(vector loc, vector sd, matrix eps_y, vector h,
                      vector loss_params) {
  int S = rows(eps_y);
  int N = cols(eps_y);
  matrix[S, N] y = rep_matrix(loc', S) + rep_matrix(sd', S) .* eps_y;
  return to_matrix(loss(to_vector(y), to_vector(rep_matrix(h', S)),
                        loss_params),
                   S, N);
}
"""


def vectorised_helper(folder: Path) -> Path:
    """``utility.stanfunctions`` with the vectorised loss and ``outcome_losses``."""
    shipped = program_path("lcvi/utility.stanfunctions").read_text()
    term = shipped[shipped.index("// The LCVI utility term at one theta") :]
    path = folder / "utility_vectorised.stanfunctions"
    path.write_text(VECTORISED_HELPER + VECTORISED_OUTCOMES + term)
    return path


def gradient_seconds(model, theta: np.ndarray, calls: int) -> float:
    """Seconds per gradient, the median over ``calls`` timed in one block."""
    start = time.perf_counter()
    for _ in range(calls):
        model.log_density_gradient(theta, propto=True, jacobian=True)
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()

    Y = load_lastfm(100)
    problem = matrix_factorisation(Y, reference_split(Y.shape), K=20)
    loss = bound_loss("check", tau=0.2)
    rng = np.random.default_rng(1)
    eps_y = rng.standard_normal((2, problem.n))
    h = rng.normal(1.0, 0.5, size=problem.n)
    data = stan_data(problem, h, eps_y, loss, "exp", 0.5, "linearised", 1.0)
    template = program_path(problem.template)
    with tempfile.TemporaryDirectory() as tmp:
        models = {
            "scalar slot (shipped)": load(
                template, data, slots={"loss.stanfunctions": loss.stan_file}
            ),
            "vectorised slot": load(
                template, data,
                slots={"utility.stanfunctions": vectorised_helper(Path(tmp))},
            ),
        }
        theta = rng.normal(0, 0.3, size=models["scalar slot (shipped)"].param_unc_num())
        values = {
            name: model.log_density_gradient(theta, propto=True, jacobian=True)
            for name, model in models.items()
        }
        (lp_a, g_a), (lp_b, g_b) = values.values()
        assert abs(lp_a - lp_b) <= 1e-9 * abs(lp_a) and np.allclose(g_a, g_b, rtol=1e-9)
        times = {name: [] for name in models}
        for repeat in range(args.repeats):
            order = list(models) if repeat % 2 == 0 else list(reversed(models))
            for name in order:
                times[name].append(gradient_seconds(models[name], theta, args.calls))
    per_gradient = {name: median(t) for name, t in times.items()}
    ratio = per_gradient["scalar slot (shipped)"] / per_gradient["vectorised slot"]
    print_table(
        ["slot", "ms per gradient (median)"],
        [[name, f"{1e3 * s:.2f}"] for name, s in per_gradient.items()]
        + [["scalar / vectorised", f"{ratio:.2f}x"]],
    )
    write_results(
        "lcvi_loss_slot",
        {
            "machine": machine_info(),
            "cells": problem.n,
            "outcome_samples": 2,
            "calls_per_repeat": args.calls,
            "seconds_per_gradient": times,
            "median_seconds_per_gradient": per_gradient,
            "ratio_scalar_over_vectorised": ratio,
        },
    )


if __name__ == "__main__":
    main()
