"""What GPC's backends share: the step they evaluate.

A backend (:mod:`~stanflow.gibbs.gpc.stan_backend`,
:mod:`~stanflow.gibbs.gpc.grid_backend`) turns a loss program, the bootstrap
resamples and the full-data estimate into an :data:`Evaluator`, step 2 of
Syring and Martin's algorithm, which :func:`~stanflow.gibbs.gpc.calibrate_gpc`
calls at every ``omega`` it tries.
"""

from __future__ import annotations

from collections.abc import Callable

Evaluator = Callable[[float, int], dict[str, float]]
"""A backend's step: ``(omega, t) ->`` the coverage at ``omega`` (key
``coverage``) and the backend's diagnostics of step ``t``."""
