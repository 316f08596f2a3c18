"""ArviZ 1.x (Python >= 3.12): results are ``xarray.DataTree``.

The primitives :mod:`stanflow.arviz_compat` builds on, on top of
``arviz_base`` (conversion), ``arviz_stats`` (diagnostics) and
``arviz_plots`` (figures); ``_arviz0`` has the same functions for ArviZ 0.x.
Inputs are already checked by the callers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import arviz_base
import arviz_plots
import arviz_stats
import numpy as np
import xarray as xr
from matplotlib.figure import Figure

Results = xr.DataTree
PAIR_FIGSIZE = (6.4, 4.8)  # matplotlib's default, as ArviZ 0.x's pair plot


def build(groups: Mapping[str, xr.Dataset], attrs: Mapping[str, Any]) -> Results:
    return xr.DataTree.from_dict({"/": xr.Dataset(attrs=dict(attrs)), **groups})


def group_names(results: Results) -> list[str]:
    return list(results.children)


def group(results: Results, name: str) -> xr.Dataset:
    return results[name].to_dataset()


def add_groups(results: Results, groups: Mapping[str, xr.Dataset]) -> None:
    for name, dataset in groups.items():
        results[name] = xr.DataTree(dataset)


def netcdf_bytes(results: Results) -> bytes:
    return bytes(results.to_netcdf(engine="h5netcdf"))


def read_netcdf(path: str | os.PathLike) -> Results:
    with xr.open_datatree(os.fspath(path), engine="h5netcdf") as results:
        return results.load()


def from_cmdstanpy(fit: Any, **options: Any) -> dict[str, xr.Dataset]:
    results = arviz_base.from_cmdstanpy(fit, **options)
    return {name: node.to_dataset() for name, node in results.children.items()}


def dict_to_dataset(
    data: Mapping[str, np.ndarray],
    coords: Mapping[str, Sequence[Any] | np.ndarray] | None,
    dims: Mapping[str, Sequence[str]] | None,
    attrs: Mapping[str, Any] | None,
) -> xr.Dataset:
    return arviz_base.dict_to_dataset(dict(data), coords=coords, dims=dims, attrs=attrs)


def make_attrs(library: ModuleType) -> dict[str, Any]:
    return arviz_base.make_attrs(inference_library=library)


def ess(ds: xr.Dataset, method: str, prob: Any) -> xr.Dataset:
    return arviz_stats.ess(ds, method=method, prob=prob)


def rhat(ds: xr.Dataset) -> xr.Dataset:
    return arviz_stats.rhat(ds)


def mcse(ds: xr.Dataset, method: str, prob: Any) -> xr.Dataset:
    return arviz_stats.mcse(ds, method=method, prob=prob)


def plot_forest(
    results: Results, var_names: list[str], ci_prob: float, figsize: tuple[float, float]
) -> Figure:
    collection = arviz_plots.plot_forest(
        results,
        var_names=var_names,
        combined=True,
        ci_kind="hdi",
        ci_probs=(0.5, ci_prob),
        backend="matplotlib",
        figure_kwargs={"figsize": figsize},
    )
    return collection.get_viz("figure")


def plot_pair(
    results: Results,
    x: str,
    y: str,
    coords: Mapping[str, Sequence[Any]] | None,
    labels: tuple[str, str],
) -> Figure:
    collection = arviz_plots.plot_pair_focus(
        results,
        y,
        var_names=[x],
        coords=coords,
        visuals={"divergence": {"color": "C1", "alpha": 1.0, "edgecolor": "black"}},
        backend="matplotlib",
        figure_kwargs={"figsize": PAIR_FIGSIZE},
    )
    figure = collection.get_viz("figure")
    axis = figure.axes[0]
    axis.set_xlabel(labels[0])
    axis.set_ylabel(labels[1])
    return figure
