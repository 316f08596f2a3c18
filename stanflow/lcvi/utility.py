"""The utility term ``U(lambda, h) = sum_n E_q[log E_{y_n | theta} u(y_n, h_n)]`` in NumPy.

Estimated by double reparameterisation with fixed base samples: ``T`` draws
``theta_t`` of the normal ``q`` from fixed base samples ``eps_theta`` (in the
unconstrained space; :func:`theta_draws` for mean-field), and for each of them ``S`` outcomes
``y_{ts} = g(theta_t, eps_y[s])`` from the same base samples ``eps_y``. Two
estimators of the inner term per ``theta_t`` and data point ``n``:

- ``"naive"``: ``log (1/S) sum_s u(y_{tsn}, h_n)``; for ``u = exp(-gamma l)``
  this is a log-sum-exp; for ``u = M - l`` it is ``-inf`` when the mean
  utility is not positive;
- ``"linearised"``: ``-(1/S) sum_s l(y_{tsn}, h_n) / M`` for ``u = M - l``
  (``log(M - l) ~ log M - l / M`` without the constant), and
  ``-gamma (1/S) sum_s l`` for ``u = exp(-gamma l)``.

These are the checks of the Stan template ``stan/lcvi/eight_schools_lcvi.stan``,
whose target gains :func:`utility_per_theta` at ADVI's own draw of ``theta``.

:class:`Utility` is the utility term as the LCVI procedures take it
(``utility=``): the utility, its scale, the estimator and ``S``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.special import logsumexp, ndtri

from stanflow.golden import golden_section, sections_for
from stanflow.lcvi.utility_transform import UTILITIES, check_utility, utility_scale
from stanflow.losses import BoundLoss, bound_loss
from stanflow.losses.decisions import CHUNK_ELEMENTS
from stanflow.validation import check_int, check_number

GRID_POINTS = 33
"""Points of the coarse grid that :func:`utility_decisions` starts from."""

MAX_SECTIONS = 100
"""Golden sections of :func:`utility_decisions` at the most (they shrink by 0.618 each)."""

ESTIMATORS = ("naive", "linearised")
"""Estimators of the utility term, in the order of the Stan data ``estimator`` (1, 2)."""


@dataclass(frozen=True)
class Utility:
    """The utility term of LCVI: the utility of a loss, its scale, estimator and outcome samples.

    What :func:`stanflow.lcvi.run_lcvi`, :func:`stanflow.lcvi.run_lcvi_joint`
    and :func:`stanflow.lcvi.lcvi` take as ``utility=`` (their default is
    ``Utility()``); they return it with the scale they used.

    Parameters
    ----------
    kind : {"linear", "exp"}, default "linear"
        Utility ``M - l`` or ``exp(-gamma l)``
        (:func:`~stanflow.lcvi.utility_transform.utility_from_losses`).
    scale : float, optional
        ``M`` or ``gamma``, positive and finite; by default (``None``) set
        from plain VI's losses at ``percentile``
        (:func:`~stanflow.lcvi.utility_transform.utility_scale`).
    percentile : float, default 90
        In ``(0, 100]``: ``M`` is this percentile of plain VI's losses (the
        paper's M90), ``gamma = 1 / M``; unused when ``scale`` is given.
    estimator : {"naive", "linearised"}, default "linearised"
        The estimator of the inner term (module docstring).
    n_outcomes : int, default 5
        Outcome samples ``S`` per draw of ``theta``, at least 1.

    Raises
    ------
    ValueError
        Naming the field, when the object is made.
    """

    kind: str = "linear"
    scale: float | None = None
    percentile: float = 90.0
    estimator: str = "linearised"
    n_outcomes: int = 5

    def __post_init__(self) -> None:
        if self.kind not in UTILITIES:
            raise ValueError(f"kind: unknown utility {self.kind!r}; known: {list(UTILITIES)}")
        if self.scale is not None:
            object.__setattr__(self, "scale", check_utility(self.kind, self.scale)[1])
        percentile = check_number(self.percentile, "percentile")
        if not 0 < percentile <= 100:
            raise ValueError(f"percentile must be in (0, 100], got {self.percentile!r}")
        object.__setattr__(self, "percentile", percentile)
        check_estimator(self.estimator)
        object.__setattr__(self, "n_outcomes", check_int(self.n_outcomes, "n_outcomes"))

    def scaled(self, losses: np.ndarray) -> Utility:
        """This utility with the scale that plain VI's ``losses`` give at ``percentile``."""
        return replace(self, scale=utility_scale(losses, self.kind, self.percentile))

    def given_scale(self, needed_by: str) -> float:
        """``scale``, which ``needed_by`` needs given: a ``ValueError`` naming it if ``None``."""
        if self.scale is None:
            raise ValueError(f"scale: {needed_by} needs the scale M or gamma")
        return self.scale


def utility_argument(utility: Utility | None) -> Utility:
    """The ``utility=`` of an LCVI procedure: ``Utility()`` for ``None``, else a :class:`Utility`."""
    if utility is None:
        return Utility()
    if not isinstance(utility, Utility):
        raise TypeError(f"utility must be a Utility, got {type(utility).__name__}")
    return utility


def theta_draws(mu: np.ndarray, sigma: np.ndarray, eps_theta: np.ndarray) -> np.ndarray:
    """Reparameterised draws ``mu + sigma * eps_theta`` of a mean-field normal.

    Parameters
    ----------
    mu : array_like, shape (D,)
    sigma : array_like, shape (D,)
        Positive.
    eps_theta : array_like, shape (T, D)
        Standard normal base samples.

    Returns
    -------
    ndarray, shape (T, D)
    """
    mu, sigma = np.asarray(mu, dtype=float), np.asarray(sigma, dtype=float)
    eps_theta = np.asarray(eps_theta, dtype=float)
    if mu.ndim != 1 or sigma.shape != mu.shape:
        raise ValueError(
            f"mu and sigma must be vectors of one length, got {mu.shape} and {sigma.shape}"
        )
    if np.any(sigma <= 0):
        raise ValueError("sigma must be positive")
    if eps_theta.ndim != 2 or eps_theta.shape[1] != mu.shape[0]:
        raise ValueError(
            f"eps_theta must have shape (T, {mu.shape[0]}), got {eps_theta.shape}"
        )
    return mu + sigma * eps_theta


def outcome_base_samples(
    S: int, N: int, rng: np.random.Generator, stratified: bool = True
) -> np.ndarray:
    """Fixed standard normal base samples ``eps_y`` of the outcomes, shape (S, N).

    Stratified and antithetic (default): ``eps_y[s, n] = Phi^-1((s + u_n) / S)``
    for the strata below the median, with one uniform ``u_n`` per data point,
    mirrored above it (``eps_y[S - 1 - s, n] = -eps_y[s, n]``; the middle
    stratum of an odd ``S`` gets 0). Each ``eps_y[:, n]`` thus has one draw in
    each of the ``S`` equal-probability strata of ``N(0, 1)`` and mean exactly
    0. This matters because the same samples serve every gradient step: a
    fixed ``eps_y`` pulls the optimum towards ``h - sd mean_s eps_y`` for each
    data point, and with two plain stratified draws that mean ranges up to
    +-0.8 (the squared loss's pull then has a random offset per data point);
    antithetic pairs remove it, and for the squared loss make the outcome
    average exact. Otherwise independent draws.

    Parameters
    ----------
    S, N : int
        At least 1.
    rng : numpy.random.Generator
    stratified : bool, default True
    """
    if S < 1 or N < 1:
        raise ValueError(f"S and N must be >= 1, got {S!r}, {N!r}")
    if not stratified:
        return rng.standard_normal((S, N))
    half = S // 2
    lower = ndtri((np.arange(half)[:, None] + rng.uniform(size=N)) / S)
    middle = np.zeros((S % 2, N))
    return np.concatenate([lower, middle, -lower[::-1]])


def uniform_base_samples(S: int, N: int, seed: int, used: bool = True) -> np.ndarray:
    """Fixed uniform base samples ``u`` of the outcomes, shape (S, N).

    Stratified: each column holds one draw in each of the ``S`` strata
    ``[s / S, (s + 1) / S)``, in a random order of its own, so that it is
    independent of the normal base samples. Drawn from a stream of their own
    (``seed`` and a fixed tag), so that adding them changes no other number
    of a run; all ``1/2`` for a program that does not use them (``used``).
    """
    if not used:
        return np.full((S, N), 0.5)
    rng = np.random.default_rng([int(seed), 0x75])
    strata = rng.permuted(np.tile(np.arange(S)[:, None], (1, N)), axis=0)
    return (strata + rng.uniform(size=(S, N))) / S


def normal_outcomes(
    loc: np.ndarray, scale: np.ndarray, eps_y: np.ndarray
) -> np.ndarray:
    """Outcomes ``y_{tsn} = loc[t, n] + scale[n] * eps_y[s, n]`` of a normal likelihood.

    Parameters
    ----------
    loc : array_like, shape (T, N)
        Location of ``y_n`` given each ``theta_t`` (for eight schools: ``theta_n``).
    scale : array_like, shape (N,)
        Positive standard deviations.
    eps_y : array_like, shape (S, N)
        Standard normal base samples, shared by all ``theta_t``.

    Returns
    -------
    ndarray, shape (T, S, N)
    """
    loc, scale = np.asarray(loc, dtype=float), np.asarray(scale, dtype=float)
    eps_y = np.asarray(eps_y, dtype=float)
    if loc.ndim != 2 or scale.shape != loc.shape[1:] or eps_y.shape[1:] != scale.shape:
        raise ValueError(
            "loc, scale, eps_y must have shapes (T, N), (N,), (S, N), got "
            f"{loc.shape}, {scale.shape}, {eps_y.shape}"
        )
    if np.any(scale <= 0):
        raise ValueError("scale must be positive")
    return loc[:, None, :] + scale * eps_y[None, :, :]


def utility_per_theta(
    y: np.ndarray,
    h: np.ndarray,
    loss: str | BoundLoss,
    kind: str,
    scale: float,
    estimator: str = "linearised",
) -> np.ndarray:
    """The inner utility term per draw of ``theta``, summed over data points.

    Parameters
    ----------
    y : array_like, shape (T, S, N)
        ``S`` outcomes for each of ``T`` draws of ``theta``, ``N`` data points.
    h : array_like, shape (N,)
        Decisions.
    loss : str or BoundLoss
        A :class:`~stanflow.losses.BoundLoss` or a parameter-free loss name.
    kind : {"linear", "exp"}
        Utility ``M - l`` or ``exp(-gamma l)``.
    scale : float
        ``M`` or ``gamma``, positive.
    estimator : {"naive", "linearised"}, default "linearised"

    Returns
    -------
    ndarray, shape (T,)
    """
    kind, scale = check_utility(kind, scale)
    check_estimator(estimator)
    y, h = np.asarray(y, dtype=float), np.asarray(h, dtype=float)
    if y.ndim != 3 or y.shape[1] == 0:
        raise ValueError(f"y must have shape (T, S, N) with S >= 1, got {y.shape}")
    if h.shape != y.shape[2:]:
        raise ValueError(f"h (decisions) must have shape {y.shape[2:]}, got {h.shape}")
    inner = _inner(bound_loss(loss).value(y, h), kind, scale, estimator)
    return inner.sum(axis=1)


def utility_at_locations(
    loc: np.ndarray,
    scale_y: np.ndarray,
    eps_y: np.ndarray,
    h: np.ndarray,
    loss: str | BoundLoss,
    kind: str,
    scale: float,
    estimator: str = "linearised",
) -> np.ndarray:
    """:func:`utility_per_theta` of the outcomes :func:`normal_outcomes` gives.

    The same as ``utility_per_theta(normal_outcomes(loc, scale_y, eps_y), h,
    ...)``, a few draws at a time (:data:`~stanflow.losses.decisions.CHUNK_ELEMENTS`).

    Parameters
    ----------
    loc, scale_y, eps_y
        As ``loc``, ``scale`` and ``eps_y`` of :func:`normal_outcomes`.
    h, loss, kind, scale, estimator
        As for :func:`utility_per_theta`.

    Returns
    -------
    ndarray, shape (T,)
    """
    loc = np.asarray(loc, dtype=float)
    chunk = max(1, CHUNK_ELEMENTS // max(1, np.size(eps_y)))
    return np.concatenate(
        [
            utility_per_theta(
                normal_outcomes(loc[i : i + chunk], scale_y, eps_y),
                h,
                loss,
                kind,
                scale,
                estimator,
            )
            for i in range(0, loc.shape[0], chunk)
        ]
    )


def utility_term(
    y: np.ndarray,
    h: np.ndarray,
    loss: str | BoundLoss,
    kind: str,
    scale: float,
    estimator: str = "linearised",
) -> float:
    """The utility term ``U``: :func:`utility_per_theta` averaged over the ``T`` draws.

    Parameters and shapes as :func:`utility_per_theta`.

    Returns
    -------
    float
    """
    return float(utility_per_theta(y, h, loss, kind, scale, estimator).mean())


def utility_decisions(
    y: np.ndarray,
    loss: str | BoundLoss,
    kind: str,
    scale: float,
    estimator: str = "linearised",
    xtol: float = 1e-9,
) -> np.ndarray:
    """The decisions that maximise the estimated utility term, one per data point.

    ``U`` is a sum over data points of terms in one decision each, so each
    ``h_n`` maximises ``mean_t inner(y[t, :, n], h_n)`` on its own. With the
    linearised estimator that is the Bayes decision of the pooled outcomes
    ``y[:, :, n]`` (exactly); with the naive one, a golden-section search on
    ``[min y[:, :, n], max y[:, :, n]]``, which holds the maximiser since every
    shipped loss grows as ``h`` leaves all outcomes behind: a grid of
    :data:`GRID_POINTS` points, then golden sections around its best point.
    Where the naive ``M - l`` term is ``-inf`` for every ``h`` (some draw's
    mean loss exceeds ``M`` wherever ``h`` is), the Bayes decision of the
    pooled outcomes is returned.

    Parameters
    ----------
    y : array_like, shape (T, S, N)
        Outcomes as for :func:`utility_per_theta`.
    loss, kind, scale, estimator
        As for :func:`utility_per_theta`.
    xtol : float, default 1e-9
        Width of the final bracket, relative to the widest range of outcomes
        of a data point (at most :data:`MAX_SECTIONS` golden sections).

    Returns
    -------
    ndarray, shape (N,)
    """
    kind, scale = check_utility(kind, scale)
    check_estimator(estimator)
    y = np.asarray(y, dtype=float)
    if y.ndim != 3 or 0 in y.shape:
        raise ValueError(f"y must have shape (T, S, N) with T, S >= 1, got {y.shape}")
    loss = bound_loss(loss)
    if estimator == "linearised":
        return loss.bayes_decision(y.reshape(-1, y.shape[2]))

    def value(h: np.ndarray) -> np.ndarray:
        return _inner(loss.value(y, h), kind, scale, estimator).mean(axis=0)

    low, high = y.min(axis=(0, 1)), y.max(axis=(0, 1))
    width = xtol * float(np.max(high - low))
    # A coarse grid first (it also steps over flat -inf stretches of the
    # naive M - l term), then golden sections around its best point.
    grid = low + (high - low) * np.linspace(0, 1, GRID_POINTS)[:, None]
    values = np.stack([value(g) for g in grid])
    best = np.argmax(values, axis=0)
    cells = np.arange(y.shape[2])
    low = grid[np.maximum(best - 1, 0), cells]
    high = grid[np.minimum(best + 1, GRID_POINTS - 1), cells]
    # a fixed number of sections: a width below the spacing of floating-point
    # numbers at the size of y would never be reached
    start = float(np.max(high - low))
    sections = sections_for(width / start) if width < start else 0
    low, high = golden_section(
        lambda h: -value(h), low, high, min(sections, MAX_SECTIONS)
    )
    pooled = loss.bayes_decision(y.reshape(-1, y.shape[2]))
    return np.where(np.isneginf(values.max(axis=0)), pooled, (low + high) / 2)


def check_estimator(estimator: str) -> None:
    """Raise a ``ValueError`` naming ``estimator`` unless it is one of :data:`ESTIMATORS`."""
    if estimator not in ESTIMATORS:
        raise ValueError(
            f"estimator: unknown estimator {estimator!r}; known: {list(ESTIMATORS)}"
        )


def _inner(losses: np.ndarray, kind: str, scale: float, estimator: str) -> np.ndarray:
    """The inner term per draw of ``theta`` and data point from losses (T, S, N)."""
    S = losses.shape[1]
    if estimator == "linearised":
        mean_loss = losses.mean(axis=1)
        return -mean_loss / scale if kind == "linear" else -scale * mean_loss
    if kind == "exp":
        return logsumexp(-scale * losses, axis=1) - math.log(S)
    mean_utility = scale - losses.mean(axis=1)
    with np.errstate(divide="ignore"):
        return np.where(mean_utility > 0, np.log(np.maximum(mean_utility, 0)), -np.inf)
