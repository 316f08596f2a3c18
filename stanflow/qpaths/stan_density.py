"""Base and target densities given as Stan programs, evaluated in process.

A q-path target is one Stan file: its ``model`` block is ``log pi1`` of the
unconstrained parameters (Jacobian included, constants kept, so that ``Z`` is
the integral the program's target defines). :class:`StanLogDensity` wraps the
loaded program as the ``log_pi(z) -> (N,)`` callable that :func:`~stanflow.qpaths.annealing.smc`,
:func:`~stanflow.qpaths.annealing.ais` and :func:`~stanflow.qpaths.ti.thermodynamic_integration`
take, so no NumPy copy of the density is needed; the default random-walk moves
only evaluate it. Its data are checked before the program compiles: a NaN in
them would make ``log pi1`` NaN at every particle, and the annealing would fail
far from the cause.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import bridgestan
import numpy as np

from stanflow.models import load, log_density_gradient_rows, log_density_rows
from stanflow.models.cache import PathLike


class StanLogDensity:
    """``log p(z)`` of a Stan program at particles ``z`` of shape ``(N, d)``.

    Parameters
    ----------
    model : bridgestan.StanModel
        The program with its data (:func:`stanflow.models.load`).
    threads : int, optional
        Threads per call (:func:`stanflow.models.log_density_rows`).

    Notes
    -----
    The density is the program's ``target`` with every constant
    (``propto=False``) and the log Jacobian of its constraints, as a density
    of the unconstrained parameters ``z``: ``d = model.param_unc_num()``.
    Points the program rejects get ``-inf``.
    """

    def __init__(self, model: bridgestan.StanModel, *, threads: int | None = None):
        if not isinstance(model, bridgestan.StanModel):
            raise TypeError(
                f"model must be a bridgestan.StanModel, got {type(model).__name__}"
            )
        self.model = model
        self.threads = threads

    @property
    def dim(self) -> int:
        """Number of unconstrained parameters ``d``."""
        return self.model.param_unc_num()

    def __call__(self, z: np.ndarray) -> np.ndarray:
        return log_density_rows(
            self.model, z, propto=False, jacobian=True, threads=self.threads,
            reject_as_neg_inf=True,
        )

    def value_and_gradient(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log density and its gradient at ``z`` (Stan's reverse mode), shapes ``(N,)``, ``(N, d)``.

        Rejected points get ``-inf`` and a NaN gradient.
        """
        return log_density_gradient_rows(
            self.model, z, propto=False, jacobian=True, threads=self.threads,
            reject_as_neg_inf=True,
        )

    def __repr__(self) -> str:
        return f"StanLogDensity({self.model.name()}, d={self.dim})"


def stan_log_density(
    source: PathLike,
    data: Mapping[str, Any] | str | None = None,
    *,
    slots: Mapping[str, PathLike] | None = None,
    include_paths: Iterable[PathLike] = (),
    threads: int | None = None,
    allow_nan: bool = False,
) -> StanLogDensity:
    """Compile (cached), load and wrap a Stan program as a q-path density.

    Parameters
    ----------
    source : str or os.PathLike
        The Stan program (or template), e.g. ``stan/qpaths/logistic_regression.stan``.
    data : mapping or str, optional
        Its data (see :func:`stanflow.models.load`).
    slots, include_paths
        Passed to :func:`stanflow.models.load`.
    threads : int, optional
        Threads per evaluation of many particles.
    allow_nan : bool, default False
        Take data holding NaN, for a program that treats them itself (missing
        values it tests with ``is_nan``); by default a NaN is refused, since it
        would make the log density NaN.

    Returns
    -------
    StanLogDensity

    Raises
    ------
    ValueError
        If the data hold a NaN (the message names the field) and ``allow_nan``
        is False, before anything compiles; if the program rejects its data.
    """
    if not allow_nan:
        check_no_nan(data)
    model = load(source, data, slots=slots, include_paths=include_paths)
    return StanLogDensity(model, threads=threads)


def check_no_nan(data: Mapping[str, Any] | str | os.PathLike | None) -> None:
    """Refuse data with a NaN in any field, naming the field.

    Parameters
    ----------
    data : mapping, str, os.PathLike or None
        As :func:`stanflow.models.load` takes it: a mapping, a JSON string or
        the path of a ``.json`` file (Stan's ``NaN``, as a number or a string).

    Raises
    ------
    ValueError
        ``data: field 'X' holds NaN ...``.
    """
    for name, value in _fields(data).items():
        try:
            values = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            continue  # not numbers (nested records): Stan checks those itself
        if np.isnan(values).any():
            where = np.argwhere(np.isnan(values))[0].tolist()
            raise ValueError(
                f"data: field {name!r} holds NaN ({int(np.isnan(values).sum())} value(s), "
                f"first at index {where}); replace or drop the missing values (the "
                "target's log density would be NaN), or pass allow_nan=True to a program "
                "that tests them with is_nan"
            )


def _fields(data: Mapping[str, Any] | str | os.PathLike | None) -> Mapping[str, Any]:
    """The fields of ``data``; none for data that are not a JSON object (Stan says why)."""
    if data is None or isinstance(data, Mapping):
        return data or {}
    text = str(data)
    if isinstance(data, os.PathLike) or text.endswith(".json"):
        if not Path(data).is_file():
            raise ValueError(f"data: no such file {data}")
        text = Path(data).read_text()
    try:
        fields = json.loads(text)
    except ValueError:
        return {}
    return fields if isinstance(fields, dict) else {}
