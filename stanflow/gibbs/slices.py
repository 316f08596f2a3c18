"""A loss program's data cut by observation: the prior from one, the losses in chunks.

A loss program's target is ``log prior - omega * sum_i weights[i] * loss_i``:
the prior does not depend on the observations and the losses add up over
them. When the data block says which of its variables are indexed by
observation (their first size is the weights' size ``N``, and ``N`` sizes
nothing else), the evaluation form loaded with a slice of the observations is
the same program on fewer data, so

- loaded with **one observation**, at ``omega = 0`` it gives the log prior at
  the cost of one loss instead of ``n`` (the prior is asked for beside almost
  every total loss);
- loaded with **chunks** of observations, it gives the target as the chunks'
  sum less the prior counted ``chunks - 1`` times too often, each chunk's data
  small enough (:data:`CHUNK_BYTES`) to stay in a core's cache while a block
  of points is evaluated on it: the whole data of ``10^5`` observations do not
  fit, and every point would walk them from memory again.

Whether a program may be cut is checked, never assumed
(:func:`checked_slices`, when :class:`~stanflow.gibbs.program.LossProgram`
loads): at the contract's check points the slices must give the whole
program's prior and each observation's loss. A program whose losses use all the data
(centred in ``transformed data``, say) or whose prior depends on ``N`` is
evaluated whole, as before.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import bridgestan
import numpy as np

from stanflow.models import load
from stanflow.models.source import block_lines

CHUNK_BYTES = 2**19
"""Data bytes per chunk (half of a common 1 MiB level-2 cache per core)."""
SLICE_RTOL = 1e-9
"""Relative tolerance of the check that the slices give the whole program's prior and losses."""

_IDENTIFIER = re.compile(r"[A-Za-z]\w*")


@dataclass(frozen=True)
class ObservationLayout:
    """Which data variables are indexed by observation.

    Attributes
    ----------
    size : str
        The data variable that counts the observations (``weights``' size).
    fields : tuple of str
        The variables whose first index is the observation.
    """

    size: str
    fields: tuple[str, ...]

    def cut(self, data: Mapping[str, Any], rows: slice) -> dict[str, Any]:
        """The data of the observations ``rows`` (a slice of ``range(n)``)."""
        out = dict(data)
        for name in self.fields:
            out[name] = np.asarray(data[name])[rows]
        out[self.size] = len(range(*rows.indices(int(data[self.size]))))
        return out

    def bytes_per_observation(self, data: Mapping[str, Any]) -> float:
        """Bytes of data per observation, plus its weight and one intermediate."""
        values = sum(np.asarray(data[name]).size for name in self.fields)
        return 8.0 * (values / int(data[self.size]) + 2)


def observation_layout(code: str, weights_size: str) -> ObservationLayout | None:
    """The layout of formatted ``code``'s data, or None when it cannot be read or cut.

    Cut only if ``weights_size`` is a plain ``int`` data variable ``N`` and
    every other appearance of ``N`` in the data block is the first size of a
    declaration (``vector[N] y``, ``matrix[N, K] X``, ``array[N] int g``).
    """
    size = weights_size.strip()
    if not _IDENTIFIER.fullmatch(size):
        return None
    statements = " ".join(line.split("//")[0] for line in block_lines(code, "data")).split(";")
    fields: list[str] = []
    counted = False
    for statement in (s.strip() for s in statements):
        if not statement:
            continue
        parsed = _declaration(statement)
        if parsed is None:
            return None
        name, sizes, rest = parsed
        if name == size:
            counted = bool(re.fullmatch(r"int(<[^;]*>)?", rest.strip()))
            continue
        first = sizes[0] if sizes else ""
        if first == size:
            sizes = sizes[1:]
            if name != "weights":
                fields.append(name)
        if any(size in _IDENTIFIER.findall(text) for text in [*sizes, rest]):
            return None
    return ObservationLayout(size, tuple(fields)) if counted else None


def _declaration(statement: str) -> tuple[str, list[str], str] | None:
    """``(name, sizes in order, the type's other text)`` of one data declaration."""
    match = re.fullmatch(r"(?P<type>.*?)\s+(?P<name>[A-Za-z]\w*)", statement)
    if match is None:
        return None
    text, sizes, rest = match.group("type"), [], []
    depth, angle, start = 0, 0, 0
    for i, char in enumerate(text):
        if char == "<" and depth == 0:
            angle += 1
        elif char == ">" and depth == 0 and angle:
            angle -= 1
        elif char == "[" and not angle:
            if depth == 0:
                start = i + 1
            depth += 1
            continue
        elif char == "]" and not angle:
            depth -= 1
            if depth == 0:
                sizes += _top_level_split(text[start:i])
            continue
        if depth == 0:
            rest.append(char)
    if depth or angle:
        return None
    return match.group("name"), [s.strip() for s in sizes], "".join(rest)


def _top_level_split(text: str) -> list[str]:
    """``text`` split at commas outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def chunk_bounds(n: int, bytes_per_observation: float) -> list[slice]:
    """Chunks of at most :data:`CHUNK_BYTES` of data; none when the whole data are small.

    Cut only when the data exceed two chunks: below that a point's data stay
    in cache anyway.
    """
    per_chunk = max(1, int(CHUNK_BYTES // bytes_per_observation))
    if n <= 2 * per_chunk:
        return []
    count = -(-n // per_chunk)
    edges = np.linspace(0, n, count + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(edges)]


@dataclass
class ObservationSlices:
    """The evaluation form loaded on slices of the data (see the module's docstring).

    Attributes
    ----------
    layout : ObservationLayout
        How the data are cut.
    prior : bridgestan.StanModel
        The evaluation form on the first observation alone (the prior at ``omega = 0``).
    chunks : list of (slice, bridgestan.StanModel)
        The observations of each chunk and the evaluation form on them; empty
        when the data are evaluated whole.
    """

    layout: ObservationLayout
    prior: bridgestan.StanModel
    chunks: list[tuple[slice, bridgestan.StanModel]]

    @classmethod
    def load(
        cls, library_file: Path, data: Mapping[str, Any], layout: ObservationLayout,
        bounds: list[slice],
    ) -> ObservationSlices:
        """Load the evaluation form on the prior's observation and on each chunk."""
        prior = cls(layout, load(library_file, layout.cut(data, slice(0, 1))), [])
        return prior.with_chunks(library_file, data, bounds) if bounds else prior

    def with_chunks(
        self, library_file: Path, data: Mapping[str, Any], bounds: list[slice]
    ) -> ObservationSlices:
        """These slices with the evaluation form loaded on each chunk ``bounds``."""
        chunks = [(rows, load(library_file, self.layout.cut(data, rows))) for rows in bounds]
        return ObservationSlices(self.layout, self.prior, chunks)

    @property
    def bounds(self) -> list[slice]:
        """The chunks' observations."""
        return [rows for rows, _ in self.chunks]


class SlicedForm(Protocol):
    """What :func:`checked_slices` needs of an evaluation form (``EvaluationForm``)."""

    slices: ObservationSlices | None

    def log_prior(self, u: np.ndarray, *, jacobian: bool = True) -> np.ndarray: ...

    def losses(self, u: np.ndarray) -> np.ndarray: ...

    def total_loss(self, u: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray: ...


def checked_slices(
    form: SlicedForm,
    library_file: Path,
    data: Mapping[str, Any],
    layout: ObservationLayout | None,
    points: np.ndarray,
    prior: np.ndarray,
    losses: np.ndarray,
) -> ObservationSlices | None:
    """The slices of ``form``'s data that give its values at the check ``points``.

    The one-observation slice must give the prior (``prior``, no Jacobian),
    and chunks, where the data are large enough for them, every observation's
    loss (``losses``, shape ``(S, n)``) and the total. None where the data
    cannot be cut (``layout`` None), Stan rejects a slice or the prior
    disagrees: the program is evaluated whole; chunks that disagree are
    dropped and the prior's slice kept. ``form.slices`` is None on return.
    """
    n = losses.shape[1]
    if layout is None or n < 2:
        return None
    try:
        form.slices = ObservationSlices.load(library_file, data, layout, [])
        right = agrees(form.log_prior(points, jacobian=False), prior)
        prior_only, form.slices = form.slices, None
        if not right:
            return None
        bounds = chunk_bounds(n, layout.bytes_per_observation(data))
        if not bounds:
            return prior_only
        form.slices = prior_only.with_chunks(library_file, data, bounds)
        right = (agrees(form.losses(points), losses)
                 and agrees(form.total_loss(points), losses.sum(axis=1)))
        chunked, form.slices = form.slices, None
    except (ValueError, RuntimeError):  # Stan rejects a slice of the data (N >= 2, say)
        form.slices = None
        return None
    return chunked if right else prior_only


def agrees(found: np.ndarray, expected: np.ndarray) -> bool:
    """Whether a sliced evaluation ``found`` is the whole program's ``expected`` (:data:`SLICE_RTOL`)."""
    scale = np.abs(expected) + 1.0
    return bool(np.all(np.abs(found - expected) <= SLICE_RTOL * scale))
