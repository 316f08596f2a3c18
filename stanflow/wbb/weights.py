"""Weighted Bayesian bootstrap weights from one root seed.

Draw ``i`` uses the ``i``-th child of ``numpy.random.SeedSequence(root)``
(``SeedSequence(root, spawn_key=(i,))``, what ``SeedSequence(root).spawn`` hands
out as its ``i``-th child, the convention of :mod:`stanflow.runs.seeds`). Its
weights therefore depend only on the root seed and ``i``: not on how many draws
are made, in which order, or in how many batches.

Each draw takes ``n + 1`` standard exponentials from its child generator: the
first ``n`` are the observation weights ``w_1..w_n``, the last is the prior
weight ``w_p``. With ``prior="fixed"`` the last one is replaced by 1, so the
fixed and random variants of a draw share their observation weights (common
random numbers, which makes the two variants directly comparable).
"""

from __future__ import annotations

import numpy as np

from stanflow.validation import check_int

PRIORS = ("random", "fixed")


def draw_weights(
    seed: int, index: int, n: int, prior: str = "random"
) -> tuple[np.ndarray, float]:
    """Weights of draw ``index``.

    Parameters
    ----------
    seed : int
        Non-negative root seed of the bootstrap.
    index : int
        Non-negative draw number.
    n : int
        Number of observations, at least 1.
    prior : {"random", "fixed"}
        ``w_p ~ Exp(1)`` or ``w_p = 1``.

    Returns
    -------
    w : ndarray, shape (n,)
        Observation weights, i.i.d. Exp(1).
    w_p : float
        Prior weight.
    """
    w, wp = bootstrap_weights(seed, n, 1, prior=prior, start=index)
    return w[0], float(wp[0])


def bootstrap_weights(
    seed: int, n: int, B: int, *, prior: str = "random", start: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Weights of draws ``start, ..., start + B - 1``.

    Parameters
    ----------
    seed : int
        Non-negative root seed of the bootstrap.
    n : int
        Number of observations, at least 1.
    B : int
        Number of draws, at least 1.
    prior : {"random", "fixed"}
        ``w_p ~ Exp(1)`` or ``w_p = 1``.
    start : int
        Index of the first draw, non-negative.

    Returns
    -------
    w : ndarray, shape (B, n)
        Observation weights; row ``b`` is draw ``start + b``.
    w_p : ndarray, shape (B,)
        Prior weights.
    """
    seed = check_int(seed, "seed", 0)
    start = check_int(start, "start", 0)
    n, B = check_int(n, "n"), check_int(B, "B")
    if prior not in PRIORS:
        raise ValueError(f"prior must be one of {PRIORS}, got {prior!r}")
    out = np.empty((B, n + 1))
    for b in range(B):
        child = np.random.SeedSequence(seed, spawn_key=(start + b,))
        out[b] = np.random.default_rng(child).standard_exponential(n + 1)
    w, wp = out[:, :n], out[:, n]
    return w, (wp if prior == "random" else np.ones(B))
