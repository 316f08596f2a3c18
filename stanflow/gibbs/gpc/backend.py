"""What GPC's backends share: the step they evaluate, and the checks of their settings.

A backend (:mod:`~stanflow.gibbs.gpc.stan_backend`,
:mod:`~stanflow.gibbs.gpc.grid_backend`) turns a loss program, the bootstrap
resamples and the full-data estimate into an :data:`Evaluator`, step 2 of
Syring and Martin's algorithm, which :func:`~stanflow.gibbs.gpc.calibrate_gpc`
calls at every ``omega`` it tries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Evaluator = Callable[[float, int], dict[str, float]]
"""A backend's step: ``(omega, t) ->`` the coverage at ``omega`` (key
``coverage``) and the backend's diagnostics of step ``t``."""


def positive_int(value: Any, name: str) -> int:
    """``value`` as an int ``>= 1``, or a ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a real number (an int, float or NumPy number; not a bool)."""
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
