"""CmdStan 2.35 method arguments: names, valid values, and command-line tokens.

A run's ``args`` is a flat mapping in CmdStan's own names, e.g.
``{"num_samples": 500, "adapt.delta": 0.95, "max_depth": 12, "metric": "dense_e"}``.
The children of a plain sub-group (only ``adapt``) are written ``adapt.<name>``;
the arguments below a choice (``algorithm``, ``engine``, ``metric``) are written
by their own name and apply only when that choice is made (``max_depth`` needs
``engine="nuts"``). :func:`check_args` validates such a mapping and
:func:`method_tokens` turns it into CmdStan's command-line tokens, naming only
what was given so that everything else keeps CmdStan's defaults.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stanflow.validation import is_integer, is_number

METHODS = ("sample", "optimize", "variational", "pathfinder", "laplace")
"""The methods a run set runs: those whose output is one CSV of draws per chain."""


class ArgumentError(ValueError):
    """An argument is unknown, of the wrong type or out of range.

    Attributes
    ----------
    field : str
        The argument's key, e.g. ``"adapt.delta"``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class _Value:
    """A leaf: ``kind`` is int, real, bool or file; ``rule`` explains ``ok``."""

    kind: str
    rule: str = ""
    ok: Callable[[Any], bool] = lambda value: True


@dataclass(frozen=True)
class _Group:
    children: dict[str, _Value | _Group | _Choice] = field(default_factory=dict)


@dataclass(frozen=True)
class _Choice:
    default: str
    options: dict[str, _Group]


def _int_at_least(low: int) -> _Value:
    return _Value("int", f">= {low}", lambda v: v >= low)


def _positive_real() -> _Value:
    return _Value("real", "> 0", lambda v: v > 0)


def _nonnegative_real() -> _Value:
    return _Value("real", ">= 0", lambda v: v >= 0)


def _bfgs() -> dict[str, _Value | _Group | _Choice]:
    return {
        "init_alpha": _positive_real(),
        "tol_obj": _nonnegative_real(),
        "tol_rel_obj": _nonnegative_real(),
        "tol_grad": _nonnegative_real(),
        "tol_rel_grad": _nonnegative_real(),
        "tol_param": _nonnegative_real(),
    }


_SCHEMA: dict[str, _Group] = {
    "sample": _Group(
        {
            "num_samples": _int_at_least(0),
            "num_warmup": _int_at_least(0),
            "thin": _int_at_least(1),
            "adapt": _Group(
                {
                    "engaged": _Value("bool"),
                    "gamma": _positive_real(),
                    "delta": _Value("real", "in (0, 1)", lambda v: 0 < v < 1),
                    "kappa": _positive_real(),
                    "t0": _positive_real(),
                    "init_buffer": _int_at_least(0),
                    "term_buffer": _int_at_least(0),
                    "window": _int_at_least(0),
                }
            ),
            "algorithm": _Choice(
                "hmc",
                {
                    "hmc": _Group(
                        {
                            "metric_file": _Value("file"),
                            "stepsize": _positive_real(),
                            "stepsize_jitter": _Value(
                                "real", "in [0, 1]", lambda v: 0 <= v <= 1
                            ),
                            "engine": _Choice(
                                "nuts",
                                {
                                    "nuts": _Group({"max_depth": _int_at_least(1)}),
                                    "static": _Group({"int_time": _positive_real()}),
                                },
                            ),
                            "metric": _Choice(
                                "diag_e",
                                {
                                    name: _Group()
                                    for name in ("unit_e", "diag_e", "dense_e")
                                },
                            ),
                        }
                    ),
                    "fixed_param": _Group(),
                },
            ),
        }
    ),
    "optimize": _Group(
        {
            "jacobian": _Value("bool"),
            "iter": _int_at_least(1),
            "algorithm": _Choice(
                "lbfgs",
                {
                    "bfgs": _Group(_bfgs()),
                    "lbfgs": _Group({**_bfgs(), "history_size": _int_at_least(1)}),
                    "newton": _Group(),
                },
            ),
        }
    ),
    "variational": _Group(
        {
            "iter": _int_at_least(1),
            "grad_samples": _int_at_least(1),
            "elbo_samples": _int_at_least(1),
            "eta": _positive_real(),
            "tol_rel_obj": _positive_real(),
            "eval_elbo": _int_at_least(1),
            "output_samples": _int_at_least(0),
            "algorithm": _Choice(
                "meanfield", {"meanfield": _Group(), "fullrank": _Group()}
            ),
            "adapt": _Group({"engaged": _Value("bool"), "iter": _int_at_least(1)}),
        }
    ),
    "pathfinder": _Group(
        {
            **_bfgs(),
            "history_size": _int_at_least(1),
            "num_psis_draws": _int_at_least(1),
            "num_paths": _int_at_least(1),
            "psis_resample": _Value("bool"),
            "calculate_lp": _Value("bool"),
            "max_lbfgs_iters": _int_at_least(1),
            "num_draws": _int_at_least(1),
            "num_elbo_draws": _int_at_least(1),
        }
    ),
    "laplace": _Group(
        {
            "mode": _Value("file"),
            "jacobian": _Value("bool"),
            "draws": _int_at_least(1),
            "calculate_lp": _Value("bool"),
        }
    ),
}

_UNSUPPORTED = {
    "num_chains": "set the run's chains instead",
    "save_warmup": "a run set collects the sampling draws only",
    "adapt.save_metric": "a run set collects the draws CSV only",
    "save_iterations": "a run set collects the final estimate only",
    "save_single_paths": "a run set collects the draws CSV only",
}
_REQUIRED = {"laplace": ("mode",)}
# Output arguments accepted with every method; they go after ``output file=``.
OUTPUT_ARGS: dict[str, _Value] = {
    "sig_figs": _Value("int", "in [-1, 18] (-1: CmdStan's default of 6)", lambda v: -1 <= v <= 18),
}


def check_args(method: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the arguments of one run of ``method``.

    Parameters
    ----------
    method : str
        One of :data:`METHODS`.
    args : mapping of str to value
        CmdStan argument names (``adapt.<name>`` inside ``adapt``) to values,
        and the output arguments of :data:`OUTPUT_ARGS` (``sig_figs``).

    Returns
    -------
    dict
        The arguments with canonical Python values (int, float, bool, absolute
        path str for files, option name for choices), in the order given.

    Raises
    ------
    ArgumentError
        Naming the offending argument (``field``); also for combinations the
        driver would reject (adaptation without warmup).
    """
    if method not in _SCHEMA:
        raise ArgumentError(
            "method", f"method must be one of {list(METHODS)}, got {method!r}"
        )
    if not isinstance(args, Mapping):
        raise ArgumentError(
            "args", f"args must be a mapping, got {type(args).__name__}"
        )
    tree = _SCHEMA[method]
    for key in args:
        if not isinstance(key, str):
            raise ArgumentError(str(key), f"argument names must be str, got {key!r}")
    chosen = {
        key: value
        for key, value in args.items()
        if isinstance(_node(tree, key), _Choice)
    }
    available = _available(tree, chosen)
    conditions = _conditions(tree)
    checked: dict[str, Any] = {}
    for key, value in args.items():
        if key in OUTPUT_ARGS:
            checked[key] = _check_value(key, OUTPUT_ARGS[key], value)
            continue
        if key in _UNSUPPORTED:
            raise ArgumentError(
                key, f"{key!r} is not supported here: {_UNSUPPORTED[key]}"
            )
        if key not in available:
            if key in conditions:
                needs = " or ".join(conditions[key])
                raise ArgumentError(key, f"{key!r} applies only when {needs}")
            raise ArgumentError(
                key, f"{key!r} is not a {method} argument; valid: {sorted(conditions)}"
            )
        checked[key] = _check_value(key, available[key], value)
    for key in _REQUIRED.get(method, ()):
        if key not in checked:
            raise ArgumentError(key, f"{method} needs {key!r}")
    if method == "sample" and _adapts_without_warmup(checked):
        raise ArgumentError(
            "num_warmup",
            "num_warmup=0 needs adaptation off: set 'adapt.engaged': False",
        )
    return checked


def uses_nuts(method: str, args: Mapping[str, Any]) -> bool:
    """Whether a checked run samples with NUTS (several chains need it)."""
    return (
        method == "sample"
        and args.get("algorithm", "hmc") == "hmc"
        and args.get("engine", "nuts") == "nuts"
    )


def method_tokens(method: str, args: Mapping[str, Any]) -> list[str]:
    """CmdStan command-line tokens for ``method`` with checked ``args``.

    Parameters
    ----------
    method : str
    args : mapping
        As returned by :func:`check_args`.

    Returns
    -------
    list of str
        E.g. ``["method=sample", "num_samples=500", "adapt", "delta=0.95"]``;
        output arguments are left to :func:`output_tokens`.
        Each group's own values come before its sub-groups, so that CmdStan,
        which matches a token to the innermost argument that knows it, finds
        every token where it belongs.
    """
    return [f"method={method}", *_tokens(_SCHEMA[method], args, "")]


def output_tokens(args: Mapping[str, Any]) -> list[str]:
    """Tokens of the output arguments in checked ``args`` (``["sig_figs=18"]``)."""
    return [f"{name}={_format(args[name])}" for name in OUTPUT_ARGS if name in args]


def _tokens(group: _Group, args: Mapping[str, Any], prefix: str) -> list[str]:
    tokens = [
        f"{name}={_format(args[prefix + name])}"
        for name, node in group.children.items()
        if isinstance(node, _Value) and prefix + name in args
    ]
    for name, node in group.children.items():
        key = prefix + name
        if isinstance(node, _Group):
            inner = _tokens(node, args, key + ".")
            tokens += [name, *inner] if inner else []
        elif isinstance(node, _Choice):
            option = args.get(key, node.default)
            inner = _tokens(node.options[option], args, prefix)
            if key in args or inner:
                tokens += [f"{name}={option}", *inner]
    return tokens


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _node(group: _Group, key: str) -> _Value | _Group | _Choice | None:
    """The node a key names, searching every option of every choice."""
    for name, node in group.children.items():
        if isinstance(node, _Group):
            if key.startswith(name + "."):
                found = _node(node, key[len(name) + 1 :])
                if found is not None:
                    return found
        elif name == key:
            return node
        if isinstance(node, _Choice):
            for option in node.options.values():
                found = _node(option, key)
                if found is not None:
                    return found
    return None


def _available(
    group: _Group, chosen: Mapping[str, Any], prefix: str = ""
) -> dict[str, Any]:
    """Keys usable given the choices made (defaults for the rest) -> their node."""
    out: dict[str, Any] = {}
    for name, node in group.children.items():
        key = prefix + name
        if isinstance(node, _Group):
            out.update(_available(node, chosen, key + "."))
            continue
        out[key] = node
        if isinstance(node, _Choice):
            option = chosen.get(key, node.default)
            if option in node.options:
                out.update(_available(node.options[option], chosen, prefix))
    return out


def _conditions(
    group: _Group, prefix: str = "", needs: str = ""
) -> dict[str, list[str]]:
    """Every key of the tree -> the choices it needs, as text (``engine='nuts'``)."""
    out: dict[str, list[str]] = {}
    for name, node in group.children.items():
        key = prefix + name
        if isinstance(node, _Group):
            for inner, where in _conditions(node, key + ".", needs).items():
                out.setdefault(inner, []).extend(where)
            continue
        out.setdefault(key, []).append(needs or "always")
        if isinstance(node, _Choice):
            for option_name, option in node.options.items():
                condition = f"{key}={option_name!r}"
                inner_needs = f"{needs} and {condition}" if needs else condition
                for inner, where in _conditions(option, prefix, inner_needs).items():
                    out.setdefault(inner, []).extend(where)
    return out


def _check_value(key: str, node: _Value | _Choice, value: Any) -> Any:
    if isinstance(node, _Choice):
        if not isinstance(value, str) or value not in node.options:
            raise ArgumentError(
                key, f"{key!r} must be one of {list(node.options)}, got {value!r}"
            )
        return value
    if node.kind == "bool":
        if isinstance(value, (bool, np.bool_)) or (is_integer(value) and value in (0, 1)):
            return bool(value)
        raise ArgumentError(key, f"{key!r} must be a bool, got {value!r}")
    if node.kind == "file":
        if not isinstance(value, (str, os.PathLike)) or not Path(value).is_file():
            raise ArgumentError(
                key, f"{key!r} must name an existing file, got {value!r}"
            )
        return str(Path(value).absolute())
    if node.kind == "int":
        if not is_integer(value):
            raise ArgumentError(key, f"{key!r} must be an int, got {value!r}")
        value = int(value)
    else:
        if not is_number(value) or not math.isfinite(value):
            raise ArgumentError(
                key, f"{key!r} must be a finite real number, got {value!r}"
            )
        value = float(value)
    if not node.ok(value):
        raise ArgumentError(key, f"{key!r} must be {node.rule}, got {value!r}")
    return value


def _adapts_without_warmup(args: Mapping[str, Any]) -> bool:
    return (
        args.get("algorithm", "hmc") == "hmc"
        and args.get("num_warmup", 1000) == 0
        and args.get("adapt.engaged", True)
    )
