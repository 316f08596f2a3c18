"""The learning-rate path's sampler settings, one argument object checked when it is made.

:class:`PathSampler` says how the SMC sweep in ``omega``
(:class:`~stanflow.gibbs.path.sweep.LearningRatePath`) samples: how many
particles, how many moves per schedule point and of which kernel, and how far
each step goes. :class:`~stanflow.gibbs.path.sweep.LearningRatePath` and
:func:`~stanflow.gibbs.path.sweep.gibbs_path` take one as ``sampler=``
(default ``PathSampler()``), and so does
:func:`~stanflow.gibbs.path.calibration.calibrate_path` (default
:data:`CALIBRATION_SAMPLER`, twice the particles and fewer moves). What
depends on the program (at least :data:`MIN_PARTICLES_PER_PARAMETER`
particles per parameter) or on the path (NUTS moves need ``q = 1``) is
checked where the sweep is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stanflow.validation import check_int, is_number

MOVES = ("rwm", "nuts", "auto")
"""The move kernels: random-walk Metropolis, NUTS through the run layer, self-tuning."""
MIN_PARTICLES_PER_PARAMETER = 50
"""The random-walk proposal is the particles' covariance, the schedule keeps
half of them effective, and the calibration's regions are weighted covariances:
fewer than this many particles per parameter is refused."""


@dataclass(frozen=True)
class PathSampler:
    """How the learning-rate path's SMC sweep samples.

    Parameters
    ----------
    n_particles : int, default 2000
        Particles ``N``; at least :data:`MIN_PARTICLES_PER_PARAMETER` per
        parameter of the program (checked by the sweep).
    n_moves : int, default 5
        Moves per schedule point; with ``moves="auto"`` the most per point.
    target_ess : float, default 0.5
        The schedule keeps this fraction of ``N`` effective per step, in (0, 1).
    moves : {"rwm", "nuts", "auto"}, default "rwm"
        Random-walk Metropolis (NumPy, :func:`~stanflow.qpaths.kernels.rwm_moves`),
        NUTS through the program's executable and the run layer
        (:class:`stanflow.gibbs.path.moves.NutsMoves`, ``q = 1`` only), or
        self-tuning moves (:class:`stanflow.qpaths.self_tuning.SelfTuningMoves`:
        independence proposals from the particles' Gaussian where they are
        accepted, else an adapted random walk, as many per point as the
        particles need to decorrelate, at most ``n_moves``): with tens of
        parameters a few random-walk moves leave the particles where their
        ancestors were.

    Raises
    ------
    ValueError
        Naming the field, when the object is made.
    """

    n_particles: int = 2000
    n_moves: int = 5
    target_ess: float = 0.5
    moves: str = "rwm"

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "n_particles", check_particles(self.n_particles, MIN_PARTICLES_PER_PARAMETER)
        )
        object.__setattr__(self, "n_moves", check_int(self.n_moves, "n_moves"))
        if not (is_number(self.target_ess) and 0 < self.target_ess < 1):
            raise ValueError(f"target_ess must lie in (0, 1), got {self.target_ess!r}")
        object.__setattr__(self, "target_ess", float(self.target_ess))
        if self.moves not in MOVES:
            raise ValueError(f"moves must be one of {MOVES}, got {self.moves!r}")


def as_sampler(sampler: Any) -> PathSampler:
    """``sampler``, ``PathSampler()`` for None, or a ``TypeError`` naming it."""
    if sampler is None:
        return PathSampler()
    if not isinstance(sampler, PathSampler):
        raise TypeError(f"sampler must be a PathSampler, got {type(sampler).__name__}")
    return sampler


def check_particles(value: Any, low: int) -> int:
    """``n_particles`` as an int ``>= low`` (:func:`stanflow.validation.check_int`), or a
    ``ValueError`` that also gives the share per parameter behind ``low``."""
    try:
        return check_int(value, "n_particles", low)
    except ValueError:
        raise ValueError(
            f"n_particles must be an integer >= {low} "
            f"({MIN_PARTICLES_PER_PARAMETER} per parameter), got {value!r}"
        ) from None


CALIBRATION_SAMPLER = PathSampler(n_particles=4000, n_moves=3)
""":func:`~stanflow.gibbs.path.calibration.calibrate_path`'s sampler by default:
4000 particles, 3 random-walk moves per schedule point, ``target_ess = 0.5``
(twice the particles of ``PathSampler()``, fewer moves). To change one setting
and keep the others: ``dataclasses.replace(CALIBRATION_SAMPLER, n_particles=8000)``."""
