"""The penalty slot of the smooth WBB problems: a shipped name or a file of yours.

``real penalty(vector beta, vector penalty_params)``, from ``stan/wbb/penalties``
(``ridge``, ``pseudo_huber``) or a file of yours, for
:mod:`stanflow.wbb.inprocess` and :mod:`stanflow.wbb.stan_optimize`; its
parameters are bound and its file checked as a loss's are
(:func:`stanflow.losses.loss_parameters`, :func:`stanflow.losses.loss_slot_file`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from stanflow.parameters import check_vector
from stanflow.signatures import PENALTY, check_signature
from stanflow.slots import is_slot_file, slot_file


def penalty_parameters(
    penalty: str | os.PathLike, params: Mapping[str, float] | Iterable[float] | None
) -> tuple[float, ...]:
    """A penalty's parameters, by name or in declared order, checked.

    Parameters
    ----------
    penalty : str or os.PathLike
        A name in ``stan/wbb/penalties`` or the path of a file.
    params : mapping of str to float, sequence of float, or None
        Checked against the file's ``// params:`` line
        (:func:`stanflow.parameters.check_vector`).

    Returns
    -------
    tuple of float
        The Stan vector ``penalty_params``.
    """
    path = slot_file(penalty, "wbb/penalties", "penalty")
    return check_vector(path, params, "penalty_params")


def penalty_slot_file(penalty: str | os.PathLike) -> Path:
    """The Stan file of a penalty, for the slot ``penalty.stanfunctions``.

    A file of yours is checked by stanc for the slot's signature first
    (:func:`stanflow.signatures.check_signature`), before anything compiles.

    Raises
    ------
    ValueError
        If no shipped penalty has that name or the file does not exist.
    stanflow.models.CompileError
        If the file does not define the slot's signature.
    """
    path = slot_file(penalty, "wbb/penalties", "penalty")
    if is_slot_file(penalty):
        check_signature(path, PENALTY)
    return path
