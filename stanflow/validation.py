"""Generic checks of arguments, shared by every method.

Each check returns the checked value, converted (an ``int``, a ``float``, a float
array), or raises a ``ValueError`` whose message begins with the argument's name.
Only checks used in more than one place live here; domain-specific checks (a
penalty, a set of weights, a ``q``) stay beside their code and may call these.
The model is scikit-learn's ``sklearn/utils/validation.py``.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "check_finite_vector",
    "check_int",
    "check_number",
    "check_positive",
    "is_integer",
    "is_number",
]


def is_number(value: Any) -> TypeGuard[int | float | np.integer | np.floating]:
    """Whether ``value`` is a real number.

    Parameters
    ----------
    value : object

    Returns
    -------
    bool
        True for an ``int``, a ``float`` or a real NumPy number; False for a
        bool (``True`` is not a number here), a complex number and anything else.
    """
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def is_integer(value: Any) -> TypeGuard[int | np.integer]:
    """Whether ``value`` is an ``int`` or a NumPy integer (not a bool)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _bound_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low}"
    return f"{'<' if high_open else '<='} {high}"


def check_number(
    value: Any,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite float, optionally within bounds.

    Parameters
    ----------
    value : int, float or NumPy number
        Not a bool, a string or an array.
    name : str
        The argument's name, for the message.
    low, high : float, optional
        Bounds of ``value``; None for none.
    low_open, high_open : bool
        Whether the bound itself is excluded (``>`` rather than ``>=``).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        "{name} must be a real number, got ..." when ``value`` is not a number
        (:func:`is_number`); "{name} must be finite, got ..." without bounds, or
        "{name} must be finite and > 0, got ..." (the bounds spelled out) with
        them, when it is NaN, infinite or out of bounds.
    """
    if not is_number(value):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    number = float(value)
    inside = math.isfinite(number)
    if low is not None:
        inside = inside and (number > low if low_open else number >= low)
    if high is not None:
        inside = inside and (number < high if high_open else number <= high)
    if not inside:
        if low is None and high is None:
            raise ValueError(f"{name} must be finite, got {value!r}")
        bound = _bound_text(low, high, low_open, high_open)
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")
    return number


def check_positive(value: Any, name: str) -> float:
    """``value`` as a finite float ``> 0``.

    Parameters
    ----------
    value : int, float or NumPy number
    name : str
        The argument's name, for the message.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        "{name} must be finite and > 0, got ..." (or "must be a real number"),
        as :func:`check_number` with ``low=0, low_open=True``.
    """
    return check_number(value, name, low=0, low_open=True)


def check_int(value: Any, name: str, minimum: int = 1) -> int:
    """``value`` as an ``int >= minimum``.

    Parameters
    ----------
    value : int or NumPy integer
        Not a bool, and not a float even when it is whole (``3.0``).
    name : str
        The argument's name, for the message.
    minimum : int
        The smallest value allowed.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        "{name} must be an integer >= {minimum}, got {value!r}", whatever is wrong.
    """
    if not is_integer(value) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_finite_vector(values: ArrayLike, name: str) -> np.ndarray:
    """``values`` as a finite, non-empty 1-d float array.

    Parameters
    ----------
    values : array_like
    name : str
        The argument's name, for the message.

    Returns
    -------
    ndarray, shape (n,)
        ``numpy.asarray(values, dtype=float)``, ``n >= 1``.

    Raises
    ------
    ValueError
        "{name} must be a non-empty 1-d array, got shape ..." or
        "{name} contains NaN or infinite values".
    """
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-d array, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return array
