"""The groups of each cmdstanpy result, and its run configuration as root attributes.

:func:`fit_groups` gives the sample groups of a fit by method (see
:mod:`stanflow.idata` for the layout): MCMC through ArviZ's ``from_cmdstanpy``
(complex variables given a last ``(real, imag)`` axis), the other methods
through :func:`stanflow.idata_columns.columns_to_dataset`, and a
generate-quantities result as its parent's groups with its own variables merged
in. :func:`stan_shapes` and :func:`resolve_names` check what the caller names
against the fit's variables; :func:`run_config` is the CmdStan configuration
that cmdstanpy parsed from the CSV header.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import cmdstanpy
import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.idata_columns import COMPLEX_PARTS, SAMPLE_DIMS, Coords, Dims, columns_to_dataset

Fit = (
    cmdstanpy.CmdStanMCMC
    | cmdstanpy.CmdStanVB
    | cmdstanpy.CmdStanMLE
    | cmdstanpy.CmdStanLaplace
    | cmdstanpy.CmdStanPathfinder
    | cmdstanpy.CmdStanGQ
)
"""Every cmdstanpy result :func:`stanflow.idata.to_inference_data` converts."""

_SKIPPED_CONFIG = {"raw_header", "column_names"}


def stan_shapes(fit: Fit) -> dict[str, tuple[int, ...]]:
    """Shapes (without sample dims) of the real and complex Stan variables of a fit.

    Tuples are left out; complex variables get their ``(real, imag)`` axis.
    For a GQ result, the parent's variables are included.
    """
    fits = [fit.previous_fit, fit] if isinstance(fit, cmdstanpy.CmdStanGQ) else [fit]
    shapes = {}
    for one in fits:
        for name, var in one.metadata.stan_vars.items():
            # stanio.Variable.type is an enum stanio does not export; compare names
            if var.type.name == "SCALAR":
                shapes[name] = tuple(var.dimensions)
            elif var.type.name == "COMPLEX":
                shapes[name] = (*var.dimensions, 2)
    return shapes


def resolve_names(
    field: str,
    requested: str | Sequence[str] | None,
    available: Mapping[str, Any],
    default: list[str],
) -> list[str]:
    """The variables named for the group ``field``, all among ``available``.

    ``requested`` is one name, several, or ``None``: then those of ``default``
    the fit has. An unknown name is a ``ValueError`` naming ``field``.
    """
    if requested is None:
        return [name for name in default if name in available]
    names = [requested] if isinstance(requested, str) else list(requested)
    missing = [name for name in names if name not in available]
    if missing:
        raise ValueError(
            f"{field}: no Stan variable {missing}; variables: {sorted(available)}"
        )
    return names


def fit_groups(
    fit: Fit,
    coords: Coords | None,
    dims: Dims | None,
    predictive: list[str],
    loglik: list[str],
) -> dict[str, xr.Dataset]:
    """The sample groups of ``fit`` (posterior, sample_stats, ...), by method."""
    if isinstance(fit, cmdstanpy.CmdStanMCMC):
        # Without an explicit dtype ArviZ casts complex draws to float, dropping
        # the imaginary part.
        complex_vars = {
            name: np.complex128
            for name, var in fit.metadata.stan_vars.items()
            if var.type.name == "COMPLEX"
        }
        groups = arviz_compat.from_cmdstanpy(
            fit,
            coords=coords,
            dims=dims,
            posterior_predictive=predictive or None,
            log_likelihood=loglik or False,
            dtypes=complex_vars,
        )
        return {name: _complex_as_parts(group) for name, group in groups.items()}
    if isinstance(fit, cmdstanpy.CmdStanGQ):
        return _gq_groups(fit, coords, dims, predictive, loglik)
    point = None
    if isinstance(fit, cmdstanpy.CmdStanVB):
        draws = fit.variational_sample[None]
        point = (fit.column_names, fit.variational_params_np)
    elif isinstance(fit, cmdstanpy.CmdStanMLE):
        draws = fit.optimized_params_np[None, None]
    elif isinstance(fit, cmdstanpy.CmdStanLaplace):
        draws = fit.draws()[None]
        point = (fit.mode.column_names, fit.mode.optimized_params_np)
    else:
        draws = fit.draws()[None]
    everything = columns_to_dataset(fit.column_names, draws, coords=coords, dims=dims)
    groups = _split(everything, predictive, loglik)
    if point is not None:
        names, values = point
        ds = columns_to_dataset(names, values[None, None], coords=coords, dims=dims)
        groups["point_estimate"] = _split(ds.isel(chain=0, draw=0, drop=True), [], [])[
            "posterior"
        ]
    return groups


def _complex_as_parts(ds: xr.Dataset) -> xr.Dataset:
    """Give complex variables a last ``(real, imag)`` axis, like columns_to_dataset.

    netCDF has no complex type, and every method then has the same layout.
    """
    for var in [v for v in ds.data_vars if np.iscomplexobj(ds[v])]:
        values = ds[var]
        dim = f"{var}_dim_{values.ndim - len(SAMPLE_DIMS)}"
        parts = xr.concat([values.real, values.imag], dim=dim)
        ds = ds.assign({var: parts.transpose(..., dim)}).assign_coords(
            {dim: list(COMPLEX_PARTS)}
        )
    return ds


def _split(
    ds: xr.Dataset, predictive: list[str], loglik: list[str]
) -> dict[str, xr.Dataset]:
    """Split a Dataset of all columns into posterior, sample_stats, predictive groups.

    Names ending in ``__`` go to sample_stats without that suffix; empty groups
    other than posterior are left out.
    """
    stats = [str(v) for v in ds.data_vars if str(v).endswith("__")]
    moved = {*stats, *predictive, *loglik}
    groups = {
        "posterior": ds[[v for v in ds.data_vars if v not in moved]],
        "sample_stats": ds[stats].rename({v: v[:-2] for v in stats}),
        "posterior_predictive": ds[predictive],
        "log_likelihood": ds[loglik],
    }
    return {
        name: group.drop_dims(_unused_dims(group))
        for name, group in groups.items()
        if group.data_vars or name == "posterior"
    }


def _unused_dims(ds: xr.Dataset) -> list[str]:
    used = set(SAMPLE_DIMS).union(*(ds[v].dims for v in ds.data_vars))
    return [str(dim) for dim in ds.dims if dim not in used]


def _gq_groups(
    fit: cmdstanpy.CmdStanGQ,
    coords: Coords | None,
    dims: Dims | None,
    predictive: list[str],
    loglik: list[str],
) -> dict[str, xr.Dataset]:
    """The parent fit's groups with the generated quantities merged in (theirs win)."""
    own = set(fit.metadata.stan_vars)
    parent_vars = set(fit.previous_fit.metadata.stan_vars) - own
    groups = fit_groups(
        fit.previous_fit,
        coords,
        dims,
        [n for n in predictive if n in parent_vars],
        [n for n in loglik if n in parent_vars],
    )
    draws = np.swapaxes(fit.draws(), 0, 1)
    generated = columns_to_dataset(fit.column_names, draws, coords=coords, dims=dims)
    for name, group in _split(generated, predictive, loglik).items():
        if name not in groups:
            groups[name] = group
            continue
        kept = groups[name].drop_vars([v for v in groups[name].data_vars if v in own])
        groups[name] = xr.merge([kept, group], join="exact", combine_attrs="override")
    return groups


def run_config(fit: Fit) -> dict[str, Any]:
    """The CmdStan run configuration, as root attributes safe for netCDF."""
    config = fit.metadata.cmdstan_config
    attrs: dict[str, Any] = {}
    for key, value in config.items():
        if key in _SKIPPED_CONFIG:
            continue
        if isinstance(value, bool):
            attrs[key] = int(value)
        elif isinstance(value, (str, int, float)):
            attrs[key] = value
    if isinstance(fit, cmdstanpy.CmdStanMLE):
        attrs["converged"] = int(fit.converged)
    return attrs
