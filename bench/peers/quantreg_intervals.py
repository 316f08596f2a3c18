"""Peer benchmark: quantreg's slope intervals against stanflow's calibrated Gibbs posterior.

Quantile regression of ``y`` on ``(1, x)``, n = 200, 95% intervals for the slope,
over ``--datasets`` simulated data sets (default 200) per cell, four cells:

* designs: ``homoscedastic`` (``gibbs-calibrate``'s: ``X ~ chi2_2 - 2``,
  ``Y = 2 + X + N(0, 2^2)``; true slope 1 at every tau) and ``heteroscedastic``
  (``Y = 2 + X + (1 + 0.5 (X + 2)) e``, ``e ~ N(0, 1)``; true slope
  ``1 + 0.5 Phi^-1(tau)``);
* tau = 0.5 and 0.9 (the same data sets for both taus of a design).

R (``r-base-core``, ``r-cran-quantreg`` from Debian, installed by
``apt-get`` if ``Rscript`` is missing) fits every data set of a cell in one
``Rscript`` process (``quantreg_fits.R``): ``rq`` with ``summary(se = "nid")``
and ``summary(se = "boot")`` (quantreg's default xy-pair bootstrap, ``--boot-r``
replicates), the interval being estimate +- t quantile x standard error; each
fit is timed inside R. stanflow fits the same data sets with the linear template
(check loss at tau, independent ``N(0, 10^2)`` priors: ``gibbs-calibrate``'s)
and per data set one ``calibrate_path`` (4000 particles, B = 200 resamples) and
one ``calibrate_importance`` (2000 draws per proposal, the same resamples): the
slope's equal-tailed 95% interval at GPC's root (calibrated on the joint
ellipsoid) and at the plug-in ``omega``, without and with the shape fix (every
posterior moved to the sandwich's shape before GPC counts its regions and the
intervals are read), the shape taken from ``H`` and ``J`` (``adjust="sandwich"``)
or from the resamples' posterior means (``adjust="bootstrap"``). Time per fit:
making the program (cache hit) plus the calibration, for each of the six
variants. Cells alternate R, stanflow, R, stanflow in one run.

Coverage is the share of data sets whose interval holds the true slope, with its
binomial standard error. ``--importance-only`` leaves out ``calibrate_path`` (8x
slower) so that many more data sets narrow the coverages' errors; its results go to
``quantreg_intervals_importance.json``.

Usage::

    .venv/bin/python bench/peers/quantreg_intervals.py [--datasets 200] [--importance-only]
        [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import machine_info, print_table, write_results
from _r import ensure_r

R_SCRIPT = Path(__file__).resolve().parent / "quantreg_fits.R"
N = 200
TAUS = (0.5, 0.9)
DESIGNS = ("homoscedastic", "heteroscedastic")
SEED = 20261204
LEVEL = 0.95
QUICK_DATASETS = 3
ADJUSTMENTS = (("none", ""), ("sandwich", "_adjusted"), ("bootstrap", "_bootstrap"))
"""Each ``adjust`` of stanflow's calibrations with the suffix of its result keys."""


def true_slope(design: str, tau: float) -> float:
    """The slope of the tau-quantile of ``Y`` given ``X`` in ``design``."""
    from scipy.stats import norm

    return 1.0 if design == "homoscedastic" else 1.0 + 0.5 * float(norm.ppf(tau))


def simulate(design: str, datasets: int) -> list[tuple[Any, Any]]:
    """``datasets`` pairs ``(x, y)`` of ``design``, n = 200, from a fixed seed per design."""
    import numpy as np

    rng = np.random.default_rng([SEED, DESIGNS.index(design)])
    out = []
    for _ in range(datasets):
        x = rng.chisquare(2, size=N) - 2
        scale = 2.0 if design == "homoscedastic" else 1.0 + 0.5 * (x + 2)
        out.append((x, 2 + x + scale * rng.normal(size=N)))
    return out


def write_csv(data: list[tuple[Any, Any]], path: Path) -> None:
    """Write the data sets as rows ``dataset, x, y`` at full precision."""
    lines = ["dataset,x,y"]
    for d, (x, y) in enumerate(data):
        lines += [f"{d},{a:.17g},{b:.17g}" for a, b in zip(x, y, strict=True)]
    path.write_text("\n".join(lines) + "\n")


def run_r(rscript: str, csv: Path, tau: float, boot_r: int, folder: Path) -> dict[str, Any]:
    """quantreg on every data set of ``csv`` in one Rscript process; per-data-set rows and times."""
    import pandas as pd

    out = folder / f"r_{csv.stem}_{tau}.csv"
    start = time.perf_counter()
    proc = subprocess.run(
        [rscript, str(R_SCRIPT), str(csv), str(tau), str(boot_r), str(SEED), str(out)],
        capture_output=True, text=True, check=False,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{R_SCRIPT.name} failed:\n{proc.stdout}\n{proc.stderr}")
    return {"rows": pd.read_csv(out), "process_wall": wall,
            "versions": proc.stdout.strip().splitlines()[0]}


def stanflow_fit(x: Any, y: Any, tau: float, seed: int,
                 designs: tuple[str, ...] = ("", "importance_")) -> dict[str, Any]:
    """One data set: the linear template, ``calibrate_path`` (design ``""``) and
    ``calibrate_importance`` (``"importance_"``) without and with either shape fix; slope
    intervals at GPC and plug-in, each variant timed."""
    import numpy as np

    from stanflow.gibbs import calibrate_importance, calibrate_path, linear_program

    calibrations = {"": calibrate_path, "importance_": calibrate_importance}
    record: dict[str, Any] = {}
    for adjust, suffix in ADJUSTMENTS:
        for design in designs:
            calibrate = calibrations[design]
            start = time.perf_counter()
            program = linear_program(
                y, np.column_stack([np.ones(len(x)), x]), loss="check",
                loss_params={"tau": tau}, prior="normal", prior_params={"mean": 0, "sd": 10},
            )
            calibration = calibrate(program, seed=seed, rules=["plugin"],
                                    adjust=adjust).calibration
            record[f"{design}seconds{suffix}"] = time.perf_counter() - start
            slope = calibration["rule_interval"].isel(param=1)
            gpc = "gpc_path" if design == "" else "gpc"
            for rule, name in ((gpc, "gpc"), ("plugin", "plugin")):
                record[f"omega_{design}{name}{suffix}"] = float(
                    calibration["rule_omega"].sel(rule=rule))
                record[f"{design}{name}{suffix}"] = [float(v) for v in slope.sel(rule=rule).values]
            record[f"{design}low_ess_share{suffix}"] = float(calibration["low_ess_share"])
    return record


def coverage(intervals: list[tuple[float, float]], truth: float) -> dict[str, float]:
    """Share of intervals holding ``truth``, its binomial standard error, the median width."""
    import numpy as np

    ends = np.asarray(intervals)
    held = (ends[:, 0] <= truth) & (truth <= ends[:, 1])
    p = float(held.mean())
    return {"coverage": p, "se": math.sqrt(p * (1 - p) / len(held)),
            "median_width": float(np.median(ends[:, 1] - ends[:, 0]))}


def coverage_goal_met(
    methods: dict[str, dict[str, float]], datasets: int, ours: str = "stanflow_gpc"
) -> bool:
    """Whether ``ours``'s coverage is as close to 0.95 as quantreg's best, counted in data sets."""

    def miss(method: str) -> int:
        return abs(round(methods[method]["coverage"] * datasets) - round(LEVEL * datasets))

    return miss(ours) <= min(miss("quantreg_nid"), miss("quantreg_boot"))


def summarise_cell(r: dict[str, Any], fits: list[dict[str, Any]], truth: float,
                   designs: tuple[str, ...] = ("", "importance_")) -> dict[str, Any]:
    """Coverage and time per fit of each method in one (design, tau) cell."""
    import numpy as np

    rows = r["rows"]
    methods = {
        "quantreg_nid": {
            **coverage(list(zip(rows["nid_lower"], rows["nid_upper"], strict=True)), truth),
            "seconds_per_fit": float(rows["seconds_nid"].mean()),
        },
        "quantreg_boot": {
            **coverage(list(zip(rows["boot_lower"], rows["boot_upper"], strict=True)), truth),
            "seconds_per_fit": float((rows["seconds_nid"] + rows["seconds_boot"]).mean()),
        },
    }
    for design, (_, suffix) in itertools.product(designs, ADJUSTMENTS):
        seconds = float(np.mean([f[f"{design}seconds{suffix}"] for f in fits]))
        for rule in ("gpc", "plugin"):
            methods[f"stanflow_{design}{rule}{suffix}"] = {
                **coverage([tuple(f[f"{design}{rule}{suffix}"]) for f in fits], truth),
                "seconds_per_fit": seconds,
                "median_omega": float(np.median([f[f"omega_{design}{rule}{suffix}"]
                                                 for f in fits])),
            }
    boot = methods["quantreg_boot"]["seconds_per_fit"]
    summary: dict[str, Any] = {
        "truth_slope": truth,
        "methods": methods,
        "r_process_wall": r["process_wall"],
        "r_seconds_per_data_set_incl_startup": r["process_wall"] / len(rows),
    }
    for design in designs:
        name = design.rstrip("_")
        tail = f"_{name}" if name else ""
        summary[f"max_{design}low_ess_share"] = max(
            f[f"{design}low_ess_share{suffix}"] for f in fits for _, suffix in ADJUSTMENTS)
        for _, suffix in ADJUSTMENTS:
            summary[f"goal_coverage_met{tail}{suffix}"] = coverage_goal_met(
                methods, len(fits), f"stanflow_{design}gpc{suffix}")
        summary[f"goal_time_met{tail}"] = methods[f"stanflow_{design}gpc"]["seconds_per_fit"] <= boot
    return summary


def warm_compile() -> float:
    """Seconds to make the linear template's program once (a cache hit after the first run)."""
    import numpy as np

    from stanflow.gibbs import linear_program

    start = time.perf_counter()
    linear_program(np.arange(3.0), np.ones((3, 2)), loss="check", loss_params={"tau": 0.5},
                   prior="normal", prior_params={"mean": 0, "sd": 10})
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the cells, print a table, write ``bench/results/quantreg_intervals.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=200,
                        help="simulated data sets per design and tau (default 200)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK_DATASETS} data sets, results not written")
    parser.add_argument("--boot-r", type=int, default=200,
                        help="quantreg's bootstrap replicates (default 200, quantreg's own)")
    parser.add_argument("--importance-only", action="store_true",
                        help="stanflow by calibrate_importance only (no calibrate_path): fast "
                        "enough for many data sets; results in quantreg_intervals_importance.json")
    args = parser.parse_args(argv)
    designs = ("importance_",) if args.importance_only else ("", "importance_")
    name = "quantreg_intervals" + ("_importance" if args.importance_only else "")
    datasets = QUICK_DATASETS if args.quick else args.datasets
    if datasets < 2:
        parser.error(f"--datasets must be at least 2, got {datasets}")

    info = machine_info()
    rscript = ensure_r("quantreg")
    program_wall = warm_compile()
    cells: dict[str, Any] = {}
    versions = ""
    with tempfile.TemporaryDirectory(prefix="stanflow-peers-qr-") as tmp:
        folder = Path(tmp)
        for design in DESIGNS:
            data = simulate(design, datasets)
            csv = folder / f"{design}.csv"
            write_csv(data, csv)
            for tau in TAUS:
                r = run_r(rscript, csv, tau, args.boot_r, folder)
                versions = r["versions"]
                fits = [stanflow_fit(x, y, tau, seed=d, designs=designs)
                        for d, (x, y) in enumerate(data)]
                key = f"{design}_tau{tau}"
                cells[key] = summarise_cell(r, fits, true_slope(design, tau), designs)
                spent = ", ".join(
                    f"{d.rstrip('_') or 'path'} "
                    f"{sum(f[f'{d}seconds{s}'] for f in fits for _, s in ADJUSTMENTS):.1f} s"
                    for d in designs)
                print(f"{key}: R {r['process_wall']:.1f} s, stanflow {spent}", flush=True)
    rows = [
        [cell, method, m["coverage"], m["se"], m["median_width"], m["seconds_per_fit"]]
        for cell, summary in cells.items()
        for method, m in summary["methods"].items()
    ]
    print()
    print_table(["cell", "method", "coverage", "se", "median width", "s per fit"], rows)
    data = {
        "benchmark": name,
        "command": f".venv/bin/python bench/peers/quantreg_intervals.py --datasets {datasets}"
        + (" --importance-only" if args.importance_only else "")
        + (" --quick" if args.quick else ""),
        "machine": info,
        "versions": {"r_quantreg": versions, "stanflow": _stanflow_version()},
        "settings": {"n": N, "taus": list(TAUS), "datasets": datasets, "level": LEVEL,
                     "boot_r": args.boot_r, "seed": SEED,
                     **({} if args.importance_only else {"stanflow_particles": 4000}),
                     "stanflow_importance_draws": 2000, "stanflow_B": 200,
                     "prior": "normal(0, 10) on both coefficients"},
        "stanflow_make_program_wall": program_wall,
        "cells": cells,
        "goal": "stanflow GPC coverage at least as close to 0.95 as quantreg's best, "
        "time per fit at most quantreg's bootstrap's",
    }
    if not args.quick:
        print(f"wrote {write_results(name, data)}")
    return data


def _stanflow_version() -> str:
    import stanflow

    return stanflow.__version__


if __name__ == "__main__":
    main()
