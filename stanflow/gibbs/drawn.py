"""A loss program evaluated on the observations its weights use: a resample's drawn ones.

A bootstrap resample weights each observation by the times it was drawn and
leaves about ``1/e`` of them out (weight 0). Their losses add nothing to the
target ``log prior - omega * sum_i weights[i] * loss_i``, yet the evaluation
form loaded with the whole data computes every one. Where the data can be cut
by observation (:mod:`stanflow.gibbs.slices`), the form loaded with the used
observations alone gives the same target for about ``0.63`` of the cost, so
weights that leave out at least :data:`MIN_LEFT_OUT` of the observations are
evaluated there (:class:`DrawnForms`, which
:class:`~stanflow.gibbs.evaluation.EvaluationForm` asks). Loading a form costs
about as much as evaluating the whole data at a thousand or two points (Stan
reads the data's text), so the same weights are evaluated whole until they
have been asked for at :data:`LOAD_AFTER` points; then the form on their
observations is loaded (each observation's text written once, the form's
joined from them) and kept, the least recently used dropped first, up to
:data:`KEPT_BYTES` of data.

Whether a program may be cut this way is checked, never assumed
(:func:`checked_drawn`, when :class:`~stanflow.gibbs.program.LossProgram`
loads): with weights that leave out a random half of the observations, the
cut evaluation must give the whole program's target.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from stanflow.gibbs.slices import ObservationLayout, ObservationSlices, agrees, chunk_bounds
from stanflow.models import load

MIN_LEFT_OUT = 0.2
"""Weights that leave out at least this share of the observations are evaluated on
the others (a bootstrap resample leaves out ``1/e``, about 0.37)."""
LOAD_AFTER = 2000
"""Points at which the same weights are evaluated whole before the form on their
observations is loaded."""
KEPT_BYTES = 2**29
"""Data bytes of the forms kept for reuse (each resample's, across evaluations)."""


class DrawnForms:
    """The evaluation form of a program loaded on the observations that weights use.

    Parameters
    ----------
    library_file : path
        The compiled evaluation form.
    data : mapping
        The program's whole data.
    slices : ObservationSlices
        How the data are cut, and the prior's form (shared by every subset).

    Never pickled: a program sent to another process makes its own, empty
    (:class:`~stanflow.gibbs.program.LossProgram`).
    """

    def __init__(self, library_file: Path, data: Mapping[str, Any],
                 slices: ObservationSlices) -> None:
        self.library_file = library_file
        self.data = data
        self.slices = slices
        self._bytes = slices.layout.bytes_per_observation(data)
        self._kept: OrderedDict[bytes, tuple[ObservationSlices | None, np.ndarray]] = (
            OrderedDict())
        self._asked: dict[bytes, int] = {}
        self._text: _DataText | None = None
        self._lock = threading.Lock()

    def cut(self, weights: np.ndarray, points: int = LOAD_AFTER
            ) -> tuple[ObservationSlices, np.ndarray] | None:
        """The form on the observations ``weights`` (shape ``(n,)``) uses, and their weights,
        for an evaluation at ``points`` points.

        None when the weights leave out fewer than :data:`MIN_LEFT_OUT` of the
        observations or all of them, when they have been asked for at fewer
        than :data:`LOAD_AFTER` points before, or when Stan rejects the cut
        data: the whole form evaluates them.
        """
        used = weights != 0
        left_out = used.size - int(used.sum())
        if left_out < MIN_LEFT_OUT * used.size or left_out == used.size:
            return None
        key = hashlib.blake2b(np.packbits(used).tobytes(), digest_size=16).digest()
        with self._lock:  # a program may serve several threads (experiment cells)
            if key in self._kept:
                self._kept.move_to_end(key)
                form, keep = self._kept[key]
            else:
                asked = self._asked.get(key, 0)
                if asked < LOAD_AFTER:
                    self._asked[key] = asked + points
                    return None
                self._asked.pop(key, None)
                keep = np.flatnonzero(used)
                form = self._load(keep)
                self._kept[key] = (form, keep)
                while len(self._kept) > 1 and self._bytes * sum(
                        len(k) for _, k in self._kept.values()) > KEPT_BYTES:
                    self._kept.popitem(last=False)
        return None if form is None else (form, weights[keep])

    def clear(self) -> None:
        """Drop the kept forms and what was asked for: the next weights start afresh."""
        with self._lock:
            self._kept.clear()
            self._asked.clear()

    def _load(self, keep: np.ndarray) -> ObservationSlices | None:
        """The form on the observations ``keep``, as slices: in chunks where their data
        are large, else whole (one chunk); None if Stan rejects the cut data."""
        if self._text is None:
            self._text = _DataText(self.data, self.slices.layout)
        bounds = chunk_bounds(len(keep), self._bytes) or [slice(0, len(keep))]
        try:
            return ObservationSlices(
                self.slices.layout, self.slices.prior,
                [(rows, load(self.library_file, self._text.of(keep[rows]))) for rows in bounds])
        except (ValueError, RuntimeError):
            return None


class _DataText:
    """The data's JSON text on any subset of the observations, joined from each
    observation's text, written once (Python's float text reads back exactly)."""

    def __init__(self, data: Mapping[str, Any], layout: ObservationLayout) -> None:
        self.size = layout.size
        self.rest = [f"{json.dumps(name)}: {_text(value)}" for name, value in data.items()
                     if name not in layout.fields and name != layout.size]
        self.rows = {name: [_text(row) for row in np.asarray(data[name])]
                     for name in layout.fields}

    def of(self, keep: np.ndarray) -> str:
        """The JSON text of the data of the observations ``keep``."""
        index = keep.tolist()
        fields = [f"{json.dumps(name)}: [{','.join([rows[i] for i in index])}]"
                  for name, rows in self.rows.items()]
        return "{" + ", ".join([*self.rest, *fields, f'"{self.size}": {len(index)}']) + "}"


def _text(value: Any) -> str:
    return json.dumps(np.asarray(value).tolist())


class DrawnForm(Protocol):
    """What :func:`checked_drawn` needs of an evaluation form (``EvaluationForm``)."""

    drawn: DrawnForms | None

    def log_density(self, u: np.ndarray, omega: float | np.ndarray = 1.0,
                    weights: np.ndarray | None = None, *, jacobian: bool = True) -> np.ndarray: ...


def checked_drawn(
    form: DrawnForm,
    library_file: Path,
    data: Mapping[str, Any],
    slices: ObservationSlices | None,
    points: np.ndarray,
    prior: np.ndarray,
    losses: np.ndarray,
) -> DrawnForms | None:
    """:class:`DrawnForms` of ``form`` if, at the check ``points``, weights that leave out
    a random half of the observations give the whole program's target there.

    ``prior`` (no Jacobian) and ``losses`` (shape ``(S, n)``) are the whole
    program's at ``points``. None where the data cannot be cut (``slices``
    None) or the cut disagrees. ``form.drawn`` is None on return.
    """
    n = losses.shape[1]
    if slices is None or n < 2:
        return None
    rng = np.random.default_rng(n)
    weights = np.where(rng.permutation(n) < n // 2, rng.uniform(0.5, 1.5, n), 0.0)
    drawn = DrawnForms(library_file, data, slices)
    drawn.cut(weights)  # asked for: the next evaluation loads the cut
    form.drawn = drawn
    try:
        found = form.log_density(points, 1.0, weights, jacobian=False)
    except (ValueError, RuntimeError):
        found = None
    form.drawn = None
    if found is None or drawn.cut(weights) is None:
        return None
    drawn.clear()  # the check's form is no resample's; the data's text is kept
    return drawn if agrees(found, prior - losses @ weights) else None
