"""The learning-rate path drawn: posterior mean and interval against omega, rules marked, log Z_n.

:func:`plot_path` draws, for one parameter of a path's ``InferenceData``
(:func:`stanflow.gibbs.path.gibbs_path` or
:func:`stanflow.gibbs.path.calibrate_path`), the posterior mean and
equal-tailed interval against ``omega`` (log axis) with their Monte Carlo
bands, each calibration rule's ``omega`` as a vertical line, and
``log Z_n(omega)`` with its band on a second axis.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stanflow import arviz_compat
from stanflow.arviz_compat import Results

RULE_STYLES = {
    "gpc_path": ("tab:red", "-"),
    "gpc_robbins_monro": ("tab:purple", "--"),
    "gpc_fixed_point": ("tab:brown", ":"),
    "plugin": ("tab:green", "-."),
    "holmes_walker": ("tab:olive", (0, (3, 1, 1, 1))),
}


def plot_path(
    idata: Results,
    param: int = 0,
    axes: Any = None,
    title: str | None = None,
    truth: float | None = None,
    omega_min: float | None = None,
) -> Any:
    """Draw the path of one parameter and ``log Z_n``.

    Parameters
    ----------
    idata : Results
        With ``path_functionals`` (and ``calibration`` for the rules' lines).
    param : int, default 0
        Index along ``param``.
    axes : pair of matplotlib Axes, optional
        Where to draw (the posterior, then ``log Z_n``); default a new figure.
    title : str, optional
    truth : float, optional
        A reference value drawn as a horizontal line (e.g. the true median).
    omega_min : float, optional
        The smallest ``omega`` drawn; default ``omega_max / 100``.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    if axes is None:
        axes = plt.subplots(1, 2, figsize=(11, 4))[1]
    ax, ax_z = axes
    functionals = arviz_compat.group(idata, "path_functionals")
    every = functionals["omega"].values
    if omega_min is None:
        omega_min = every[-1] / 100
    shown = functionals.sel(omega=every >= omega_min)
    table = shown.isel(param=param)
    omega = table["omega"].values
    probs = table["prob"].values
    name = str(functionals["param"].values[param])
    ends = [int(np.argmin(probs)), int(np.argmax(probs))]
    ax.fill_between(omega, *(table["quantile"].isel(prob=e) for e in ends), color="tab:blue",
                    alpha=0.15, label=f"{probs[ends[0]]:g}-{probs[ends[1]]:g} quantiles")
    for e in ends:
        ax.fill_between(omega, table["quantile_lower"].isel(prob=e), table["quantile_upper"].isel(prob=e),
                        color="tab:blue", alpha=0.35, linewidth=0)
    mean, se = table["mean"].values, table["mean_se"].values
    ax.plot(omega, mean, color="tab:blue", label="mean")
    ax.fill_between(omega, mean - 2 * se, mean + 2 * se, color="tab:blue", alpha=0.35, linewidth=0)
    if truth is not None:
        ax.axhline(truth, color="black", linewidth=0.8, label="truth")
    log_z, log_z_se = table["log_z"].values, table["log_z_se"].values
    ax_z.plot(omega, log_z, color="tab:blue")
    ax_z.fill_between(omega, log_z - 2 * log_z_se, log_z + 2 * log_z_se, color="tab:blue",
                      alpha=0.3, linewidth=0)
    steps = arviz_compat.group(idata, "path")["omega"].values
    steps = steps[steps >= omega_min]
    ax_z.plot(steps, np.interp(steps, omega, log_z), "o", color="tab:blue", markersize=3,
              label="schedule points")
    if "calibration" in arviz_compat.group_names(idata):
        calibration = arviz_compat.group(idata, "calibration")
        rules = zip(calibration["rule"].values, calibration["rule_omega"].values, strict=True)
        for rule, value in rules:
            color, style = RULE_STYLES.get(str(rule), ("gray", "-"))
            for a in (ax, ax_z):
                label = f"{rule} {value:.3f}" if a is ax else None
                a.axvline(value, color=color, linestyle=style, label=label)
    for a in (ax, ax_z):
        a.set_xscale("log")
        a.set_xlabel("omega")
    ax.set_ylabel(name)
    ax_z.set_ylabel("log Z_n(omega)")
    ax.legend(fontsize=7, loc="best")
    ax_z.legend(fontsize=7, loc="best")
    if title:
        ax.set_title(title, fontsize=9)
    return ax.figure
