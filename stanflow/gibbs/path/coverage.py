"""The bootstrap coverage of GPC's regions from one path reweighted per resample.

Each resample's Gibbs posterior at ``omega`` is read from the path's particles
(:func:`stanflow.gibbs.path.gpc_root.path_gpc`'s docstring says how): the
coverage function :class:`PathCoverage` (``omega -> Evaluation``), its region
statistic :func:`region_statistic` and the verdicts with their Monte Carlo
flip probabilities :func:`inside_and_flip`. The other design, particles moved
to each resample, is :mod:`stanflow.gibbs.path.transport`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import ndtr
from scipy.stats import chi2
from threadpoolctl import ThreadpoolController

from stanflow.gibbs.gpc.regions import span_basis, span_coordinates
from stanflow.gibbs.gpc.reweighting import resample_counts
from stanflow.gibbs.path.read import log_level_density
from stanflow.gibbs.path.resample_means import bootstrap_shape
from stanflow.gibbs.path.sweep import LearningRatePath
from stanflow.gibbs.shape import check_shape, volume_scale

PLANE_SHAPE = ("shape: the draws span fewer dimensions than their values (a simplex's); "
               "no shape moves them")
"""The error when a shape is asked of draws confined to a plane."""
BLAS = ThreadpoolController()
"""Limits BLAS threads around the per-resample products."""

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
    shape: np.ndarray | None = None,
    rows: int = ROWS,
) -> tuple[np.ndarray, np.ndarray]:
    """Each resample's statistic for its region at ``omega``, and its effective size.

    The weights are ``log w_bs = -omega resample_loss_bs + log_base_s``. The
    ``(B, S)`` work runs on blocks of :data:`ROWS` resamples in float32 (the
    losses centred per row and the draws at the estimate first, so that
    rounding is relative to their spread, not their size; sums in float64).
    Draws confined to a plane (a simplex's values) are taken in its
    coordinates (:func:`~stanflow.gibbs.gpc.regions.span_coordinates`).

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
    shape : ndarray, shape (K, K), optional
        With ``K > 1``, each resample's posterior is moved to this shape first
        (:mod:`stanflow.gibbs.shape`): the draws' distances stay, the
        estimate's is taken in ``c_b shape`` (``c_b`` keeping the resample's
        generalised variance).
    rows : int, default :data:`ROWS`
        Resamples per block.

    Returns
    -------
    statistic : ndarray, shape (B,)
        ``K = 1``: the weighted CDF at the estimate. ``K > 1``: the weight of
        draws strictly closer than the estimate to the weighted mean, in the
        weighted covariance's Mahalanobis distance (the estimate's in the
        adjusted covariance's when ``shape`` is given).
    ess : ndarray, shape (B,)
        ``(sum w)^2 / sum w^2`` per resample.
    """
    B, S = resample_loss.shape
    interval = draws.shape[1] == 1
    if not interval:
        spanned, estimate = span_coordinates(draws, estimate)
        if shape is not None and spanned.shape[1] < draws.shape[1]:
            raise ValueError(PLANE_SHAPE)
        draws = spanned
    K = draws.shape[1]
    centred = draws - estimate
    if interval:
        features = (centred <= 0).astype(np.float32)
    else:
        outer = (centred[:, :, None] * centred[:, None, :]).reshape(S, K * K)
        features = np.concatenate([centred, outer], axis=1).astype(np.float32)
    if shape is not None and not interval:
        shape = check_shape(shape, K)
        shape_inverse = np.linalg.inv(shape)
    else:
        shape = None
    base = (log_base - log_base.max()).astype(np.float32)
    statistic, ess = np.empty(B), np.empty(B)
    buffer = np.empty((rows, S), np.float32)
    closer = np.empty((rows, S), np.float32)
    for start in range(0, B, rows):
        block = slice(start, min(start + rows, B))
        losses = resample_loss[block]
        w = buffer[: losses.shape[0]]
        np.multiply(losses - losses.min(axis=1, keepdims=True), -omega, out=w,
                    casting="same_kind")
        w += base
        w -= w.max(axis=1, keepdims=True)
        np.exp(w, out=w)
        total = w.sum(axis=1, dtype=np.float64)
        ess[block] = total**2 / np.einsum("bs,bs->b", w, w, dtype=np.float64)
        moments = (w @ features).astype(np.float64) / total[:, None]
        if interval:
            statistic[block] = moments[:, 0]
            continue
        mean = moments[:, :K]
        cov = moments[:, K:].reshape(-1, K, K) - mean[:, :, None] * mean[:, None, :]
        inverse = np.linalg.inv(cov)
        linear = np.einsum("bkl,bl->bk", inverse, mean)
        # With the estimate at x = 0, a draw x is strictly closer to the mean
        # than the estimate when x' C^-1 x - 2 (C^-1 m)' x + m' C^-1 m < d,
        # d = m' T^-1 m the estimate's distance (T = C unadjusted).
        offset = np.zeros(len(mean), np.float32)
        if shape is not None:
            adjusted = shape_inverse / volume_scale(cov, shape)[:, None, None]
            offset = (np.einsum("bk,bk->b", linear, mean)
                      - np.einsum("bk,bkl,bl->b", mean, adjusted, mean)).astype(np.float32)
        coef = np.concatenate([-2 * linear, inverse.reshape(-1, K * K)], axis=1)
        mask = closer[: losses.shape[0]]
        np.less(coef.astype(np.float32) @ features.T + offset[:, None], 0.0, out=mask)
        statistic[block] = np.einsum("bs,bs->b", w, mask, dtype=np.float64) / total
    return statistic, ess


def inside_and_flip(
    statistic: np.ndarray, ess: np.ndarray, alpha: float, scalar: bool, centre: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Whether each region holds the estimate, and the probability that Monte
    Carlo error put it on the wrong side.

    Parameters
    ----------
    statistic, ess : ndarray, shape (B,)
        Each resample's region statistic and effective sample size.
    alpha : float
    scalar : bool
        One parameter (an equal-tailed interval) or several (an ellipsoid).
    centre : float, default 0
        The variance a cross-fitted centre adds per effective draw
        (:func:`cross_fit_variance`; 0 where the statistic has no estimated centre
        or its own covariance).

    Returns
    -------
    inside : ndarray of bool, shape (B,)
    flip : ndarray, shape (B,)
        ``Phi(-|statistic - p| / sqrt((p (1 - p) + centre) / ess))`` for the nearest
        threshold ``p`` (``alpha/2`` or ``1 - alpha/2`` for a scalar,
        ``1 - alpha`` for a vector).
    """
    if scalar:
        inside = (statistic >= alpha / 2) & (statistic <= 1 - alpha / 2)
        p = np.where(statistic < 0.5, alpha / 2, 1 - alpha / 2)
    else:
        inside = statistic <= 1 - alpha
        p = np.full(statistic.shape, 1 - alpha)
    se = np.sqrt((p * (1 - p) + centre) / ess)
    return inside, ndtr(-np.abs(statistic - p) / se)


def cross_fit_variance(size: int, alpha: float) -> float:
    """The variance, per effective draw, that a cross-fitted centre adds to
    :func:`region_statistic_per_resample`'s statistic at its threshold ``1 - alpha``.

    The statistic is the weight of draws closer to the centre than the
    estimate, in a fixed metric. Each half of the draws is measured from the
    other half's mean, which is off by ``delta`` of covariance ``Sigma /
    ESS_half``; the estimate's squared distance ``u`` moves by ``-2 delta' M
    (estimate - mean)`` to first order, of variance ``4 u / ESS_half`` in the
    posterior's own metric, while the draws' distances move only at second
    order. Through the draws' distance density ``g`` (``chi2_K``'s, for a
    posterior near normal; the metric's scale cancels), each half's statistic
    gains ``g(u)^2 4 u / ESS_half``; the two halves' mean gains ``4 g(u)^2 u /
    ESS`` at ``u = chi2_K^-1(1 - alpha)``: 0.32 to 0.41 times the binomial
    ``p (1 - p)`` at ``alpha = 0.05`` for ``K`` from 2 to 50. Zero for one
    parameter, whose statistic (a weighted CDF) has no centre.
    """
    if size == 1:
        return 0.0
    u = chi2.ppf(1 - alpha, size)
    return float(4 * chi2.pdf(u, size) ** 2 * u)


class BootstrapProblem(NamedTuple):
    """GPC's question on a path: which resamples' regions hold the estimate, at any ``omega``.

    Attributes
    ----------
    path : LearningRatePath
        The full data's path (unweighted), extended on demand.
    indices : ndarray of int, shape (B, n)
        The bootstrap resamples (:func:`stanflow.gibbs.gpc.bootstrap_indices`).
    estimate : ndarray, shape (K,)
        The full-data estimate.
    alpha : float
        Regions of level ``1 - alpha``.
    shape : ndarray, shape (K, K) or None
        The shape fix's target (:mod:`stanflow.gibbs.shape`), or None.
    """

    path: LearningRatePath
    indices: np.ndarray
    estimate: np.ndarray
    alpha: float
    shape: np.ndarray | None = None

    def checked(self) -> BootstrapProblem:
        """The problem with its arrays as floats, or a ``ValueError`` naming the field."""
        if self.path.target.weights is not None:
            raise ValueError(
                "path: GPC's bootstrap resamples the data itself, so it needs a path of "
                "the unweighted data (weights all 1)"
            )
        K = len(self.path.target.names)
        estimate = np.atleast_1d(np.asarray(self.estimate, dtype=float))
        if estimate.shape != (K,) or not np.all(np.isfinite(estimate)):
            raise ValueError(f"estimate must be finite with {K} value(s), got {self.estimate!r}")
        shape = None if self.shape is None or K == 1 else check_shape(self.shape, K)
        return self._replace(estimate=estimate, shape=shape)


class PathCoverage:
    """``omega -> Evaluation``: the bootstrap coverage from one reweighted path.

    Parameters
    ----------
    problem : BootstrapProblem
        Its path is extended on demand (a geometric path) when
        ``proposal_scale * omega`` lies beyond its end.
    proposal_scale : float
        Resamples at ``omega`` are read from the schedule point nearest
        ``proposal_scale * omega`` (:func:`proposal_step`).
    """

    def __init__(self, problem: BootstrapProblem, proposal_scale: float) -> None:
        problem = problem.checked()
        self.path = problem.path
        self.counts = resample_counts(problem.indices, self.path.target.n)
        self.estimate = problem.estimate
        self.alpha = problem.alpha
        self.proposal_scale = proposal_scale
        self._resample_losses: dict[int, np.ndarray] = {}
        self._theta: dict[int, np.ndarray] = {}
        self._last: tuple[tuple[float, int], Evaluation] | None = None
        self.shape = problem.shape

    def __call__(self, omega: float) -> Evaluation:
        # The same omega on the same schedule gives the same evaluation (GPC's
        # root finder asks for omega0 again after resamples="auto" probed it).
        key = (float(omega), len(self.path.levels))
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        k, theta, resample_loss, log_base = self._reweighted(omega)
        with BLAS.limit(limits=1, user_api="blas"):
            statistic, ess = region_statistic(
                theta, resample_loss, log_base, omega, self.estimate, self.shape)
        scalar = len(self.path.target.names) == 1
        inside, flip = inside_and_flip(statistic, ess, self.alpha, scalar)
        found = Evaluation(
            omega=float(omega),
            count=int(inside.sum()),
            count_variance=float(np.sum(flip * (1 - flip))),
            ess_min=float(ess.min()),
            ess_median=float(np.median(ess)),
            low_ess=int(np.sum(ess < LOW_ESS)),
            step=k,
        )
        self._last = ((float(omega), len(self.path.levels)), found)
        return found

    def bootstrap_shape(self, omega: float) -> tuple[np.ndarray, np.ndarray]:
        """:func:`~stanflow.gibbs.path.resample_means.bootstrap_shape` read from the
        particles ``omega`` would be read from."""
        _, theta, resample_loss, log_base = self._reweighted(omega)
        return bootstrap_shape(theta, resample_loss, log_base, omega)

    @property
    def shape(self) -> np.ndarray | None:
        """The shape the posteriors are moved to before their regions are read (None: as they are)."""
        return self._shape

    @shape.setter
    def shape(self, shape: np.ndarray | None) -> None:
        self._shape = None if shape is None else check_shape(shape, len(self.estimate))
        self._last = None  # an evaluation in another shape

    def _reweighted(self, omega: float) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """The schedule point read at ``omega`` (extending the path to it), its
        particles' parameters, each resample's losses there and ``log_base``."""
        reference = self.proposal_scale * omega
        if self.path.end is None or reference > self.path.end:
            self.path.extend(reference)
        assert self.path.end is not None  # extend set it
        k = proposal_step(self.path.omegas, omega, reference)
        level = self.path.levels[k]
        if k not in self._resample_losses:
            with BLAS.limit(limits=1, user_api="blas"):
                pointwise = self.path.target.pointwise_loss(level.z)
                self._resample_losses[k] = self.counts @ pointwise.T
            self._theta[k] = self.path.target.theta(level.z)
        g = log_level_density(level.loss, level.omega, self.path.end, self.path.q)
        return k, self._theta[k], self._resample_losses[k], -g


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


def region_statistic_per_resample(
    theta: np.ndarray,
    log_w: np.ndarray,
    estimate: np.ndarray,
    posterior_shape: np.ndarray,
    shape: np.ndarray | None = None,
) -> np.ndarray:
    """Each resample's region statistic from its own weighted draws, in a given shape.

    ``K = 1``: the weighted CDF at the estimate. ``K > 1``: the weight of draws
    strictly closer to the resample's posterior mean than the estimate, in the
    Mahalanobis distance of ``posterior_shape`` (the estimate's in ``c shape``
    of the same volume when ``shape`` is given: the shape fix, as in
    :func:`region_statistic`). Unlike
    :func:`region_statistic`, the ellipsoid's shape is not each resample's
    own weighted covariance: with a few hundred effective draws in tens of
    dimensions that estimate is noisy, and the draws it was fitted to sit
    closer to their mean than a new point (their weighted squared distances
    average exactly ``K``), which counts too many regions as holding the
    estimate. The full data's posterior covariance (or the sandwich) has the
    resamples' shape to first order. The mean is cross-fitted: each half of
    the draws (even and odd positions) is measured from the other half's.

    Parameters
    ----------
    theta : ndarray, shape (B, S, K)
    log_w : ndarray, shape (B, S)
    estimate : ndarray, shape (K,)
    posterior_shape : ndarray, shape (K, K)
        The posteriors' covariance, positive definite.
    shape : ndarray, shape (K, K), optional
        The shape fix's target shape.

    Returns
    -------
    ndarray, shape (B,)
    """
    w = np.exp(log_w - log_w.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    K = theta.shape[2]
    if K == 1:
        return np.einsum("bs,bs->b", w, theta[:, :, 0] <= estimate[0])
    basis = span_basis(theta)
    if basis is not None:  # values confined to a plane (a simplex's): its coordinates
        if shape is not None:
            raise ValueError(PLANE_SHAPE)
        theta, estimate = theta @ basis, estimate @ basis
        posterior_shape = basis.T @ posterior_shape @ basis
    metric = np.linalg.inv(posterior_shape)
    estimate_metric = metric if shape is None else (
        np.linalg.inv(shape) / volume_scale(posterior_shape, shape))
    closer = np.zeros(len(w))
    halves = (slice(0, None, 2), slice(1, None, 2))
    for measured, fitted in (halves, halves[::-1]):
        wf = w[:, fitted]
        mean = np.einsum("bs,bsk->bk", wf, theta[:, fitted]) / wf.sum(axis=1, keepdims=True)
        gap_draws = theta[:, measured] - mean[:, None, :]
        d_draws = np.einsum("bsk,kl,bsl->bs", gap_draws, metric, gap_draws)
        gap = estimate - mean
        d_estimate = np.einsum("bk,kl,bl->b", gap, estimate_metric, gap)
        closer += np.einsum("bs,bs->b", w[:, measured], d_draws < d_estimate[:, None])
    return closer
