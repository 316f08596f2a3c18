"""Reference ``log Z``: importance sampling from a Student-t fitted to SMC particles.

SMC estimates of ``log Z`` with too few moves per temperature are biased
(the particles lag behind the intermediate targets), yet their final
particles describe the posterior well. :func:`reference_log_z` runs
geometric adaptive SMC, keeps each run's final particles
(:class:`FinalParticles`) and estimates ``log Z`` by importance sampling from a
multivariate t fitted to them (:func:`t_importance_log_z`): an estimate whose
error is known (the delta-method standard error of the weights' mean) and
which needs no mixing along the path. Independent runs give independent
proposals, so their agreement is a check.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

from stanflow import arviz_compat
from stanflow.qpaths.annealing import smc
from stanflow.qpaths.kernels import (
    LogDensity,
    MoveInfo,
    MoveKernel,
    Particles,
    Sampler,
)
from stanflow.qpaths.self_tuning import SelfTuningMoves
from stanflow.validation import check_int


class FinalParticles:
    """A move kernel wrapper that keeps the particles each run ends with.

    Wraps ``moves`` (:data:`~stanflow.qpaths.kernels.MoveKernel`); every
    call at ``beta = 1`` (the last step of a run) appends the moved particles'
    ``z`` to :attr:`runs`.
    """

    def __init__(self, moves: MoveKernel | None = None) -> None:
        self.moves = SelfTuningMoves() if moves is None else moves
        self.runs: list[np.ndarray] = []

    def __call__(
        self,
        rng: np.random.Generator,
        particles: Particles,
        beta: float,
        q: float,
        log_pi0: LogDensity,
        log_pi1: LogDensity,
        n_moves: int | None,
    ) -> tuple[Particles, MoveInfo]:
        moved, info = self.moves(rng, particles, beta, q, log_pi0, log_pi1, n_moves)
        if beta == 1.0:
            self.runs.append(moved.z.copy())
        return moved, info


def t_importance_log_z(
    log_pi1: LogDensity,
    particles: np.ndarray,
    rng: np.random.Generator,
    n_draws: int,
    df: float = 5.0,
    scale: float = 1.2,
) -> dict[str, float]:
    """``log Z`` of ``pi1`` by importance sampling from a t fitted to ``particles``.

    The proposal is the multivariate t with ``df`` degrees of freedom, location
    the particles' mean and shape ``scale`` times their covariance.

    Parameters
    ----------
    log_pi1 : callable
        Unnormalised log target, ``(n, d) -> (n,)``.
    particles : ndarray, shape (N, d)
        Draws approximating ``pi1``, ``N > d``.
    rng : numpy.random.Generator
    n_draws : int
        Importance draws (at least 2).
    df, scale : float
        Positive.

    Returns
    -------
    dict
        ``log_z``, ``se`` (delta-method standard error of ``log Z``) and
        ``ess_fraction`` (ESS of the weights / ``n_draws``).
    """
    particles = np.asarray(particles, dtype=float)
    if particles.ndim != 2 or particles.shape[0] <= particles.shape[1]:
        raise ValueError(f"particles must be (N, d) with N > d, got {particles.shape}")
    n_draws = check_int(n_draws, "n_draws", 2)
    if not (df > 0 and scale > 0):
        raise ValueError(f"df and scale must be positive, got {df}, {scale}")
    proposal = stats.multivariate_t(
        particles.mean(axis=0), scale * np.cov(particles, rowvar=False), df=df
    )
    draws = proposal.rvs(n_draws, random_state=rng).reshape(n_draws, -1)
    log_w = np.asarray(log_pi1(draws), dtype=float) - proposal.logpdf(draws)
    if not np.isfinite(log_w).all():
        raise ValueError("log_pi1 is not finite at some proposal draws")
    w = np.exp(log_w - log_w.max())
    return {
        "log_z": float(np.log(w.mean()) + log_w.max()),
        "se": float(w.std() / np.sqrt(len(w)) / w.mean()),
        "ess_fraction": float(w.sum() ** 2 / np.sum(w**2) / len(w)),
    }


def reference_log_z(
    log_pi0: LogDensity,
    sample_pi0: Sampler,
    log_pi1: LogDensity,
    *,
    seed: int,
    n_draws: int,
    moves: MoveKernel | None = None,
    **smc_options: Any,
) -> dict:
    """Geometric adaptive SMC, then t importance sampling on each run's particles.

    Parameters
    ----------
    log_pi0, sample_pi0, log_pi1 : callable
        As for :func:`stanflow.qpaths.annealing.smc`.
    seed : int
        Seeds the SMC runs and the importance draws.
    n_draws : int
        Importance draws per run.
    moves : callable, optional
        The move kernel; default the self-tuning moves of
        :func:`~stanflow.qpaths.annealing.smc` (one kernel for all runs).
    **smc_options
        Passed to :func:`~stanflow.qpaths.annealing.smc` (``n_particles``,
        ``n_moves``, ``target_ess``, ``n_runs``, ...); ``q`` and ``schedule``
        are not allowed (the path is geometric, the schedule adaptive).

    Returns
    -------
    dict
        ``importance``: one :func:`t_importance_log_z` result per SMC run;
        ``log_z``: their inverse-variance weighted mean and ``se`` its standard
        error; ``spread``: the largest minus the smallest run;
        ``smc_log_z``: the SMC runs' own estimates.
    """
    for name in ("q", "schedule"):
        if name in smc_options:
            raise ValueError(f"{name}: the reference run is geometric and adaptive")
    final = FinalParticles(moves)
    results = smc(log_pi0, sample_pi0, log_pi1, seed=seed, moves=final, **smc_options)
    group = arviz_compat.group(results, "smc")
    rng = np.random.default_rng(seed)
    importance = [t_importance_log_z(log_pi1, z, rng, n_draws) for z in final.runs]
    values = np.array([r["log_z"] for r in importance])
    weights = 1 / np.array([r["se"] for r in importance]) ** 2
    return {
        "importance": importance,
        "log_z": float(np.sum(weights * values) / weights.sum()),
        "se": float(1 / np.sqrt(weights.sum())),
        "spread": float(values.max() - values.min()),
        "smc_log_z": group.log_z.values.tolist(),
        "temperatures": group.n_steps.values.tolist(),
    }
