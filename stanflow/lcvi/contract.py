"""The LCVI-program contract: what a Stan program of your own declares to get LCVI.

An *LCVI program* is a complete Stan program that

- includes stanflow's functions in its functions block, ``#include
  lcvi.stanfunctions``, and stanflow's data in its data block, ``#include
  lcvi_data.stan``: the decisions ``lcvi_h``, the outcomes' base samples
  ``lcvi_z`` (standard normal) and ``lcvi_u`` (uniform), the settings
  ``lcvi``, and their sizes ``lcvi_S``, ``lcvi_N``, ``lcvi_size``;
- adds the utility term to its target once, with the outcomes of the
  ``lcvi_N`` decisions written in Stan: ``target += lcvi_utility(loc, sd,
  lcvi_z, lcvi_h, lcvi);`` for normal outcomes, or ``target +=
  lcvi_utility(outcomes, lcvi_h, lcvi);`` for an ``lcvi_S x lcvi_N`` matrix of
  outcomes computed from the base samples.

This module reads a program and checks those declarations; its *evaluation
form* (:func:`evaluation_form`) is the same program with ``lcvi_z``,
``lcvi_u``, ``lcvi_h`` and ``lcvi`` moved from the data block to the end of the
parameters block. Loaded in process, that form gives at any parameters, base
samples and decisions the target and its gradient, and with the settings'
*probe* on, the outcomes themselves: ``lcvi_utility`` then adds ``sum(probe .*
outcomes)`` (or ``loc`` and ``sd``) to the target, so the gradient in the probe
is the outcomes, read off the target as a loss program's losses are. Checks
that need the loaded program are in :mod:`stanflow.lcvi.program`.

Docs: ``docs/your-own-model.md`` ("LCVI").
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from stanflow.gibbs.contract import ContractError
from stanflow.models.cache import CompileError
from stanflow.models.source import check_compiles, move_to_parameters, read_source
from stanflow.resources import resource_dir

CONTRACT_PAGE = "docs/your-own-model.md#lcvi"
"""The contract's documentation, named in every contract error."""

FUNCTIONS_INCLUDE = "#include lcvi.stanfunctions"
DATA_INCLUDE = "#include lcvi_data.stan"
DECLARATIONS = {
    "lcvi_S": ("int", 0),
    "lcvi_N": ("int", 0),
    "lcvi_z": ("real", 2),
    "lcvi_u": ("real", 2),
    "lcvi_h": ("real", 1),
    "lcvi_size": ("int", 0),
    "lcvi": ("real", 1),
}
"""stanflow's data of an LCVI program (``stan/lcvi/lcvi_data.stan``): name -> (type, dims)."""

MOVED = {
    "lcvi_z": "matrix[lcvi_S, lcvi_N] lcvi_z;",
    "lcvi_u": "matrix[lcvi_S, lcvi_N] lcvi_u;",
    "lcvi_h": "vector[lcvi_N] lcvi_h;",
    "lcvi": "vector[lcvi_size] lcvi;",
}
"""The declarations the evaluation form moves to the parameters, in this order."""

_MOVED_LINE = re.compile(
    r"^\s*(?:matrix|vector)(?:<.*>)?\[[^\]]*\]\s+(?P<name>lcvi_z|lcvi_u|lcvi_h|lcvi);"
)
_UTILITY_CALL = re.compile(r"target\s*\+=[^;]*\blcvi_utility\s*\(")
_DEFINITION = re.compile(r"^\s*real lcvi_utility\(matrix outcomes", re.MULTILINE)


@dataclass(frozen=True)
class LcviSource:
    """An LCVI program read and checked against the contract's declarations.

    Attributes
    ----------
    path : pathlib.Path
    code : str
        Includes resolved (the loss slot bound to the squared loss), as
        ``stanc --auto-format`` prints it.
    inputs, parameters : dict
        ``stanc --info`` of the data and parameters blocks.
    """

    path: Path
    code: str
    inputs: dict
    parameters: dict

    @property
    def user_inputs(self) -> list[str]:
        """The data variables the user supplies: all but stanflow's."""
        return [name for name in self.inputs if name not in DECLARATIONS]


def contract_error(path: Path | str, problem: str) -> ContractError:
    """A :class:`~stanflow.gibbs.ContractError` for ``path`` saying ``problem``."""
    return ContractError(
        f"LCVI program {path}: {problem} (the LCVI-program contract: {CONTRACT_PAGE})"
    )


def read_lcvi_program(
    path: str | os.PathLike,
    stanc: Path,
    *,
    include_paths: Iterable[str | os.PathLike] = (),
    slots: Mapping[str, str | os.PathLike] | None = None,
) -> LcviSource:
    """Read a Stan program and check the contract's declarations and includes.

    Raises
    ------
    ContractError
        A missing file, not a ``.stan`` program, no parameters, stanflow's
        functions or data not included, its data declared otherwise, no
        ``lcvi_utility`` in the model block.
    stanflow.models.CompileError
        If stanc rejects the program (its message names the line).
    """
    path = Path(path)
    if not path.is_file():
        raise contract_error(path, "file not found")
    if path.suffix != ".stan":
        raise contract_error(path, "an LCVI program is a complete Stan program, a .stan file")
    text = path.read_text()
    if "lcvi.stanfunctions" not in text:
        raise contract_error(
            path, f"stanflow's functions are not included: add `{FUNCTIONS_INCLUDE}` to the "
            "functions block"
        )
    if "lcvi_data.stan" not in text:
        raise contract_error(
            path, f"the data block lacks stanflow's LCVI data: add `{DATA_INCLUDE}` to the "
            "data block"
        )
    check_loss = resource_dir("stan") / "losses" / "squared.stanfunctions"
    bound = {"loss.stanfunctions": check_loss, **dict(slots or {})}
    code, info = read_source(path, stanc, include_paths=include_paths, slots=bound)
    if not _DEFINITION.search(code):
        raise contract_error(
            path, f"stanflow's functions are not included: add `{FUNCTIONS_INCLUDE}` to the "
            "functions block"
        )
    inputs = info["inputs"]
    missing = [name for name in DECLARATIONS if name not in inputs]
    if missing:
        raise contract_error(
            path, f"the data block lacks stanflow's LCVI data ({', '.join(missing)}): add "
            f"`{DATA_INCLUDE}` to the data block"
        )
    for name, (kind, dims) in DECLARATIONS.items():
        if (inputs[name]["type"], inputs[name]["dimensions"]) != (kind, dims):
            raise contract_error(
                path, f"`{name}` is declared otherwise than in lcvi_data.stan: include "
                f"`{DATA_INCLUDE}` instead of declaring it yourself"
            )
    if not info["parameters"]:
        raise contract_error(path, "the program has no parameters block")
    model = _model_block(code)
    if not _UTILITY_CALL.search(model):
        raise contract_error(
            path, "the model block never adds the utility term: add `target += "
            "lcvi_utility(loc, sd, lcvi_z, lcvi_h, lcvi);` (normal outcomes) or `target += "
            "lcvi_utility(outcomes, lcvi_h, lcvi);`"
        )
    moved = [m.group("name") for line in code.splitlines() if (m := _MOVED_LINE.match(line))]
    if sorted(moved) != sorted(MOVED):
        raise contract_error(
            path, f"declare stanflow's data with `{DATA_INCLUDE}` in the data block, once"
        )
    return LcviSource(path.resolve(), code, inputs, info["parameters"])


def evaluation_form(source: LcviSource, stanc: Path) -> str:
    """The program with ``lcvi_z``, ``lcvi_u``, ``lcvi_h`` and ``lcvi`` as its last parameters.

    Raises
    ------
    ContractError
        If stanc rejects that form: stanflow's variables are used where only
        data may be (transformed data, a size, a ``data`` argument).
    """
    code = move_to_parameters(
        source.code, lambda line: bool(_MOVED_LINE.match(line)), MOVED.values()
    )
    try:
        check_compiles(source.path, code, stanc)
    except CompileError as err:
        raise contract_error(
            source.path,
            "lcvi_z, lcvi_u, lcvi_h and lcvi may be used only where a parameter may (the "
            "model block), because stanflow evaluates the program in process with them as "
            f"parameters, and stanc rejects it so:\n{err.console}",
        ) from None
    return code


def _model_block(code: str) -> str:
    """The text of the model block of formatted code."""
    match = re.search(r"^model \{$(?P<body>.*?)^\}$", code, re.MULTILINE | re.DOTALL)
    return match.group("body") if match else ""
