"""Result CSV files -> arrays -> Datasets with a ``run`` dimension.

CSV files are read with pandas' C parser (``comment="#"``), one run at a time,
straight into arrays allocated once for the whole run set: the memory needed is
the final arrays plus one run's CSV, whatever the number of runs.

Dimensions are ``(chain, draw, run, *variable dims)``: ``chain`` and ``draw``
stay first, as ArviZ expects, so its diagnostics (:mod:`stanflow.arviz_compat`) treat
``run`` like any other variable dim and report each run separately.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from stanflow.idata import columns_to_dataset

RUN_DIM = "run"
DIMS = ("chain", "draw", RUN_DIM)

SAMPLER_STATS = {
    "lp__": "lp",
    "accept_stat__": "acceptance_rate",
    "stepsize__": "step_size",
    "treedepth__": "tree_depth",
    "n_leapfrog__": "n_steps",
    "divergent__": "diverging",
    "energy__": "energy",
}
"""CmdStan's sampler columns -> ArviZ's sample_stats names (as ``from_cmdstanpy``)."""

_TOTAL_TIME = re.compile(rb"([0-9.eE+-]+) seconds \(Total\)")
_TAIL_BYTES = 2048


@dataclass(frozen=True)
class RunDraws:
    """The draws of one run.

    Attributes
    ----------
    names : tuple of str
        Column names as cmdstanpy writes them (``mu``, ``theta[2]``, ``lp__``).
    values : ndarray, shape (chain, draw, column)
    total_time : ndarray, shape (chain,)
        Seconds from each CSV's ``Elapsed Time ... (Total)`` line; NaN if absent.
    """

    names: tuple[str, ...]
    values: np.ndarray
    total_time: np.ndarray


def column_name(csv_name: str) -> str:
    """A Stan CSV column name in cmdstanpy's form: ``b.1.2`` -> ``b[1,2]``.

    Tuple slots (``:`` in the CSV) become ``.``: ``t.2:1`` -> ``t[2].1``.
    """
    parts = []
    for part in csv_name.split(":"):
        name, *indices = part.split(".")
        parts.append(f"{name}[{','.join(indices)}]" if indices else name)
    return ".".join(parts)


def read_csv(path: Path, method: str) -> tuple[tuple[str, ...], np.ndarray, float]:
    """Read one Stan CSV file.

    Parameters
    ----------
    path : pathlib.Path
    method : str
        For ``variational`` the first row (the mean of the approximation) is dropped.

    Returns
    -------
    names : tuple of str
        In cmdstanpy's form (:func:`column_name`).
    values : ndarray, shape (draw, column)
    total_time : float
        From the timing block; NaN when the file has none.
    """
    frame = pd.read_csv(path, comment="#", skipinitialspace=True, dtype=np.float64)
    values = frame.to_numpy()
    if method == "variational":
        values = values[1:]
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        handle.seek(max(0, handle.tell() - _TAIL_BYTES))
        found = _TOTAL_TIME.findall(handle.read())
    total = float(found[-1]) if found else float("nan")
    return tuple(column_name(str(c)) for c in frame.columns), values, total


def read_run(paths: Sequence[Path], method: str) -> RunDraws:
    """Read a run's CSV files, one per chain.

    Raises
    ------
    ValueError
        If the chains' columns or numbers of draws differ.
    """
    read = [read_csv(Path(path), method) for path in paths]
    names = read[0][0]
    for path, (other, values, _) in zip(paths, read, strict=True):
        if other != names or len(values) != len(read[0][1]):
            raise ValueError(f"{path}: columns or draws differ from {paths[0]}")
    return RunDraws(
        names=names,
        values=np.stack([values for _, values, _ in read]),
        total_time=np.array([total for _, _, total in read]),
    )


def collect(
    runs: Sequence[Sequence[Path] | None],
    method: str,
    *,
    coords: Mapping[str, Sequence[Any]] | None = None,
    dims: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, xr.Dataset]:
    """Read the runs of a run set into Datasets with a ``run`` dimension.

    Parameters
    ----------
    runs : sequence
        Per run, its CSV files (one per chain), or None for a run without
        results, whose values are NaN.
    method : str
        The runs' method.
    coords, dims
        As in :func:`stanflow.idata.columns_to_dataset`, for the variables' own dims.

    Returns
    -------
    dict of str to xarray.Dataset
        ``posterior``; ``sample_stats`` (the ``__`` columns; for ``sample``
        under ArviZ's names); ``chain_stats`` with dims ``(run, chain)``:
        ``total_time`` and, for ``sample``, ``divergences``.

    Raises
    ------
    ValueError
        If no run has results, or a run's columns or shape differ from the
        first run with results (naming that run).
    """
    found = next(((i, files) for i, files in enumerate(runs) if files is not None), None)
    if found is None:
        raise ValueError("no run has results yet")
    first, first_files = found
    template = read_run(first_files, method)
    layout = columns_to_dataset(
        template.names,
        np.arange(len(template.names))[None, None, :],
        coords=coords,
        dims=dims,
    )
    chains, draws = template.values.shape[:2]
    arrays = {
        str(var): np.full((chains, draws, len(runs), *layout[var].shape[2:]), np.nan)
        for var in layout.data_vars
    }
    columns = {str(var): layout[var].values[0, 0].astype(int) for var in layout.data_vars}
    total_time = np.full((len(runs), chains), np.nan)
    for index, files in enumerate(runs):
        if files is None:
            continue
        run = template if index == first else read_run(files, method)
        if run.names != template.names or run.values.shape != template.values.shape:
            raise ValueError(
                f"run {index}: columns or (chain, draw) shape {run.values.shape[:2]} "
                f"differ from run {first}'s {template.values.shape[:2]}; a run set's "
                "runs must have the same output to be collected"
            )
        for var, column in columns.items():
            arrays[var][:, :, index] = run.values[:, :, column]
        total_time[index] = run.total_time
    return _datasets(arrays, layout, method, len(runs), total_time)


def _datasets(
    arrays: dict[str, np.ndarray],
    layout: xr.Dataset,
    method: str,
    n_runs: int,
    total_time: np.ndarray,
) -> dict[str, xr.Dataset]:
    chains, draws = total_time.shape[1], next(iter(arrays.values())).shape[1]
    sample_coords = {
        "chain": np.arange(chains),
        "draw": np.arange(draws),
        RUN_DIM: np.arange(n_runs),
    }

    def dataset(names: dict[str, str]) -> xr.Dataset:
        variables = {
            new: ([*DIMS, *layout[old].dims[2:]], arrays[old])
            for old, new in names.items()
        }
        own = {dim for _, (var_dims, _) in variables.items() for dim in var_dims[3:]}
        return xr.Dataset(
            variables,
            coords={**sample_coords, **{d: layout.coords[d].values for d in own}},
        )

    stats = [str(v) for v in layout.data_vars if str(v).endswith("__")]
    renames = SAMPLER_STATS if method == "sample" else {}
    groups = {
        "posterior": dataset(
            {str(v): str(v) for v in layout.data_vars if str(v) not in stats}
        ),
        "sample_stats": dataset(
            {v: renames.get(v, v.removesuffix("__")) for v in stats}
        ),
    }
    chain_stats = {"total_time": ((RUN_DIM, "chain"), total_time)}
    if method == "sample" and "diverging" in groups["sample_stats"]:
        diverging = groups["sample_stats"]["diverging"]
        chain_stats["divergences"] = (
            (RUN_DIM, "chain"),
            diverging.sum("draw", skipna=False).transpose(RUN_DIM, "chain").values,
        )
    groups["chain_stats"] = xr.Dataset(
        chain_stats, coords={RUN_DIM: np.arange(n_runs), "chain": np.arange(chains)}
    )
    if not groups["sample_stats"].data_vars:
        del groups["sample_stats"]
    return groups
