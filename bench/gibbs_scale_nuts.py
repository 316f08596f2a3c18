"""GPC at scale against the resample design: the moved design's root beside NUTS per resample.

Median regression (check loss, tau = 0.5) at K = 5, 10 and 20 coefficients, n = 500,
B = 200 (the data and resamples of ``bench/gibbs_scale.py``):

1. The moved design's coverage function and root (``TransportCoverage`` and
   ``search_root``, as ``path_gpc`` runs them), with its stated error
   ``sqrt(count_variance + 1/12) / |slope|``.
2. Every resample's Gibbs posterior by NUTS (one chain, 300 warm-up and 1000 draws,
   as ``StanBackend(design="resample")`` runs it) at the root and at
   ``root * (1 -+ 0.1)``, counted with the same regions (the full data's posterior
   covariance, each resample's mean). A NUTS count is a Monte Carlo estimate too:
   its variance is the moved design's formula, ``sum pi_b (1 - pi_b)`` with
   ``pi_b`` the chance that a resample's verdict flipped, read from the NUTS draws'
   smallest bulk effective sample size over the coefficients.
3. The NUTS root by linear interpolation between the two counts around the target
   ``0.95 B``, its error by the delta method (both counts' variances, each with the
   rounding term ``1/12``), and the distance between the two roots in the error of
   their difference, ``sqrt(se_moved^2 + se_nuts^2)``.

Writes ``bench/results/gibbs_scale_nuts.json``; with ``--K`` other sizes (n = 500) to
``bench/results/gibbs_scale_nuts_K<K>.json``. ``--workers`` NUTS runs at a time (default 1;
the moved design's work uses every core, the NUTS runs one core each).

    python bench/gibbs_scale_nuts.py [--K 50] [--workers 2]
"""

from __future__ import annotations

import argparse
import math
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from _common import machine_info, print_table, write_results
from gibbs_scale import NUTS, B, coverage_indices, program_for

from stanflow import arviz_compat
from stanflow.gibbs import posterior
from stanflow.gibbs.gpc.reweighting import resample_counts
from stanflow.gibbs.path import CALIBRATION_SAMPLER, LearningRatePath
from stanflow.gibbs.path.coverage import (
    BootstrapProblem,
    cross_fit_variance,
    inside_and_flip,
    region_statistic_per_resample,
)
from stanflow.gibbs.path.gpc_root import search_root
from stanflow.gibbs.path.root_search import ROUNDING_VARIANCE
from stanflow.gibbs.path.transport import TransportCoverage

SIZES = [(5, 500), (10, 500), (20, 500)]
ALPHA = 0.05
SPREAD = 0.1
"""The NUTS counts are taken at ``root * (1 - SPREAD)``, ``root`` and ``root * (1 + SPREAD)``."""
MAX_EVALUATIONS = 40
"""The moved design's root finder's budget of coverage evaluations."""


def moved_root(program, seed: int = 1) -> tuple[TransportCoverage, dict]:
    """The moved design's root and its stated error, as ``path_gpc`` computes them
    (:func:`~stanflow.gibbs.path.gpc_root.search_root`), the path and the moves seeded by ``seed``."""
    path = LearningRatePath(program, sampler=CALIBRATION_SAMPLER, seed=seed)
    problem = BootstrapProblem(path, coverage_indices(program), program.estimate().theta, ALPHA)
    coverage = TransportCoverage(problem, seed=seed)
    start = time.perf_counter()
    found = search_root(coverage, max_evaluations=MAX_EVALUATIONS)
    wall = time.perf_counter() - start
    at_root = found.error.at_root
    return coverage, {"root": found.root, "root_se": found.error.se,
                      "converged": found.converged, "wall_s": wall,
                      "evaluations": len(found.history), "count_at_root": at_root.count,
                      "count_variance_at_root": at_root.count_variance,
                      "count_slope": found.error.slope}


def nuts_count(program, coverage: TransportCoverage, counts: np.ndarray, omega: float,
               workers: int = 1) -> dict:
    """The count of covering resamples by NUTS per resample (weights ``counts``, ``(B, n)``)
    at ``omega``, its Monte Carlo variance, and the NUTS runs' wall seconds and effective sizes
    (``workers`` runs at a time)."""
    K = len(program.names)

    def run(b: int) -> tuple[float, float, float]:
        start = time.perf_counter()
        fit = posterior(program, omega=omega, weights=counts[b], seed=b, **NUTS)
        seconds = time.perf_counter() - start
        draws = arviz_compat.group(fit, "posterior")["beta"].values.reshape(1, -1, K)
        statistic = region_statistic_per_resample(
            draws, np.zeros(draws.shape[:2]), coverage.estimate, coverage.region)[0]
        return statistic, float(arviz_compat.ess(fit, var_names=["beta"])["beta"].min()), seconds

    program.model()  # compiled or loaded once, before the threads share it
    with ThreadPoolExecutor(workers) as pool:
        statistic, ess, seconds = map(np.array, zip(*pool.map(run, range(B)), strict=True))
    inside, flip = inside_and_flip(statistic, ess, ALPHA, scalar=False,
                                   centre=cross_fit_variance(K, ALPHA))
    return {"count": int(inside.sum()), "count_variance": float(np.sum(flip * (1 - flip))),
            "ess_min": float(ess.min()), "ess_median": float(np.median(ess)),
            "seconds_median": float(np.median(seconds))}


def interpolated_root(omegas: list[float], counts: list[int], variances: list[float],
                      target: float) -> tuple[float, float]:
    """Where the piecewise-linear count through ``(omegas, counts)`` crosses ``target``,
    and that root's delta-method error from the two counts' variances (``nan, nan`` when
    the counts do not cross ``target`` within ``omegas``)."""
    for k in range(len(omegas) - 1):
        (w0, c0, v0), (w1, c1, v1) = ((omegas[j], counts[j], variances[j]) for j in (k, k + 1))
        if (c0 - target) * (c1 - target) <= 0 and c0 != c1:
            t = (target - c0) / (c1 - c0)
            scale = (w1 - w0) / (c1 - c0)
            variance = (1 - t) ** 2 * (v0 + ROUNDING_VARIANCE) + t**2 * (v1 + ROUNDING_VARIANCE)
            se = abs(scale) * math.sqrt(variance)
            return float(w0 + t * (w1 - w0)), se
    return math.nan, math.nan


def compare(K: int, n: int, workers: int = 1) -> dict:
    program = program_for(K, n)
    coverage, moved = moved_root(program)
    root = moved["root"]
    omegas = [root * (1 - SPREAD), root, root * (1 + SPREAD)]
    at = [coverage(w) for w in omegas]
    counts = resample_counts(coverage_indices(program), program.n)
    nuts = [nuts_count(program, coverage, counts, w, workers) for w in omegas]
    nuts_counts = [r["count"] for r in nuts]
    nuts_root, nuts_se = interpolated_root(
        omegas, nuts_counts, [r["count_variance"] for r in nuts], (1 - ALPHA) * B)
    gap = root - nuts_root
    record = {"K": K, "n": n, **moved, "omegas": omegas,
              "counts_moved": [e.count for e in at],
              "count_variances_moved": [e.count_variance for e in at],
              "counts_nuts": nuts_counts, "nuts": nuts, "nuts_root": nuts_root, "nuts_root_se": nuts_se,
              "gap_in_errors_of_both": abs(gap) / math.hypot(moved["root_se"], nuts_se),
              "gap_in_moved_errors": abs(gap) / moved["root_se"]}
    print(f"K = {K}: moved root {root:.3f} +- {moved['root_se']:.3f}, NUTS root "
          f"{nuts_root:.3f} +- {nuts_se:.3f}; counts {record['counts_moved']} vs {nuts_counts}",
          flush=True)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--K", type=int, nargs="+", help="other sizes (n = 500)")
    parser.add_argument("--workers", type=int, default=1, help="NUTS runs at a time")
    args = parser.parse_args()
    info = machine_info()
    sizes = SIZES if args.K is None else [(K, 500) for K in args.K]
    rows = [compare(K, n, args.workers) for K, n in sizes]
    print_table(["K", "n", "moved root", "NUTS root", "gap / both errors"],
                [[r["K"], r["n"], f"{r['root']:.3f} +- {r['root_se']:.3f}",
                  f"{r['nuts_root']:.3f} +- {r['nuts_root_se']:.3f}",
                  f"{r['gap_in_errors_of_both']:.1f}"] for r in rows])
    options = "" if args.K is None else " --K " + " ".join(map(str, args.K))
    options += "" if args.workers == 1 else f" --workers {args.workers}"
    name = "gibbs_scale_nuts" + ("" if args.K is None else "_K" + "_".join(map(str, args.K)))
    write_results(name, {
        "command": "python bench/gibbs_scale_nuts.py" + options, "machine": info, "B": B,
        "nuts": NUTS, "rows": rows,
    })


if __name__ == "__main__":
    main()
