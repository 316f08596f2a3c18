"""The shipped losses in NumPy: values and their first two derivatives in the prediction.

Each function takes ``(y, f, *params)`` and broadcasts ``y`` against ``f``;
they are the same functions as ``stan/losses/<name>.stanfunctions``, which
``tests/test_gibbs_stan_e2e.py`` checks point by point against Stan.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def absolute(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``|y - f|``."""
    return np.abs(y - f)


def check(y: np.ndarray, f: np.ndarray, tau: float) -> np.ndarray:
    """``tau u - min(u, 0)`` with ``u = y - f``: the pinball loss of the tau-quantile."""
    u = y - f
    return tau * u - np.minimum(u, 0.0)


def squared(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``(y - f)^2``."""
    return np.square(y - f)


def huber(y: np.ndarray, f: np.ndarray, delta: float) -> np.ndarray:
    """``u^2 / 2`` for ``|u| <= delta``, else ``delta (|u| - delta / 2)``."""
    a = np.abs(y - f)
    return np.where(a <= delta, 0.5 * a**2, delta * (a - 0.5 * delta))


def hinge(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``max(0, 1 - y f)`` for labels ``y`` in {-1, 1}."""
    return np.maximum(0.0, 1.0 - y * f)


def logistic(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``log(1 + exp(-y f))`` for labels ``y`` in {-1, 1}."""
    return np.logaddexp(0.0, -y * f)


def normal_nll(y: np.ndarray, f: np.ndarray, sigma: float) -> np.ndarray:
    """``-log normal(y | f, sigma)``."""
    return 0.5 * np.square((y - f) / sigma) + math.log(sigma) + _HALF_LOG_2PI


def linex(y: np.ndarray, f: np.ndarray, c: float) -> np.ndarray:
    """``exp(a) - a - 1`` with ``a = c (f - y)``, ``c != 0``."""
    a = c * (f - np.asarray(y))
    return np.expm1(a) - a


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))``, without overflow."""
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def zero(y: np.ndarray, f: np.ndarray, *params: float) -> np.ndarray:
    """0 at every ``(y, f)``: the second derivative of a piecewise-linear loss."""
    return np.zeros(np.broadcast(y, f).shape)


def constant(value: float) -> Callable[..., np.ndarray]:
    """``(y, f, *params) -> value`` at every ``(y, f)``."""

    def function(y: np.ndarray, f: np.ndarray, *params: float) -> np.ndarray:
        return np.full(np.broadcast(y, f).shape, value)

    return function
