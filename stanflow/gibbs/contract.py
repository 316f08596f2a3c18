"""The loss-program contract: what a Stan program must declare to be a Gibbs posterior.

A *loss program* is a complete Stan program whose

- data include the learning rate ``real<lower=0> omega;`` and one weight per
  observation ``vector<lower=0>[N] weights;`` (any size expression, the
  number of observations ``n``);
- target is ``-omega * sum_i weights[i] * loss_i(theta) + log prior(theta)``,
  the losses and the prior free of ``omega`` and ``weights``.

stanflow sets ``omega`` and ``weights``; everything else in the data block is
the user's. This module reads a program (``#include`` lines resolved as
:func:`stanflow.models.render` does, formatted by ``stanc --auto-format``),
checks the two declarations, and writes the program's *evaluation form*: the
same program with ``omega`` and ``weights`` moved from the data block to the
end of the parameters block. Loaded in process, that form gives at any
parameter value, for any ``omega`` and any weights, the target and its
gradient, and ``d target / d weights[i] = -omega * loss_i(theta)``: every
observation's loss is read off the target itself, so the program never states
its losses twice. The checks that need the loaded program (losses finite,
target linear in the weights) are in :mod:`stanflow.gibbs.program`.

Docs: ``docs/your-own-model.md``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from stanflow.models.cache import CompileError
from stanflow.models.source import (
    block_lines,
    check_compiles,
    move_to_parameters,
    read_source,
)

CONTRACT_PAGE = "docs/your-own-model.md"
"""The contract's documentation, named in every contract error."""
OMEGA = "omega"
WEIGHTS = "weights"
OMEGA_DECLARATION = "real<lower=0> omega;"
WEIGHTS_DECLARATION = "vector<lower=0>[N] weights;"

_OMEGA_LINE = re.compile(r"^\s*real(?:<.*>)?\s+omega;\s*(?://.*)?$")
_WEIGHTS_LINE = re.compile(r"^\s*vector(?:<.*>)?\[(?P<size>.+)\]\s+weights;\s*(?://.*)?$")


class ContractError(ValueError):
    """A Stan program, or its data, does not meet the loss-program contract.

    The message names the program, what is missing or wrong, and the contract's
    page (:data:`CONTRACT_PAGE`).
    """


@dataclass(frozen=True)
class ProgramSource:
    """A loss program read and checked against the contract's declarations.

    Attributes
    ----------
    path : pathlib.Path
        The program's file.
    code : str
        The program with its includes resolved, as ``stanc --auto-format``
        prints it.
    inputs : dict
        The data block's variables, ``name -> {"type", "dimensions"}`` (``stanc
        --info``), ``omega`` and ``weights`` included.
    parameters : dict
        The parameters block's variables, likewise.
    quantities : dict
        The transformed parameters and generated quantities, likewise.
    weights_size : str
        The size expression of ``weights`` (``"N"`` in ``vector[N] weights``).
    """

    path: Path
    code: str
    inputs: dict
    parameters: dict
    quantities: dict
    weights_size: str

    @property
    def user_inputs(self) -> list[str]:
        """The data variables the user supplies: all but ``omega`` and ``weights``."""
        return [name for name in self.inputs if name not in (OMEGA, WEIGHTS)]


def contract_error(path: Path | str, problem: str) -> ContractError:
    """A :class:`ContractError` for ``path`` saying ``problem`` and where the contract is."""
    return ContractError(
        f"loss program {path}: {problem} (the loss-program contract: {CONTRACT_PAGE})"
    )


def read_program(
    path: str | os.PathLike,
    stanc: Path,
    *,
    include_paths: Iterable[str | os.PathLike] = (),
    slots: Mapping[str, str | os.PathLike] | None = None,
) -> ProgramSource:
    """Read a Stan program and check the contract's declarations.

    Parameters
    ----------
    path : str or os.PathLike
        A complete Stan program (``.stan``).
    stanc : pathlib.Path
        The ``stanc`` executable that formats and describes it.
    include_paths : iterable of path, optional
        Folders for its ``#include`` lines (:func:`stanflow.models.render`;
        the including file's folder and the shipped ``stan/`` folder are
        always searched).
    slots : mapping, optional
        Bindings of include names to files, for a template
        (:func:`stanflow.models.render`).

    Returns
    -------
    ProgramSource

    Raises
    ------
    ContractError
        If the file is missing, is not a ``.stan`` program, has no parameters,
        or does not declare ``omega`` and ``weights`` in its data block as
        :data:`OMEGA_DECLARATION` and :data:`WEIGHTS_DECLARATION` say.
    stanflow.models.CompileError
        If stanc rejects the program (its message names the line).
    """
    path = Path(path)
    if not path.is_file():
        raise contract_error(path, "file not found")
    if path.suffix != ".stan":
        raise contract_error(
            path, "a loss program is a complete Stan program, a .stan file "
            "(a loss of (y, f) alone is a .stanfunctions slot file: docs/your-own-loss.md)"
        )
    code, info = read_source(path, stanc, include_paths=include_paths, slots=slots)
    inputs, parameters = info["inputs"], info["parameters"]
    _check_declaration(path, inputs, OMEGA, 0, OMEGA_DECLARATION)
    _check_declaration(path, inputs, WEIGHTS, 1, WEIGHTS_DECLARATION)
    if not parameters:
        raise contract_error(path, "the program has no parameters block (theta)")
    block = block_lines(code, "data")
    omega_lines = [line for line in block if _OMEGA_LINE.match(line)]
    weights_lines = [m for line in block if (m := _WEIGHTS_LINE.match(line))]
    if len(omega_lines) != 1:
        raise contract_error(
            path, f"declare the learning rate on a line of its own in the data block: "
            f"`{OMEGA_DECLARATION}`"
        )
    if len(weights_lines) != 1:
        raise contract_error(
            path, "declare the weights as a vector, one per observation, on a line of its "
            f"own in the data block: `{WEIGHTS_DECLARATION}`"
        )
    quantities = {**info["transformed parameters"], **info["generated quantities"]}
    return ProgramSource(path.resolve(), code, inputs, parameters, quantities,
                         weights_lines[0].group("size").strip())


def evaluation_form(source: ProgramSource) -> str:
    """The program with ``omega`` and ``weights`` as its last parameters.

    Their declarations leave the data block and are appended, unconstrained, to
    the parameters block, so that an unconstrained point is ``(theta, omega,
    weights)`` and one loaded program serves every learning rate and weight
    vector.
    """
    return move_to_parameters(
        source.code,
        lambda line: bool(_OMEGA_LINE.match(line) or _WEIGHTS_LINE.match(line)),
        [f"real {OMEGA};", f"vector[{source.weights_size}] {WEIGHTS};"],
    )


def check_evaluation_form(source: ProgramSource, code: str, stanc: Path) -> None:
    """Run stanc on the evaluation form; a failure says why the contract needs it.

    Raises
    ------
    ContractError
        If stanc rejects the program once ``omega`` and ``weights`` are
        parameters: they are then used where only data may be (transformed
        data, a size, a ``data``-qualified argument).
    """
    try:
        check_compiles(source.path, code, stanc)
    except CompileError as err:
        raise contract_error(
            source.path,
            "omega and weights may be used only where a parameter may (the model block, "
            "transformed parameters, generated quantities), because stanflow evaluates "
            "the program in process with both as parameters, and stanc rejects it so:\n"
            f"{err.console}",
        ) from None


def _check_declaration(path: Path, inputs: dict, name: str, dims: int, declaration: str) -> None:
    found = inputs.get(name)
    if found is None:
        raise contract_error(path, f"the data block declares no `{name}`: add `{declaration}`")
    if found["type"] != "real" or found["dimensions"] != dims:
        raise contract_error(
            path, f"`{name}` must be declared `{declaration}`, found a {found['type']} with "
            f"{found['dimensions']} dimension(s)"
        )
