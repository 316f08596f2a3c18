"""Input validation shared by the WBB solvers; errors name the argument."""

from __future__ import annotations

import numpy as np

from stanflow.validation import check_finite_vector


def check_X_y(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``X`` as a finite float array (n, p) and ``y`` as a finite (n,) array."""
    X = np.asarray(X, dtype=float)
    y = check_finite_vector(y, "y")
    if X.ndim != 2:
        raise ValueError(f"X must be 2-dimensional (n, p), got shape {X.shape}")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]} entries")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or infinite values")
    return X, y


def check_lam(lam: float) -> float:
    """A finite ``lam >= 0``."""
    lam = float(lam)
    if not (np.isfinite(lam) and lam >= 0):
        raise ValueError(f"lam must be finite and >= 0, got {lam!r}")
    return lam


def check_weights(
    weights: np.ndarray | None, prior_weight: float | np.ndarray, n: int, *, positive: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Observation weights as (B, n) and prior weights as (B,).

    ``weights=None`` means unit weights (B = 1); a 1-d ``weights`` is one draw.
    A scalar ``prior_weight`` is shared by all draws. Weights must be finite and
    non-negative (strictly positive when ``positive``).
    """
    w = np.ones((1, n)) if weights is None else np.asarray(weights, dtype=float)
    given_shape = w.shape
    if w.ndim == 1:
        w = w[None, :]
    if w.ndim != 2 or w.shape[1] != n:
        raise ValueError(
            f"weights must have shape (n,) or (B, n) with n = {n}, got {given_shape}"
        )
    if not np.all(np.isfinite(w)) or np.any(w < 0) or (positive and np.any(w <= 0)):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"weights must be finite and {bound}")
    wp = np.asarray(prior_weight, dtype=float)
    if wp.ndim == 0:
        wp = np.full(w.shape[0], float(wp))
    if wp.shape != (w.shape[0],):
        raise ValueError(
            f"prior_weight must be a scalar or have shape ({w.shape[0]},), got {wp.shape}"
        )
    if not np.all(np.isfinite(wp)) or np.any(wp < 0):
        raise ValueError("prior_weight must be finite and >= 0")
    return w, wp
