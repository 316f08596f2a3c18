"""Run specifications and their validation against the model, before any launch.

A :class:`RunSpec` says what one run does: method, data, inits, method
arguments, optionally its own seed, chains and threads. :func:`check_spec`
validates one spec against the model's declared inputs and parameters
(``model.src_info()``) and returns a :class:`CheckedRun` with canonical values;
every problem raises :class:`InvalidRunSpec` naming the run and the field.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from stanflow.runs.arguments import (
    ArgumentError,
    check_args,
    uses_nuts,
)
from stanflow.runs.seeds import MAX_SEED
from stanflow.runs.sizes import Size, SizeMismatch, check_shapes
from stanflow.validation import is_integer, is_number

_STAN_JSON_CONSTANTS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class InvalidRunSpec(ValueError):
    """A run specification does not fit the model or CmdStan's arguments.

    Attributes
    ----------
    index : int
        Position of the run in the run set.
    field : str
        The offending field, e.g. ``"data['y']"`` or ``"args['adapt.delta']"``.
    """

    def __init__(self, index: int, field: str, message: str) -> None:
        super().__init__(f"run {index}, {field}: {message}")
        self.index = index
        self.field = field


@dataclass(frozen=True)
class RunSpec:
    """What one run of a run set does.

    Parameters
    ----------
    method : str
        ``sample`` (default), ``optimize``, ``variational``, ``pathfinder`` or
        ``laplace``.
    data : mapping or path, optional
        The data, as for cmdstanpy (names to scalars/arrays), or a Stan JSON file.
    inits : mapping, float or path, optional
        Initial values of parameters (constrained scale), a radius for random
        inits (CmdStan's default is 2), or a Stan JSON file.
    args : mapping, optional
        CmdStan's method arguments; see :mod:`stanflow.runs.arguments`.
    seed : int, optional
        This run's seed; by default it is derived from the run set's root seed.
    chains : int
        Chains of a ``sample`` run, all in the run's one process.
    threads_per_chain : int
        Threads per chain (for ``reduce_sum``); the process gets
        ``chains * threads_per_chain`` threads, and the executors count that
        many cores for it. Needs a model built with ``STAN_THREADS``
        (stanflow's default) unless 1.
    """

    method: str = "sample"
    data: Mapping[str, Any] | str | os.PathLike | None = None
    inits: Mapping[str, Any] | float | str | os.PathLike | None = None
    args: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None
    chains: int = 1
    threads_per_chain: int = 1


@dataclass(frozen=True)
class ModelInterface:
    """What validation needs to know about a compiled model.

    Attributes
    ----------
    inputs, parameters : dict
        ``src_info()["inputs"]`` and ``["parameters"]``: name -> ``{"type",
        "dimensions"}``. None when the model's source is unknown (then data and
        inits are not checked).
    threaded : bool
        Whether the executable was built with ``STAN_THREADS``.
    shapes : dict, optional
        Declared data shapes (:func:`stanflow.runs.sizes.declared_shapes`);
        None when the source is unknown (then sizes are left to the model).
    """

    inputs: Mapping[str, Any] | None
    parameters: Mapping[str, Any] | None
    threaded: bool
    shapes: Mapping[str, tuple[Size, ...]] | None = None


@dataclass(frozen=True)
class CheckedRun:
    """A validated run: canonical values, data and inits still in memory.

    Attributes
    ----------
    data : dict or None
        Checked data (arrays with the declared number of dims, ints as int64).
    inits : dict, float or None
        Checked inits mapping, or the init radius.
    threads : int
        The process's ``num_threads`` (``chains * threads_per_chain``), or 0 for
        an executable without threads (then the token is left out).
    """

    index: int
    method: str
    args: dict[str, Any]
    data: dict[str, Any] | None
    inits: dict[str, Any] | float | None
    seed: int | None
    chains: int
    threads: int


def as_spec(spec: RunSpec | Mapping[str, Any], index: int) -> RunSpec:
    """Accept a :class:`RunSpec` or a mapping of its fields.

    Raises
    ------
    InvalidRunSpec
        For anything else, or for a mapping with unknown keys.
    """
    if isinstance(spec, RunSpec):
        return spec
    if not isinstance(spec, Mapping):
        raise InvalidRunSpec(
            index, "spec", f"must be a RunSpec or a mapping, got {type(spec).__name__}"
        )
    known = {f.name for f in fields(RunSpec)}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise InvalidRunSpec(
            index, str(unknown[0]), f"unknown field; fields: {sorted(known)}"
        )
    return RunSpec(**spec)


def check_spec(spec: RunSpec, index: int, model: ModelInterface) -> CheckedRun:
    """Validate one run specification against ``model``.

    Parameters
    ----------
    spec : RunSpec
    index : int
        The run's position, for error messages.
    model : ModelInterface

    Returns
    -------
    CheckedRun

    Raises
    ------
    InvalidRunSpec
        Naming ``index`` and the field: unknown method or argument, a value out
        of CmdStan's range, data missing a declared input or with the wrong
        type, number of dims or sizes (where the program declares them as
        literals or data names), inits for unknown parameters, bad seed, chains
        or threads.
    """
    try:
        args = check_args(spec.method, spec.args)
    except ArgumentError as error:
        field_name = (
            "method" if error.field in ("method", "args") else f"args[{error.field!r}]"
        )
        raise InvalidRunSpec(index, field_name, str(error)) from None
    seed = spec.seed
    if seed is not None and (not is_integer(seed) or not 0 <= seed <= MAX_SEED):
        raise InvalidRunSpec(
            index, "seed", f"must be an int in [0, {MAX_SEED}], got {seed!r}"
        )
    for name in ("chains", "threads_per_chain"):
        value = getattr(spec, name)
        if not is_integer(value) or value < 1:
            raise InvalidRunSpec(index, name, f"must be an int >= 1, got {value!r}")
    if spec.chains > 1 and not uses_nuts(spec.method, args):
        raise InvalidRunSpec(
            index, "chains", "several chains need method 'sample' with the NUTS engine"
        )
    if spec.threads_per_chain > 1 and not model.threaded:
        raise InvalidRunSpec(
            index, "threads_per_chain", "the model was built without STAN_THREADS"
        )
    try:
        data = _check_data(spec.data, model.inputs)
        inits = _check_inits(spec.inits, model.parameters)
        if data and model.shapes:
            check_shapes(data, model.shapes)
    except (_FieldError, SizeMismatch) as error:
        raise InvalidRunSpec(index, error.field, str(error)) from None
    return CheckedRun(
        index=index,
        method=spec.method,
        args=args,
        data=data,
        inits=inits,
        seed=None if seed is None else int(seed),
        chains=int(spec.chains),
        threads=int(spec.chains * spec.threads_per_chain) if model.threaded else 0,
    )


class _FieldError(ValueError):
    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


def _check_data(
    data: Mapping[str, Any] | str | os.PathLike | None,
    inputs: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    if data is None:
        data = {}
    elif not isinstance(data, Mapping):
        data = _read_json("data", data)
    if inputs is None:
        return dict(data) or None
    checked = {}
    for name, declared in inputs.items():
        if name not in data:
            raise _FieldError(
                f"data[{name!r}]", f"missing; the model declares {_describe(declared)}"
            )
        checked[name] = _check_value(f"data[{name!r}]", declared, data[name])
    return checked or None


def _check_inits(
    inits: Mapping[str, Any] | float | str | os.PathLike | None,
    parameters: Mapping[str, Any] | None,
) -> dict[str, Any] | float | None:
    if inits is None:
        return None
    if is_number(inits):
        if not math.isfinite(inits) or inits < 0:
            raise _FieldError(
                "inits", f"a radius must be finite and >= 0, got {inits!r}"
            )
        return float(inits)
    if not isinstance(inits, Mapping):
        inits = _read_json("inits", inits)
    if parameters is None:
        return dict(inits)
    checked = {}
    for name, value in inits.items():
        if name not in parameters:
            raise _FieldError(
                f"inits[{name!r}]", f"not a parameter; parameters: {sorted(parameters)}"
            )
        checked[name] = _check_value(f"inits[{name!r}]", parameters[name], value)
    return checked


def _read_json(what: str, path: Any) -> dict[str, Any]:
    if not isinstance(path, (str, os.PathLike)):
        raise _FieldError(
            what, f"must be a mapping or a JSON file path, got {type(path).__name__}"
        )
    if not Path(path).is_file():
        raise _FieldError(what, f"file not found: {path}")
    try:
        loaded = json.loads(
            Path(path).read_text(), parse_constant=_STAN_JSON_CONSTANTS.get
        )
    except (OSError, ValueError) as error:
        raise _FieldError(what, f"cannot read {path} as JSON: {error}") from None
    if not isinstance(loaded, dict):
        raise _FieldError(what, f"{path} must hold one JSON object")
    return _json_numbers(loaded)


def _json_numbers(value: Any) -> Any:
    """Stan JSON's ``"NaN"``/``"Infinity"``/``"-Infinity"`` strings as floats."""
    if isinstance(value, str):
        return _STAN_JSON_CONSTANTS.get(value, value)
    if isinstance(value, list):
        return [_json_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_numbers(v) for k, v in value.items()}
    return value


def _describe(declared: Mapping[str, Any]) -> str:
    kind = declared["type"]
    if isinstance(kind, list):
        kind = "tuple(" + ", ".join(_describe(slot) for slot in kind) + ")"
    return f"{kind} with {declared['dimensions']} dims"


def _check_value(where: str, declared: Mapping[str, Any], value: Any) -> Any:
    """Check one value against its declaration ``{"type", "dimensions"}``."""
    kind, dims = declared["type"], declared["dimensions"]
    if isinstance(kind, list):
        return _check_tuple(where, kind, dims, value)
    try:
        array = np.asarray(value)
    except ValueError:
        raise _FieldError(where, "is not a rectangular array") from None
    if kind == "complex" and array.dtype.kind in "biuf" and _pairs(array, dims):
        array = array[..., 0] + 1j * array[..., 1]
    if array.ndim != dims and not (array.size == 0 and array.ndim <= dims):
        raise _FieldError(
            where,
            f"has {array.ndim} dims (shape {array.shape}) but the model declares "
            f"{_describe(declared)}",
        )
    allowed = "biufc" if kind == "complex" else "biuf"
    if array.dtype.kind not in allowed:
        raise _FieldError(where, f"must hold {kind} values, got dtype {array.dtype}")
    if kind == "int":
        if array.dtype.kind == "f" and not np.all(
            np.isfinite(array) & (np.round(array) == array)
        ):
            raise _FieldError(where, "is declared int but holds non-integer values")
        return array.astype(np.int64)
    return array.astype(complex if kind == "complex" else float)


def _pairs(array: np.ndarray, dims: int) -> bool:
    """Complex values written as ``[re, im]`` pairs (Stan JSON's form)."""
    return array.ndim == dims + 1 and array.shape[-1] == 2


def _check_tuple(where: str, slots: list[Any], dims: int, value: Any) -> Any:
    if dims > 0:
        if not isinstance(value, Sequence) or isinstance(value, (str, tuple)):
            raise _FieldError(
                where, f"must be a list (an array of tuples with {dims} dims)"
            )
        inner = {"type": slots, "dimensions": dims - 1}
        return [_check_value(f"{where}[{i}]", inner, v) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        value = [value.get(str(i + 1)) for i in range(len(slots))]
    if not isinstance(value, Sequence) or len(value) != len(slots):
        raise _FieldError(where, f"must be a tuple of {len(slots)} values")
    return tuple(
        _check_value(f"{where}.{i + 1}", slot, v)
        for i, (slot, v) in enumerate(zip(slots, value, strict=True))
    )
