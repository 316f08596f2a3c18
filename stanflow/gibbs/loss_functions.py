"""What the estimate and the sandwich need of a loss program: its losses in process.

:class:`~stanflow.gibbs.program.LossProgram` has all of it; the modules that
compute from a program (:mod:`stanflow.gibbs.estimate`,
:mod:`stanflow.gibbs.sandwich`) type their argument with this protocol, so
that they do not import the program that imports them.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from stanflow.gibbs.contract import ProgramSource


class LossFunctions(Protocol):
    """A loss program's losses and gradients on Stan's unconstrained scale.

    Attributes
    ----------
    source : ProgramSource
        The program as read (its ``path`` names it in errors).
    names : list of str
        The parameters as declared, flattened.
    dim : int
        ``D``, the unconstrained dimension.
    n : int
        Number of observations.
    """

    source: ProgramSource
    names: list[str]
    dim: int
    n: int

    def losses(self, u: np.ndarray) -> np.ndarray:
        """Every observation's loss at every point, shape ``(S, n)``."""
        ...

    def total_loss(self, u: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """``sum_i weights[i] loss_i`` at every point, shape ``(S,)``."""
        ...

    def loss_gradient(
        self, u: np.ndarray, weights: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The total loss and its gradient in ``u``, shapes ``(S,)`` and ``(S, D)``."""
        ...

    def constrain(self, u: np.ndarray) -> np.ndarray:
        """The parameters as declared at ``u``, shape ``(S, len(names))``."""
        ...
