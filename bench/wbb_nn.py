"""Solver choice for the WBB neural net: full-batch L-BFGS against Adam minibatches.

One weighted problem of the ``wbb-nn`` kind (ReLU (128, 64), softmax, L2
``lam = 1e-4 n``, Exp(1) weights), on scikit-learn's 8 x 8 digits (1000
training digits) so that it runs in seconds. Each solver gets the same wall
budget from the same He start; we record the weighted objective
(``stanflow.wbb.neural_net.objective``) over time, the final largest gradient
entry and the test accuracy. Adam (Kingma and Ba 2015; step 1e-3, minibatches
of 100, the weighted minibatch loss scaled by n / 100) is written here only for
the comparison.

    python bench/wbb_nn.py [--budget 20]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from _common import RESULTS_DIR
from scipy.optimize import minimize
from sklearn.datasets import load_digits

from stanflow.wbb import bootstrap_weights
from stanflow.wbb.neural_net import init_params, layer_sizes, objective, predict

SEED = 3


def lbfgs(theta, args, budget):
    trace, start = [], time.perf_counter()

    def callback(intermediate_result):
        elapsed = time.perf_counter() - start
        trace.append((elapsed, float(intermediate_result.fun)))
        if elapsed > budget:
            raise StopIteration

    res = minimize(objective, theta, args=args, jac=True, method="L-BFGS-B", callback=callback,
                   options={"maxiter": 100_000, "maxfun": 200_000, "ftol": 1e-14, "gtol": 1e-10})
    return res.x, trace


def adam(theta, X, labels, sizes, w, penalty, budget, batch=100, step=1e-3):
    rng = np.random.default_rng(SEED)
    theta, m, v = theta.copy(), np.zeros_like(theta), np.zeros_like(theta)
    n, t, trace, start = len(labels), 0, [], time.perf_counter()
    while time.perf_counter() - start < budget:
        for idx in np.array_split(rng.permutation(n), n // batch):
            _, g = objective(theta, X[idx], labels[idx], sizes, w[idx] * n / len(idx), penalty)
            t += 1
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g * g
            theta -= step * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        elapsed = time.perf_counter() - start
        trace.append((elapsed, objective(theta, X, labels, sizes, w, penalty)[0]))
        start += time.perf_counter() - start - elapsed  # full-objective evaluation not timed
    return theta, trace


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=20.0)
    budget = parser.parse_args().budget
    data = load_digits()
    X, y = data.data / 16.0, data.target
    order = np.random.default_rng(SEED).permutation(len(y))
    train, test = order[:1000], order[1000:]
    sizes = layer_sizes(64, (128, 64), 10)
    w, wp = bootstrap_weights(SEED, 1000, 1)
    penalty = 1e-4 * 1000 * wp[0]
    start = init_params(sizes, SEED)
    args = (X[train], y[train], sizes, w[0], penalty)
    result = {"budget_seconds": budget, "n_train": 1000, "sizes": list(sizes)}
    for name, (theta, trace) in {
        "lbfgs": lbfgs(start, args, budget),
        "adam": adam(start, *args, budget),
    }.items():
        value, grad = objective(theta, *args)
        checkpoints = {f"{s:g}s": min((f for t, f in trace if t <= s), default=None)
                       for s in (budget / 8, budget / 4, budget / 2, budget)}
        result[name] = {
            "objective": value,
            "objective_at": checkpoints,
            "max_abs_gradient": float(np.abs(grad).max()),
            "test_accuracy": float(np.mean(predict(theta, X[test], sizes) == y[test])),
        }
    print(json.dumps(result, indent=1))
    (RESULTS_DIR / "wbb_nn.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
