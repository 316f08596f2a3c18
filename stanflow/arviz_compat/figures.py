"""Figures drawn by the installed ArviZ (``arviz.plot_*`` on 0.x, ``arviz_plots`` on 1.x).

Both return a matplotlib ``Figure`` that the caller titles and saves; the two
lines draw the same content in their own styles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure

from stanflow.arviz_compat._line import backend
from stanflow.arviz_compat.container import Results, group, group_names


def plot_forest(
    results: Results,
    var_names: Sequence[str],
    *,
    ci_prob: float = 0.9,
    figsize: tuple[float, float] = (8.0, 5.0),
) -> Figure:
    """Forest plot of posterior variables, chains combined.

    Parameters
    ----------
    results : Results
    var_names : sequence of str
        Posterior variables; one row per element.
    ci_prob : float
        Probability of the outer (highest density) interval; the inner one is 50%.
    figsize : (float, float)
        Inches.

    Returns
    -------
    matplotlib.figure.Figure
    """
    _check_variables(results, var_names)
    if not 0 < ci_prob < 1:
        raise ValueError(f"ci_prob must be in (0, 1), got {ci_prob!r}")
    return backend.plot_forest(results, list(var_names), ci_prob, figsize)


def plot_pair(
    results: Results,
    x: str,
    y: str,
    *,
    coords: Mapping[str, Sequence[Any]] | None = None,
    labels: tuple[str, str] | None = None,
) -> Figure:
    """Scatter plot of posterior draws of ``y`` against ``x``, divergent transitions marked.

    Parameters
    ----------
    results : Results
        With ``sample_stats["diverging"]``.
    x, y : str
        Posterior variables, scalar once ``coords`` are applied.
    coords : mapping, optional
        Selection, e.g. ``{"school": ["Choate"]}``.
    labels : (str, str), optional
        Axis labels; default ``x`` and ``y``.

    Returns
    -------
    matplotlib.figure.Figure
    """
    _check_variables(results, [x, y])
    if "sample_stats" not in group_names(results) or "diverging" not in group(
        results, "sample_stats"
    ):
        raise ValueError("results need sample_stats['diverging'] to mark divergences")
    return backend.plot_pair(results, x, y, coords, labels or (x, y))


def _check_variables(results: Results, var_names: Sequence[str]) -> None:
    posterior = group(results, "posterior")
    missing = [name for name in var_names if name not in posterior.data_vars]
    if missing:
        raise ValueError(
            f"no posterior variables {missing}; variables: {sorted(map(str, posterior.data_vars))}"
        )
