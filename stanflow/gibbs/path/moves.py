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

import shutil
import tempfile
from pathlib import Path

import numpy as np

from stanflow.gibbs.path.target import PathTarget
from stanflow.outdir import Interrupted
from stanflow.qpaths.kernels import LogDensity, MoveInfo, Particles, evaluate
from stanflow.qpaths.stan_moves import adapted_step_size, nuts_transitions


class NutsMoves:
    """A move kernel (:data:`stanflow.qpaths.kernels.MoveKernel`) running the Gibbs template.

    Parameters
    ----------
    target : PathTarget
        The program's losses and prior at particles.
    omega_max : float
        The path's end: the level at ``beta`` is the Gibbs posterior at
        ``beta * omega_max``.
    work_dir : path, optional
        Where each level's run set goes (removed after reading).
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
        if not 0 < target_accept < 1:
            raise ValueError(f"target_accept must lie in (0, 1), got {target_accept}")
        self.target = target
        self.omega_max = float(omega_max)
        self.model = target.program.model("stanflow")
        self.work_dir = Path(work_dir) if work_dir is not None else None
        self.target_accept = target_accept
        self.max_depth = int(max_depth)
        self.step_size: float | None = None
        self.history: list[dict] = []

    def __call__(
        self,
        rng: np.random.Generator,
        particles: Particles,
        beta: float,
        q: float,
        log_pi0: LogDensity,
        log_pi1: LogDensity,
        n_moves: int,
    ) -> tuple[Particles, MoveInfo]:
        """``n_moves`` NUTS transitions of every particle at ``omega = beta * omega_max``.

        Raises
        ------
        ValueError
            If ``q != 1`` (the template samples Gibbs posteriors only).
        RuntimeError
            If a run fails.
        """
        if q != 1:
            raise ValueError(f"q: NUTS moves on the Gibbs template need q = 1, got {q}")
        if self.step_size is None:
            self.step_size = float(self.target.dim ** -0.25)
        step_size = self.step_size
        omega = beta * self.omega_max
        root = Path(tempfile.mkdtemp(prefix="path-moves-", dir=self.work_dir))
        try:
            moved, accept, seconds = self._run(rng, particles.z, omega, n_moves, step_size, root)
        except Interrupted:  # its folder is removed below: nothing is kept to resume
            raise KeyboardInterrupt from None
        finally:
            shutil.rmtree(root, ignore_errors=True)
        self.history.append(
            {"omega": omega, "step_size": step_size, "accept": accept, "seconds": seconds}
        )
        self.step_size = adapted_step_size(step_size, accept, self.target_accept)
        return evaluate(moved, log_pi0, log_pi1), MoveInfo(accept, n_moves)

    def _run(
        self, rng: np.random.Generator, z: np.ndarray, omega: float, n_moves: int,
        step_size: float, root: Path,
    ) -> tuple[np.ndarray, float, float]:
        target = self.target
        program = target.program
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
