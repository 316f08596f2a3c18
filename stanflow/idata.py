"""cmdstanpy results -> the installed ArviZ's results, and netCDF save/load.

:func:`to_inference_data` accepts every cmdstanpy result and returns an
``arviz.InferenceData`` under ArviZ 0.x, an ``xarray.DataTree`` under ArviZ 1.x
(:mod:`stanflow.arviz_compat`), with the same groups. MCMC goes through ArviZ's
``from_cmdstanpy``; the other methods, which ArviZ does not read, go through
:func:`columns_to_dataset`, a pure function from Stan column names and a
``(chain, draw, column)`` array to an ``xarray.Dataset`` with named dims.

Group layout per method (``chain``/``draw`` are the sample dims):

=================  ==============================================================
CmdStanMCMC        posterior, sample_stats, log_likelihood, ... (ArviZ's layout)
CmdStanVB          posterior (1 chain), sample_stats (lp, log_p, log_g),
                   point_estimate (the variational mean)
CmdStanMLE         posterior (1 chain, 1 draw), sample_stats (lp)
CmdStanLaplace     posterior (1 chain), sample_stats (log_p, log_q),
                   point_estimate (the mode)
CmdStanPathfinder  posterior (1 chain), sample_stats (lp_approx, lp)
CmdStanGQ          the parent fit's groups, with the generated quantities merged
                   into posterior, posterior_predictive or log_likelihood
=================  ==============================================================

The run configuration cmdstanpy parsed from the CSV header (method, algorithm,
iterations, seed, ...) is stored as the results' root attributes.

The pure builders :func:`columns_to_dataset` and :func:`data_to_dataset` live in
:mod:`stanflow.idata_columns` and the groups of each method in
:mod:`stanflow.idata_groups`; both builders are importable from here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import cmdstanpy
import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.atomic import write_atomic
from stanflow.idata_columns import (
    Coords,
    Dims,
    columns_to_dataset,
    data_to_dataset,
    named_dataset,
)
from stanflow.idata_groups import Fit, fit_groups, resolve_names, run_config, stan_shapes

__all__ = [
    "Fit",
    "columns_to_dataset",
    "data_to_dataset",
    "load",
    "save",
    "save_dataset",
    "to_inference_data",
]


def to_inference_data(
    fit: Fit,
    *,
    coords: Coords | None = None,
    dims: Dims | None = None,
    observed_data: Mapping[str, Any] | None = None,
    constant_data: Mapping[str, Any] | None = None,
    posterior_predictive: str | Sequence[str] | None = None,
    log_likelihood: str | Sequence[str] | None = None,
) -> Results:
    """Convert any cmdstanpy result into the installed ArviZ's results.

    Parameters
    ----------
    fit : cmdstanpy fit
        A CmdStanMCMC, CmdStanVB, CmdStanMLE, CmdStanLaplace, CmdStanPathfinder or
        CmdStanGQ: the result of ``model.sample``, ``variational``, ``optimize``,
        ``laplace_sample``, ``pathfinder`` or ``generate_quantities``.
    coords : mapping of str to sequence, optional
        Coordinate values per dim name, e.g. ``{"school": ["Choate", ...]}``.
    dims : mapping of str to sequence of str, optional
        Dim names per variable (Stan variables and data), e.g.
        ``{"theta": ["school"], "y": ["school"]}``.
    observed_data, constant_data : mapping of str to array_like, optional
        Stored as the ``observed_data`` and ``constant_data`` groups.
    posterior_predictive : str or sequence of str, optional
        Variables moved from the posterior to the ``posterior_predictive`` group.
    log_likelihood : str or sequence of str, optional
        Variables moved to the ``log_likelihood`` group. By default ``log_lik``
        if the program has it (ArviZ's convention); ``[]`` moves none.

    Returns
    -------
    Results
        ``arviz.InferenceData`` (ArviZ 0.x) or ``xarray.DataTree`` (ArviZ 1.x);
        see the module docstring for the groups of each method. The root
        attributes hold the CmdStan run configuration (for a GQ result, its
        parent's).

    Raises
    ------
    TypeError
        If ``fit`` is not a cmdstanpy result.
    ValueError
        If a named variable does not exist or ``coords``/``dims`` do not fit.
    """
    if not isinstance(fit, Fit):
        raise TypeError(
            "fit must be a cmdstanpy result (CmdStanMCMC, CmdStanVB, CmdStanMLE, "
            f"CmdStanLaplace, CmdStanPathfinder or CmdStanGQ), got {type(fit).__name__}"
        )
    data_groups = {
        group: data_to_dataset(data, coords=coords, dims=dims)
        for group, data in (
            ("observed_data", observed_data),
            ("constant_data", constant_data),
        )
        if data is not None
    }
    shapes = stan_shapes(fit)
    for ds in data_groups.values():
        shapes.update({str(v): ds[v].shape for v in ds.data_vars})
    unknown = sorted(set(dims or {}) - set(shapes))
    if unknown:
        raise ValueError(
            f"dims names {unknown}, which are neither Stan variables nor data; "
            f"known names: {sorted(shapes)}"
        )
    named_dataset(
        {v: np.empty(shape) for v, shape in shapes.items()}, 0, coords, dims, {}
    )
    groups = fit_groups(
        fit,
        coords,
        dims,
        resolve_names(
            "posterior_predictive", posterior_predictive, shapes, default=[]
        ),
        resolve_names("log_likelihood", log_likelihood, shapes, default=["log_lik"]),
    )
    config_source = fit.previous_fit if isinstance(fit, cmdstanpy.CmdStanGQ) else fit
    return arviz_compat.build(groups | data_groups, attrs=run_config(config_source))


def save(idata: Results, path: str | os.PathLike) -> Path:
    """Write ``idata`` to a netCDF file atomically (temporary file, then rename).

    The file is made in memory first (:func:`stanflow.arviz_compat.write_netcdf`),
    so a disk without room for it is an error before anything is written.

    Parameters
    ----------
    idata : Results
        ``arviz.InferenceData`` (ArviZ 0.x) or ``xarray.DataTree`` (ArviZ 1.x).
    path : str or os.PathLike
        Target file, conventionally ``*.nc``; its folder must exist.

    Returns
    -------
    pathlib.Path
        The path written.

    Raises
    ------
    stanflow.atomic.WriteError
        If the disk refuses the file (full, read-only); the target is as it was.
    """
    if not isinstance(idata, Results):
        raise TypeError(
            f"idata must be a {Results.__name__} (the installed ArviZ's results), "
            f"got {type(idata).__name__}"
        )
    path = Path(path)
    if not path.parent.is_dir():
        raise ValueError(f"path: folder {path.parent} does not exist")
    write_atomic(path, lambda tmp: arviz_compat.write_netcdf(idata, tmp))
    return path


def save_dataset(dataset: xr.Dataset, path: str | os.PathLike) -> Path:
    """Write one ``xarray.Dataset`` to a netCDF file atomically, as :func:`save` does.

    Read it back with ``xarray.open_dataset(path)``.

    Parameters
    ----------
    dataset : xarray.Dataset
    path : str or os.PathLike
        Target file, conventionally ``*.nc``; its folder must exist.

    Returns
    -------
    pathlib.Path
        The path written.

    Raises
    ------
    stanflow.atomic.WriteError
        If the disk refuses the file (full, read-only); the target is as it was.
    """
    if not isinstance(dataset, xr.Dataset):
        raise TypeError(f"dataset must be an xarray.Dataset, got {type(dataset).__name__}")
    return write_atomic(path, lambda tmp: arviz_compat.write_netcdf(dataset, tmp))


def load(path: str | os.PathLike) -> Results:
    """Read results written by :func:`save`, fully into memory.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    Results
        ``arviz.InferenceData`` (ArviZ 0.x) or ``xarray.DataTree`` (ArviZ 1.x).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: file not found: {path}")
    return arviz_compat.read_netcdf(path)
