"""Why the n = 50 coverage curve sits above the asymptotic formula: the finite-sample effect.

The setting of ``gibbs-coverage``: data ``y_1..n ~ Gamma(2, 1)``, the Gibbs
posterior of the median under the absolute loss with a uniform prior on
[0, 8], equal-tailed 95% intervals, whose asymptotic coverage of the true
median ``m`` is ``2 Phi(1.96 sqrt(omega* / omega)) - 1`` with
``omega* = 2 f(m) = 0.6266``. Here the posterior CDF at ``m`` is exact (piecewise
exponential, ``stanflow.gibbs.exact_location``), so many replications are cheap:
for n = 25, 50, 100, 200 and 400, R = 20000 data sets each (``--quick``: 1000),
the coverage on the learning rates of ``gibbs-coverage``.

Reported per n:

- the coverage curve and its distance from the formula, with Monte Carlo
  standard errors; the mean distance over ``omega <= 1`` with its standard error
  from the per-replication averages (the curve's errors are correlated, since
  every omega uses the same data sets);
- ``omega_n``, the learning rate at which the intervals cover exactly 95% at
  this n, against ``omega*``;
- a split of the excess: the curve the sample median alone would give,
  ``P(|median - m| sqrt(2 omega n f(m)) <= 1.96)`` (asymptotic posterior width,
  finite-n spread of the estimator), against the formula (the estimator's
  share) and against the measured curve (the posterior's share: its finite-n
  width and centre), and the sample median's standard deviation over its
  asymptotic ``1 / (2 f(m) sqrt(n))``;
- fits ``A n^-k`` of the mean excess over ``omega <= 1`` and of the posterior's share.

Writes ``gibbs_coverage_n.png`` (distance from the formula against omega for
every n; the mean excess and its split against n with the fit; ``omega_n``
against n), ``gibbs_coverage_n.nc`` and ``summary.json``.

Every n is a piece (``OUT/runs/n<n>.json``), so a stopped run resumes. The data
sets of all n come from one stream of the seed, in the order of ``SIZES``: a
piece draws the stream up to its own.
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
import xarray as xr
from scipy import optimize
from scipy.special import erf

from stanflow import arviz_compat
from stanflow.experiment import Cell, CellRun, Experiment, Records
from stanflow.gibbs.exact_location import absolute_cdf, absolute_segments
from stanflow.gibbs.gpc.fixed_point import BRACKET, plateau_end
from stanflow.idata import save
from stanflow.workflows import main, save_figure

DESCRIPTION = (
    "Finite-sample coverage of Gibbs intervals for the median of Gamma(2, 1) data at "
    "n = 25 to 400 against the asymptotic formula, exact posteriors"
)

SEED = 20240518
SIZES = (25, 50, 100, 200, 400)
OMEGAS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6.5, 8, 10)
SMALL = 1.0
"""The mean excess is taken over the learning rates up to this one."""
BOUNDS = (0.0, 8.0)
LEVEL = 0.95
Z_LEVEL = 1.959963984540054
ELEMENTS = 2_000_000
"""Data sets are processed in chunks of at most this many observations."""

SETTINGS = {"quick": {"replications": 1000}, "full": {"replications": 20000}}


def gamma2_median() -> float:
    """Median of Gamma(2, 1): the root of ``1 - exp(-m) (1 + m) = 1/2``."""
    return float(optimize.brentq(lambda m: 1 - math.exp(-m) * (1 + m) - 0.5, 0.5, 5.0))


def formula(omega: np.ndarray, omega_star: float) -> np.ndarray:
    """Asymptotic coverage ``2 Phi(z sqrt(omega* / omega)) - 1``."""
    return erf(Z_LEVEL * np.sqrt(omega_star / np.asarray(omega)) / math.sqrt(2))


def truth() -> tuple[float, float, float]:
    """The median ``m`` of Gamma(2, 1), its density ``f(m)`` and ``omega* = 2 f(m)``."""
    median = gamma2_median()
    density = median * math.exp(-median)
    return median, density, 2 * density


def cells(settings: dict[str, Any]) -> list[Cell]:
    """One cell per n."""
    return [Cell(f"n{n}", {"n": n, "replications": settings["replications"]}) for n in SIZES]


def compute(run: CellRun) -> dict:
    """One n: its summary row and the coverage the sample median alone would give."""
    n, replications = run.params["n"], run.params["replications"]
    median, density, omega_star = truth()
    omegas = np.array(OMEGAS, dtype=float)
    expected = formula(omegas, omega_star)
    small = omegas <= SMALL
    sim = simulate(data_sets(run, n), median)
    covered = sim["covered"]
    gap = np.abs(sim["sample_median"] - median)[:, None] * np.sqrt(2 * omegas * n * density)
    median_only = gap <= Z_LEVEL  # (R, omega)
    rate, rate_median = covered.mean(0), median_only.mean(0)
    # per-replication averages over omega <= 1: their spread gives honest errors
    excess = covered[:, small].mean(1) - expected[small].mean()
    estimator_part = median_only[:, small].mean(1) - expected[small].mean()
    posterior_part = excess - estimator_part
    sd_ratio = float(np.std(sim["sample_median"], ddof=1) * 2 * density * math.sqrt(n))
    row = {
        "coverage": _by_omega(rate),
        "mcse": _by_omega(np.sqrt(rate * (1 - rate) / replications)),
        "distance": _by_omega(rate - expected),
        "mean_excess_small_omega": float(excess.mean()),
        "mean_excess_small_omega_se": _se(excess),
        "estimator_part": float(estimator_part.mean()),
        "estimator_part_se": _se(estimator_part),
        "posterior_part": float(posterior_part.mean()),
        "posterior_part_se": _se(posterior_part),
        "max_distance_small_omega": float(np.max(rate[small] - expected[small])),
        "min_distance_small_omega": float(np.min(rate[small] - expected[small])),
        "omega_n": sim["omega_n"],
        "omega_n_se": sim["omega_n_se"],
        "median_sd_ratio": sd_ratio,
        "median_sd_ratio_se": sd_ratio / math.sqrt(2 * (replications - 1)),
    }
    return {"row": row, "median_only": rate_median}


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """Every n's row, the power-law fits of the excess and of the posterior's share."""
    rows = {f"n{n}": records[f"n{n}"]["row"] for n in SIZES}
    median, density, omega_star = truth()
    fit, posterior_fit = (
        _power_fit(
            np.array(SIZES, dtype=float),
            np.array([rows[f"n{n}"][key] for n in SIZES]),
            np.array([rows[f"n{n}"][f"{key}_se"] for n in SIZES]),
        )
        for key in ("mean_excess_small_omega", "posterior_part")
    )
    return {
        **rows,
        "omega_star": omega_star,
        "median": median,
        "density_at_median": density,
        "formula": _by_omega(formula(np.array(OMEGAS, dtype=float), omega_star)),
        "excess_fit": fit,
        "posterior_part_fit": posterior_fit,
        "small_omega_max": SMALL,
        "sizes": list(SIZES),
        "replications": settings["replications"],
        "quick": settings == SETTINGS["quick"],
    }


def figures(out: Path, summary: dict[str, Any], records: Records) -> None:
    """``gibbs_coverage_n.nc`` (coverage curves by n) and ``gibbs_coverage_n.png``."""
    omegas = np.array(OMEGAS, dtype=float)
    expected = formula(omegas, summary["omega_star"])
    save(
        arviz_compat.build(
            {
                "coverage": xr.Dataset(
                    {
                        "coverage": (("n", "omega"), np.array(
                            [list(summary[f"n{n}"]["coverage"].values()) for n in SIZES])),
                        "median_only": (("n", "omega"), np.array(
                            [records[f"n{n}"]["median_only"] for n in SIZES])),
                        "formula": ("omega", expected),
                    },
                    coords={"n": list(SIZES), "omega": omegas},
                    attrs={"replications": summary["replications"], "level": LEVEL,
                           "true_median": summary["median"]},
                )
            }
        ),
        out / "gibbs_coverage_n.nc",
    )
    save_figure(_figure(summary, omegas, expected), out / "gibbs_coverage_n.png")


def report(summary: dict[str, Any]) -> None:
    """Print the excess per n and its power-law fit."""
    for n in SIZES:
        row = summary[f"n{n}"]
        print(
            f"n = {n:>3}: mean excess over omega <= 1 {row['mean_excess_small_omega']:+.4f} "
            f"+- {row['mean_excess_small_omega_se']:.4f} (estimator {row['estimator_part']:+.4f}, "
            f"posterior {row['posterior_part']:+.4f}), omega_n {row['omega_n']:.3f}"
        )
    fit = summary["excess_fit"]
    print(f"excess ~ {fit['amplitude']:.3f} n^-{fit['exponent']:.2f} (+- {fit['exponent_se']:.2f})")


def data_sets(run: CellRun, n: int) -> np.ndarray:
    """The ``(R, n)`` data sets of size ``n``: the seed's one stream holds R data sets per n in ``SIZES``."""
    rng, replications = run.rng(), run.params["replications"]
    for size in SIZES[:SIZES.index(n)]:
        rng.gamma(2.0, 1.0, size=(replications, size))  # the smaller sizes' data sets
    return rng.gamma(2.0, 1.0, size=(replications, n))


def simulate(y: np.ndarray, median: float) -> dict:
    """Coverage indicators per data set and omega, the sample medians, and ``omega_n``."""
    replications, n = y.shape
    chunk = max(1, ELEMENTS // n)
    segments = [
        absolute_segments(y[start:start + chunk], median, BOUNDS)
        for start in range(0, replications, chunk)
    ]

    def inside(omega: np.ndarray) -> np.ndarray:
        """(len(omega), R) coverage indicators."""
        return np.concatenate(
            [_covers(absolute_cdf(part, omega[:, None])) for part in segments], axis=-1
        )

    covered = inside(np.array(OMEGAS, dtype=float)).T  # (R, omega)
    level = round(LEVEL * replications)

    def count(omega: np.ndarray) -> np.ndarray:
        return inside(omega).sum(axis=-1)

    omega_n = float(plateau_end(count, level, np.array([BRACKET[0]]), np.array([BRACKET[1]]))[0])
    low, high = count(np.array([omega_n / 1.2, omega_n * 1.2])) / replications
    slope = (high - low) / (omega_n * (1.2 - 1 / 1.2))
    return {
        "covered": covered,
        "sample_median": np.median(y, axis=1),
        "omega_n": omega_n,
        "omega_n_se": math.sqrt(LEVEL * (1 - LEVEL) / replications) / abs(slope),
    }


def _covers(cdf_values: np.ndarray) -> np.ndarray:
    return (cdf_values >= (1 - LEVEL) / 2) & (cdf_values <= 1 - (1 - LEVEL) / 2)


def _by_omega(values: np.ndarray) -> dict[str, float]:
    return {f"{omega:g}": float(v) for omega, v in zip(OMEGAS, values, strict=True)}


def _se(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(values.size))


def _power_fit(n: np.ndarray, excess: np.ndarray, se: np.ndarray) -> dict[str, float]:
    """Weighted least squares ``excess = A n^-k``, with the errors of ``A`` and ``k``."""
    (amplitude, exponent), covariance = optimize.curve_fit(
        lambda x, a, k: a * x**-k, n, excess, p0=(0.2, 0.5), sigma=se, absolute_sigma=True
    )
    residual = (excess - amplitude * n**-exponent) / se
    return {
        "amplitude": float(amplitude),
        "exponent": float(exponent),
        "amplitude_se": float(math.sqrt(covariance[0, 0])),
        "exponent_se": float(math.sqrt(covariance[1, 1])),
        "chi2": float(np.sum(residual**2)),
        "dof": int(n.size - 2),
    }


def _figure(summary: dict, omegas: np.ndarray, expected: np.ndarray) -> plt.Figure:
    figure, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    colours = plt.cm.viridis(np.linspace(0.0, 0.85, len(SIZES)))
    axis = axes[0]
    for n, colour in zip(SIZES, colours, strict=True):
        row = summary[f"n{n}"]
        distance = np.array(list(row["distance"].values()))
        se = np.array(list(row["mcse"].values()))
        axis.plot(omegas, distance, "o-", ms=3, color=colour, label=f"n = {n}")
        axis.fill_between(omegas, distance - 2 * se, distance + 2 * se, color=colour, alpha=0.15, lw=0)
    axis.axhline(0, color="black", lw=1)
    axis.axvline(summary["omega_star"], color="grey", ls=":", lw=0.8)
    axis.set_xscale("log")
    axis.set_xlabel("learning rate omega")
    axis.set_ylabel("coverage - 2 Phi(1.96 sqrt(omega*/omega)) + 1")
    axis.set_title(f"Distance from the asymptotic curve ({summary['replications']} data sets, +-2 MC se)")
    axis.legend(fontsize=8)

    axis = axes[1]
    sizes = np.array(SIZES, dtype=float)
    for key, label, marker in (
        ("mean_excess_small_omega", "excess (measured)", "o"),
        ("estimator_part", "from the sample median's spread", "s"),
        ("posterior_part", "from the posterior (width, centre)", "^"),
    ):
        values = [summary[f"n{n}"][key] for n in SIZES]
        errors = [2 * summary[f"n{n}"][f"{key}_se"] for n in SIZES]
        axis.errorbar(sizes, values, yerr=errors, fmt=marker, capsize=3, label=label)
    fit = summary["excess_fit"]
    dense = np.geomspace(sizes[0] * 0.8, sizes[-1] * 1.25, 100)
    axis.plot(dense, fit["amplitude"] * dense ** -fit["exponent"], color="black", lw=1,
              label=f"fit {fit['amplitude']:.2f} n^-{fit['exponent']:.2f}")
    axis.axhline(0, color="grey", lw=0.8)
    _sizes_axis(axis)
    axis.set_ylabel(f"mean over omega <= {SMALL:g} of coverage - formula")
    axis.set_title("The excess shrinks with n")
    axis.legend(fontsize=8)

    axis = axes[2]
    axis.errorbar(sizes, [summary[f"n{n}"]["omega_n"] for n in SIZES],
                  yerr=[2 * summary[f"n{n}"]["omega_n_se"] for n in SIZES], fmt="o", capsize=3,
                  label="omega_n: exact 95% coverage at this n")
    axis.axhline(summary["omega_star"], color="black", lw=1, label=f"omega* = {summary['omega_star']:.4f}")
    _sizes_axis(axis)
    axis.set_ylabel("learning rate")
    axis.set_title("The finite-n calibrated rate approaches omega*")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def _sizes_axis(axis) -> None:
    axis.set_xscale("log")
    axis.set_xticks(SIZES, [str(n) for n in SIZES])
    axis.minorticks_off()
    axis.set_xlabel("n")


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        figures=figures, report=report, seed=SEED)


def run(out: Path, quick: bool) -> dict:
    """Every n (resumed from ``out/runs``), the fits, the InferenceData, the figure and the summary."""
    return EXPERIMENT.run(out, quick)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
