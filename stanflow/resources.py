"""Where stanflow's shipped folders are: in the installed package, or in a checkout.

The repository keeps three top-level folders that users read and edit:
``stan/`` (programs, templates and slot files), ``workflows/`` (one script per
paper experiment) and ``data/`` (small data). A wheel carries them as
package data under ``stanflow/_resources/`` (``pyproject.toml`` maps the
folders there), read through :mod:`importlib.resources`; an editable install or a
checkout on ``sys.path`` reads the repository's own folders. Either way the
rest of stanflow asks :func:`resource_dir` and never assumes a checkout.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

SHIPPED = ("stan", "workflows", "data")
"""The folders shipped with stanflow."""
PACKAGED = "_resources"
"""Their folder inside the installed package."""


@functools.cache
def resource_dir(name: str) -> Path:
    """The shipped folder ``name`` (one of :data:`SHIPPED`).

    Returns
    -------
    pathlib.Path
        ``<site-packages>/stanflow/_resources/<name>`` for an installed wheel,
        else ``<repository>/<name>`` for a checkout or an editable install.

    Raises
    ------
    ValueError
        If ``name`` is not a shipped folder.
    FileNotFoundError
        If neither location exists (a broken installation); the message names both.
    """
    if name not in SHIPPED:
        raise ValueError(f"name must be one of {SHIPPED}, got {name!r}")
    packaged = Path(str(resources.files("stanflow") / PACKAGED / name))
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(
        f"stanflow's {name}/ folder is missing: neither {packaged} (installed "
        f"package) nor {checkout} (repository checkout) exists; reinstall stanflow"
    )
