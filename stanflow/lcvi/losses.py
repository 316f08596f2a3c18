"""Losses ``l(y, h)`` of a decision ``h`` for an outcome ``y``, their Bayes decisions, and utilities.

=========  ==============================================  ===========  ==========================
name       ``l(y, h)``                                     parameter    Bayes decision
=========  ==============================================  ===========  ==========================
squared    ``(y - h)^2``                                   --           mean
absolute   ``|y - h|``                                     --           median
tilted     ``max(q (y - h), (q - 1)(y - h))``              q in (0, 1)  q-quantile
linex      ``exp(c (h - y)) - c (h - y) - 1``              c != 0       ``-(1/c) log E[exp(-c y)]``
=========  ==============================================  ===========  ==========================

LinEx sign convention: with ``c > 0`` over-prediction (``h > y``) costs
exponentially and under-prediction linearly, so the decision lies below the
mean (for a normal predictive ``N(m, s^2)``: ``h = m - c s^2 / 2``); ``c < 0``
is the mirror image.

Each loss also exists in Stan as ``stan/lcvi/losses/<name>.stanfunctions``
defining ``vector loss(vector y, vector h, vector loss_params)`` (elementwise),
the slot ``loss.stanfunctions`` of ``stan/lcvi/eight_schools_lcvi.stan``.

Utilities (Kusmierczyk, Sakaya and Klami 2019, :func:`utility_from_losses`):
``"linear"`` is ``u = M - l``, ``"exp"`` is ``u = exp(-gamma l)``. The *scale*
(``M`` or ``gamma``) comes from the losses seen under plain VI by
:func:`utility_scale`: ``M`` is their ``p``-th percentile (the paper's M90 for
``p = 90``), and ``gamma = 1 / M``, so that ``u`` falls to ``exp(-1)`` at the
same loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import logsumexp, ndtr, ndtri

from stanflow.models import STAN_DIR

UTILITIES = ("linear", "exp")
"""Utility transforms: ``"linear"`` is ``M - l``, ``"exp"`` is ``exp(-gamma l)``."""

CHUNK_ELEMENTS = 2**20
"""Array elements (8 MB of doubles) per chunk of the larger computations on
draws x outcomes: all of them at once (160 MB on Last.fm) would cost more in
fresh memory (page faults) than in arithmetic."""


@dataclass(frozen=True)
class Loss:
    """A loss with its parameters bound.

    Parameters
    ----------
    name : str
        Registry name, also the Stan file's stem.
    params : tuple of float
        Parameter values in the order of the Stan vector ``loss_params``.
    value : callable
        ``(y, h) -> ndarray``, broadcasting ``y`` against ``h``.
    decision : callable
        ``draws -> ndarray``: the Bayes decision from predictive draws of shape
        ``(S, *shape)`` (draws along axis 0), shape ``shape``.
    mixture : callable
        ``(loc, sd) -> ndarray``: the Bayes decision when the predictive is the
        mixture ``(1/T) sum_t N(loc[t], sd^2)`` (``loc`` of shape ``(T, *shape)``,
        ``sd`` broadcasting against ``shape``), exact up to round-off.
    source : path, optional
        The Stan slot file of a loss of your own (``vector loss(vector y,
        vector h, vector loss_params)``, elementwise); shipped losses leave it
        unset and use ``stan/lcvi/losses/<name>.stanfunctions``.
    """

    name: str
    params: tuple[float, ...]
    value: Callable[[np.ndarray, np.ndarray], np.ndarray]
    decision: Callable[[np.ndarray], np.ndarray]
    mixture: Callable[[np.ndarray, np.ndarray], np.ndarray]
    source: Path | None = None

    @property
    def stan_file(self) -> Path:
        """The slot file for ``loss.stanfunctions``."""
        if self.source is not None:
            path = Path(self.source)
            if not path.is_file():
                raise ValueError(f"source: the loss file {path} does not exist")
            return path
        return stan_file(self.name)

    def bayes_decision(self, draws: np.ndarray) -> np.ndarray:
        """Bayes decision from predictive draws.

        Parameters
        ----------
        draws : array_like, shape (S, *shape)
            Finite draws of ``y``, ``S >= 1``.

        Returns
        -------
        ndarray, shape shape
        """
        draws = np.asarray(draws, dtype=float)
        if draws.ndim == 0 or draws.shape[0] == 0:
            raise ValueError(
                f"draws must have at least one draw along axis 0, got shape {draws.shape}"
            )
        if not np.all(np.isfinite(draws)):
            raise ValueError("draws must be finite")
        return self.decision(draws)

    def mixture_decision(self, loc: np.ndarray, sd: np.ndarray) -> np.ndarray:
        """Bayes decision for a normal likelihood averaged over draws of its location.

        The predictive of ``y`` is ``(1/T) sum_t N(loc[t], sd^2)``: the draws
        ``loc[t]`` of ``E[y | theta_t]`` under ``q`` with the likelihood's noise
        integrated out exactly, so the decision has no outcome-sampling noise.

        Parameters
        ----------
        loc : array_like, shape (T, *shape)
            Finite, ``T >= 1``.
        sd : array_like, broadcasting against ``shape``
            Positive likelihood standard deviations.

        Returns
        -------
        ndarray, shape shape
        """
        loc = np.asarray(loc, dtype=float)
        sd = np.asarray(sd, dtype=float)
        if loc.ndim == 0 or loc.shape[0] == 0:
            raise ValueError(
                f"loc must have at least one draw along axis 0, got shape {loc.shape}"
            )
        if not np.all(np.isfinite(loc)):
            raise ValueError("loc must be finite")
        if not np.all(sd > 0):
            raise ValueError("sd must be positive")
        try:
            np.broadcast_shapes(sd.shape, loc.shape[1:])
        except ValueError:
            raise ValueError(
                f"sd must broadcast against shape {loc.shape[1:]}, got {sd.shape}"
            ) from None
        return self.mixture(loc, sd)


def squared() -> Loss:
    """``(y - h)^2``; Bayes decision: the mean."""
    return Loss(
        "squared",
        (),
        lambda y, h: np.square(y - h),
        lambda d: d.mean(axis=0),
        lambda loc, sd: loc.mean(axis=0),
    )


def absolute() -> Loss:
    """``|y - h|``; Bayes decision: the median."""
    return Loss(
        "absolute",
        (),
        lambda y, h: np.abs(y - h),
        lambda d: np.median(d, axis=0),
        lambda loc, sd: mixture_quantile(loc, sd, 0.5),
    )


def tilted(q: float) -> Loss:
    """Tilted (pinball) loss of level ``q`` in (0, 1); Bayes decision: the ``q``-quantile."""
    q = _real(q, "q")
    if not 0 < q < 1:
        raise ValueError(f"q must be in (0, 1), got {q!r}")

    def value(y: np.ndarray, h: np.ndarray) -> np.ndarray:
        u = np.asarray(y) - h
        return np.maximum(q * u, (q - 1) * u)

    return Loss(
        "tilted",
        (q,),
        value,
        lambda d: np.quantile(d, q, axis=0),
        lambda loc, sd: mixture_quantile(loc, sd, q),
    )


def linex(c: float) -> Loss:
    """LinEx loss ``exp(c (h - y)) - c (h - y) - 1``, ``c != 0``.

    Bayes decision ``-(1/c) log E[exp(-c y)]``, computed with log-sum-exp.
    """
    c = _real(c, "c")
    if c == 0:
        raise ValueError("c must be non-zero (c -> 0 is squared loss up to c^2/2)")

    def value(y: np.ndarray, h: np.ndarray) -> np.ndarray:
        a = c * (h - np.asarray(y))
        return np.expm1(a) - a

    def decision(draws: np.ndarray) -> np.ndarray:
        log_mean = logsumexp(-c * draws, axis=0) - math.log(draws.shape[0])
        return -log_mean / c

    def mixture(loc: np.ndarray, sd: np.ndarray) -> np.ndarray:
        # E[exp(-c y)] = mean_t exp(-c loc_t + c^2 sd^2 / 2)
        return decision(loc) - c * np.square(sd) / 2

    return Loss("linex", (c,), value, decision, mixture)


def mixture_quantile(loc: np.ndarray, sd: np.ndarray, q: float) -> np.ndarray:
    """The ``q``-quantile of ``(1/T) sum_t N(loc[t], sd^2)``, elementwise.

    Solves ``F(h) = mean_t Phi((h - loc[t]) / sd) = q`` by Newton's method
    kept inside a bracket: the root lies between the smallest and largest
    ``loc[t] + sd Phi^-1(q)``, every evaluation of ``F`` shrinks the bracket,
    and a Newton step that leaves it is replaced by bisection.

    Parameters
    ----------
    loc : ndarray, shape (T, *shape)
    sd : ndarray, broadcasting against ``shape``, positive
    q : float in (0, 1)

    Returns
    -------
    ndarray, shape shape
    """
    shape = loc.shape[1:]
    loc = loc.reshape(loc.shape[0], -1)
    sd = np.broadcast_to(sd, shape).reshape(-1)
    shift = sd * ndtri(q)
    lo, hi = loc.min(axis=0) + shift, loc.max(axis=0) + shift
    tol = 1e-10 * (1.0 + np.max(np.abs(lo)) + np.max(np.abs(hi)))
    # a few thousand elements at a time (CHUNK_ELEMENTS)
    chunk = max(1, CHUNK_ELEMENTS // loc.shape[0])
    h = np.empty_like(lo)
    for i in range(0, loc.shape[1], chunk):
        part = slice(i, i + chunk)
        h[part] = _bracketed_newton(loc[:, part], sd[part], q, lo[part], hi[part], tol)
    return h.reshape(shape)


def _bracketed_newton(
    loc: np.ndarray,
    sd: np.ndarray,
    q: float,
    lo: np.ndarray,
    hi: np.ndarray,
    tol: float,
) -> np.ndarray:
    """:func:`mixture_quantile` of ``loc`` (T, M), ``sd`` (M,) in its bracket ``[lo, hi]``.

    ``lo`` and ``hi`` are narrowed in place.
    """
    h = loc.mean(axis=0) + np.sqrt(loc.var(axis=0) + np.square(sd)) * ndtri(q)
    h = np.clip(h, lo, hi)
    active = np.arange(h.size)  # elements not yet converged
    for _ in range(200):
        a, s_a = active, sd[active]
        z = (h[a] - loc[:, a]) / s_a
        excess = ndtr(z).mean(axis=0) - q
        density = np.exp(-np.square(z) / 2).mean(axis=0) / (s_a * np.sqrt(2 * np.pi))
        lo[a] = np.where(excess < 0, h[a], lo[a])
        hi[a] = np.where(excess < 0, hi[a], h[a])
        with np.errstate(divide="ignore", invalid="ignore"):
            newton = h[a] - excess / density
        inside = (newton > lo[a]) & (newton < hi[a])
        new = np.where(inside, newton, (lo[a] + hi[a]) / 2)
        moving = (np.abs(new - h[a]) > tol) & (hi[a] - lo[a] > tol)
        h[a] = new
        active = a[moving]
        if active.size == 0:
            break
    return h


LOSSES: dict[str, Callable[..., Loss]] = {
    "squared": squared,
    "absolute": absolute,
    "tilted": tilted,
    "linex": linex,
}
"""Loss constructors by name; parameters are keyword arguments (``q``, ``c``)."""


def stan_file(name: str) -> Path:
    """The Stan file of the loss family ``name`` (its parameters are Stan data)."""
    if name not in LOSSES:
        raise ValueError(f"loss: unknown loss {name!r}; known: {sorted(LOSSES)}")
    return STAN_DIR / "lcvi" / "losses" / f"{name}.stanfunctions"


def get_loss(name: str | Loss, **params: float) -> Loss:
    """The loss called ``name`` with its parameters bound (a :class:`Loss` is returned as is).

    Examples
    --------
    >>> get_loss("tilted", q=0.2).params
    (0.2,)
    """
    if isinstance(name, Loss):
        if params:
            raise ValueError("params: cannot rebind the parameters of a Loss object")
        return name
    if name not in LOSSES:
        raise ValueError(f"loss: unknown loss {name!r}; known: {sorted(LOSSES)}")
    try:
        return LOSSES[name](**params)
    except TypeError:
        raise ValueError(
            f"params: loss {name!r} takes {_signature(name)}, got {sorted(params)}"
        ) from None


def utility_from_losses(losses: np.ndarray, kind: str, scale: float) -> np.ndarray:
    """Utilities of losses: ``scale - l`` (``"linear"``) or ``exp(-scale l)`` (``"exp"``).

    Parameters
    ----------
    losses : array_like, any shape
    kind : {"linear", "exp"}
    scale : float
        ``M`` or ``gamma``, positive and finite.

    Returns
    -------
    ndarray, shape of ``losses``
    """
    kind, scale = check_utility(kind, scale)
    losses = np.asarray(losses, dtype=float)
    return scale - losses if kind == "linear" else np.exp(-scale * losses)


def utility_scale(losses: np.ndarray, kind: str, percentile: float = 90.0) -> float:
    """``M`` (``"linear"``) or ``gamma`` (``"exp"``) from losses under plain VI.

    Parameters
    ----------
    losses : array_like, any shape, at least one element
        Losses ``l(y, h)`` of predictive draws under plain VI at its decisions.
    kind : {"linear", "exp"}
    percentile : float, default 90
        In (0, 100]; ``M`` is this percentile of ``losses`` (M90 by default).

    Returns
    -------
    float
        ``M``, or ``gamma = 1 / M``.
    """
    _check_kind(kind)
    percentile = _real(percentile, "percentile")
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile!r}")
    losses = np.asarray(losses, dtype=float)
    if losses.size == 0 or not np.all(np.isfinite(losses)):
        raise ValueError("losses must be non-empty and finite")
    M = float(np.percentile(losses, percentile))
    if M <= 0:
        raise ValueError(
            f"losses: their {percentile:g}th percentile is {M!r}; M must be positive"
        )
    return M if kind == "linear" else 1.0 / M


def check_utility(kind: str, scale: float) -> tuple[str, float]:
    """Validate a utility ``kind`` and its ``scale`` (``M`` or ``gamma``)."""
    _check_kind(kind)
    scale = _real(scale, "scale")
    if not scale > 0:
        name = "M" if kind == "linear" else "gamma"
        raise ValueError(f"scale ({name}) must be positive, got {scale!r}")
    return kind, scale


def _check_kind(kind: str) -> None:
    if kind not in UTILITIES:
        raise ValueError(f"utility: unknown utility {kind!r}; known: {list(UTILITIES)}")


def _real(value: float, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return number


def _signature(name: str) -> str:
    names = LOSSES[name].__code__.co_varnames[: LOSSES[name].__code__.co_argcount]
    return f"parameters {list(names)}" if names else "no parameters"
