"""The learning-rate path: every Gibbs posterior from omega = 0 to omega_max in one SMC sweep.

A Gibbs posterior ``pi_omega(theta) ∝ exp(-omega L_n(theta)) pi(theta)`` is, as
``omega`` grows from 0, the geometric annealing path (``q = 1``) from the prior
``pi`` to the Gibbs posterior at ``omega_max``, with ``beta = omega / omega_max``.
One tempered SMC sweep along it (:mod:`stanflow.qpaths.kernels`' pieces: the
ESS-targeted schedule :func:`~stanflow.qpaths.kernels.next_beta`, resampling, the
random-walk kernel :func:`~stanflow.qpaths.kernels.rwm_moves`, or NUTS moves through
the run layer, :mod:`stanflow.gibbs.path.moves`) leaves equally weighted
particles for the Gibbs posterior at every ``omega_k`` of its schedule, and
``log Z_n(omega_k)`` as the running sum of ``log`` mean incremental weights.
Between schedule points the Gibbs posterior at ``omega`` is the particles of
the last schedule point at or below it reweighted by
``exp(-(omega - omega_k) L_n)`` (:mod:`stanflow.gibbs.path.read`), whose
effective sample size the adaptive schedule keeps at least ``target_ess * N``
up to the next point. The sampler's settings (particles, moves, ``target_ess``)
are one argument object, :class:`~stanflow.gibbs.path.sampler.PathSampler`.

With ``q < 1`` the sweep follows the q-path between the same endpoints
(:func:`stanflow.qpaths.qmath.log_qpath`); its intermediate levels are then not
Gibbs posteriors, and every ``omega`` is read from them by importance weights.

A path can also start at a learning rate ``omega_0 > 0`` from particles bridged
from a Gaussian near the data (:mod:`stanflow.gibbs.path.start`): its cost is
then linear in ``n`` instead of ``n log n``, and it reads ``omega`` from
``omega_0`` on.

The pieces: the kernels (:mod:`stanflow.gibbs.path.levels`: :class:`PathLevel`,
one schedule point, and the steps between them), the loop
:class:`LearningRatePath` (which can extend a geometric path to a larger
``omega_max``), and :func:`gibbs_path`, which returns ``InferenceData``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr
from threadpoolctl import ThreadpoolController

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs.path.levels import (
    PathLevel,
    advance,
    initial_level,
    next_omega,
    start_level,
)
from stanflow.gibbs.path.moves import NutsMoves
from stanflow.gibbs.path.read import default_omegas, functionals
from stanflow.gibbs.path.sampler import (
    MIN_PARTICLES_PER_PARAMETER,
    PathSampler,
    as_sampler,
    check_particles,
)
from stanflow.gibbs.path.start import GaussianStart
from stanflow.gibbs.path.target import PathTarget
from stanflow.gibbs.program import LossProgram
from stanflow.qpaths.kernels import RESAMPLING, MoveKernel, rwm_moves
from stanflow.qpaths.qmath import check_q
from stanflow.qpaths.self_tuning import SelfTuningMoves
from stanflow.validation import check_int

_BLAS = ThreadpoolController()


class LearningRatePath:
    """The SMC sweep in ``omega`` for one Gibbs posterior, extendable (``q = 1``).

    Parameters
    ----------
    program : LossProgram
        The Gibbs posterior: any loss program, a template's or a user's.
    q : float, default 1.0
        1: the geometric path, whose levels are the Gibbs posteriors at their
        ``omega``; below 1 a q-path between the same endpoints.
    sampler : PathSampler, optional
        Particles, moves per schedule point and their kernel, ``target_ess``
        (:class:`~stanflow.gibbs.path.sampler.PathSampler`); default
        ``PathSampler()``: 2000 particles, 5 random-walk moves, ``target_ess =
        0.5``. At least :data:`MIN_PARTICLES_PER_PARAMETER` particles per
        parameter; NUTS moves need ``q = 1``.
    resampling : {"systematic", "multinomial"}, default "systematic"
    seed : int, optional
    max_steps : int, default 1000
        Give up (``RuntimeError``) after this many schedule points.
    weights : array_like, shape (n,), optional
        The observations' weights (default all 1; :class:`~stanflow.gibbs.path.target.PathTarget`).
    start : GaussianStart, optional
        Start at ``start.omega`` from particles bridged from a Gaussian
        (:mod:`stanflow.gibbs.path.start`: cost linear in ``n``), not at the
        prior; the path then reads learning rates from ``start.omega`` on.
        Needs ``q = 1`` and random-walk or self-tuning moves. Can also be set
        by :meth:`start_from` before the first :meth:`extend`.

    Raises
    ------
    TypeError, ValueError
        Naming the argument (or the sampler's field), before any sampling.

    Attributes
    ----------
    target : PathTarget
        The program's losses and prior at particles.
    sampler : PathSampler
    levels : list of PathLevel
        The schedule so far, from ``omega = 0`` (or ``start.omega``).
    start : GaussianStart or None
    """

    def __init__(
        self,
        program: LossProgram,
        *,
        q: float = 1.0,
        sampler: PathSampler | None = None,
        resampling: str = "systematic",
        seed: int | None = None,
        max_steps: int = 1000,
        weights: np.ndarray | None = None,
        start: GaussianStart | None = None,
    ) -> None:
        target = PathTarget(program, weights)
        self.q = float(check_q(q))
        sampler = as_sampler(sampler)
        check_particles(sampler.n_particles, MIN_PARTICLES_PER_PARAMETER * target.dim)
        self.max_steps = check_int(max_steps, "max_steps")
        if resampling not in RESAMPLING:
            raise ValueError(f"resampling must be one of {RESAMPLING}, got {resampling!r}")
        if sampler.moves == "nuts" and self.q != 1:
            raise ValueError("moves: NUTS moves sample Gibbs posteriors, so they need q = 1")
        self.target = target
        self.sampler = sampler
        self.resampling = resampling
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._tuned = (
            SelfTuningMoves(max_moves=sampler.n_moves) if sampler.moves == "auto" else None
        )
        self.levels: list[PathLevel] = []
        self.end: float | None = None
        self.start: GaussianStart | None = None
        if start is not None:
            self.start_from(start)

    @property
    def omegas(self) -> np.ndarray:
        """The schedule so far, shape ``(len(levels),)``."""
        return np.array([level.omega for level in self.levels])

    def start_from(self, start: GaussianStart) -> LearningRatePath:
        """Start at ``start`` instead of the prior (before the first :meth:`extend`).

        Raises
        ------
        TypeError, ValueError
            If ``start`` is not a :class:`~stanflow.gibbs.path.start.GaussianStart`
            in the particles' dimension, the path has levels already, or its
            ``q`` or moves cannot bridge from a Gaussian.
        """
        if not isinstance(start, GaussianStart):
            raise TypeError(f"start must be a GaussianStart, got {type(start).__name__}")
        if len(start.mean) != self.target.dim:
            raise ValueError(f"start: a Gaussian in {len(start.mean)} dimensions for "
                             f"particles in {self.target.dim} ({self.target.space} scale)")
        if self.levels:
            raise ValueError(f"start: the path has started already (at omega = "
                             f"{self.levels[0].omega})")
        if self.q != 1 or self.sampler.moves == "nuts":
            raise ValueError("start: a path from a Gaussian needs q = 1 and random-walk or "
                             "self-tuning moves")
        self.start = start
        return self

    def extend(self, omega_max: float) -> LearningRatePath:
        """Sweep on to ``omega_max`` (the first call starts at the prior or at
        :attr:`start`).

        A geometric path (``q = 1``) can be extended again to a larger
        ``omega_max``; a q-path depends on its end and cannot.

        Raises
        ------
        ValueError
            If ``omega_max`` is not positive and finite, or a q-path is
            extended past its end.
        """
        omega_max = check_omega_max(omega_max)
        if self.start is not None and omega_max < self.start.omega:
            raise ValueError(f"omega_max = {omega_max} lies below the path's start, "
                             f"omega = {self.start.omega}")
        if self.end is not None:
            if omega_max <= self.end:
                return self
            if self.q != 1:
                raise ValueError(
                    f"omega_max: a q-path (q = {self.q}) ends at omega_max = {self.end} "
                    "and cannot be extended; choose omega_max up front"
                )
        moves = self._moves(omega_max)
        with _BLAS.limit(limits=1, user_api="blas"):
            if not self.levels:
                self.levels.append(self._first_level(moves))
            while self.levels[-1].omega < omega_max:
                if len(self.levels) > self.max_steps:
                    raise RuntimeError(
                        f"gibbs path: omega = {self.levels[-1].omega} after "
                        f"max_steps = {self.max_steps} schedule points"
                    )
                level = self.levels[-1]
                omega = next_omega(level, omega_max, self.q, self.sampler.target_ess)
                self.levels.append(advance(
                    self.rng, level, omega, self.target, omega_max=omega_max, q=self.q,
                    n_moves=None if self._tuned is not None else self.sampler.n_moves,
                    resampling=self.resampling, moves=moves,
                ))
        self.end = omega_max
        return self

    def to_dataset(self) -> xr.Dataset:
        """The ``path`` group: particles, losses and ``log Z`` by schedule point.

        Variables: ``omega``, ``log_z``, ``log_z_se``, ``ess``, ``acceptance``
        (dim ``step``), ``theta`` (``step``, ``particle``, ``param``: the
        parameters at the particles), ``total_loss`` (``step``, ``particle``).
        Every particle of a step has weight ``1 / N``. Attributes: ``q``,
        ``omega_max``, the sampler's settings and the program
        (:meth:`PathTarget.describe`).
        """
        if not self.levels or self.end is None:
            raise ValueError("the path is empty: call extend(omega_max) first")
        target = self.target
        levels = self.levels
        described = {
            key: value if isinstance(value, (str, int, float)) else json.dumps(value)
            for key, value in target.describe().items()
        }
        return xr.Dataset(
            {
                "omega": ("step", np.array([lv.omega for lv in levels])),
                "log_z": ("step", np.array([lv.log_z for lv in levels])),
                "log_z_se": ("step", np.sqrt([lv.log_z_var for lv in levels])),
                "ess": ("step", np.array([lv.ess for lv in levels])),
                "acceptance": ("step", np.array([lv.acceptance for lv in levels])),
                "theta": (("step", "particle", "param"),
                          np.stack([target.theta(lv.z) for lv in levels])),
                "total_loss": (("step", "particle"), np.stack([lv.loss for lv in levels])),
            },
            coords={"step": np.arange(len(levels)), "param": target.names},
            attrs={
                "method": "gibbs_path",
                "q": self.q,
                "omega_max": float(self.end),
                "n_particles": self.sampler.n_particles,
                "n_moves": self.sampler.n_moves,
                "target_ess": self.sampler.target_ess,
                "resampling": self.resampling,
                "moves": self.sampler.moves,
                "seed": -1 if self.seed is None else int(self.seed),
                **({"start": "prior"} if self.start is None else self.start.describe()),
                **described,
                "log_z": "log Z_n(omega) with the prior normalised"
                if self.q == 1 else "log normalising constant of each q-path level relative to the prior",
            },
        )

    def _first_level(self, moves: MoveKernel) -> PathLevel:
        if self.start is None:
            return initial_level(self.rng, self.target, self.sampler.n_particles)
        return start_level(
            self.rng, self.target, self.start, self.sampler.n_particles, moves=moves,
            n_moves=None if self._tuned is not None else self.sampler.n_moves,
            target_ess=self.sampler.target_ess, resampling=self.resampling,
        )

    def _moves(self, omega_max: float) -> MoveKernel:
        if self._tuned is not None:
            return self._tuned
        if self.sampler.moves == "rwm":
            return rwm_moves
        return NutsMoves(self.target, omega_max)


def gibbs_path(
    program: LossProgram,
    *,
    omega_max: float = 1.0,
    q: float = 1.0,
    sampler: PathSampler | None = None,
    resampling: str = "systematic",
    seed: int | None = None,
    omegas: np.ndarray | None = None,
    probs: Sequence[float] = (0.025, 0.5, 0.975),
    weights: np.ndarray | None = None,
    start: GaussianStart | None = None,
) -> Results:
    """Every Gibbs posterior of a loss program from ``omega = 0`` to ``omega_max`` by one SMC sweep.

    Parameters
    ----------
    program : LossProgram
        Any loss program: a template's (:func:`~stanflow.gibbs.location_program`,
        ``linear_program``; a shipped prior's draws are exact) or a user's (the
        prior drawn by NUTS at ``omega = 0``; :mod:`stanflow.gibbs.path.target`).
    omega_max : float, default 1.0
        Where the path ends; positive and finite.
    q, sampler, resampling, seed
        The sweep (:class:`LearningRatePath`); ``sampler`` a
        :class:`~stanflow.gibbs.path.sampler.PathSampler`, default
        ``PathSampler()`` (2000 particles, 5 random-walk moves).
    omegas : array_like, optional
        Where to tabulate the functionals; default the schedule and 151 points
        spaced geometrically from ``omega_max / 1000`` (or the start's
        ``omega``, if larger) to ``omega_max``.
    probs : sequence of float, default (0.025, 0.5, 0.975)
        Quantile levels of the functionals (the first and last give the
        equal-tailed interval).
    weights : array_like, shape (n,), optional
        The observations' weights (default all 1).
    start : GaussianStart, optional
        Start at ``start.omega`` from a Gaussian near the data instead of the
        prior (:class:`LearningRatePath`; cost linear in ``n``).

    Returns
    -------
    Results
        ``path`` (:meth:`LearningRatePath.to_dataset`), ``path_functionals``
        (:func:`stanflow.gibbs.path.read.functionals`: mean, quantiles, their
        Monte Carlo errors and ``log Z_n`` against ``omega``) and the program's
        data groups (a template's ``observed_data`` and ``constant_data``).

    Raises
    ------
    ValueError, TypeError
        Naming the argument, before any sampling: ``omega_max <= 0``, too few
        particles for the number of parameters, a ``sampler`` that is not a
        :class:`~stanflow.gibbs.path.sampler.PathSampler`.
    """
    omega_max = check_omega_max(omega_max)
    path = LearningRatePath(
        program, q=q, sampler=sampler, resampling=resampling, seed=seed, weights=weights,
        start=start,
    ).extend(omega_max)
    group = path.to_dataset()
    grid = default_omegas(group) if omegas is None else omegas
    return to_inference_data(group, functionals(group, grid, probs), program)


def to_inference_data(
    path: xr.Dataset, table: xr.Dataset, program: LossProgram, **groups: xr.Dataset
) -> Results:
    """Results of a path: ``path``, ``path_functionals``, the program's data groups, and more groups."""
    return arviz_compat.build(
        {"path": path, "path_functionals": table, **program.data_groups(), **groups}
    )


def check_omega_max(omega_max: Any) -> float:
    """``omega_max`` as a float, or a ``TypeError``/``ValueError`` naming it."""
    if isinstance(omega_max, bool) or not isinstance(omega_max, (int, float, np.number)):
        raise TypeError(f"omega_max must be a number, got {type(omega_max).__name__}")
    if not (math.isfinite(omega_max) and omega_max > 0):
        raise ValueError(f"omega_max must be positive and finite, got {omega_max!r}")
    return float(omega_max)
