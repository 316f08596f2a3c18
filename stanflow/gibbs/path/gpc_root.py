"""GPC by root finding on the learning-rate path.

Syring and Martin's calibration (:mod:`stanflow.gibbs.gpc`) asks for the
``omega`` at which the bootstrap coverage ``c_B(omega)`` of the full-data
estimate by the ``100(1 - alpha)%`` regions of the resamples' Gibbs posteriors
is ``1 - alpha``. With common resamples (the same ``B`` resamples at every
``omega``, drawn exactly as :func:`stanflow.gibbs.gpc.calibrate_gpc` draws
them) and one path reweighted per resample, ``c_B`` is a deterministic
function of ``omega``, so its crossing of ``1 - alpha`` is found by bracketing
instead of by Robbins-Monro steps:

- a resample is a vector of counts ``c_b``; its Gibbs posterior at ``omega`` is
  read from the path's particles at the schedule point ``k`` nearest
  ``proposal_scale * omega`` in ``log omega`` among those at or below
  ``omega / 2`` (wider than the target, as the reweight design's proposal;
  :func:`proposal_step`) by ``log w_bs = -omega c_b . l(theta_s) - g_k(theta_s)``
  (``+ omega_k L_n(theta_s)`` on the geometric path; the prior cancels). The
  ``(B x n) @ (n x S)`` product ``c_b . l`` is formed once per schedule point;
- its region holds the estimate when the weighted CDF at the estimate lies in
  ``[alpha/2, 1 - alpha/2]`` (scalar, equal-tailed interval) or when the
  weight of draws strictly closer than the estimate in the weighted
  Mahalanobis distance is at most ``1 - alpha`` (vector, ellipsoid);
- the root: from ``omega0``, double or halve until the count of covering
  resamples crosses ``(1 - alpha) B``, then the Illinois variant of regula
  falsi (the interpolation point kept inside the inner 90% of the bracket),
  stopping when the count equals ``(1 - alpha) B`` exactly (as GPC with
  ``eps = 0``) or the bracket is narrower than ``xtol * omega``. A geometric
  path is extended when the bracket needs a larger ``omega``.

Stated error: each resample's statistic has Monte Carlo standard error
``sqrt(p (1 - p) / ESS_b)`` at its threshold ``p``, so it is on the wrong side
with probability ``pi_b = Phi(-|margin_b| / se_b)``; the count's variance is
``sum pi_b (1 - pi_b)``, plus ``1/12`` for its integer steps, and the root's
standard error is the count's divided by the slope of the count in ``omega``
(the secant through the nearest evaluations at least two resamples away from
the target on either side, evaluating the count further from the root when
the search did not).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import xarray as xr
from scipy.special import ndtr
from threadpoolctl import ThreadpoolController

from stanflow.gibbs.gpc.algorithm import bootstrap_indices
from stanflow.gibbs.gpc.reweighting import resample_counts
from stanflow.gibbs.path.read import log_level_density
from stanflow.gibbs.path.sweep import LearningRatePath

_BLAS = ThreadpoolController()

MARGIN = 2
"""Evaluations used for the slope are at least this many resamples from the target."""
SLOPE_SPREADS = (1.1, 1.25, 1.5)
"""When the search never went :data:`MARGIN` resamples from the target on
both sides, the count is evaluated at ``root / f`` and ``root * f`` for these
``f`` in turn until it has, for the slope."""
ROWS = 16
"""Resamples per block of the weight kernel (the block stays in cache)."""
LOW_ESS = 100
"""Below this effective sample size a resample's region is counted as unreliable."""
WIDEST = 0.5
"""Proposals come from schedule points at or below this fraction of ``omega``."""


class Evaluation(NamedTuple):
    """The bootstrap coverage at one ``omega``.

    Attributes
    ----------
    omega : float
    count : int
        Resamples whose region holds the estimate.
    count_variance : float
        Monte Carlo variance of ``count``, ``sum pi_b (1 - pi_b)``.
    ess_min, ess_median : float
        Kish effective sample sizes of the resamples' weights.
    low_ess : int
        Resamples whose weights have an effective sample size below
        :data:`LOW_ESS` (their regions are unreliable).
    step : int
        The path's schedule point the weights start from.
    """

    omega: float
    # The field's name shadows tuple.count on purpose: it is the count this records.
    count: int  # type: ignore[assignment]
    count_variance: float
    ess_min: float
    ess_median: float
    low_ess: int
    step: int


def region_statistic(
    draws: np.ndarray,
    resample_loss: np.ndarray,
    log_base: np.ndarray,
    omega: float,
    estimate: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Each resample's statistic for its region at ``omega``, and its effective size.

    The weights are ``log w_bs = -omega resample_loss_bs + log_base_s``. The
    ``(B, S)`` work runs on blocks of :data:`ROWS` resamples in float32 (the
    losses centred per row and the draws at the estimate first, so that
    rounding is relative to their spread, not their size; sums in float64).

    Parameters
    ----------
    draws : ndarray, shape (S, K)
        Particles shared by all resamples.
    resample_loss : ndarray, shape (B, S)
        ``c_b . l(theta_s)``, each resample's total loss at each particle.
    log_base : ndarray, shape (S,)
        The part of the log weights common to all resamples.
    omega : float
    estimate : ndarray, shape (K,)

    Returns
    -------
    statistic : ndarray, shape (B,)
        ``K = 1``: the weighted CDF at the estimate. ``K > 1``: the weight of
        draws strictly closer than the estimate to the weighted mean, in the
        weighted covariance's Mahalanobis distance.
    ess : ndarray, shape (B,)
        ``(sum w)^2 / sum w^2`` per resample.
    """
    B, S = resample_loss.shape
    K = draws.shape[1]
    centred = draws - estimate
    if K == 1:
        features = (centred <= 0).astype(np.float32)
    else:
        outer = (centred[:, :, None] * centred[:, None, :]).reshape(S, K * K)
        features = np.concatenate([centred, outer], axis=1).astype(np.float32)
    base = (log_base - log_base.max()).astype(np.float32)
    statistic, ess = np.empty(B), np.empty(B)
    buffer = np.empty((ROWS, S), np.float32)
    closer = np.empty((ROWS, S), np.float32)
    for start in range(0, B, ROWS):
        block = slice(start, min(start + ROWS, B))
        rows = resample_loss[block]
        w = buffer[: rows.shape[0]]
        np.multiply(rows - rows.min(axis=1, keepdims=True), -omega, out=w, casting="same_kind")
        w += base
        w -= w.max(axis=1, keepdims=True)
        np.exp(w, out=w)
        total = w.sum(axis=1, dtype=np.float64)
        ess[block] = total**2 / np.einsum("bs,bs->b", w, w, dtype=np.float64)
        moments = (w @ features).astype(np.float64) / total[:, None]
        if K == 1:
            statistic[block] = moments[:, 0]
            continue
        mean = moments[:, :K]
        cov = moments[:, K:].reshape(-1, K, K) - mean[:, :, None] * mean[:, None, :]
        inverse = np.linalg.inv(cov)
        linear = np.einsum("bkl,bl->bk", inverse, mean)
        # With the estimate at x = 0, a draw x is strictly closer to the mean
        # than the estimate when x' C^-1 x - 2 (C^-1 m)' x < 0.
        coef = np.concatenate([-2 * linear, inverse.reshape(-1, K * K)], axis=1)
        mask = closer[: rows.shape[0]]
        np.less(coef.astype(np.float32) @ features.T, 0.0, out=mask)
        statistic[block] = np.einsum("bs,bs->b", w, mask, dtype=np.float64) / total
    return statistic, ess


def inside_and_flip(
    statistic: np.ndarray, ess: np.ndarray, alpha: float, scalar: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Whether each region holds the estimate, and the probability that Monte
    Carlo error put it on the wrong side.

    Returns
    -------
    inside : ndarray of bool, shape (B,)
    flip : ndarray, shape (B,)
        ``Phi(-|statistic - p| / sqrt(p (1 - p) / ess))`` for the nearest
        threshold ``p`` (``alpha/2`` or ``1 - alpha/2`` for a scalar,
        ``1 - alpha`` for a vector).
    """
    if scalar:
        inside = (statistic >= alpha / 2) & (statistic <= 1 - alpha / 2)
        p = np.where(statistic < 0.5, alpha / 2, 1 - alpha / 2)
    else:
        inside = statistic <= 1 - alpha
        p = np.full(statistic.shape, 1 - alpha)
    se = np.sqrt(p * (1 - p) / ess)
    return inside, ndtr(-np.abs(statistic - p) / se)


class PathCoverage:
    """``omega -> Evaluation``: the bootstrap coverage from one reweighted path.

    Parameters
    ----------
    path : LearningRatePath
        Extended on demand (a geometric path) when ``proposal_scale * omega``
        lies beyond its end.
    indices : ndarray of int, shape (B, n)
        The bootstrap resamples (:func:`stanflow.gibbs.gpc.bootstrap_indices`).
    estimate : ndarray, shape (K,)
        The full-data estimate.
    alpha : float
    proposal_scale : float
        Resamples at ``omega`` are read from the schedule point nearest
        ``proposal_scale * omega`` (:func:`proposal_step`).
    """

    def __init__(
        self,
        path: LearningRatePath,
        indices: np.ndarray,
        estimate: np.ndarray,
        alpha: float,
        proposal_scale: float,
    ) -> None:
        if path.target.weights is not None:
            raise ValueError(
                "path: GPC's bootstrap resamples the data itself, so it needs a path of "
                "the unweighted data (weights all 1)"
            )
        self.path = path
        self.counts = resample_counts(indices, path.target.n)
        self.estimate = np.asarray(estimate, dtype=float)
        self.alpha = alpha
        self.proposal_scale = proposal_scale
        self._resample_losses: dict[int, np.ndarray] = {}
        self._theta: dict[int, np.ndarray] = {}

    def __call__(self, omega: float) -> Evaluation:
        reference = self.proposal_scale * omega
        if self.path.end is None or reference > self.path.end:
            self.path.extend(reference)
        assert self.path.end is not None  # extend set it
        k = proposal_step(self.path.omegas, omega, reference)
        level = self.path.levels[k]
        g = log_level_density(level.loss, level.omega, self.path.end, self.path.q)
        with _BLAS.limit(limits=1, user_api="blas"):
            if k not in self._resample_losses:
                pointwise = self.path.target.pointwise_loss(level.z)
                self._resample_losses[k] = self.counts @ pointwise.T
                self._theta[k] = self.path.target.theta(level.z)
            statistic, ess = region_statistic(
                self._theta[k], self._resample_losses[k], -g, omega, self.estimate
            )
        scalar = len(self.path.target.names) == 1
        inside, flip = inside_and_flip(statistic, ess, self.alpha, scalar)
        return Evaluation(
            omega=float(omega),
            count=int(inside.sum()),
            count_variance=float(np.sum(flip * (1 - flip))),
            ess_min=float(ess.min()),
            ess_median=float(np.median(ess)),
            low_ess=int(np.sum(ess < LOW_ESS)),
            step=k,
        )


def proposal_step(omegas: np.ndarray, omega: float, reference: float) -> int:
    """The schedule point nearest ``reference`` in ``log omega`` among those at
    or below ``WIDEST * omega`` (the prior, step 0, when none is).

    Parameters
    ----------
    omegas : ndarray, shape (L,)
        The schedule, increasing from 0.
    omega : float
        The target learning rate.
    reference : float
        The wanted proposal rate, ``proposal_scale * omega``.

    Returns
    -------
    int
    """
    candidates = np.flatnonzero((omegas > 0) & (omegas <= max(WIDEST * omega, reference)))
    if candidates.size == 0:
        return 0
    return int(candidates[np.argmin(np.abs(np.log(omegas[candidates] / reference)))])


def find_root(
    coverage: Callable[[float], Evaluation],
    omega0: float,
    target: float,
    *,
    xtol: float,
    max_evaluations: int,
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
    factor = 2.0 if g0 > 0 else 0.5
    near, g_near = omega0, g0
    far, g_far = omega0 * factor, gap(omega0 * factor)
    while g_far * g0 > 0 and not exhausted():
        near, g_near = far, g_far
        far, g_far = far * factor, gap(far * factor)
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


def count_slope(root: float, history: list[Evaluation], target: float) -> float:
    """The covering count's slope in ``omega`` near the root (negative).

    The secant through the evaluations nearest ``root`` with a count at least
    :data:`MARGIN` above and below ``target``; ``nan`` when the evaluations do
    not reach that far on both sides.
    """
    above = [e for e in history if e.count - target >= MARGIN]
    below = [e for e in history if target - e.count >= MARGIN]
    if not above or not below:
        return math.nan
    left = min(above, key=lambda e: abs(e.omega - root))
    right = min(below, key=lambda e: abs(e.omega - root))
    return (right.count - left.count) / (right.omega - left.omega)


def path_gpc(
    path: LearningRatePath,
    estimate: np.ndarray,
    *,
    B: int = 200,
    alpha: float = 0.05,
    omega0: float = 1.0,
    seed: int = 0,
    proposal_scale: float = 0.25,
    xtol: float = 1e-3,
    max_evaluations: int = 40,
) -> xr.Dataset:
    """GPC's learning rate as the root of the bootstrap coverage on a path.

    Parameters
    ----------
    path : LearningRatePath
        The Gibbs posterior's path (extended as needed when geometric).
    estimate : array_like, shape (K,)
        The full-data estimate (empirical risk minimiser).
    B : int, default 200
        Bootstrap resamples, drawn from ``SeedSequence(seed)`` as
        :func:`stanflow.gibbs.gpc.calibrate_gpc` draws them.
    alpha : float, default 0.05
    omega0 : float, default 1.0
        Where the bracketing starts.
    seed : int, default 0
    proposal_scale : float, default 0.25
        In ``(0, 1]``; see the module docstring.
    xtol : float, default 1e-3
        Relative width of the final bracket.
    max_evaluations : int, default 40
        Coverage evaluations at most.

    Returns
    -------
    xarray.Dataset
        The ``calibration`` group: ``omega`` (the root), ``omega_se`` (its
        Monte Carlo standard error), ``count_variance`` (of the covering count
        at the root), ``count_slope`` (covering resamples per unit of
        ``omega``), ``converged``, ``evaluations``, ``estimate`` (dim ``param``), per
        evaluation (dim ``evaluation``) ``omega_path``, ``coverage_path``,
        ``ess_min``, ``ess_median``, ``proposal_omega``; ``low_ess_share``
        (the share of resamples read from fewer than :data:`LOW_ESS` effective
        particles at the root: with many parameters the one path no longer
        serves the resamples, and the root means nothing); ``wall_time``
        (seconds). Attributes: method, B, alpha, omega0, seed, ...
    """
    _check_args(B, alpha, omega0, proposal_scale, xtol, max_evaluations)
    estimate = np.atleast_1d(np.asarray(estimate, dtype=float))
    size = len(path.target.names)
    if estimate.shape != (size,) or not np.all(np.isfinite(estimate)):
        raise ValueError(f"estimate must be finite with {size} value(s), got {estimate!r}")
    start = time.perf_counter()
    indices = bootstrap_indices(path.target.n, B, np.random.SeedSequence(seed))
    coverage = PathCoverage(path, indices, estimate, alpha, proposal_scale)
    target = (1 - alpha) * B
    root, history, done = find_root(
        coverage, float(omega0), target, xtol=xtol, max_evaluations=max_evaluations
    )
    at_root = next((e for e in history if e.omega == root), None) or coverage(root)
    slope = count_slope(root, history, target)
    for spread in SLOPE_SPREADS:
        if math.isfinite(slope) or len(history) + 2 > max_evaluations:
            break
        history += [coverage(root / spread), coverage(root * spread)]
        slope = count_slope(root, history, target)
    se = math.sqrt(at_root.count_variance + 1 / 12) / abs(slope)
    wall = time.perf_counter() - start
    return xr.Dataset(
        {
            "omega": ((), root),
            "omega_se": ((), se),
            "count_variance": ((), at_root.count_variance),
            "count_slope": ((), slope),
            "converged": ((), done),
            "evaluations": ((), len(history)),
            "coverage": ((), at_root.count / B),
            "estimate": (("param",), estimate),
            "omega_path": (("evaluation",), np.array([e.omega for e in history])),
            "coverage_path": (("evaluation",), np.array([e.count / B for e in history])),
            "ess_min": (("evaluation",), np.array([e.ess_min for e in history])),
            "ess_median": (("evaluation",), np.array([e.ess_median for e in history])),
            "low_ess_share": ((), at_root.low_ess / B),
            "proposal_omega": (("evaluation",), path.omegas[[e.step for e in history]]),
            "wall_time": ((), wall),
        },
        coords={"param": path.target.names, "evaluation": np.arange(len(history))},
        attrs={
            "method": "gpc_path",
            "reference": "Syring and Martin (2019), Biometrika 106(2) 479-486",
            "rule": "root of the bootstrap coverage by bracketing (Illinois) on one "
            "path reweighted per resample",
            "B": B,
            "alpha": alpha,
            "omega0": float(omega0),
            "seed": seed,
            "proposal_scale": proposal_scale,
            "xtol": xtol,
            "region": "equal-tailed interval" if size == 1
            else "weighted Mahalanobis ellipsoid",
        },
    )


def _check_args(B, alpha, omega0, proposal_scale, xtol, max_evaluations) -> None:
    if isinstance(B, bool) or not isinstance(B, (int, np.integer)) or B < 1:
        raise ValueError(f"B must be an int >= 1, got {B!r}")
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not (isinstance(omega0, (int, float)) and math.isfinite(omega0) and omega0 > 0):
        raise ValueError(f"omega0 must be positive and finite, got {omega0!r}")
    if not (isinstance(proposal_scale, (int, float)) and 0 < proposal_scale <= 1):
        raise ValueError(f"proposal_scale must be in (0, 1], got {proposal_scale!r}")
    if not (isinstance(xtol, (int, float)) and 0 < xtol < 1):
        raise ValueError(f"xtol must be in (0, 1), got {xtol!r}")
    if isinstance(max_evaluations, bool) or not isinstance(max_evaluations, int) or max_evaluations < 2:
        raise ValueError(f"max_evaluations must be an int >= 2, got {max_evaluations!r}")
