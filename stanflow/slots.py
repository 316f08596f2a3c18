"""Slot files: where a method takes a loss, prior, penalty or target as a Stan file.

Every method accepts, where it takes a slot, either the name of a shipped
file (``"check"`` is ``stan/losses/check.stanfunctions``) or the path of a
file of your own. One rule tells them apart for the whole package
(:func:`is_slot_file`), and :func:`slot_file` resolves either to an existing
file or raises an error naming the argument before anything compiles.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeGuard

from stanflow.models import STAN_DIR


def is_slot_file(value: object) -> TypeGuard[str | os.PathLike]:
    """Whether ``value`` is the path of a file rather than a shipped name.

    A path object, or a string that ends in ``.stanfunctions`` or contains a
    path separator. Shipped names (``"check"``, ``"laplace"``) are neither.
    Where it is false, callers cast the value to a name or an object (a
    :class:`~stanflow.losses.Loss`): no type says "a string that is not a path".
    """
    if isinstance(value, os.PathLike):
        return True
    return isinstance(value, str) and (
        value.endswith(".stanfunctions") or "/" in value or os.sep in value
    )


def slot_file(value: str | os.PathLike, folder: str, argument: str) -> Path:
    """The file of a slot: a shipped name in ``stan/<folder>`` or your own file's path.

    Parameters
    ----------
    value : str or os.PathLike
        A name (``"check"``) or a path (:func:`is_slot_file`).
    folder : str
        The shipped files' folder under ``stan/``, e.g. ``"losses"``.
    argument : str
        The caller's argument, named in errors (``"loss"``, ``"penalty"``).

    Returns
    -------
    pathlib.Path
        An existing file, absolute.

    Raises
    ------
    ValueError
        If the file does not exist, or no shipped file has that name (the
        message lists the shipped ones).
    """
    if is_slot_file(value):
        path = Path(value)
        if not path.is_file():
            raise ValueError(f"{argument}: file not found: {path}")
        return path.resolve()
    path = STAN_DIR / folder / f"{value}.stanfunctions"
    if not isinstance(value, str) or not path.is_file():
        shipped = sorted(p.stem for p in (STAN_DIR / folder).glob("*.stanfunctions"))
        raise ValueError(
            f"{argument}: no {value!r} in stan/{folder} (shipped: {', '.join(shipped)}); "
            "give one of those names or the path of your own .stanfunctions file"
        )
    return path
