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

The pieces: :class:`PathLevel` (one schedule point), the kernels
:func:`initial_level`, :func:`next_omega` and :func:`advance`, the loop
:class:`LearningRatePath` (which can extend a geometric path to a larger
``omega_max``), and :func:`gibbs_path`, which returns ``InferenceData``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import xarray as xr
from threadpoolctl import ThreadpoolController

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs.path.moves import NutsMoves
from stanflow.gibbs.path.read import default_omegas, functionals
from stanflow.gibbs.path.sampler import (
    MIN_PARTICLES_PER_PARAMETER,
    PathSampler,
    as_sampler,
    check_particles,
)
from stanflow.gibbs.path.target import PathTarget
from stanflow.gibbs.program import LossProgram
from stanflow.qpaths import smc_step
from stanflow.qpaths.kernels import (
    RESAMPLING,
    MoveKernel,
    Particles,
    next_beta,
    rwm_moves,
)
from stanflow.qpaths.qmath import check_q
from stanflow.qpaths.self_tuning import SelfTuningMoves
from stanflow.validation import check_int

_BLAS = ThreadpoolController()


class PathLevel(NamedTuple):
    """One schedule point of the path: equally weighted particles.

    Attributes
    ----------
    omega : float
        The learning rate (``beta * omega_max``).
    z : ndarray, shape (N, d)
        Particles after resampling and moves, where the target's particles
        live (:class:`~stanflow.gibbs.path.target.PathTarget`).
    loss : ndarray, shape (N,)
        Their total losses ``L_n(theta)``.
    log_prior : ndarray, shape (N,)
        Their prior log densities (normalised on the box).
    log_z : float
        ``log`` of the level's normalising constant relative to the prior,
        ``log int pi exp(g_k)``, with ``g_k`` from
        :func:`~stanflow.gibbs.path.read.log_level_density`;
        ``log Z_n(omega)`` on the geometric path.
    log_z_var : float
        Its variance estimate, ``sum_k (1/ESS_k - 1/N)`` over the steps so far
        (exact for perfectly mixing moves).
    ess : float
        Effective sample size of the incremental weights into this level
        (``N`` at the prior).
    acceptance : float
        Mean acceptance of the moves at this level (``nan`` at the prior).
    """

    omega: float
    z: np.ndarray
    loss: np.ndarray
    log_prior: np.ndarray
    log_z: float
    log_z_var: float
    ess: float
    acceptance: float


def initial_level(rng: np.random.Generator, target: PathTarget, n_particles: int) -> PathLevel:
    """The path at ``omega = 0``: ``n_particles`` draws from the prior."""
    z = np.asarray(target.sample_prior(rng, n_particles), dtype=float)
    return PathLevel(
        omega=0.0,
        z=z,
        loss=target.total_loss(z),
        log_prior=target.log_prior(z),
        log_z=0.0,
        log_z_var=0.0,
        ess=float(n_particles),
        acceptance=math.nan,
    )


def next_omega(level: PathLevel, omega_max: float, q: float, target_ess: float) -> float:
    """The next schedule point: the largest ``omega <= omega_max`` keeping the
    effective sample size of the incremental weights at ``target_ess * N``
    (bisection, :func:`stanflow.qpaths.kernels.next_beta`)."""
    beta = next_beta(_particles(level, omega_max), level.omega / omega_max, q, target_ess)
    return omega_max if beta >= 1.0 else beta * omega_max


def advance(
    rng: np.random.Generator,
    level: PathLevel,
    omega: float,
    target: PathTarget,
    *,
    omega_max: float,
    q: float,
    n_moves: int | None,
    resampling: str,
    moves: MoveKernel,
) -> PathLevel:
    """One SMC step: reweight to ``omega``, resample, move ``n_moves`` times.

    Parameters
    ----------
    rng : numpy.random.Generator
    level : PathLevel
        The current schedule point.
    omega : float
        The next one, in ``(level.omega, omega_max]``.
    target : PathTarget
    omega_max, q : float
        The path's end and its ``q``.
    n_moves : int or None
        None: as many as the kernel finds needed (self-tuning moves).
    resampling : {"systematic", "multinomial"}
    moves : callable
        A :data:`stanflow.qpaths.kernels.MoveKernel` targeting ``pi_{beta,q}``
        between the prior and the Gibbs posterior at ``omega_max``.

    Returns
    -------
    PathLevel
    """
    particles = _particles(level, omega_max)
    beta, beta_next = level.omega / omega_max, min(1.0, omega / omega_max)
    log_pi0, log_pi1 = _densities(target, omega_max)
    try:
        state, info = smc_step.step(
            rng, smc_step.SMCState(particles, np.zeros(len(particles.z)), beta), beta_next, q,
            log_pi0, log_pi1, moves=moves, n_moves=n_moves, resampling=resampling,
        )
    except RuntimeError as err:
        raise RuntimeError(f"gibbs path, omega = {level.omega} to {omega}: {err}") from None
    moved, step_ess, n = state.particles, info.ess, len(particles.z)
    return PathLevel(
        omega=float(omega),
        z=moved.z,
        loss=(moved.log_pi0 - moved.log_pi1) / omega_max,
        log_prior=moved.log_pi0,
        log_z=level.log_z + info.log_z_increment,
        log_z_var=level.log_z_var + max(0.0, 1.0 / step_ess - 1.0 / n),
        ess=step_ess,
        acceptance=float(info.acceptance),
    )


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
        The schedule so far, from ``omega = 0``.
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

    @property
    def omegas(self) -> np.ndarray:
        """The schedule so far, shape ``(len(levels),)``."""
        return np.array([level.omega for level in self.levels])

    def extend(self, omega_max: float) -> LearningRatePath:
        """Sweep on to ``omega_max`` (the first call starts at the prior).

        A geometric path (``q = 1``) can be extended again to a larger
        ``omega_max``; a q-path depends on its end and cannot.

        Raises
        ------
        ValueError
            If ``omega_max`` is not positive and finite, or a q-path is
            extended past its end.
        """
        omega_max = check_omega_max(omega_max)
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
                self.levels.append(
                    initial_level(self.rng, self.target, self.sampler.n_particles))
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
                **described,
                "log_z": "log Z_n(omega) with the prior normalised"
                if self.q == 1 else "log normalising constant of each q-path level relative to the prior",
            },
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
        Where to tabulate the functionals; default the schedule, 0 and 151
        points spaced geometrically from ``omega_max / 1000`` to ``omega_max``.
    probs : sequence of float, default (0.025, 0.5, 0.975)
        Quantile levels of the functionals (the first and last give the
        equal-tailed interval).
    weights : array_like, shape (n,), optional
        The observations' weights (default all 1).

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


def _particles(level: PathLevel, omega_max: float) -> Particles:
    return Particles(level.z, level.log_prior, level.log_prior - omega_max * level.loss)


def _densities(target: PathTarget, omega_max: float):
    """``log pi0`` (the prior) and ``log pi1`` (the Gibbs posterior at
    ``omega_max``, unnormalised) as the callables of the q-path kernels; the
    loss is evaluated only inside the prior's support."""

    def log_pi1(z: np.ndarray) -> np.ndarray:
        log_prior = target.log_prior(z)
        inside = np.isfinite(log_prior)
        if inside.all():
            return log_prior - omega_max * target.total_loss(z)
        loss = np.zeros(len(z))
        if inside.any():
            loss[inside] = target.total_loss(z[inside])
        return log_prior - omega_max * loss

    return target.log_prior, log_pi1


def check_omega_max(omega_max: Any) -> float:
    """``omega_max`` as a float, or a ``TypeError``/``ValueError`` naming it."""
    if isinstance(omega_max, bool) or not isinstance(omega_max, (int, float, np.number)):
        raise TypeError(f"omega_max must be a number, got {type(omega_max).__name__}")
    if not (math.isfinite(omega_max) and omega_max > 0):
        raise ValueError(f"omega_max must be positive and finite, got {omega_max!r}")
    return float(omega_max)
