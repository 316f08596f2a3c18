"""Which ArviZ line is installed, and the backend module that speaks it.

This is the only place in stanflow that looks at ArviZ's version: every other
module goes through :mod:`stanflow.arviz_compat`, whose functions behave the
same on both lines.
"""

from __future__ import annotations

from importlib import metadata

ARVIZ_VERSION = metadata.version("arviz")
"""The installed ArviZ distribution's version (``0.23.4``, ``1.3.0``, ...)."""

LINE = int(ARVIZ_VERSION.split(".", 1)[0])
"""ArviZ's major version: 0 (``InferenceData``) or 1 (``xarray.DataTree``)."""

if LINE == 0:
    from stanflow.arviz_compat import _arviz0 as backend
else:
    # The other line's module, with the same functions: mypy sees one line at a time.
    from stanflow.arviz_compat import _arviz1 as backend  # type: ignore[no-redef]

__all__ = ["ARVIZ_VERSION", "LINE", "backend"]
