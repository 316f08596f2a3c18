"""A Gibbs posterior sampled by NUTS: a loss program at a learning rate, through cmdstanpy.

:func:`posterior` runs the program's executable (one for every learning rate and
weight vector, :meth:`~stanflow.gibbs.program.LossProgram.model`) with
``omega`` and ``weights`` as data and returns the installed ArviZ's results. The
learning rate is a number or a calibration: a result with a ``calibration``
group (:func:`~stanflow.gibbs.calibrate_plugin`, ``calibrate_gpc``, ...), whose
``omega`` is used and whose group is kept in the posterior's results. A
calibration with the shape fix (``adjust=``) is for posteriors moved to its
``shape``: a warning says how to move the NUTS draws
(:func:`~stanflow.gibbs.shape.adjust_draws`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs.program import LossProgram, check_omega
from stanflow.idata import to_inference_data


def posterior(
    program: LossProgram,
    *,
    omega: float | Results,
    weights: np.ndarray | None = None,
    coords: Mapping[str, Sequence[Any]] | None = None,
    dims: Mapping[str, Sequence[str]] | None = None,
    **sample_kwargs: Any,
) -> Results:
    """Sample the Gibbs posterior of a loss program with NUTS.

    Parameters
    ----------
    program : LossProgram
        The program with its data (a user's, or a template's:
        :func:`~stanflow.gibbs.location_program`, :func:`~stanflow.gibbs.linear_program`).
    omega : float or Results
        The learning rate, ``>= 0``; or a calibration's result, whose scalar
        ``calibration.omega`` is used and whose ``calibration`` group is kept.
    weights : array_like, shape (n,), optional
        Per-observation weights (default all 1): a bootstrap resample's counts,
        Bayesian-bootstrap weights, 0/1 for a subset.
    coords, dims : mapping, optional
        ArviZ coordinates and dims of the program's variables (the templates
        give their own: ``obs``, ``coef``).
    **sample_kwargs
        Passed to ``CmdStanModel.sample`` (``chains``, ``iter_sampling``,
        ``seed``, ...); ``show_progress`` defaults to False.

    Returns
    -------
    Results
        ``posterior``, ``sample_stats``, ``observed_data`` and ``constant_data``
        (``omega``, ``weights`` and, for a template, its data), and with a
        calibration its ``calibration`` group; the root attributes add
        ``omega`` and what the program records (:meth:`LossProgram.describe`).

    Raises
    ------
    TypeError, ValueError
        For a bad ``omega`` (a calibration without one scalar ``omega``) or
        bad weights, before anything runs.
    """
    if not isinstance(program, LossProgram):
        raise TypeError(
            f"program must be a LossProgram (stanflow.gibbs.LossProgram, location_program, "
            f"linear_program), got {type(program).__name__}"
        )
    calibration = None
    if isinstance(omega, arviz_compat.Results):
        calibration = arviz_compat.group(omega, "calibration")
        value = calibration["omega"]
        if value.ndim != 0:
            raise ValueError(
                f"omega: the calibration's omega has dims {value.dims}; pick one, e.g. "
                "float(result.calibration['omega'].sel(...))"
            )
        omega = float(value)
        if "shape" in calibration:
            warnings.warn(
                f"omega: this calibration (adjust={calibration.attrs.get('adjust')!r}) is for "
                "posteriors moved to its shape, and NUTS draws are not moved; move them with "
                "stanflow.gibbs.adjust_draws(draws, result.calibration['shape'].values), or "
                "read the calibrated intervals from its rule_interval",
                UserWarning, stacklevel=2,
            )
    data = program.stan_data(check_omega(omega), weights)
    fit = program.model().sample(data=data, **{"show_progress": False, **sample_kwargs})
    observed, constant, own_dims, own_coords = program.result_data(data)
    idata = to_inference_data(
        fit, coords={**own_coords, **(coords or {})}, dims={**own_dims, **(dims or {})},
        observed_data=observed or None, constant_data=constant,
    )
    if calibration is not None:
        arviz_compat.add_groups(idata, {"calibration": calibration})
    idata.attrs.update(omega=data["omega"], **program.describe())
    return idata
