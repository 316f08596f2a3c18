"""An in-process optimiser's state on disk, so that a long optimisation resumes where it stopped.

Guarantee: an optimiser that saves its :class:`OptimiserState` every few steps
with :func:`save_state` and, on a rerun, continues from :func:`load_state`
computes exactly the numbers of an uninterrupted run: the arrays are stored bit
for bit (``.npz``, written atomically) together with the random generators'
whole states. A file saved under another ``signature`` (the problem, the
settings, the seed: whatever the run depends on) is an error naming the file
and the fields that differ, never resumed by mistake. The generators must be
PCG64 or PCG64DXSM (``numpy.random.default_rng``'s), whose states JSON holds.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from stanflow.atomic import write_npz
from stanflow.validation import check_int


class OptimiserState(NamedTuple):
    """Where an optimisation stands.

    Attributes
    ----------
    step : int
        Steps done.
    arrays : list of ndarray
        Everything the next step reads (parameters, moments, orders...).
    rngs : list of numpy.random.Generator
        The generators of the next step's random numbers.
    seconds : float
        Wall time of the steps done, over all runs.
    """

    step: int
    arrays: list[np.ndarray]
    rngs: list[np.random.Generator]
    seconds: float


def save_state(path: str | os.PathLike, signature: dict[str, Any], state: OptimiserState) -> None:
    """Write ``state`` and the run's ``signature`` (JSON-like) to ``path`` atomically."""
    for rng in state.rngs:
        if type(rng.bit_generator).__name__ not in ("PCG64", "PCG64DXSM"):
            raise ValueError(f"state.rngs: a {type(rng.bit_generator).__name__} generator's "
                             "state cannot be saved; use numpy.random.default_rng")
    header = {
        "signature": signature,
        "step": state.step,
        "seconds": state.seconds,
        "rngs": [rng.bit_generator.state for rng in state.rngs],
    }
    arrays = {f"array_{i}": a for i, a in enumerate(state.arrays)}
    with_header = arrays | {"header": np.array(json.dumps(header))}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_npz(path, with_header)


def load_state(path: str | os.PathLike, signature: dict[str, Any]) -> OptimiserState | None:
    """The state saved at ``path``, or ``None`` when there is no file.

    Raises
    ------
    ValueError
        If the file was saved by a run with another ``signature``, or is not
        such a state.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as saved:
            header = json.loads(str(saved["header"]))
            arrays = [saved[f"array_{i}"] for i in range(len(saved.files) - 1)]
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"{path} is not an optimiser state ({error}): remove it") from error
    expected = json.loads(json.dumps(signature))
    if header["signature"] != expected:
        differ = sorted(k for k in expected.keys() | header["signature"].keys()
                        if header["signature"].get(k) != expected.get(k))
        raise ValueError(
            f"{path} is the state of another run (differs in {', '.join(differ)}): "
            "remove it or choose another file"
        )
    return OptimiserState(header["step"], arrays, [_generator(s) for s in header["rngs"]],
                          header["seconds"])


def check_every(checkpoint_every: Any) -> None:
    """Raise a ``ValueError`` naming ``checkpoint_every`` unless it is an integer >= 1."""
    check_int(checkpoint_every, "checkpoint_every")


def digest(values: Mapping[str, Any]) -> str:
    """A sha256 of named arrays (e.g. a model's data), for a run's ``signature``."""
    hashed = hashlib.sha256()
    for name in sorted(values):
        value = np.ascontiguousarray(values[name])
        hashed.update(f"{name}:{value.dtype.str}:{value.shape}:".encode())
        hashed.update(value.tobytes())
    return hashed.hexdigest()


def _generator(state: dict[str, Any]) -> np.random.Generator:
    bit_generator = getattr(np.random, state["bit_generator"])(0)  # its state replaced next
    bit_generator.state = state
    return np.random.Generator(bit_generator)
