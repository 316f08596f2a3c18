"""The results object of the installed ArviZ: build it, read its groups, store it.

Under ArviZ 0.x a result is an ``arviz.InferenceData``, under ArviZ 1.x an
``xarray.DataTree`` with one child per group; both hold the same groups
(``posterior``, ``sample_stats``, ``calibration``, ...) as ``xarray.Dataset``
objects and the same root attributes. ``results.posterior["mu"]`` and
``results.attrs`` work on both; a group as a whole is read with :func:`group`,
which always returns an ``xarray.Dataset``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import xarray as xr

from stanflow.arviz_compat._line import backend
from stanflow.atomic import require_space

Results = backend.Results
"""The installed ArviZ's results type: ``InferenceData`` (0.x) or ``DataTree`` (1.x)."""


def build(
    groups: Mapping[str, xr.Dataset], *, attrs: Mapping[str, Any] | None = None
) -> Results:
    """Make a results object of the installed ArviZ from its groups.

    Parameters
    ----------
    groups : mapping of str to xarray.Dataset
        Group name (``posterior``, ``calibration``, ...) to its data. Groups
        without data variables are left out (as ``InferenceData`` does).
    attrs : mapping of str to Any, optional
        Root attributes (netCDF-safe values: str, numbers, lists of them).

    Returns
    -------
    Results
        ``arviz.InferenceData`` under ArviZ 0.x, ``xarray.DataTree`` under 1.x.

    Raises
    ------
    TypeError
        If a group is not an ``xarray.Dataset``.
    ValueError
        If a group name is empty or contains ``/``.
    """
    _check_groups(groups)
    kept = {name: dataset for name, dataset in groups.items() if dataset.data_vars}
    return backend.build(kept, dict(attrs or {}))


def group_names(results: Results) -> list[str]:
    """The names of the groups of ``results``, in their stored order."""
    _check_results(results)
    return backend.group_names(results)


def group(results: Results, name: str) -> xr.Dataset:
    """One group of ``results`` as a new ``xarray.Dataset`` sharing its arrays.

    Adding variables or attributes to it leaves ``results`` as they were.

    Raises
    ------
    KeyError
        If ``results`` has no group ``name``; the message lists the groups.
    """
    _check_results(results)
    names = backend.group_names(results)
    if name not in names:
        raise KeyError(f"results have no group {name!r}; groups: {names}")
    return backend.group(results, name)


def add_groups(results: Results, groups: Mapping[str, xr.Dataset]) -> None:
    """Add groups to ``results`` in place.

    Raises
    ------
    ValueError
        If ``results`` already has one of the groups, or a name is malformed.
    TypeError
        If a group is not an ``xarray.Dataset``.
    """
    _check_results(results)
    _check_groups(groups)
    taken = sorted(set(groups) & set(backend.group_names(results)))
    if taken:
        raise ValueError(f"results already have the groups {taken}")
    backend.add_groups(results, groups)


def write_netcdf(results: Results | xr.Dataset, path: str | os.PathLike) -> None:
    """Write ``results`` (or one ``xarray.Dataset``) to a netCDF-4 file (h5netcdf).

    Results get one netCDF group per group. The file is made in memory and
    then written in one ordinary write, after checking the folder has room
    for it: the HDF5 library never writes to the disk, so a full disk is a
    :class:`stanflow.atomic.WriteError`, not a crash of the library.
    Callers write through :func:`stanflow.atomic.write_atomic`.
    """
    if isinstance(results, xr.Dataset):
        data = bytes(results.to_netcdf(engine="h5netcdf"))
    else:
        _check_results(results)
        data = backend.netcdf_bytes(results)
    require_space(path, len(data))
    Path(path).write_bytes(data)


def read_netcdf(path: str | os.PathLike) -> Results:
    """Read a file written by :func:`write_netcdf` fully into memory; the file is closed."""
    return backend.read_netcdf(path)


def from_cmdstanpy(fit: Any, **options: Any) -> dict[str, xr.Dataset]:
    """The groups ArviZ's ``from_cmdstanpy`` makes of an MCMC fit.

    Parameters
    ----------
    fit : cmdstanpy.CmdStanMCMC
    **options
        ``from_cmdstanpy``'s keywords, which both ArviZ lines share
        (``coords``, ``dims``, ``posterior_predictive``, ``log_likelihood``,
        ``dtypes``, ...).

    Returns
    -------
    dict of str to xarray.Dataset
    """
    return backend.from_cmdstanpy(fit, **options)


def dict_to_dataset(
    data: Mapping[str, np.ndarray],
    *,
    coords: Mapping[str, Sequence[Any] | np.ndarray] | None = None,
    dims: Mapping[str, Sequence[str]] | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> xr.Dataset:
    """Arrays with leading ``(chain, draw)`` axes as a Dataset, ArviZ's way.

    Unnamed axes are called ``<var>_dim_<i>``; the Dataset carries the
    installed ArviZ's creation attributes and ``attrs``.
    """
    return backend.dict_to_dataset(data, coords, dims, attrs)


def make_attrs(library: ModuleType) -> dict[str, Any]:
    """The attributes the installed ArviZ stamps on a group made from ``library``'s output."""
    return backend.make_attrs(library)


def _check_results(results: Any) -> None:
    if not isinstance(results, Results):
        raise TypeError(
            f"results must be a {Results.__name__} (the installed ArviZ's results), "
            f"got {type(results).__name__}"
        )


def _check_groups(groups: Mapping[str, Any]) -> None:
    for name, dataset in groups.items():
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"group names must be non-empty and without '/', got {name!r}")
        if not isinstance(dataset, xr.Dataset):
            raise TypeError(
                f"group {name!r} must be an xarray.Dataset, got {type(dataset).__name__}"
            )
