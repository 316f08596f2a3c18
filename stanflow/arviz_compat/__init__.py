"""The installed ArviZ line, behind one interface: the only module that imports ArviZ.

stanflow runs on two ArviZ lines, chosen by ``pyproject.toml`` from the Python
version:

- ArviZ 0.x (Python 3.11): results are ``arviz.InferenceData``;
- ArviZ >= 1.3 (Python >= 3.12, split into ``arviz_base``, ``arviz_stats`` and
  ``arviz_plots``): results are ``xarray.DataTree``.

Every result stanflow returns is the installed line's own object with the same
groups, variables, coords and dims on both lines. Code that needs more than
``results.<group>["var"]`` and ``results.attrs`` (which work on both) uses this
package: :func:`build`, :func:`group`, :func:`group_names`,
:func:`add_groups`, :func:`write_netcdf`/:func:`read_netcdf`, the MCMC
converter :func:`from_cmdstanpy`, the diagnostics :func:`ess`, :func:`rhat`,
:func:`mcse` and the figures :func:`plot_forest`, :func:`plot_pair`.
:data:`LINE` says which line is installed, for the tests and the README's
claims; stanflow's methods do not branch on it.
"""

from stanflow.arviz_compat._line import ARVIZ_VERSION, LINE
from stanflow.arviz_compat.container import (
    Results,
    add_groups,
    build,
    dict_to_dataset,
    from_cmdstanpy,
    group,
    group_names,
    make_attrs,
    read_netcdf,
    write_netcdf,
)
from stanflow.arviz_compat.diagnostics import TAIL_PROBS, ess, mcse, rhat
from stanflow.arviz_compat.figures import plot_forest, plot_pair

__all__ = [
    "ARVIZ_VERSION",
    "LINE",
    "TAIL_PROBS",
    "Results",
    "add_groups",
    "build",
    "dict_to_dataset",
    "ess",
    "from_cmdstanpy",
    "group",
    "group_names",
    "make_attrs",
    "mcse",
    "plot_forest",
    "plot_pair",
    "read_netcdf",
    "rhat",
    "write_netcdf",
]
