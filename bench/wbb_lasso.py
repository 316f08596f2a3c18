"""WBB weighted-lasso draws per second against a loop of scikit-learn's Lasso.

The diabetes data of ``wbb-diabetes`` (442 x 10, standardised, y centred) and
its CV penalty; B = 1000 WBB draws (random prior weight). Ours:
``stanflow.wbb.wbb_lasso`` (weights, all draws at once, InferenceData) and the
bare solver ``stanflow.wbb.solve_lasso`` on the same weights. Theirs, in the same
run on the same draws: ``Lasso(alpha, fit_intercept=True).fit(X, y,
sample_weight=w)`` per draw. scikit-learn rescales ``sample_weight`` to sum
to ``n`` and minimises ``sum_i s_i r_i^2 / (2 n) + alpha |b|_1``, so our
``sum_i w_i r_i^2 / 2 + lam wp |b|_1`` is theirs with ``alpha = lam wp / sum(w)``.
scikit-learn at its default ``tol=1e-4`` and at ``tol=1e-10``; the largest
coefficient difference to ours is reported for both.

    python bench/wbb_lasso.py [--draws 1000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import numpy as np
from _common import REPO, RESULTS_DIR
from sklearn.linear_model import Lasso

from stanflow.wbb import bootstrap_weights, solve_lasso, wbb_lasso

sys.path.insert(0, str(REPO / "workflows"))
from wbb_diabetes import cv_alpha, diabetes

SEED = 11


def sklearn_loop(X, y, lam, w, wp, tol):
    beta = np.zeros((w.shape[0], X.shape[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b in range(w.shape[0]):
            model = Lasso(alpha=lam * wp[b] / w[b].sum(), fit_intercept=True, tol=tol, max_iter=100_000)
            beta[b] = model.fit(X, y, sample_weight=w[b]).coef_
    return beta


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=1000)
    B = parser.parse_args().draws
    X, y, _ = diabetes()
    lam = len(y) * cv_alpha(X, y)[0]
    timings = {}
    start = time.perf_counter()
    idata = wbb_lasso(X, y, lam, B, seed=SEED, fit_intercept=True)
    timings["stanflow_wbb_lasso"] = time.perf_counter() - start
    w, wp = bootstrap_weights(SEED, len(y), B)
    start = time.perf_counter()
    ours = solve_lasso(X, y, lam, weights=w, prior_weight=wp, fit_intercept=True).beta
    timings["stanflow_lasso_solver"] = time.perf_counter() - start
    theirs = {}
    for tol in (1e-4, 1e-10):
        start = time.perf_counter()
        theirs[tol] = sklearn_loop(X, y, lam, w, wp, tol)
        timings[f"sklearn_loop_tol{tol:g}"] = time.perf_counter() - start
    scale = np.abs(ours).max()
    result = {
        "draws": B,
        "lam": lam,
        "seconds": timings,
        "draws_per_second": {k: B / v for k, v in timings.items()},
        "speedup_vs_sklearn_default_tol": timings["sklearn_loop_tol0.0001"] / timings["stanflow_wbb_lasso"],
        "speedup_vs_sklearn_tol1e-10": timings["sklearn_loop_tol1e-10"] / timings["stanflow_wbb_lasso"],
        "max_abs_diff_vs_sklearn_default_tol": float(np.abs(ours - theirs[1e-4]).max()),
        "max_abs_diff_vs_sklearn_tol1e-10": float(np.abs(ours - theirs[1e-10]).max()),
        "max_abs_coefficient": float(scale),
        "idata_matches_solver": bool(np.allclose(idata.posterior["beta"].values[0], ours, atol=1e-8)),
    }
    print(json.dumps(result, indent=1))
    (RESULTS_DIR / "wbb_lasso.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
