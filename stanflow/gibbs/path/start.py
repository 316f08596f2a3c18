"""Where a learning-rate path can start instead of the prior: a Gaussian near the data.

From the prior, the sweep to the Gibbs posterior at ``omega`` takes a number of
steps that grows like ``(d / 2) log(omega n)``: the posterior narrows from the
prior's width to ``(omega n)^(-1/2)``, and each step may shrink it only as far
as the particles allow. Every step costs ``n`` per particle, so a path from the
prior costs ``n log n``. Started at a Gaussian ``N(mean, cov)`` close to the
Gibbs posterior at some ``omega_0 > 0`` (the Laplace approximation
``N(estimate, (omega_0 n H)^-1)``), the sweep needs a few steps to bridge from
the Gaussian to that posterior and a number independent of ``n`` from
``omega_0`` on: its cost is linear in ``n``.

:class:`GaussianStart` is the start (checked when it is made); :func:`bridge`
is the kernel: an SMC sweep along the geometric path from the normalised
Gaussian to ``pi(theta) exp(-omega_0 L_n(theta))`` (the ESS-targeted schedule
and the move kernels of :mod:`stanflow.qpaths.kernels`). It returns equally
weighted particles from the Gibbs posterior at ``omega_0`` and ``log
Z_n(omega_0)``, the same quantity (the prior normalised) a sweep from the prior
estimates; the bridge's levels are not Gibbs posteriors and are not kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from stanflow.qpaths import smc_step
from stanflow.qpaths.kernels import LogDensity, MoveKernel, Particles, next_beta
from stanflow.validation import check_positive

MAX_BRIDGE_STEPS = 200
"""A bridge from the Gaussian that needs more steps than this is an error."""


@dataclass(frozen=True, eq=False)
class GaussianStart:
    """A Gaussian where a learning-rate path starts, on the particles' scale.

    Parameters
    ----------
    omega : float
        The path's first learning rate ``omega_0 > 0``.
    mean : array_like, shape (d,)
    cov : array_like, shape (d, d)
        Symmetric positive definite; near the Gibbs posterior at ``omega``
        (the bridge corrects it exactly, a wider one at a few more steps).

    Raises
    ------
    ValueError
        Naming the field, when the object is made.
    """

    omega: float
    mean: np.ndarray
    cov: np.ndarray
    _chol: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "omega", check_positive(self.omega, "omega"))
        mean = np.asarray(self.mean, dtype=float)
        cov = np.asarray(self.cov, dtype=float)
        if mean.ndim != 1 or not np.all(np.isfinite(mean)):
            raise ValueError(f"mean must be a finite vector, got shape {mean.shape}")
        if cov.shape != (len(mean), len(mean)) or not np.allclose(cov, cov.T):
            raise ValueError(f"cov must be a symmetric {len(mean)} x {len(mean)} matrix, "
                             f"got shape {cov.shape}")
        try:
            chol = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            raise ValueError("cov must be positive definite") from None
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "cov", cov)
        object.__setattr__(self, "_chol", chol)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws, shape ``(n, d)``."""
        return self.mean + rng.standard_normal((n, len(self.mean))) @ self._chol.T

    def log_density(self, z: np.ndarray) -> np.ndarray:
        """The normalised log density at ``z`` (shape ``(N, d)``), shape ``(N,)``."""
        white = np.linalg.solve(self._chol, (np.asarray(z, float) - self.mean).T)
        log_det = 2 * np.sum(np.log(np.diag(self._chol)))
        return -0.5 * (np.sum(white**2, axis=0) + log_det + len(self.mean) * math.log(2 * math.pi))

    def describe(self) -> dict[str, Any]:
        """What the path records of its start."""
        return {"start": "gaussian", "start_omega": self.omega}


class Bridged(NamedTuple):
    """The Gibbs posterior at a start's ``omega``, bridged from its Gaussian.

    Attributes
    ----------
    z : ndarray, shape (N, d)
        Equally weighted particles.
    log_z : float
        ``log Z_n(omega)`` (the prior normalised).
    log_z_var : float
        Its variance estimate, ``sum_k (1/ESS_k - 1/N)`` over the bridge's steps.
    ess : float
        Effective sample size of the last step's incremental weights.
    acceptance : float
        Mean acceptance of its last moves.
    """

    z: np.ndarray
    log_z: float
    log_z_var: float
    ess: float
    acceptance: float


def bridge(
    rng: np.random.Generator,
    start: GaussianStart,
    log_target: LogDensity,
    n_particles: int,
    *,
    moves: MoveKernel,
    n_moves: int | None,
    target_ess: float,
    resampling: str,
) -> Bridged:
    """SMC from ``start``'s Gaussian to the Gibbs posterior at ``start.omega``.

    Parameters
    ----------
    rng : numpy.random.Generator
    start : GaussianStart
    log_target : callable
        ``z -> log pi(z) - start.omega L_n(z)`` at particles ``(N, d)`` (the
        prior normalised), ``-inf`` outside the prior's support.
    n_particles : int
    moves : callable
        A :data:`stanflow.qpaths.kernels.MoveKernel` for any base and target
        (random-walk or self-tuning moves).
    n_moves : int or None
    target_ess : float
        Each step keeps this fraction of the particles effective.
    resampling : {"systematic", "multinomial"}

    Returns
    -------
    Bridged

    Raises
    ------
    RuntimeError
        If the bridge takes more than :data:`MAX_BRIDGE_STEPS` steps or a step
        leaves no weight (the Gaussian misses the posterior).
    """
    omega = start.omega
    z = start.sample(rng, n_particles)
    state = smc_step.init(Particles(z, start.log_density(z), log_target(z)))
    log_z, log_z_var, steps = 0.0, 0.0, 0
    ess, acceptance = float(n_particles), float("nan")
    while state.beta < 1.0:
        if steps == MAX_BRIDGE_STEPS:
            raise RuntimeError(
                f"gibbs path: the bridge from the Gaussian start to omega = {omega} took "
                f"{MAX_BRIDGE_STEPS} steps and reached beta = {state.beta:.3g}; the Gaussian "
                "is far from the Gibbs posterior there"
            )
        beta = next_beta(state.particles, state.beta, 1.0, target_ess)
        try:
            state, info = smc_step.step(rng, state, beta, 1.0, start.log_density, log_target,
                                        moves=moves, n_moves=n_moves, resampling=resampling)
        except RuntimeError as err:
            raise RuntimeError(f"gibbs path, from the Gaussian start at omega = {omega}: "
                               f"{err}") from None
        steps += 1
        log_z += info.log_z_increment
        log_z_var += max(0.0, 1.0 / info.ess - 1.0 / n_particles)
        ess, acceptance = info.ess, float(info.acceptance)
    return Bridged(state.particles.z, log_z, log_z_var, ess, acceptance)
