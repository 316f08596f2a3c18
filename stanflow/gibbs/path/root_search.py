"""The root of a noisy bootstrap coverage count in ``omega``, and its standard error.

GPC's learning rate is where the count of resamples whose regions hold the
estimate crosses ``(1 - alpha) B``. Whether the resamples' posteriors are read
from one path (:mod:`stanflow.gibbs.path.gpc_root`) or one importance sample
(:mod:`stanflow.gibbs.importance`), the count is a deterministic step function
of ``omega`` with Monte Carlo noise per resample, and the same search serves:

- the root: from ``omega0``, double or halve (or, for particles moved to the
  resamples, step past where a chi-squared model of the count puts the root,
  :func:`chi2_root_guess`) until the count of covering
  resamples crosses ``(1 - alpha) B``, then the Illinois variant of regula
  falsi (the interpolation point kept inside the inner 90% of the bracket),
  stopping when the count equals ``(1 - alpha) B`` exactly (as GPC with
  ``eps = 0``) or the bracket is narrower than ``xtol * omega``.

Stated error: each resample's statistic has Monte Carlo standard error
``sqrt(p (1 - p) / ESS_b)`` at its threshold ``p`` (plus the cross-fitted
centre's share for particles moved to the resamples,
:func:`~stanflow.gibbs.path.coverage.cross_fit_variance`), so it is on the
wrong side with probability ``pi_b = Phi(-|margin_b| / se_b)``; the count's
variance is ``sum pi_b (1 - pi_b)``, plus ``1/12`` for its integer steps, and
the root's standard error is the count's divided by the slope of the count in
``omega``: the secant through the nearest evaluations at least
:data:`NOISE_MARGIN` count standard deviations (and :data:`MARGIN` resamples)
away from the target on either side, so that the counts' noise moves the
slope by a quarter at most (evaluating the count further from the root when
the search did not go that far).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy import stats

from stanflow.gibbs.path.coverage import Evaluation

MARGIN = 2
"""Evaluations used for the slope are at least this many resamples from the target."""
NOISE_MARGIN = 3.0
"""... and at least this many standard deviations of the count at the root: a
secant through two counts ``2 m`` sd apart is off by ``sqrt(2) / (2 m)`` of the
slope (a quarter at ``m = 3``); nearer counts gave slopes off by factors of two
with tens of coefficients, and errors as small."""
SLOPE_SPREADS = (1.1, 1.25, 1.5, 2.0)
"""When the search never went that far from the target on both sides, the
count is evaluated at ``root / f`` and ``root * f`` for these ``f`` in turn
until it has, for the slope."""
ROUNDING_VARIANCE = 1 / 12
"""The variance of a count's rounding to an integer, in the root's error."""
OVERSHOOT = 1.1
"""A guided step (:func:`chi2_root_guess`) goes this factor past the guessed
root, so that the next evaluation most likely closes the bracket."""
MIN_STEP = 1.05
"""... and moves ``omega`` by at least this factor (at most by 2, as doubling does)."""


def find_root(
    coverage: Callable[[float], Evaluation],
    omega0: float,
    target: float,
    *,
    xtol: float,
    max_evaluations: int,
    guess: Callable[[float, int], float] | None = None,
) -> tuple[float, list[Evaluation], bool]:
    """Where the count of covering resamples crosses ``target``, by bracketing.

    Parameters
    ----------
    coverage : callable
        ``omega -> Evaluation`` (its ``count`` falls as ``omega`` grows).
    omega0 : float
        Start: doubled or halved until the count crosses ``target``.
    target : float
        ``(1 - alpha) B``.
    xtol : float
        Stop when the bracket is narrower than ``xtol`` times its upper end.
    max_evaluations : int
    guess : callable, optional
        ``(omega, count) -> omega``: where a model of the count puts the root,
        seen from one evaluation (:func:`chi2_root_guess`). The search for a
        bracket then steps past the guess by :data:`OVERSHOOT` (by a factor
        within ``[MIN_STEP, 2]``) instead of doubling or halving.

    Returns
    -------
    root : float
        An ``omega`` whose count equals ``target``, else the bracket's midpoint.
    history : list of Evaluation
        Every evaluation, in order.
    converged : bool
        Whether the count hit ``target`` or the bracket reached ``xtol``.
    """
    history: list[Evaluation] = []

    def gap(omega: float) -> float:
        history.append(coverage(omega))
        return history[-1].count - target

    def exhausted() -> bool:
        return len(history) >= max_evaluations

    g0 = gap(omega0)
    if abs(g0) < 1e-9:
        return omega0, history, True
    up = g0 > 0

    def further(omega: float) -> float:
        if guess is None:
            return omega * (2.0 if up else 0.5)
        ratio = guess(omega, history[-1].count) / omega
        if up:
            return omega * min(max(ratio * OVERSHOOT, MIN_STEP), 2.0)
        return omega * max(min(ratio / OVERSHOOT, 1 / MIN_STEP), 0.5)

    near, g_near = omega0, g0
    far = further(omega0)
    g_far = gap(far)
    while g_far * g0 > 0 and not exhausted():
        near, g_near = far, g_far
        far = further(far)
        g_far = gap(far)
    if abs(g_far) < 1e-9:
        return far, history, True
    if g_far * g0 > 0:
        return far, history, False
    (lo, g_lo), (hi, g_hi) = sorted([(near, g_near), (far, g_far)])
    side = 0
    while hi - lo > xtol * hi and not exhausted():
        width = hi - lo
        point = (lo * g_hi - hi * g_lo) / (g_hi - g_lo)
        point = min(max(point, lo + 0.05 * width), hi - 0.05 * width)
        g = gap(point)
        if abs(g) < 1e-9:
            return point, history, True
        if g > 0:
            lo, g_lo = point, g
            if side == 1:
                g_hi /= 2
            side = 1
        else:
            hi, g_hi = point, g
            if side == -1:
                g_lo /= 2
            side = -1
    return 0.5 * (lo + hi), history, hi - lo <= xtol * hi


def chi2_root_guess(dimension: int, B: int, alpha: float) -> Callable[[float, int], float]:
    """The root where Gaussian posteriors would put it, seen from one count.

    A resample's statistic is (about) ``chi2_K`` at the right rate ``omega*``
    and scales with ``omega / omega*`` (the posterior's precision does), so
    the count at ``omega`` is about ``B F_K(q omega* / omega)`` with ``q`` the
    ``chi2_K`` quantile at ``1 - alpha``: ``omega* = omega F_K^-1(count / B) / q``
    (the count shrunk by half a resample from 0 and ``B``). ``K`` is the
    region's dimension; one for an interval.
    """
    level = stats.chi2.ppf(1 - alpha, dimension)

    def guess(omega: float, count: int) -> float:
        return omega * float(stats.chi2.ppf((count + 0.5) / (B + 1), dimension)) / level

    return guess


def count_slope(
    root: float, history: list[Evaluation], target: float, margin: float = MARGIN,
    room: float = math.inf,
) -> float:
    """The covering count's slope in ``omega`` near the root (negative).

    The secant through the evaluations nearest ``root`` with a count at least
    ``margin`` above and below ``target`` (above, at most ``room``: the count
    cannot pass ``B``); ``nan`` when the evaluations do not reach that far on
    both sides.
    """
    above = [e for e in history if e.count - target >= min(margin, room)]
    below = [e for e in history if target - e.count >= margin]
    if not above or not below:
        return math.nan
    left = min(above, key=lambda e: abs(e.omega - root))
    right = min(below, key=lambda e: abs(e.omega - root))
    return (right.count - left.count) / (right.omega - left.omega)


class RootError(NamedTuple):
    """A root's evaluation, the count's slope there and the root's Monte Carlo error."""

    at_root: Evaluation
    slope: float
    se: float


def root_error(
    coverage: Callable[[float], Evaluation],
    root: float,
    history: list[Evaluation],
    target: float,
    max_evaluations: int,
    B: int,
) -> RootError:
    """The root's Monte Carlo error, ``sqrt(count_variance + 1/12) / |slope|``.

    The count's variance is the evaluation's at ``root`` (``1/12`` for its
    rounding to an integer), the slope :func:`count_slope`'s through counts
    at least :data:`MARGIN` resamples and :data:`NOISE_MARGIN` standard
    deviations of that count from the target (above it, at most the ``B -
    target`` resamples there are). While the slope is unknown,
    ``history`` is extended in place by evaluations at ``root / spread`` and
    ``root * spread`` for each of :data:`SLOPE_SPREADS`, within
    ``max_evaluations`` in all.
    """
    at_root = next((e for e in history if e.omega == root), None) or coverage(root)
    sd = math.sqrt(at_root.count_variance + ROUNDING_VARIANCE)
    margin = max(MARGIN, NOISE_MARGIN * sd)
    slope = count_slope(root, history, target, margin, B - target)
    for spread in SLOPE_SPREADS:
        if math.isfinite(slope) or len(history) + 2 > max_evaluations:
            break
        history += [coverage(root / spread), coverage(root * spread)]
        slope = count_slope(root, history, target, margin, B - target)
    return RootError(at_root, slope, sd / abs(slope))


def root_variables(
    root: float, converged: bool, history: list[Evaluation], error: RootError, B: int,
    estimate: np.ndarray,
) -> dict[str, tuple]:
    """The ``calibration`` group's record of a root search (:func:`path_gpc`'s variables
    from ``omega`` to ``low_ess_share``; dims ``param``, ``evaluation``)."""
    at_root = error.at_root
    return {
        "omega": ((), root),
        "omega_se": ((), error.se),
        "count_variance": ((), at_root.count_variance),
        "count_slope": ((), error.slope),
        "converged": ((), converged),
        "evaluations": ((), len(history)),
        "coverage": ((), at_root.count / B),
        "estimate": (("param",), estimate),
        "omega_path": (("evaluation",), np.array([e.omega for e in history])),
        "coverage_path": (("evaluation",), np.array([e.count / B for e in history])),
        "ess_min": (("evaluation",), np.array([e.ess_min for e in history])),
        "ess_median": (("evaluation",), np.array([e.ess_median for e in history])),
        "low_ess_share": ((), at_root.low_ess / B),
    }
