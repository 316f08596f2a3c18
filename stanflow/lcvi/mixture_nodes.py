"""Normal mixtures as samples: stratified noise nodes for numerical mixture decisions.

The predictive ``(1/T) sum_t N(loc[t], sd^2)`` of the LCVI loop's decision
step is represented by ``K`` noise nodes per draw, ``Y[t, k] = loc[t] + sd
z[t, k]`` with ``z[t, k] = Phi^-1((k + u_t) / K)``: one node in each of ``K``
equal-probability strata of ``N(0, 1)``, offset by a golden-ratio sequence
``u_t`` so that the ``T K`` nodes together fill ``T K`` strata
(:func:`noise_nodes`, :func:`mixture_samples`). Their accuracy is in
:mod:`stanflow.lcvi.numeric_decisions`.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri

from stanflow.golden import RATIO
from stanflow.validation import check_int

NOISE_NODES = 32
"""Default noise nodes ``K`` per draw for normal mixtures (:func:`noise_nodes`)."""


def noise_nodes(T: int, K: int) -> np.ndarray:
    """Stratified standard normal nodes ``z[t, k] = Phi^-1((k + u_t) / K)``, shape (T, K).

    ``u_t`` is the fractional part of ``1/2 + t (sqrt(5) - 1) / 2`` (a
    golden-ratio sequence): each row has one node in each of the ``K``
    equal-probability strata of ``N(0, 1)``, and the rows together spread
    evenly within them, so that the ``T K`` nodes pooled are close to the
    midpoints of ``T K`` strata.

    Parameters
    ----------
    T, K : int
        At least 1.
    """
    for name, value in (("T", T), ("K", K)):
        check_int(value, name)
    u = np.modf(0.5 + np.arange(T) * RATIO)[0]
    return ndtri((np.arange(K)[None, :] + u[:, None]) / K)


def mixture_samples(
    loc: np.ndarray, sd: np.ndarray, nodes: int
) -> tuple[np.ndarray, tuple[int, ...]]:
    """Samples ``loc[t] + sd z[t, k]`` (T K, N) standing for the mixture, and ``shape``.

    Parameters
    ----------
    loc : array_like, shape (T, *shape)
        Finite locations, ``T >= 1``.
    sd : array_like, broadcasting against ``shape``
        Positive standard deviations.
    nodes : int
        Noise nodes ``K`` per draw, at least 1 (checked by the caller).
    """
    loc, sd = np.asarray(loc, dtype=float), np.asarray(sd, dtype=float)
    if loc.ndim == 0 or loc.shape[0] == 0:
        raise ValueError(
            f"loc must have at least one draw along axis 0, got shape {loc.shape}"
        )
    if not np.all(np.isfinite(loc)):
        raise ValueError("loc must be finite")
    shape = loc.shape[1:]
    try:
        sd = np.broadcast_to(sd, shape).reshape(-1)
    except ValueError:
        raise ValueError(
            f"sd must broadcast against shape {shape}, got {sd.shape}"
        ) from None
    if not np.all(sd > 0) or not np.all(np.isfinite(sd)):
        raise ValueError("sd must be positive and finite")
    T = loc.shape[0]
    z = noise_nodes(T, nodes)  # (T, K)
    loc = loc.reshape(T, -1)
    samples = loc[:, None, :] + z[:, :, None] * sd  # (T, K, N)
    return samples.reshape(T * z.shape[1], -1), shape
