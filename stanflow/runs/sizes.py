"""Sizes of a Stan program's data, checked before anything runs.

``cmdstanpy``'s ``src_info()`` gives each data variable's type and number of
dims but not its sizes, so ``vector[N] y`` with ``len(y) != N`` would only fail
inside the executable. :func:`declared_shapes` reads the sizes from the
program's ``data`` block, and :func:`check_shapes` compares a run's data with
them. Sizes that are integer literals or the names of other data variables are
checked; any other size expression (``N - 1``, ``flag ? N : 0``) is left to
the model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

Size = int | str | None

_VECTOR_TYPES = {
    "vector", "row_vector", "simplex", "unit_vector", "ordered", "positive_ordered",
    "sum_to_zero_vector", "complex_vector", "complex_row_vector",
}
_MATRIX_TYPES = {"matrix", "complex_matrix"}
_SQUARE_TYPES = {"cov_matrix", "corr_matrix", "cholesky_factor_corr"}
_SCALAR_TYPES = {"int", "real", "complex"}
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class SizeMismatch(ValueError):
    """A data variable whose shape contradicts its declared sizes."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def declared_shapes(code: str) -> dict[str, tuple[Size, ...]]:
    """The declared shape of every data variable of a Stan program.

    Parameters
    ----------
    code : str
        The program text.

    Returns
    -------
    dict
        Variable name -> one entry per dim (array dims first): an int for a
        literal size, the name of a data variable, or None for any other
        expression. Tuples and unknown types are left out.
    """
    block = _data_block(_strip_comments(code))
    shapes: dict[str, tuple[Size, ...]] = {}
    for statement in block.split(";"):
        parsed = _declaration(statement.strip())
        if parsed is not None:
            name, shape = parsed
            shapes[name] = shape
    return shapes


def check_shapes(data: Mapping[str, Any], shapes: Mapping[str, tuple[Size, ...]]) -> None:
    """Raise :class:`SizeMismatch` if a data array contradicts its declared sizes.

    Parameters
    ----------
    data : mapping
        Data already checked for names, types and number of dims.
    shapes : mapping
        :func:`declared_shapes` of the program.
    """
    for name, declared in shapes.items():
        if name not in data or not declared:
            continue
        actual = np.shape(data[name])
        expected = [_resolve(size, data) for size in declared]
        if np.size(data[name]) == 0:
            if any(size == 0 or size is None for size in expected):
                continue
        elif len(actual) == len(expected) and all(
            size is None or size == length for size, length in zip(expected, actual, strict=True)
        ):
            continue
        described = ", ".join(
            f"{size} = {value}" for size, value in zip(declared, expected, strict=True)
            if isinstance(size, str) and value is not None
        )
        wanted = tuple("?" if size is None else size for size in expected)
        raise SizeMismatch(
            f"data[{name!r}]",
            f"has shape {actual} but the model declares shape {wanted}"
            + (f" ({described})" if described else ""),
        )


def _resolve(size: Size, data: Mapping[str, Any]) -> int | None:
    if isinstance(size, int) or size is None:
        return size
    value = data.get(size)
    if value is None or np.ndim(value) != 0:
        return None
    return int(value)


def _strip_comments(code: str) -> str:
    code = re.sub(r"/\*.*?\*/", " ", code, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", " ", code)


def _data_block(code: str) -> str:
    """The body of the top-level ``data { ... }`` block ('' if there is none)."""
    for match in re.finditer(r"\bdata\s*\{", code):
        before = code[: match.start()].rstrip()
        if before.endswith("transformed"):
            continue
        depth, start = 0, match.end() - 1
        for position in range(start, len(code)):
            if code[position] == "{":
                depth += 1
            elif code[position] == "}":
                depth -= 1
                if depth == 0:
                    return code[start + 1 : position]
    return ""


def _declaration(statement: str) -> tuple[str, tuple[Size, ...]] | None:
    """Parse ``[array[dims]] type[<constraints>][[dims]] name``."""
    text = statement
    outer: list[Size] = []
    if text.startswith("array"):
        rest = text[len("array"):].lstrip()
        if not rest.startswith("["):
            return None
        inside, text = _bracketed(rest, "[", "]")
        outer = _sizes(inside)
        text = text.lstrip()
    match = _IDENTIFIER.match(text)
    if match is None:
        return None
    kind, text = match.group(), text[match.end():].lstrip()
    if text.startswith("<"):
        _, text = _bracketed(text, "<", ">")
        text = text.lstrip()
    inner: list[Size] = []
    if text.startswith("["):
        inside, text = _bracketed(text, "[", "]")
        inner = _sizes(inside)
        text = text.lstrip()
    name = _IDENTIFIER.fullmatch(text)
    if name is None:
        return None
    if kind in _SCALAR_TYPES:
        shape = []
    elif (kind in _VECTOR_TYPES and len(inner) == 1) or (kind in _MATRIX_TYPES and len(inner) == 2):
        shape = inner
    elif kind in _SQUARE_TYPES and len(inner) == 1:
        shape = inner * 2
    elif kind == "cholesky_factor_cov" and len(inner) in (1, 2):
        shape = inner * 2 if len(inner) == 1 else inner
    else:
        return None
    return name.group(), tuple(outer + shape)


def _bracketed(text: str, opening: str, closing: str) -> tuple[str, str]:
    """Split ``text``, which starts with ``opening``, after its matching ``closing``.

    Parentheses and brackets inside are balanced; ``<`` counts only as the
    opening of a constraint (``<lower=0>``), not inside it.
    """
    assert text.startswith(opening)
    stack = [closing]
    for position, char in enumerate(text[1:], start=1):
        if char in "([":
            stack.append(")" if char == "(" else "]")
        elif char == stack[-1]:
            stack.pop()
            if not stack:
                return text[1:position], text[position + 1 :]
    return text[1:], ""


def _sizes(inside: str) -> list[Size]:
    parts, depth, current = [], 0, ""
    for char in inside:
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    sizes: list[Size] = []
    for part in (p.strip() for p in parts):
        if part.isdigit():
            sizes.append(int(part))
        elif _IDENTIFIER.fullmatch(part):
            sizes.append(part)
        else:
            sizes.append(None)
    return sizes
