"""Each coefficient's interval from GPC on the path, without and with the shape fix, at K coefficients.

Median regression (check loss, tau = 0.5) on ``K`` coefficients: an intercept
and ``K - 1`` skewed predictors ``z_j ~ chi2_2 - 2``, true coefficients ``(1,
0.5, ..., 0.5)``, noise ``(1 + 0.5 (z_1 + 2)) e`` with ``e ~ N(0, 1)`` (its
spread grows with the first predictor, so the sandwich ``H^-1 J H^-1`` is not
``H^-1``'s shape), ``N(0, 10^2)`` priors, ``--n`` observations. On each of
``--datasets`` data sets per ``K``: ``calibrate_path(program, seed=r,
rules=[], adjust=...)`` (its defaults otherwise: B = 200, particles moved to
every resample from five coefficients on) for each ``adjust`` in ``none``,
``sandwich`` and ``bootstrap``, and whether GPC's 95% interval of each
coefficient holds the truth. Recorded per ``K`` and ``adjust``: each
coefficient's coverage, their mean, the largest distance from 0.95, the
calibration's seconds (median) and the warnings it gave.

Writes ``bench/results/gibbs_shape_coverage.json``.

    python bench/gibbs_shape_coverage.py [--K 5 10] [--n 400] [--datasets 100]
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import numpy as np
from _common import machine_info, median, print_table, write_results

from stanflow.gibbs import calibrate_path, linear_program

SEED = 20261207
ADJUSTMENTS = ("none", "sandwich", "bootstrap")
LEVEL = 0.95


def data_set(K: int, n: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(X, y, beta)`` of data set ``r`` at ``K`` coefficients (module docstring)."""
    rng = np.random.default_rng([SEED, K, r])
    z = rng.chisquare(2, size=(n, K - 1)) - 2
    X = np.column_stack([np.ones(n), z])
    beta = np.r_[1.0, np.full(K - 1, 0.5)]
    return X, X @ beta + (1 + 0.5 * (z[:, 0] + 2)) * rng.normal(size=n), beta


def fit(K: int, n: int, r: int) -> dict[str, Any]:
    """One data set: every ``adjust``'s held coefficients, seconds and warnings."""
    X, y, beta = data_set(K, n, r)
    program = linear_program(y, X, loss="check", loss_params={"tau": 0.5}, prior="normal",
                             prior_params={"mean": 0, "sd": 10})
    record: dict[str, Any] = {}
    for adjust in ADJUSTMENTS:
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            c = calibrate_path(program, seed=r, rules=[], adjust=adjust).calibration
        low, high = c["rule_interval"].sel(rule="gpc_path").values
        record[adjust] = {
            "held": ((low <= beta) & (beta <= high)).tolist(),
            "seconds": time.perf_counter() - start,
            "omega": float(c["omega"]),
            "warnings": [str(w.message)[:200] for w in caught],
        }
    return record


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per ``adjust``: coverage per coefficient, mean, largest gap to 0.95, time, warnings."""
    out = {}
    for adjust in ADJUSTMENTS:
        held = np.array([r[adjust]["held"] for r in records], dtype=float)
        per = held.mean(axis=0)
        out[adjust] = {
            "coverage": per.tolist(),
            "coverage_se": np.sqrt(per * (1 - per) / len(held)).tolist(),
            "mean_coverage": float(per.mean()),
            "largest_gap": float(np.max(np.abs(per - LEVEL))),
            "seconds_median": median([r[adjust]["seconds"] for r in records]),
            "omega_median": median([r[adjust]["omega"] for r in records]),
            "data_sets_warned": sum(bool(r[adjust]["warnings"]) for r in records),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--K", type=int, nargs="+", default=[5, 10], help="coefficients")
    parser.add_argument("--n", type=int, default=400, help="observations per data set")
    parser.add_argument("--datasets", type=int, default=100, help="data sets per K")
    args = parser.parse_args()
    info = machine_info()
    results: dict[str, Any] = {}
    for K in args.K:
        records = []
        for r in range(args.datasets):
            records.append(fit(K, args.n, r))
            if (r + 1) % 10 == 0:
                print(f"K = {K}: {r + 1} data sets", flush=True)
        results[str(K)] = {"summary": summarise(records), "records": records}
        rows = [[K, adjust, f"{s['mean_coverage']:.3f}", f"{s['largest_gap']:.3f}",
                 " ".join(f"{p:.2f}" for p in s["coverage"]), f"{s['seconds_median']:.2f}",
                 s["data_sets_warned"]]
                for adjust, s in results[str(K)]["summary"].items()]
        print_table(["K", "adjust", "mean", "largest gap", "per coefficient", "s", "warned"], rows)
    write_results("gibbs_shape_coverage", {
        "command": "python bench/gibbs_shape_coverage.py --K "
                   f"{' '.join(map(str, args.K))} --n {args.n} --datasets {args.datasets}",
        "machine": info, "seed": SEED, "n": args.n, "datasets": args.datasets, "level": LEVEL,
        "design": "median regression, intercept + (K - 1) chi2_2 - 2 predictors, coefficients "
                  "(1, 0.5, ...), noise (1 + 0.5 (z_1 + 2)) N(0, 1), N(0, 10^2) priors",
        "results": results,
    })


if __name__ == "__main__":
    main()
