"""Parameters of losses, priors and penalties: one checking module for every method.

A slot file (a loss, prior or penalty in its own ``.stanfunctions`` file, for
any of the four methods) takes its parameters as a Stan vector
(``loss_params``, ``prior_params``, ``penalty_params``). It declares them in a
comment line, so that a user's file is checked exactly like a shipped one,
before anything compiles or runs::

    // params: tau in (0, 1)
    // params: mean, sd in (0, inf)
    // params: c != 0
    // params: none

Each name may carry the open interval ``(lower, upper)`` its value must lie in
(``inf`` and ``-inf`` allowed), or ``!= 0`` (any finite value but 0); without
either, any finite value. The
order is the order of the Stan vector. :func:`declared_parameters` reads the
declaration, :func:`check_vector` checks a caller's values against it (count,
finiteness, ranges), and :func:`bind` checks values against :class:`Parameter`
objects, as the Python losses and priors declare them. Values are given one of
two ways, for every slot and every method: a sequence in the declared order, or
a mapping by name.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Parameter:
    """A real parameter restricted to the open interval ``(lower, upper)``.

    Parameters
    ----------
    name : str
        Its name, e.g. ``"tau"``.
    lower, upper : float, default -inf, inf
        Exclusive bounds; the value must also be finite.
    nonzero : bool, default False
        Whether 0 is excluded too (LinEx's ``c``).
    """

    name: str
    lower: float = -math.inf
    upper: float = math.inf
    nonzero: bool = False

    def check(self, value: Any, where: str) -> float:
        """Return ``value`` as a float, or raise ``ValueError`` naming ``where``."""
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where} must be a real number, got {value!r}") from None
        if not (math.isfinite(number) and self.lower < number < self.upper):
            raise ValueError(
                f"{where} must be finite and in ({self.lower:g}, {self.upper:g}), "
                f"got {value!r}"
            )
        if self.nonzero and number == 0:
            raise ValueError(f"{where} must be non-zero, got {value!r}")
        return number


def bind(
    declared: tuple[Parameter, ...],
    given: Mapping[str, Any] | Iterable[Any] | None,
    argument: str,
    owner: str,
    *,
    qualified: bool = False,
) -> tuple[float, ...]:
    """Check given parameter values against the declared ones.

    Parameters
    ----------
    declared : tuple of Parameter
        What the loss or prior takes, in the order of its Stan vector.
    given : mapping of str to float, sequence of float, or None
        The caller's values: by name, or in the declared order; ``None``
        means none.
    argument : str
        The caller's argument name for messages, e.g. ``"loss_params"``.
    owner : str
        What takes the parameters, for messages, e.g. ``"loss 'check'"``.
    qualified : bool, default False
        Name ``owner`` in the messages about a single value too (a file's
        name, where the argument alone does not say which file).

    Returns
    -------
    tuple of float
        The values in declaration order.

    Raises
    ------
    TypeError
        If ``given`` is neither a mapping nor a sequence (a string, a number).
    ValueError
        If a name is missing or unknown, the count is wrong, or a value is out
        of its interval.
    """
    suffix = f" of {owner}" if qualified else ""
    values: Sequence[Any]
    if given is None or isinstance(given, Mapping):
        values = _by_name(declared, {} if given is None else given, argument, owner)
    else:
        values = values_in_order(given, argument)
        if len(values) != len(declared):
            takes = (
                f"{len(declared)} parameter(s) {[p.name for p in declared]}"
                if declared
                else "no parameters"
            )
            raise ValueError(
                f"{argument}: {owner} takes {takes}, got {len(values)}: {list(values)}"
            )
    return tuple(
        p.check(v, f"{argument}[{p.name!r}]{suffix}") for p, v in zip(declared, values, strict=True)
    )


def values_in_order(given: Any, argument: str) -> tuple[Any, ...]:
    """``given`` as a tuple of values in order, or a ``TypeError`` naming ``argument``.

    A list, a tuple or a one-dimensional array is taken in order. Strings,
    numbers, sets, iterators and arrays of another shape are refused: a number
    alone is not a parameter vector (``[0.5]`` is), a set has no order, an
    iterator would be used up, and a ``pandas.Series`` must be passed as a
    mapping (``dict(series)``), by name.
    """
    if isinstance(given, np.ndarray) and given.ndim == 1:
        return tuple(given)
    if isinstance(given, (list, tuple)) and not hasattr(given, "keys"):
        return tuple(given)
    raise TypeError(
        f"{argument} must be a sequence of numbers or a mapping of parameter names to numbers "
        "(a list, tuple or 1-D array in the declared order; a dict by name), "
        f"got {type(given).__name__}: {given!r}"
    )


def _by_name(
    declared: tuple[Parameter, ...], given: Mapping[str, Any], argument: str, owner: str
) -> list[Any]:
    names = [p.name for p in declared]
    missing = [name for name in names if name not in given]
    unknown = sorted(set(given) - set(names))
    if missing or unknown:
        raise ValueError(
            f"{argument}: {owner} takes {names or 'no parameters'}; "
            f"missing {missing}, unknown {unknown}"
        )
    return [given[name] for name in names]


_DECLARATION = re.compile(r"^\s*//\s*params:\s*(?P<body>.*?)\s*$")
_ITEM = re.compile(
    r"^(?P<name>[A-Za-z][A-Za-z0-9_]*)"
    r"(?:\s+in\s+\(\s*(?P<lower>[^,()]+?)\s*,\s*(?P<upper>[^,()]+?)\s*\)"
    r"|\s*(?P<nonzero>!=\s*0))?$"
)


def declared_parameters(path: str | os.PathLike) -> tuple[Parameter, ...] | None:
    """The parameters a slot file declares in its ``// params:`` line.

    Returns
    -------
    tuple of Parameter, or None
        In the order of the Stan vector; ``()`` for ``// params: none``;
        None if the file declares nothing (its values can then only be
        checked for finiteness).

    Raises
    ------
    ValueError
        If the declaration cannot be read; the message names the file and line.
    """
    path = Path(path)
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = _DECLARATION.match(line)
        if match is None:
            continue
        body = match.group("body")
        if body == "none":
            return ()
        items = _split_items(body)
        parameters = []
        for item in items:
            found = _ITEM.match(item)
            if found is None:
                raise ValueError(
                    f"{path}, line {number}: cannot read the parameter {item!r} of "
                    "'// params:'; write NAME, NAME in (LOWER, UPPER) or NAME != 0, "
                    "comma-separated, or 'none'"
                )
            lower, upper = found.group("lower"), found.group("upper")
            parameters.append(
                Parameter(
                    found.group("name"),
                    -math.inf if lower is None else _bound(lower, path, number),
                    math.inf if upper is None else _bound(upper, path, number),
                    nonzero=found.group("nonzero") is not None,
                )
            )
        return tuple(parameters)
    return None


def check_vector(
    path: str | os.PathLike, values: Mapping[str, Any] | Iterable[Any] | None,
    argument: str,
) -> tuple[float, ...]:
    """Check the parameter vector given for a slot file against its declaration.

    Parameters
    ----------
    path : str or os.PathLike
        The slot file.
    values : sequence of float, mapping or None
        The values in the order of the Stan vector, or a mapping by name
        (checked as :func:`bind` does); None for none. For a file that
        declares nothing, a mapping's values are taken in the order given.
    argument : str
        The caller's argument for messages, e.g. ``"loss_params"``.

    Returns
    -------
    tuple of float

    Raises
    ------
    TypeError
        If ``values`` is neither a mapping nor a sequence.
    ValueError
        For a wrong count, a non-finite value or a value out of its declared
        interval; the message names the file and the parameter.
    """
    declared = declared_parameters(path)
    owner = Path(path).name
    values = () if values is None else values
    if declared is None:
        if isinstance(values, Mapping):  # keyword values: in the order given
            values = list(values.values())
        values = values_in_order(values, argument)
        declared = tuple(Parameter(f"{k + 1}") for k in range(len(values)))
    return bind(declared, values, argument, owner, qualified=True)


def _split_items(body: str) -> list[str]:
    """Split ``a, b in (0, 1), c`` at the commas outside parentheses."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(body):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(body[start:i].strip())
            start = i + 1
    items.append(body[start:].strip())
    return [item for item in items if item]


def _bound(text: str, path: Path, number: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{path}, line {number}: {text!r} is not a number") from None

