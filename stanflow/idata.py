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
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import cmdstanpy
import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.atomic import write_atomic

Fit = (
    cmdstanpy.CmdStanMCMC
    | cmdstanpy.CmdStanVB
    | cmdstanpy.CmdStanMLE
    | cmdstanpy.CmdStanLaplace
    | cmdstanpy.CmdStanPathfinder
    | cmdstanpy.CmdStanGQ
)
Coords = Mapping[str, Sequence[Any] | np.ndarray]
Dims = Mapping[str, Sequence[str]]

SAMPLE_DIMS = ("chain", "draw")
COMPLEX_PARTS = ("real", "imag")
_SEGMENT = re.compile(r"([^\[\]]*)(?:\[([^\]]*)\])?")
_SKIPPED_CONFIG = {"raw_header", "column_names"}


def columns_to_dataset(
    names: Sequence[str],
    draws: np.ndarray,
    *,
    coords: Coords | None = None,
    dims: Dims | None = None,
) -> xr.Dataset:
    """Turn Stan output columns into a Dataset of arrays with named dims.

    Parameters
    ----------
    names : sequence of str
        Column names as cmdstanpy reports them (``fit.column_names``):
        ``mu``, ``theta[3]``, ``b[1,2]``, complex ``z[2,real]``, tuple
        components ``t[1].2[3]``. Indices are 1-based; a variable's columns may
        come in any order but must fill a rectangular array.
    draws : ndarray, shape (chain, draw, column)
        The values, one column per name.
    coords : mapping of str to sequence, optional
        Coordinate values per dim name.
    dims : mapping of str to sequence of str, optional
        Dim names per variable, for its leading non-sample axes; unnamed axes
        are called ``<var>_dim_<i>`` (ArviZ's convention).

    Returns
    -------
    xarray.Dataset
        One variable per Stan variable (a tuple component ``t.2`` is its own
        variable), shape ``(chain, draw, *shape)``. Complex values get a last
        axis of size 2 with coords ``["real", "imag"]``; names ending ``__``
        are kept as they are.

    Raises
    ------
    ValueError
        If ``draws`` does not match ``names``, a name is malformed, a variable's
        columns are not rectangular, or ``coords``/``dims`` do not fit.
    """
    draws = np.asarray(draws, dtype=float)
    if draws.ndim != 3:
        raise ValueError(
            f"draws must have shape (chain, draw, column), got shape {draws.shape}"
        )
    if draws.shape[2] != len(names):
        raise ValueError(
            f"draws has {draws.shape[2]} columns but names has {len(names)} entries"
        )
    arrays: dict[str, np.ndarray] = {}
    complex_axes: dict[str, int] = {}
    for var, (columns, indices, part_axis) in _parse_columns(names).items():
        if indices.shape[1] == 0:
            arrays[var] = draws[:, :, columns[0]]
            continue
        shape = tuple(int(n) for n in indices.max(axis=0) + 1)
        if len(columns) != np.prod(shape) or len(np.unique(indices, axis=0)) != len(
            columns
        ):
            raise ValueError(
                f"names: the columns of {var!r} do not fill a "
                f"{'x'.join(map(str, shape))} array"
            )
        values = np.empty(draws.shape[:2] + shape)
        values[(slice(None), slice(None), *indices.T)] = draws[:, :, columns]
        arrays[var] = values
        if part_axis is not None:
            complex_axes[var] = part_axis
    return _named_dataset(arrays, len(SAMPLE_DIMS), coords, dims, complex_axes)


def data_to_dataset(
    data: Mapping[str, Any],
    *,
    coords: Coords | None = None,
    dims: Dims | None = None,
) -> xr.Dataset:
    """Turn a data dictionary (as passed to Stan) into a Dataset without sample dims.

    Parameters
    ----------
    data : mapping of str to array_like
        E.g. ``{"J": 8, "y": [...], "sigma": [...]}``.
    coords, dims
        As in :func:`columns_to_dataset`.

    Returns
    -------
    xarray.Dataset
    """
    if not isinstance(data, Mapping):
        raise ValueError(
            f"data must be a mapping of names to arrays, got {type(data).__name__}"
        )
    arrays = {}
    for name, value in data.items():
        array = np.asarray(value)
        if array.dtype.kind not in "biuf":
            raise ValueError(f"data[{name!r}] must be numeric, got dtype {array.dtype}")
        arrays[name] = array
    return _named_dataset(arrays, 0, coords, dims, {})


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
    shapes = _stan_shapes(fit)
    for ds in data_groups.values():
        shapes.update({str(v): ds[v].shape for v in ds.data_vars})
    unknown = sorted(set(dims or {}) - set(shapes))
    if unknown:
        raise ValueError(
            f"dims names {unknown}, which are neither Stan variables nor data; "
            f"known names: {sorted(shapes)}"
        )
    _named_dataset(
        {v: np.empty(shape) for v, shape in shapes.items()}, 0, coords, dims, {}
    )
    groups = _fit_groups(
        fit,
        coords,
        dims,
        _resolve_names(
            "posterior_predictive", posterior_predictive, shapes, default=[]
        ),
        _resolve_names("log_likelihood", log_likelihood, shapes, default=["log_lik"]),
    )
    config_source = fit.previous_fit if isinstance(fit, cmdstanpy.CmdStanGQ) else fit
    return arviz_compat.build(groups | data_groups, attrs=_run_config(config_source))


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


def _parse_columns(
    names: Sequence[str],
) -> dict[str, tuple[list[int], np.ndarray, int | None]]:
    """Group columns by variable: (column positions, 0-based indices, complex axis)."""
    parsed: dict[str, tuple[list[int], list[list[int]], int | None]] = {}
    for position, name in enumerate(names):
        var, index, part_axis = _parse_name(name)
        columns, indices, axis = parsed.setdefault(var, ([], [], part_axis))
        if (indices and len(indices[0]) != len(index)) or axis != part_axis:
            raise ValueError(
                f"names: {name!r} does not have the shape of the other {var!r} columns"
            )
        columns.append(position)
        indices.append(index)
    return {
        var: (columns, np.array(indices, dtype=int).reshape(len(columns), -1), axis)
        for var, (columns, indices, axis) in parsed.items()
    }


def _parse_name(name: str) -> tuple[str, list[int], int | None]:
    """``"t[2].1[3,real]"`` -> (``"t.1"``, [1, 2, 0], 2)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"names: entries must be non-empty strings, got {name!r}")
    var, pos = "", 0
    index: list[int] = []
    part_axis: int | None = None
    while pos < len(name):
        match = _SEGMENT.match(name, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"names: cannot parse column name {name!r}")
        var += match.group(1)
        tokens = match.group(2).split(",") if match.group(2) is not None else []
        for token in (t.strip() for t in tokens):
            if token in COMPLEX_PARTS:
                part_axis = len(index)
                index.append(COMPLEX_PARTS.index(token))
            elif token.isdigit() and int(token) >= 1:
                index.append(int(token) - 1)
            else:
                raise ValueError(f"names: bad index {token!r} in column name {name!r}")
        pos = match.end()
    if not var:
        raise ValueError(f"names: column name {name!r} has no variable name")
    return var, index, part_axis


def _named_dataset(
    arrays: Mapping[str, np.ndarray],
    n_sample: int,
    coords: Coords | None,
    dims: Dims | None,
    complex_axes: Mapping[str, int],
) -> xr.Dataset:
    """Name the axes of ``arrays`` after ``n_sample`` sample axes; attach coords."""
    coords = dict(coords or {})
    dims = dict(dims or {})
    sizes: dict[str, tuple[int, str]] = {}
    variables = {}
    for var, array in arrays.items():
        shape = array.shape[n_sample:]
        given = dims.get(var, [])
        if isinstance(given, str) or not all(isinstance(d, str) for d in given):
            raise ValueError(
                f"dims[{var!r}] must be a sequence of dim names, got {given!r}"
            )
        if len(given) > len(shape):
            raise ValueError(
                f"dims[{var!r}] names {len(given)} dims but {var!r} has "
                f"{len(shape)}: shape {shape}"
            )
        names = [*given, *(f"{var}_dim_{i}" for i in range(len(given), len(shape)))]
        for axis, (dim, size) in enumerate(zip(names, shape, strict=True)):
            if dim in sizes and sizes[dim][0] != size:
                other_size, other = sizes[dim]
                raise ValueError(
                    f"dim {dim!r} has size {size} in {var!r} "
                    f"but {other_size} in {other!r}"
                )
            sizes[dim] = (size, var)
            if dim in coords:
                if len(coords[dim]) != size:
                    raise ValueError(
                        f"coords[{dim!r}] has {len(coords[dim])} values "
                        f"but dim {dim!r} of {var!r} has size {size}"
                    )
            elif complex_axes.get(var) == axis:
                coords[dim] = list(COMPLEX_PARTS)
        variables[var] = ([*SAMPLE_DIMS[:n_sample], *names], array)
    for dim, (size, _) in sizes.items():
        coords.setdefault(dim, np.arange(size))
    if n_sample:
        first = next(iter(arrays.values()), np.empty((0, 0)))
        coords.update(
            {
                dim: np.arange(n)
                for dim, n in zip(SAMPLE_DIMS, first.shape[:n_sample], strict=True)
            }
        )
    used = {dim: np.asarray(coords[dim]) for dim in [*SAMPLE_DIMS[:n_sample], *sizes]}
    return xr.Dataset(variables, coords=used, attrs=_library_attrs())


def _library_attrs() -> dict[str, Any]:
    return arviz_compat.make_attrs(cmdstanpy)


def _stan_shapes(fit: Fit) -> dict[str, tuple[int, ...]]:
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


def _resolve_names(
    field: str,
    requested: str | Sequence[str] | None,
    available: Mapping[str, Any],
    default: list[str],
) -> list[str]:
    if requested is None:
        return [name for name in default if name in available]
    names = [requested] if isinstance(requested, str) else list(requested)
    missing = [name for name in names if name not in available]
    if missing:
        raise ValueError(
            f"{field}: no Stan variable {missing}; variables: {sorted(available)}"
        )
    return names


def _fit_groups(
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
    groups = _fit_groups(
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


def _run_config(fit: Fit) -> dict[str, Any]:
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
