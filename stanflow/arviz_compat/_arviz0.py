"""ArviZ 0.x (Python 3.11): results are ``arviz.InferenceData``.

The primitives :mod:`stanflow.arviz_compat` builds on; ``_arviz1`` has the
same functions for ArviZ 1.x. Inputs are already checked by the callers.
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np
import xarray as xr
from matplotlib.figure import Figure

with warnings.catch_warnings():
    # ArviZ 0.23 announces its 1.0 refactor with a FutureWarning on import:
    # nothing a user of stanflow can act on.
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az
    from arviz.data.base import make_attrs as _make_attrs

Results = az.InferenceData


def build(groups: Mapping[str, xr.Dataset], attrs: Mapping[str, Any]) -> Results:
    # The stubs type **kwargs as if a group could be the warn_on_custom_groups flag.
    return az.InferenceData(attrs=dict(attrs), **groups)  # type: ignore[arg-type]


def group_names(results: Results) -> list[str]:
    return list(results.groups())


def group(results: Results, name: str) -> xr.Dataset:
    return results[name].copy(deep=False)


def add_groups(results: Results, groups: Mapping[str, xr.Dataset]) -> None:
    results.add_groups(dict(groups))


_COMPRESSIBLE = "biufcS"
"""Kinds of dtype whose variables are zlib-compressed, as InferenceData.to_netcdf does."""


def netcdf_bytes(results: Results) -> bytes:
    # InferenceData.to_netcdf's file (root attributes, then each group zlib-compressed), in memory
    buffer = io.BytesIO()
    xr.Dataset(attrs=results.attrs).to_netcdf(buffer, mode="w", engine="h5netcdf")
    for name in results.groups():
        dataset = results[name]
        encoding = {
            var: {"zlib": True}
            for var, values in dataset.variables.items()
            if values.dtype.kind in _COMPRESSIBLE
        }
        dataset.to_netcdf(buffer, mode="a", group=name, engine="h5netcdf", encoding=encoding)
    return buffer.getvalue()


def read_netcdf(path: str | os.PathLike) -> Results:
    with az.rc_context({"data.load": "eager"}):
        return az.from_netcdf(os.fspath(path), engine="h5netcdf")


def from_cmdstanpy(fit: Any, **options: Any) -> dict[str, xr.Dataset]:
    results = az.from_cmdstanpy(fit, **options)
    return {name: results[name] for name in results.groups()}


def dict_to_dataset(
    data: Mapping[str, np.ndarray],
    coords: Mapping[str, Sequence[Any] | np.ndarray] | None,
    dims: Mapping[str, Sequence[str]] | None,
    attrs: Mapping[str, Any] | None,
) -> xr.Dataset:
    return az.dict_to_dataset(dict(data), coords=coords, dims=dims, attrs=attrs)


def make_attrs(library: ModuleType) -> dict[str, Any]:
    return _make_attrs(library=library)


def ess(ds: xr.Dataset, method: str, prob: Any) -> xr.Dataset:
    return az.ess(ds, method=method, prob=prob)


def rhat(ds: xr.Dataset) -> xr.Dataset:
    return az.rhat(ds)


def mcse(ds: xr.Dataset, method: str, prob: Any) -> xr.Dataset:
    return az.mcse(ds, method=method, prob=prob)


def plot_forest(
    results: Results, var_names: list[str], ci_prob: float, figsize: tuple[float, float]
) -> Figure:
    axes = az.plot_forest(
        results, var_names=var_names, combined=True, hdi_prob=ci_prob, figsize=figsize
    )
    return np.ravel(axes)[0].figure


def plot_pair(
    results: Results,
    x: str,
    y: str,
    coords: Mapping[str, Sequence[Any]] | None,
    labels: tuple[str, str],
) -> Figure:
    axes = az.plot_pair(results, var_names=[x, y], coords=coords, divergences=True)
    axis = np.ravel(axes)[0]
    axis.set_xlabel(labels[0])
    axis.set_ylabel(labels[1])
    return axis.figure
