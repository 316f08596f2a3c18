"""Named scalar parameters of losses and priors (``tau``, ``delta``, ``sd``, ...).

A loss or prior declares its parameters as :class:`Parameter` objects, each
with the open interval it must lie in; :func:`bind` checks a caller's mapping
against them and returns the values in declaration order, which is the order
of the Stan vector ``loss_params`` (or ``prior_params``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Parameter:
    """A real parameter restricted to the open interval ``(lower, upper)``.

    Parameters
    ----------
    name : str
        Its name, e.g. ``"tau"``.
    lower, upper : float, default -inf, inf
        Exclusive bounds; the value must also be finite.
    """

    name: str
    lower: float = -math.inf
    upper: float = math.inf

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
        return number


def bind(
    declared: tuple[Parameter, ...],
    given: Mapping[str, Any] | None,
    argument: str,
    owner: str,
) -> tuple[float, ...]:
    """Check given parameter values against the declared ones.

    Parameters
    ----------
    declared : tuple of Parameter
        What the loss or prior takes, in the order of its Stan vector.
    given : mapping of str to float, or None
        The caller's values; ``None`` means none.
    argument : str
        The caller's argument name for messages, e.g. ``"loss_params"``.
    owner : str
        What takes the parameters, for messages, e.g. ``"loss 'check'"``.

    Returns
    -------
    tuple of float
        The values in declaration order.

    Raises
    ------
    TypeError
        If ``given`` is not a mapping.
    ValueError
        If a name is missing or unknown or a value is out of its interval.
    """
    given = {} if given is None else given
    if not isinstance(given, Mapping):
        raise TypeError(
            f"{argument} must be a mapping of parameter names to values, "
            f"got {type(given).__name__}"
        )
    names = [p.name for p in declared]
    missing = [name for name in names if name not in given]
    unknown = sorted(set(given) - set(names))
    if missing or unknown:
        raise ValueError(
            f"{argument}: {owner} takes {names or 'no parameters'}; "
            f"missing {missing}, unknown {unknown}"
        )
    return tuple(p.check(given[p.name], f"{argument}[{p.name!r}]") for p in declared)
