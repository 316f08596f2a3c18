"""Priors for Gibbs posteriors: NumPy versions of ``stan/priors/*.stanfunctions``.

A prior file defines ``real log_prior(vector theta, vector prior_params)``, the
log density of the parameters up to a constant; their support is the box
``[lower_bound, upper_bound]`` that the template declares (data). Shipped:

========  ==============================================  =================
name      log density on the support                      parameters
========  ==============================================  =================
uniform   constant (improper flat where a bound is        --
          infinite)
normal    ``sum_k log normal(theta_k | mean, sd)``        mean, sd > 0
========  ==============================================  =================
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from stanflow.losses.registry import Params
from stanflow.models import STAN_DIR
from stanflow.parameters import Parameter, bind, check_vector
from stanflow.slots import is_slot_file, slot_file

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


@dataclass(frozen=True)
class Prior:
    """A prior in Stan and in NumPy.

    Parameters
    ----------
    name : str
        Its registry name, e.g. ``"normal"``.
    stan_file : pathlib.Path
        The ``.stanfunctions`` file defining
        ``real log_prior(vector theta, vector prior_params)``.
    log_density : callable
        ``(theta, *params) -> ndarray``: the log density of each value of a
        scalar parameter, elementwise (e.g. on a grid).
    params : tuple of Parameter
        Its parameters, in the order of the Stan vector ``prior_params``.
    """

    name: str
    stan_file: Path
    log_density: Callable[..., np.ndarray]
    params: tuple[Parameter, ...] = ()

    def bind(self, params: Params) -> tuple[float, ...]:
        """Check ``params`` (by name, or in declared order) and return them in Stan order."""
        return bind(self.params, params, "prior_params", f"prior {self.name!r}")


PRIORS: dict[str, Prior] = {
    prior.name: prior
    for prior in (
        Prior(
            "uniform",
            STAN_DIR / "priors" / "uniform.stanfunctions",
            lambda theta: np.zeros(np.shape(theta)),
        ),
        Prior(
            "normal",
            STAN_DIR / "priors" / "normal.stanfunctions",
            lambda theta, mean, sd: (
                -0.5 * np.square((np.asarray(theta) - mean) / sd)
                - math.log(sd)
                - _HALF_LOG_2PI
            ),
            params=(Parameter("mean"), Parameter("sd", 0.0)),
        ),
    )
}
"""The shipped priors by name."""


def get_prior(prior: str | Prior) -> Prior:
    """Return the shipped prior called ``prior`` (a :class:`Prior` is returned as is).

    Raises
    ------
    ValueError
        If no prior has that name; the message lists the shipped ones.
    """
    if isinstance(prior, Prior):
        return prior
    if not isinstance(prior, str) or prior not in PRIORS:
        raise ValueError(
            f"prior: unknown prior {prior!r}; shipped priors: {', '.join(PRIORS)}"
        )
    return PRIORS[prior]


def prior_parameters(
    prior: str | os.PathLike | Prior, params: Params = None
) -> tuple[float, ...]:
    """The parameters of a prior, checked: by name or in declared order, as for losses.

    Parameters
    ----------
    prior : str, path or Prior
        A shipped prior name (see :data:`PRIORS`), a :class:`Prior`, or the
        path of a prior file (:func:`stanflow.slots.is_slot_file`).
    params : mapping of str to float, sequence of float, or None
        Checked against the prior's declaration (:mod:`stanflow.parameters`).

    Returns
    -------
    tuple of float
        The Stan vector ``prior_params``.
    """
    if is_slot_file(prior):
        return check_vector(slot_file(prior, "priors", "prior"), params, "prior_params")
    return get_prior(cast("str | Prior", prior)).bind(params)


def prior_slot_file(prior: str | os.PathLike | Prior) -> Path:
    """The Stan file of a prior, for the slot ``prior.stanfunctions`` of the templates.

    A shipped name's or a :class:`Prior`'s own file, or the path of a file of yours.
    """
    if is_slot_file(prior):
        return slot_file(prior, "priors", "prior")
    return get_prior(cast("str | Prior", prior)).stan_file


def log_prior_on_grid(
    theta: np.ndarray, prior: str | Prior, params: Mapping[str, Any] | None = None
) -> np.ndarray:
    """Evaluate a prior's log density at grid points, for :func:`grid.posterior`.

    Parameters
    ----------
    theta : ndarray, shape (G,)
        Grid points of a scalar parameter.
    prior : str or Prior
        A shipped prior name (see :data:`PRIORS`) or a :class:`Prior`.
    params : mapping of str to float, optional
        Its parameters by name, e.g. ``{"mean": 0, "sd": 10}``.

    Returns
    -------
    ndarray, shape (G,)
    """
    prior = get_prior(prior)
    return np.asarray(prior.log_density(np.asarray(theta, float), *prior.bind(params)))
