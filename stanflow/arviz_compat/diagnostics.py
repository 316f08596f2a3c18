"""MCMC diagnostics (ESS, R-hat, MCSE) by the installed ArviZ's estimators.

ArviZ 0.x computes them in ``arviz.stats``, ArviZ 1.x in ``arviz_stats``; both
implement the rank-normalised split estimators of Vehtari et al. (2021) and give
identical numbers for the same draws. The one default they disagree on, the
tail ESS's quantiles, is fixed here to 5% and 95% (ArviZ 0.x's and Stan's).

Each function takes results (their ``posterior``), an ``xarray.Dataset``, an
``xarray.DataArray`` or an array of shape ``(chain, draw)`` (a 1-D array is one
chain) and returns a Dataset, a DataArray or a float accordingly. Dims other
than ``chain`` and ``draw`` are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import xarray as xr

from stanflow.arviz_compat._line import backend
from stanflow.arviz_compat.container import Results, group

TAIL_PROBS = (0.05, 0.95)
"""The quantiles whose ESS the tail ESS is the smaller of."""

Draws = Results | xr.Dataset | xr.DataArray | np.ndarray
_ARRAY_NAME = "x"


def ess(
    data: Draws,
    *,
    var_names: Sequence[str] | None = None,
    method: str = "bulk",
    prob: float | tuple[float, float] | None = None,
) -> Any:
    """Effective sample size.

    Parameters
    ----------
    data : results, Dataset, DataArray or array_like
    var_names : sequence of str, optional
        Variables to keep (results and Datasets only).
    method : str
        ``bulk``, ``tail``, ``mean``, ``sd``, ``median``, ``mad``, ``quantile``
        or ``local``, as in ArviZ.
    prob : float or (float, float), optional
        The quantile of ``quantile``, the interval of ``local``; for ``tail``
        the default is :data:`TAIL_PROBS`.

    Returns
    -------
    Dataset, DataArray or float
    """
    if method == "tail" and prob is None:
        prob = TAIL_PROBS
    return _apply(backend.ess, data, var_names, method=method, prob=prob)


def rhat(data: Draws, *, var_names: Sequence[str] | None = None) -> Any:
    """Rank-normalised split R-hat (the larger of its bulk and tail versions).

    Parameters and return value as in :func:`ess`.
    """
    return _apply(backend.rhat, data, var_names)


def mcse(
    data: Draws,
    *,
    var_names: Sequence[str] | None = None,
    method: str = "mean",
    prob: float | None = None,
) -> Any:
    """Monte Carlo standard error of the mean, sd, median or a quantile.

    Parameters
    ----------
    data, var_names
        As in :func:`ess`.
    method : str
        ``mean``, ``sd``, ``median`` or ``quantile``.
    prob : float, optional
        The quantile, for ``quantile``.

    Returns
    -------
    Dataset, DataArray or float
    """
    return _apply(backend.mcse, data, var_names, method=method, prob=prob)


def _apply(
    function: Callable[..., xr.Dataset],
    data: Draws,
    var_names: Sequence[str] | None,
    **options: Any,
) -> Any:
    """Run a backend diagnostic on ``data`` as a Dataset; return it in ``data``'s kind."""
    if isinstance(data, Results):
        data = group(data, "posterior")
    if isinstance(data, xr.Dataset):
        return function(data if var_names is None else data[list(var_names)], **options)
    if var_names is not None:
        raise ValueError("var_names applies to results and Datasets only")
    if isinstance(data, xr.DataArray):
        name = _ARRAY_NAME if data.name is None else data.name
        return function(data.to_dataset(name=name), **options)[name]
    draws = np.asarray(data, dtype=float)
    if draws.ndim == 1:
        draws = draws[None]
    if draws.ndim != 2:
        raise ValueError(
            f"an array of draws must have shape (chain, draw) or (draw,), got {draws.shape}"
        )
    dataset = xr.Dataset({_ARRAY_NAME: (("chain", "draw"), draws)})
    return float(function(dataset, **options)[_ARRAY_NAME])
