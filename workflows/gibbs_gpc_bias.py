"""GPC's own bias: its bootstrap fixed point against omega* and the finite-n target.

Syring and Martin's calibration (GPC) chooses the learning rate at which the
bootstrap coverage ``c_B(omega)`` of the full-data estimate is ``1 - alpha``.
Whatever its steps, the algorithm can at best reach that fixed point
(``stanflow.gibbs.gpc.fixed_point``: exact posteriors, the plateau where 190 of
B = 200 resamples cover, found by bisection). Here the fixed point is measured
over replications, as a property of GPC:

- data ``y_1..n ~ Gamma(2, 1)``, n = 50, 100 and 400, R replications each
  (4000 for the mean, the first 1200 of them for the median; ``--quick``: 40
  and 12), B = 200 resamples drawn as ``calibrate_gpc`` draws them, 95%
  equal-tailed intervals;
- median: absolute loss, uniform prior on [0, 8], exact piecewise-exponential
  posteriors; ``omega* = H / J = 2 f(m) = 0.6266`` (``m`` the median of
  Gamma(2, 1), ``f(m) = m e^-m``);
- mean: squared loss, flat prior, normal posteriors ``N(ybar, 1 / (2 omega n))``;
  ``omega* = H / J = 2 / (4 Var y) = 1/4``.

For every replication: the fixed point (plateau midpoint and ends), the
bootstrap coverage at ``omega*``, and whether the full-data 95% interval at the
fixed point covers the true median (mean) -- the coverage GPC's intervals
actually have, against the nominal 0.95 the paper's algorithm targets. The
finite-n target ``omega_n`` (where the intervals cover the truth exactly 95% of
the time at that n) is computed from separate data sets for the median
(``ORACLE_REPLICATIONS``, exact posteriors) and in closed form for the mean
(``ybar ~ Gamma(2n, rate n)``). A check with B = 1000 on the first
``B_CHECK_REPLICATIONS`` data sets at n = 100 tells whether the number of
resamples matters.

Writes ``gibbs_gpc_bias.png`` (fixed points against n for both losses, with
``omega*`` and ``omega_n``; coverage of GPC's intervals), ``gibbs_gpc_bias.nc``
(per replication: fixed point, plateau ends, bootstrap coverage at omega*,
covered) and ``summary.json``.

Every (loss, n), every n's ``omega_n`` of the median and the B = 1000 check
are pieces (``OUT/runs/``), so a stopped run resumes. All data come from one
stream of the seed: per n the data sets, then per n their resamples' seeds,
then per n the median's separate data sets for ``omega_n``; a piece draws the
stream up to its own.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import xarray as xr
from scipy import optimize, stats

from stanflow import arviz_compat
from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.gibbs.exact_location import absolute_cdf, absolute_segments, squared_cdf
from stanflow.gibbs.gpc.fixed_point import (
    BRACKET,
    bootstrap_count,
    bootstrap_counts,
    fixed_points,
    plateau_end,
)
from stanflow.idata import save
from stanflow.workflows import main, save_figure

DESCRIPTION = (
    "GPC's own bias: the bootstrap fixed point of Syring and Martin's calibration for "
    "the median and the mean of Gamma(2, 1) data, exact posteriors, against omega*"
)

SEED = 20240517
SIZES = (50, 100, 400)
B = 200
ALPHA = 0.05
BOUNDS = (0.0, 8.0)
B_CHECK = 1000
ELEMENTS = 4_000_000
"""Replications are processed in chunks of at most this many (resample, observation) pairs."""
LOSSES = ("absolute", "squared")

SETTINGS = {
    "quick": {"replications": {"absolute": 12, "squared": 40}, "oracle_replications": 1000,
              "b_check_replications": 4},
    "full": {"replications": {"absolute": 1200, "squared": 4000}, "oracle_replications": 40000,
             "b_check_replications": 100},
}
"""``replications``: data sets per n and loss; the median uses the first ones of the mean's (its
bisections cost more). ``oracle_replications``: the median's separate data sets per n for
``omega_n``. ``b_check_replications``: the first data sets at n = 100 checked with B = 1000."""


def gamma2_median() -> float:
    """Median of Gamma(2, 1): the root of ``1 - exp(-m) (1 + m) = 1/2``."""
    return float(optimize.brentq(lambda m: 1 - math.exp(-m) * (1 + m) - 0.5, 0.5, 5.0))


def truth(loss: str) -> tuple[float, float]:
    """The true location and ``omega* = H / J`` for Gamma(2, 1) data."""
    if loss == "absolute":
        m = gamma2_median()
        return m, 2 * m * math.exp(-m)
    return 2.0, 2 / (4 * 2.0)


def inside(cdf_values: np.ndarray) -> np.ndarray:
    """Whether equal-tailed 95% intervals hold the point whose CDF values are given."""
    return (cdf_values >= ALPHA / 2) & (cdf_values <= 1 - ALPHA / 2)


def cdf_at_truth(y: np.ndarray, loss: str, omega: np.ndarray) -> np.ndarray:
    """Full-data posterior CDF at the true location, per data set and learning rate."""
    location, _ = truth(loss)
    if loss == "absolute":
        return absolute_cdf(absolute_segments(y, location, BOUNDS), omega)
    return squared_cdf(y, location, omega)


def replicate(y: np.ndarray, loss: str, seeds: np.ndarray, resamples: int) -> xr.Dataset:
    """Fixed points and coverages of GPC for the data sets ``y`` (R, n)."""
    _, omega_star = truth(loss)
    n = y.shape[1]
    chunk = max(1, ELEMENTS // (resamples * n))
    parts = []
    for start in range(0, len(y), chunk):
        rows = slice(start, start + chunk)
        estimate = np.median(y[rows], 1) if loss == "absolute" else np.mean(y[rows], 1)
        count = bootstrap_count(
            y[rows], estimate, bootstrap_counts(n, resamples, seeds[rows]),
            loss=loss, alpha=ALPHA, bounds=BOUNDS,
        )
        found = fixed_points(count, round((1 - ALPHA) * resamples), len(estimate))
        parts.append(
            {
                "omega": found.omega,
                "lower": found.lower,
                "upper": found.upper,
                "count_at_omega": found.count,
                "bootstrap_coverage_at_omega_star": count(np.full(len(estimate), omega_star)) / resamples,
                "covered": inside(cdf_at_truth(y[rows], loss, found.omega)),
            }
        )
    return xr.Dataset(
        {key: ("replicate", np.concatenate([p[key] for p in parts])) for key in parts[0]}
    )


def oracle_absolute(y: np.ndarray) -> tuple[float, float]:
    """The median's ``omega_n``: exact coverage 0.95 over the separate data sets ``y`` (R, n), and
    its Monte Carlo standard error (delta method through the coverage curve's slope)."""
    replications, n = y.shape
    location, _ = truth("absolute")
    chunk = max(1, ELEMENTS // n)
    segments = [
        absolute_segments(y[start:start + chunk], location, BOUNDS)
        for start in range(0, replications, chunk)
    ]

    def covering(omega: np.ndarray) -> np.ndarray:
        return sum(np.sum(inside(absolute_cdf(part, omega[:, None])), axis=-1) for part in segments)

    level = round((1 - ALPHA) * replications)
    omega_n = float(plateau_end(covering, level, np.array([BRACKET[0]]), np.array([BRACKET[1]]))[0])
    low, high = covering(np.array([omega_n / 1.2, omega_n * 1.2])) / replications
    slope = (high - low) / (omega_n * (1.2 - 1 / 1.2))
    return omega_n, math.sqrt(ALPHA * (1 - ALPHA) / replications) / abs(slope)


def oracle_squared(n: int) -> float:
    """The mean's ``omega_n`` in closed form: ``P(|ybar - 2| <= z / sqrt(2 omega n)) = 0.95``
    with ``ybar ~ Gamma(2n, rate n)``."""
    z = stats.norm.ppf(1 - ALPHA / 2)
    ybar = stats.gamma(2 * n, scale=1 / n)

    def gap(omega: float) -> float:
        half = z / math.sqrt(2 * omega * n)
        return ybar.cdf(2 + half) - ybar.cdf(2 - half) - (1 - ALPHA)

    return float(optimize.brentq(gap, 0.01, 10.0))


def cells(settings: dict[str, Any]) -> list[Cell]:
    """Per loss and n the fixed points, per n the median's ``omega_n``, and the B = 1000 check."""
    drawn = {"data_sets": max(settings["replications"].values())}
    fixed = [
        Cell(f"{loss}/n{n}", drawn | {"part": "fixed_point", "loss": loss, "n": n,
                                      "replications": settings["replications"][loss], "B": B})
        for loss in LOSSES for n in SIZES
    ]
    oracle = [
        Cell(f"oracle/n{n}", drawn | {"part": "oracle", "n": n,
                                      "replications": settings["oracle_replications"]})
        for n in SIZES
    ]
    check = Cell("b_check", drawn | {"part": "fixed_point", "loss": "absolute", "n": 100,
                                     "replications": settings["b_check_replications"], "B": B_CHECK})
    return [*fixed, *oracle, check]


def compute(run: CellRun) -> dict:
    """One cell: fixed points (per data set) or the median's ``omega_n`` with its error."""
    params = run.params
    if params["part"] == "oracle":
        omega_n, omega_n_se = oracle_absolute(oracle_data(run, params["n"]))
        return {"omega_n": omega_n, "omega_n_se": omega_n_se}
    y, seeds, _ = data(run, params["n"])
    rows = slice(0, params["replications"])
    found = replicate(y[rows], params["loss"], seeds[rows], params["B"])
    return {"replicates": {key: found[key].values for key in found.data_vars}}


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """Per loss and n the fixed points against ``omega*`` and ``omega_n``; the B = 1000 check."""
    groups = fixed_point_groups(records)
    oracle = {
        "absolute": {n: (records[f"oracle/n{n}"]["omega_n"], records[f"oracle/n{n}"]["omega_n_se"])
                     for n in SIZES},
        "squared": {n: (oracle_squared(n), 0.0) for n in SIZES},
    }
    b_check = replicates(records["b_check"])
    check_rows = slice(0, settings["b_check_replications"])
    same_data = groups["absolute"]["omega"].sel(n=100).values[check_rows]
    paired = b_check["omega"].values - same_data
    return {
        **{loss: _loss_summary(groups[loss], loss, oracle[loss]) for loss in LOSSES},
        "b_check": {
            "n": 100,
            "B": B_CHECK,
            "replications": int(b_check.sizes["replicate"]),
            "mean_omega": float(b_check["omega"].mean()),
            "mean_omega_B200_same_data": float(same_data.mean()),
            "mean_difference": float(paired.mean()),
            "mean_difference_se": float(paired.std(ddof=1) / math.sqrt(paired.size)),
        },
        "sizes": list(SIZES),
        "B": B,
        "alpha": ALPHA,
        "replications": settings["replications"],
        "oracle_replications": settings["oracle_replications"],
        "quick": settings == SETTINGS["quick"],
    }


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``gibbs_gpc_bias.nc`` (per data set) and ``gibbs_gpc_bias.png``."""
    groups = fixed_point_groups(records)
    save(
        arviz_compat.build(
            {**{f"fixed_point_{loss}": groups[loss] for loss in LOSSES},
             "b_check": replicates(records["b_check"])}
        ),
        out / "gibbs_gpc_bias.nc",
    )
    save_figure(_figure(groups, {loss: summary[loss] for loss in LOSSES}),
                out / "gibbs_gpc_bias.png")


def report(summary: dict[str, Any]) -> None:
    """Print the fixed point, omega* and omega_n, and the coverage, per loss and n."""
    for loss in LOSSES:
        for n in SIZES:
            row = summary[loss][f"n{n}"]
            print(
                f"{loss:<9} n = {n:>3}: fixed point {row['mean_omega']:.3f} +- {row['mean_omega_se']:.3f} "
                f"(omega* {summary[loss]['omega_star']:.3f}, omega_n {row['omega_n']:.3f}), "
                "coverage of GPC's intervals "
                f"{row['coverage_at_fixed_point']:.3f} +- {row['coverage_se']:.3f}"
            )


def data(run: CellRun, n: int) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
    """The ``(D, n)`` data sets of size ``n``, their resamples' seeds, and the stream after them.

    The seed's one stream holds ``D = data_sets`` data sets per n in ``SIZES``,
    then ``D`` seeds per n, then the median's separate data sets per n.
    """
    rng, count = run.rng(), run.params["data_sets"]
    data_sets = {size: rng.gamma(2.0, 1.0, size=(count, size)) for size in SIZES}
    seeds = {size: rng.integers(0, 2**31 - 1, size=count) for size in SIZES}
    return data_sets[n], seeds[n], rng


def oracle_data(run: CellRun, n: int) -> np.ndarray:
    """The median's separate ``(R, n)`` data sets of size ``n``, for ``omega_n``."""
    *_, rng = data(run, n)
    replications = run.params["replications"]
    for size in SIZES[:SIZES.index(n)]:
        rng.gamma(2.0, 1.0, size=(replications, size))  # the smaller sizes' data sets
    return rng.gamma(2.0, 1.0, size=(replications, n))


def replicates(record: dict) -> xr.Dataset:
    """A fixed-point cell's per data set results."""
    return xr.Dataset(
        {key: ("replicate", np.array(values)) for key, values in record["replicates"].items()}
    )


def fixed_point_groups(records: Records) -> dict[str, xr.Dataset]:
    """Per loss, the fixed points by ``n`` and ``replicate``."""
    return {
        loss: xr.concat([replicates(records[f"{loss}/n{n}"]) for n in SIZES],
                        dim=pd.Index(SIZES, name="n"))
        for loss in LOSSES
    }


def _loss_summary(group: xr.Dataset, loss: str, oracle: dict[int, tuple[float, float]]) -> dict:
    location, omega_star = truth(loss)
    by_n = {}
    for n in SIZES:
        row = group.sel(n=n)
        omega = row["omega"].values
        covered = row["covered"].values.astype(float)
        boot = row["bootstrap_coverage_at_omega_star"].values
        R = omega.size
        by_n[f"n{n}"] = {
            "mean_omega": float(omega.mean()),
            "mean_omega_se": float(omega.std(ddof=1) / math.sqrt(R)),
            "median_omega": float(np.median(omega)),
            "quartiles_omega": [float(q) for q in np.quantile(omega, [0.25, 0.75])],
            "mean_bias_vs_omega_star": float(omega.mean() - omega_star),
            "omega_n": oracle[n][0],
            "omega_n_se": oracle[n][1],
            "mean_bias_vs_omega_n": float(omega.mean() - oracle[n][0]),
            "median_plateau_width": float(np.median(row["upper"] - row["lower"])),
            "count_at_omega_is_target": int(np.sum(row["count_at_omega"].values == round((1 - ALPHA) * B))),
            "bootstrap_coverage_at_omega_star": float(boot.mean()),
            "bootstrap_coverage_at_omega_star_se": float(boot.std(ddof=1) / math.sqrt(R)),
            "coverage_at_fixed_point": float(covered.mean()),
            "coverage_se": float(math.sqrt(max(covered.mean() * (1 - covered.mean()), 1e-12) / R)),
        }
    return {
        "truth": location,
        "omega_star": omega_star,
        "replications": int(group.sizes["replicate"]),
        **by_n,
    }


def _figure(groups: dict[str, xr.Dataset], summaries: dict[str, dict]) -> plt.Figure:
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    titles = {"absolute": "median (absolute loss)", "squared": "mean (squared loss)"}
    for axis, loss in zip(axes[:2], LOSSES, strict=True):
        group, summary = groups[loss], summaries[loss]
        values = [group["omega"].sel(n=n).values for n in SIZES]
        axis.boxplot(values, positions=range(len(SIZES)), widths=0.5, showfliers=False)
        means = [summary[f"n{n}"]["mean_omega"] for n in SIZES]
        errors = [1.96 * summary[f"n{n}"]["mean_omega_se"] for n in SIZES]
        axis.errorbar(range(len(SIZES)), means, yerr=errors, fmt="D", color="tab:red",
                      label="mean fixed point (95% Monte Carlo error)")
        axis.plot(range(len(SIZES)), [summary[f"n{n}"]["omega_n"] for n in SIZES], "s--",
                  color="tab:green", label="omega_n: exact 95% coverage at this n")
        axis.axhline(summary["omega_star"], color="black", lw=1,
                     label=f"omega* = H / J = {summary['omega_star']:.4f}")
        axis.set_xticks(range(len(SIZES)), [f"n = {n}" for n in SIZES])
        axis.set_ylabel("GPC's bootstrap fixed point (B = 200)")
        axis.set_title(f"{titles[loss]}, Gamma(2, 1) data")
        axis.legend(fontsize=8)
    axis = axes[2]
    for shift, loss, colour in ((-0.06, "absolute", "tab:blue"), (0.06, "squared", "tab:orange")):
        summary = summaries[loss]
        axis.errorbar(
            np.arange(len(SIZES)) + shift,
            [summary[f"n{n}"]["coverage_at_fixed_point"] for n in SIZES],
            yerr=[1.96 * summary[f"n{n}"]["coverage_se"] for n in SIZES],
            fmt="o", color=colour, capsize=3, label=f"{titles[loss]}: coverage at GPC's fixed point",
        )
    axis.axhline(1 - ALPHA, color="grey", ls="--", label="nominal 0.95")
    axis.set_xticks(range(len(SIZES)), [f"n = {n}" for n in SIZES])
    axis.set_ylabel("coverage of the truth by the 95% interval")
    axis.set_title("What GPC's intervals actually cover")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, report=report, seed=SEED)


def run(out: Path, quick: bool) -> dict:
    """Every cell (resumed from ``out/runs``), the InferenceData, the figure and the summary."""
    return EXPERIMENT.run(out, quick)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
