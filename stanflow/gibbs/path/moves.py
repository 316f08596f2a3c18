"""NUTS moves for the learning-rate path: particles as chains of the program's executable.

On the geometric path the level at ``beta`` is the Gibbs posterior at
``omega = beta * omega_max``, which is exactly what a loss program's executable
samples with ``omega`` as data. So a move of every particle is one
single-chain run per particle (the particle as inits, no warm-up,
``n_moves`` NUTS transitions with a fixed step size and a diagonal metric),
and the runs of one level form one :class:`~stanflow.runs.RunSet`, which batch
mode packs into a few processes (so the executable is built with stanflow's
driver, also beside a CmdStan of the user's). It is meant for targets that
random-walk moves mix poorly on.

Tuning from the particles before the moves: the inverse metric is the
particles' variance on Stan's unconstrained scale; the step size starts at
``K^(-1/4)`` and after each level is multiplied by ``exp(accept -
target_accept)`` (clipped to ``[0.5, 2]``), as
:class:`stanflow.qpaths.stan_moves.StanMoves` does for the q-path template.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stanflow.gibbs.path.target import PathTarget
from stanflow.qpaths.stan_moves import StanMoves, nuts_transitions


class NutsMoves(StanMoves):
    """A :class:`~stanflow.qpaths.stan_moves.StanMoves` running the loss program's executable.

    The tuning, the run sets and the history are those of ``StanMoves``; the
    runs sample the Gibbs posterior at ``omega = beta * omega_max``.

    Parameters
    ----------
    target : PathTarget
        The program's losses and prior at particles.
    omega_max : float
        The path's end: the level at ``beta`` is the Gibbs posterior at
        ``beta * omega_max``.
    work_dir : path, optional
        Scratch folder: each level's run set goes in a subfolder of it that is
        removed after reading (nothing is kept); default the system's
        temporary folder.
    target_accept : float, default 0.8
    max_depth : int, default 6

    Attributes
    ----------
    step_size : float or None
    history : list of dict
        Per level: ``omega``, ``step_size``, ``accept``, ``seconds``.
    """

    def __init__(
        self,
        target: PathTarget,
        omega_max: float,
        work_dir: str | Path | None = None,
        target_accept: float = 0.8,
        max_depth: int = 6,
    ) -> None:
        self._setup(target_accept, work_dir, max_depth)
        self.target = target
        self.omega_max = float(omega_max)
        self.model = target.program.model("stanflow")

    def _check(self, z: np.ndarray, q: float) -> None:
        if q != 1:
            raise ValueError(f"q: NUTS moves on the Gibbs template need q = 1, got {q}")

    def _where(self, beta: float) -> dict[str, float]:
        return {"omega": beta * self.omega_max}

    def _run(
        self, rng: np.random.Generator, z: np.ndarray, beta: float, q: float, n_moves: int,
        step_size: float, root: Path,
    ) -> tuple[np.ndarray, float, float]:
        target = self.target
        program = target.program
        omega = beta * self.omega_max
        theta, accept, seconds = nuts_transitions(
            self.model,
            program.stan_data(float(omega), target.weights),
            [program.inits(point) for point in target.theta(z)],
            target.names,
            inv_metric=np.var(target.unconstrained(z), axis=0),
            step_size=step_size,
            n_moves=n_moves,
            max_depth=self.max_depth,
            root=root,
            seed=int(rng.integers(2**63)),
            where=f"at omega = {omega}",
        )
        moved = theta if target.space == "box" else program.unconstrain(theta)
        return moved, accept, seconds
