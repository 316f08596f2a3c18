"""Golden-section search, elementwise over arrays of independent brackets.

A small pure kernel shared by the methods that minimise many one-dimensional
functions at once (Gibbs location estimates, LCVI decisions): each step
evaluates the objective once for every bracket and shrinks every bracket by
:data:`RATIO`. It assumes each function is unimodal on its bracket and then
guarantees that the returned bracket holds a minimiser.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

RATIO = (math.sqrt(5) - 1) / 2
"""The factor by which one step shrinks a bracket."""


def sections_for(xtol: float) -> int:
    """Steps that shrink a bracket to ``xtol`` (in (0, 1]) of its width."""
    return max(0, math.ceil(math.log(xtol) / math.log(RATIO)))


def golden_section(
    objective: Callable[[np.ndarray], np.ndarray],
    low: np.ndarray,
    high: np.ndarray,
    sections: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Golden-section search for minima, elementwise, ``sections`` steps.

    Parameters
    ----------
    objective : callable
        ``h -> values`` of the shape of ``low``: element ``n`` depends on
        ``h[n]`` only and is unimodal on ``[low[n], high[n]]``.
    low, high : ndarray
        The brackets, ``low <= high``, of one shape.
    sections : int
        Steps; each shrinks every bracket by :data:`RATIO` for one call of
        ``objective`` (two more calls set up the first step).

    Returns
    -------
    low, high : ndarray
        The final brackets, each holding a minimiser.
    """
    left, right = high - RATIO * (high - low), low + RATIO * (high - low)
    f_left, f_right = objective(left), objective(right)
    for _ in range(sections):
        keep_left = f_left <= f_right  # a minimiser lies in [low, right]
        high = np.where(keep_left, right, high)
        low = np.where(keep_left, low, left)
        new = np.where(
            keep_left, high - RATIO * (high - low), low + RATIO * (high - low)
        )
        f_new = objective(new)
        # kept left: the old left point is the new right one, else the old
        # right point is the new left one
        left, right, f_left, f_right = (
            np.where(keep_left, new, right),
            np.where(keep_left, left, new),
            np.where(keep_left, f_new, f_right),
            np.where(keep_left, f_left, f_new),
        )
    return low, high
