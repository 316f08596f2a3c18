"""Utilities of losses, as Kusmierczyk, Sakaya and Klami (2019) build them.

``"linear"`` is ``u = M - l``, ``"exp"`` is ``u = exp(-gamma l)``. The *scale*
(``M`` or ``gamma``) comes from the losses seen under plain VI by
:func:`utility_scale`: ``M`` is their ``p``-th percentile (the paper's M90 for
``p = 90``), and ``gamma = 1 / M``, so that ``u`` falls to ``exp(-1)`` at the
same loss. The losses themselves are :mod:`stanflow.losses`.
"""

from __future__ import annotations

import numpy as np

from stanflow.validation import check_number

UTILITIES = ("linear", "exp")
"""Utility transforms: ``"linear"`` is ``M - l``, ``"exp"`` is ``exp(-gamma l)``."""


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
    percentile = check_number(percentile, "percentile")
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
    scale = check_number(scale, "scale")
    if not scale > 0:
        name = "M" if kind == "linear" else "gamma"
        raise ValueError(f"scale ({name}) must be positive, got {scale!r}")
    return kind, scale


def _check_kind(kind: str) -> None:
    if kind not in UTILITIES:
        raise ValueError(f"utility: unknown utility {kind!r}; known: {list(UTILITIES)}")
