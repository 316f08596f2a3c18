"""Stan output columns, and data passed to Stan, as ``xarray.Dataset`` with named dims.

:func:`columns_to_dataset` is a pure function from Stan column names
(``theta[3]``, ``b[1,2]``, ``z[2,real]``, ``t[1].2[3]``) and a ``(chain, draw,
column)`` array to one array per Stan variable; :func:`data_to_dataset` does
the same for a data dictionary, without sample dims. Both name each variable's
axes from ``dims`` (ArviZ's ``<var>_dim_<i>`` otherwise) and check ``coords``
against them. :mod:`stanflow.idata` builds every method's groups from them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import cmdstanpy
import numpy as np
import xarray as xr

from stanflow import arviz_compat

Coords = Mapping[str, Sequence[Any] | np.ndarray]
Dims = Mapping[str, Sequence[str]]

SAMPLE_DIMS = ("chain", "draw")
COMPLEX_PARTS = ("real", "imag")
_SEGMENT = re.compile(r"([^\[\]]*)(?:\[([^\]]*)\])?")


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
    return named_dataset(arrays, len(SAMPLE_DIMS), coords, dims, complex_axes)


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
    return named_dataset(arrays, 0, coords, dims, {})


def named_dataset(
    arrays: Mapping[str, np.ndarray],
    n_sample: int,
    coords: Coords | None,
    dims: Dims | None,
    complex_axes: Mapping[str, int],
) -> xr.Dataset:
    """Name the axes of ``arrays`` after ``n_sample`` sample axes; attach coords.

    Parameters
    ----------
    arrays : mapping of str to ndarray
        One array per variable, its first ``n_sample`` axes ``chain``, ``draw``.
    n_sample : int
        0 (data) or 2 (draws).
    coords, dims
        As in :func:`columns_to_dataset`.
    complex_axes : mapping of str to int
        The ``(real, imag)`` axis of each complex variable, after the sample axes.

    Raises
    ------
    ValueError
        If ``dims`` names more axes than a variable has, one dim has two sizes,
        or ``coords`` do not fit the dims' sizes.
    """
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


def _library_attrs() -> dict[str, Any]:
    return arviz_compat.make_attrs(cmdstanpy)
