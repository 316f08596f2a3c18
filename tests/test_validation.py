"""The generic argument checks of stanflow.validation."""

import math

import numpy as np
import pytest

from stanflow.validation import (
    check_finite_vector,
    check_int,
    check_number,
    check_positive,
    is_integer,
    is_number,
)


@pytest.mark.parametrize("value", [0, 1.5, -2, np.float64(0.5), np.int32(3), math.inf, math.nan])
def test_is_number_accepts_real_numbers(value):
    assert is_number(value)


@pytest.mark.parametrize(
    "value", [True, np.bool_(False), "1", None, [1.0], np.ones(1), 1j, np.complex128(1)])
def test_is_number_rejects_bools_and_other_types(value):
    assert not is_number(value)


def test_check_number_returns_a_float():
    out = check_number(np.int64(3), "x")
    assert out == 3.0 and type(out) is float
    assert check_number(0.5, "x", low=0, high=1, low_open=True, high_open=True) == 0.5
    assert check_number(0, "x", low=0) == 0.0 and check_number(1, "x", high=1) == 1.0


@pytest.mark.parametrize(
    ("value", "bounds", "message"),
    [
        (True, {}, "x must be a real number, got True"),
        ("1", {}, "x must be a real number, got '1'"),
        (None, {}, "x must be a real number, got None"),
        (math.nan, {}, "x must be finite, got nan"),
        (math.inf, {}, "x must be finite, got inf"),
        (-1.0, {"low": 0}, r"x must be finite and >= 0, got -1.0"),
        (0.0, {"low": 0, "low_open": True}, r"x must be finite and > 0, got 0.0"),
        (2, {"high": 1, "high_open": True}, r"x must be finite and < 1, got 2"),
        (1, {"low": 0, "high": 1, "high_open": True}, r"x must be finite and in \[0, 1\), got 1"),
        (math.nan, {"low": 0}, "x must be finite and >= 0, got nan"),
    ],
)
def test_check_number_rejects_with_the_name(value, bounds, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        check_number(value, "x", **bounds)


def test_check_positive():
    assert check_positive(2, "tol") == 2.0 and type(check_positive(2, "tol")) is float
    for value in (0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match=r"^tol must be finite and > 0, got"):
            check_positive(value, "tol")
    with pytest.raises(ValueError, match=r"^tol must be a real number, got True$"):
        check_positive(True, "tol")


def test_check_int_returns_an_int():
    assert check_int(3, "n") == 3
    out = check_int(np.int64(0), "n", 0)
    assert out == 0 and type(out) is int
    assert check_int(-2, "n", minimum=-2) == -2


@pytest.mark.parametrize(
    ("value", "minimum", "message"),
    [
        (0, 1, "n must be an integer >= 1, got 0"),
        (1, 2, "n must be an integer >= 2, got 1"),
        (-1, 0, "n must be an integer >= 0, got -1"),
        (True, 1, "n must be an integer >= 1, got True"),
        (np.bool_(True), 0, "n must be an integer >= 0, got "),
        (2.0, 1, r"n must be an integer >= 1, got 2\.0"),
        (2.5, 1, r"n must be an integer >= 1, got 2\.5"),
        (math.nan, 1, "n must be an integer >= 1, got nan"),
        (math.inf, 1, "n must be an integer >= 1, got inf"),
        ("3", 1, "n must be an integer >= 1, got '3'"),
        (None, 1, "n must be an integer >= 1, got None"),
    ],
)
def test_check_int_rejects_with_the_name(value, minimum, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        check_int(value, "n", minimum)


def test_check_finite_vector():
    out = check_finite_vector([1, 2, 3], "y")
    assert out.dtype == float and out.shape == (3,)
    np.testing.assert_array_equal(out, [1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([], r"y must be a non-empty 1-d array, got shape \(0,\)"),
        (np.ones((2, 2)), r"y must be a non-empty 1-d array, got shape \(2, 2\)"),
        (1.0, r"y must be a non-empty 1-d array, got shape \(\)"),
        ([1.0, math.nan], "y contains NaN or infinite values"),
        ([1.0, -math.inf], "y contains NaN or infinite values"),
    ],
)
def test_check_finite_vector_rejects_with_the_name(values, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        check_finite_vector(values, "y")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, True), (np.int64(-2), True), (True, False), (3.0, False), ("3", False), (None, False)],
)
def test_is_integer_takes_ints_not_bools_or_whole_floats(value, expected):
    assert is_integer(value) is expected
