"""The signature each slot file must define, checked by stanc before anything compiles.

A loss or penalty of your own goes into several programs (a loss into the
Gibbs templates, ``stan/losses/pointwise.stan``, ``stan/losses/pair.stan``,
the WBB programs), and a file that does not define the slot's function with
its signature would fail in whichever of them compiles first, with stanc's
message about that program. :func:`check_signature` runs stanc alone (no C++
compile; once per content in a process) on the slot's *harness*, the shipped
program in which every argument that may be a parameter is one, so a file
that passes works in every program of every method; the error names your file
and the signature the slot needs. :func:`slot_compile_error` words the same
error for any program compiled with slot files (the Gibbs templates use it for
their prior).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stanflow.models import CompileError, program_path
from stanflow.models.source import check_compiles
from stanflow.models.templates import origin_note, render_with_origins
from stanflow.toolchain import installer


@dataclass(frozen=True)
class Slot:
    """A slot of the shipped programs.

    Attributes
    ----------
    name : str
        The argument that fills it (``"loss"``); its include is ``<name>.stanfunctions``.
    signature : str
        The function the file must define.
    harness : str or None
        The shipped program (:func:`stanflow.models.program_path`) that
        :func:`check_signature` compiles with stanc; None if there is none.
    """

    name: str
    signature: str
    harness: str | None = None

    @property
    def include(self) -> str:
        """The include name the programs use, e.g. ``"loss.stanfunctions"``."""
        return f"{self.name}.stanfunctions"


LOSS = Slot("loss", "real loss(real y, real f, vector loss_params)", "losses/pair")
"""The loss slot: ``y`` and ``f`` may be parameters (``pair.stan``), ``loss_params`` is data."""
PRIOR = Slot("prior", "real log_prior(vector theta, vector prior_params)")
PENALTY = Slot("penalty", "real penalty(vector beta, vector penalty_params)", "wbb/penalty_only")


def check_signature(file: str | os.PathLike, slot: Slot) -> None:
    """Check with stanc that ``file`` defines ``slot``'s function as its programs call it.

    Raises
    ------
    stanflow.models.CompileError
        Naming ``file``, the signature the slot needs and stanc's message
        (with the file and line it points to).
    ValueError
        If ``slot`` has no harness (such as :data:`PRIOR`).
    """
    if slot.harness is None:
        raise ValueError(f"slot {slot.name!r} has no program to check a file against")
    harness = program_path(slot.harness)
    code, origins = render_with_origins(harness, slots={slot.include: file})
    try:
        check_compiles(harness, code, installer.install() / "bin" / "stanc")
    except CompileError as err:
        located = CompileError(f"{err}{origin_note(err.console, origins)}", err.console)
        program = f"{slot.name}: the slot's check, stan/{slot.harness}.stan,"
        raise slot_compile_error(located, program, {slot: Path(file)}) from None


def slot_compile_error(
    err: CompileError, program: str, files: Mapping[Slot, str | os.PathLike]
) -> CompileError:
    """``err`` reworded to name the slot files and the signatures they must define.

    Parameters
    ----------
    err : stanflow.models.CompileError
        The compiler's error.
    program : str
        What did not compile, e.g. ``"the Gibbs template location.stan"``.
    files : mapping of Slot to path
        The slot files it was compiled with.

    Returns
    -------
    stanflow.models.CompileError
        With the compiler's console kept.
    """
    given = " and ".join(f"{slot.name} file {path}" for slot, path in files.items())
    needed = " and ".join(f"`{slot.signature}`" for slot in files)
    verb = "it must define" if len(files) == 1 else "they must define"
    return CompileError(
        f"{program} did not compile with {given}; {verb} {needed}.\n{err}", err.console
    )
