"""SMC, AIS and thermodynamic integration along q-paths, in NumPy.

The target is ``pi1`` (unnormalised, ``Z = integral pi1``) reached from a
normalised base ``pi0`` through ``pi_{beta,q}`` (:mod:`~stanflow.qpaths.qmath`).
The densities are vectorised callables on particles ``z`` of shape ``(N, d)``::

    log_pi0(z) -> (N,)    sample_pi0(rng, N) -> (N, d)    log_pi1(z) -> (N,)

The building blocks are small pure functions of arrays (:func:`rwm_move`,
:func:`resample`, :func:`next_beta`, :func:`log_mean_exp`); the loops over
temperatures and runs are in :func:`smc`, :func:`ais` and
:func:`thermodynamic_integration`, which return ``InferenceData`` with an
``smc`` group (dims ``run``, ``step``) and the estimate in the attributes
``log_z`` and ``log_z_se``.

Error estimates
---------------
SMC and AIS run ``n_runs`` independent times. ``log_z`` is the log of the mean
of the runs' ``Z`` estimates (each unbiased, so their mean is too) and
``log_z_se`` its delta-method standard error ``sd(Z_r) / (sqrt(R) mean(Z_r))``
from the spread of the runs. TI reports the Monte Carlo standard error of the
trapezoid sum (from the spread of the per-chain means) combined with a
discretisation error ``|T_K - T_{K/2}|`` (the trapezoid sum on every other
beta).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import arviz as az
import numpy as np
import xarray as xr
from numpy.typing import ArrayLike

from stanflow.qpaths.qmath import (
    SMALL,
    _check_beta,
    _check_q,
    _log_power_mean,
    dlog_qpath_dbeta,
    log_incremental_weight,
    log_qpath,
)

LogDensity = Callable[[np.ndarray], np.ndarray]
Sampler = Callable[[np.random.Generator, int], np.ndarray]
MoveKernel = Callable[..., tuple["Particles", float]]
"""``moves(rng, particles, beta, q, log_pi0, log_pi1, n_moves) -> (particles,
acceptance)``: ``n_moves`` MCMC steps leaving ``pi_{beta,q}`` invariant."""
RESAMPLING = ("systematic", "multinomial")
RWM_SCALE = 2.38


class Particles(NamedTuple):
    """Particles with their base and target log densities.

    Attributes
    ----------
    z : ndarray, shape (N, d)
    log_pi0, log_pi1 : ndarray, shape (N,)
    """

    z: np.ndarray
    log_pi0: np.ndarray
    log_pi1: np.ndarray


def evaluate(z: np.ndarray, log_pi0: LogDensity, log_pi1: LogDensity) -> Particles:
    """Evaluate both densities at ``z`` (shape ``(N, d)``), checking their output.

    Raises
    ------
    ValueError
        If a density returns the wrong shape, NaN or ``+inf``; the message
        names the density.
    """
    values = []
    for name, density in (("log_pi0", log_pi0), ("log_pi1", log_pi1)):
        value = np.asarray(density(z), dtype=float)
        if value.shape != (z.shape[0],):
            raise ValueError(
                f"{name} must return shape ({z.shape[0]},) for z of shape "
                f"{z.shape}, got {value.shape}"
            )
        bad = np.isnan(value) | np.isposinf(value)
        if bad.any():
            first = int(np.argmax(bad))
            raise ValueError(
                f"{name} returned NaN or +inf at {int(bad.sum())} of {len(value)} "
                f"particles (first z = {z[first].tolist()})"
            )
        values.append(value)
    return Particles(z, values[0], values[1])


def log_mean_exp(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    """``log(mean(exp(x)))`` without overflow; ``x`` of any shape."""
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    out = np.log(np.mean(np.exp(x - top), axis=axis, keepdims=True)) + top
    return np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


def ess(log_w: np.ndarray) -> float:
    """Effective sample size ``(sum w)^2 / sum w^2`` of log weights, shape (N,)."""
    w = np.exp(log_w - np.max(log_w))
    return float(w.sum() ** 2 / np.sum(w**2))


def resample(rng: np.random.Generator, log_w: np.ndarray, method: str) -> np.ndarray:
    """Ancestor indices, shape (N,), for normalised weights ``exp(log_w)``.

    ``"systematic"``: one uniform, ``N`` evenly spaced points on the CDF;
    ``"multinomial"``: ``N`` independent draws.
    """
    n = len(log_w)
    w = np.exp(log_w - np.max(log_w))
    cdf = np.cumsum(w / w.sum())
    cdf[-1] = 1.0
    if method == "systematic":
        u = (rng.uniform() + np.arange(n)) / n
    else:
        u = rng.uniform(size=n)
    return np.searchsorted(cdf, u, side="right")


def next_beta(particles: Particles, beta: float, q: float, target_ess: float) -> float:
    """Largest ``beta' <= 1`` keeping the ESS of the incremental weights at target.

    Bisection on ``beta'`` in ``[beta, 1]`` for ``ESS(log w(beta -> beta')) =
    target_ess * N``, until the bracket is below ``1e-6`` of the step (at most
    60 halvings); returns 1 when even ``beta' = 1`` keeps the ESS above the
    target.

    Parameters
    ----------
    particles : Particles
        Equally weighted particles from ``pi_{beta,q}``.
    beta : float
    q : float
    target_ess : float
        Fraction of ``N`` in ``(0, 1)``.
    """
    n = len(particles.log_pi0)
    weights = _weights_from(particles, beta, q)

    def gap(b: float) -> float:
        return ess(weights(b)) - target_ess * n

    if gap(1.0) >= 0:
        return 1.0
    lo, hi = beta, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if gap(mid) >= 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-6 * (lo - beta):
            break
    return max(lo, np.nextafter(beta, 2.0))


def _weights_from(
    particles: Particles, beta: float, q: float
) -> Callable[[float], np.ndarray]:
    """``b -> log pi_{b,q} - log pi_{beta,q}`` at the particles, for bisection.

    Checks the particles once (:func:`log_incremental_weight` at ``b = 1``),
    then evaluates the same formula without re-checking: at ``q = 1``
    ``(b - beta) l``; otherwise ``(g(b) - g(beta)) / s`` with ``g`` the
    beta-dependent part of the log power mean (``_log_power_mean``).
    """
    log_incremental_weight(particles.log_pi0, particles.log_pi1, beta, 1.0, q)
    l = particles.log_pi1 - particles.log_pi0
    if q == 1:
        return lambda b: (b - beta) * l
    _, a, base_is_ref, g_beta, s = _log_power_mean(
        particles.log_pi0, particles.log_pi1, np.float64(beta), np.float64(q)
    )
    small = np.abs(a) < SMALL
    expm1_a = np.expm1(np.where(small, a, 0.0))

    def weights(b: float) -> np.ndarray:
        w_other = np.where(base_is_ref, b, 1 - b)
        with np.errstate(divide="ignore"):
            far = np.logaddexp(
                np.log(np.where(base_is_ref, 1 - b, b)), np.log(w_other) + a
            )
        return (np.where(small, np.log1p(w_other * expm1_a), far) - g_beta) / s

    return weights


def rwm_move(
    rng: np.random.Generator,
    particles: Particles,
    beta: float,
    q: float,
    log_pi0: LogDensity,
    log_pi1: LogDensity,
    chol: np.ndarray,
) -> tuple[Particles, float]:
    """One random-walk Metropolis step of every particle, targeting ``pi_{beta,q}``.

    Parameters
    ----------
    particles : Particles
        ``z`` of shape (N, d).
    chol : ndarray, shape (d, d)
        Cholesky factor of the proposal covariance.

    Returns
    -------
    (Particles, float)
        The moved particles and the acceptance rate.
    """
    z = particles.z
    proposal = evaluate(z + rng.standard_normal(z.shape) @ chol.T, log_pi0, log_pi1)
    log_ratio = log_qpath(proposal.log_pi0, proposal.log_pi1, beta, q) - log_qpath(
        particles.log_pi0, particles.log_pi1, beta, q
    )
    accept = np.log(rng.uniform(size=len(z))) < log_ratio
    moved = Particles(
        np.where(accept[:, None], proposal.z, z),
        np.where(accept, proposal.log_pi0, particles.log_pi0),
        np.where(accept, proposal.log_pi1, particles.log_pi1),
    )
    return moved, float(accept.mean())


def proposal_chol(z: np.ndarray, scale: float = RWM_SCALE) -> np.ndarray:
    """Cholesky factor of ``(scale^2 / d) Cov(z)`` (with a small ridge), shape (d, d)."""
    d = z.shape[1]
    cov = np.atleast_2d(np.cov(z, rowvar=False))
    cov = cov + 1e-10 * (np.trace(cov) / d + 1e-300) * np.eye(d)
    return np.linalg.cholesky(scale**2 / d * cov)


def smc(
    log_pi0: LogDensity,
    sample_pi0: Sampler,
    log_pi1: LogDensity,
    *,
    q: float = 1.0,
    n_particles: int = 1000,
    n_moves: int = 1,
    schedule: ArrayLike | None = None,
    target_ess: float = 0.5,
    resampling: str = "systematic",
    n_runs: int = 4,
    seed: int | None = None,
    max_steps: int = 10_000,
    moves: MoveKernel | None = None,
) -> az.InferenceData:
    """SMC sampler along the q-path with resampling and MCMC moves; log Z estimate.

    At every step the weights are multiplied by the incremental weights
    ``pi_{beta',q} / pi_{beta,q}``, ``log Z`` gains ``log mean`` of them, the
    particles are resampled and moved ``n_moves`` times by random-walk
    Metropolis targeting ``pi_{beta',q}`` with covariance ``(2.38^2 / d)`` times
    the particle covariance.

    Parameters
    ----------
    log_pi0, sample_pi0, log_pi1 : callable
        The normalised base (log density and sampler) and the unnormalised
        target; see the module docstring.
    q : float, default 1.0
        Path parameter; 1 is the geometric path (tempering).
    n_particles : int, default 1000
    n_moves : int, default 1
        RWM steps per temperature (``M``).
    schedule : array_like, optional
        Fixed increasing betas from 0 to 1. Default: adaptive, each next beta
        by bisection so that the ESS of the incremental weights is
        ``target_ess * n_particles``.
    target_ess : float, default 0.5
        In ``(0, 1)``; used by the adaptive schedule.
    resampling : {"systematic", "multinomial"}, default "systematic"
    n_runs : int, default 4
        Independent runs, for the error estimate (at least 2).
    seed : int, optional
    max_steps : int, default 10000
        Adaptive schedule: give up (``RuntimeError``) after this many steps.
    moves : callable, optional
        The MCMC kernel (see :data:`MoveKernel`); default :func:`rwm_moves`.
        :class:`stanflow.qpaths.stan_moves.StanMoves` runs NUTS in Stan.

    Returns
    -------
    arviz.InferenceData
        Group ``smc`` with ``beta``, ``ess`` (of the incremental weights),
        ``acceptance`` (mean over the moves), ``log_z_increment`` (dims ``run``,
        ``step``; runs with fewer steps padded with NaN, see ``n_steps``),
        ``n_steps`` and ``log_z`` (per run). Attributes ``log_z``,
        ``log_z_se`` (see the module docstring), ``q``, ``n_particles``,
        ``n_moves``, ``schedule``.
    """
    q = float(_check_q(q))
    _check_counts(
        n_particles=(n_particles, 2), n_moves=(n_moves, 1), n_runs=(n_runs, 2)
    )
    betas = None if schedule is None else _check_schedule(schedule)
    if not 0 < target_ess < 1:
        raise ValueError(f"target_ess must lie in (0, 1), got {target_ess}")
    if resampling not in RESAMPLING:
        raise ValueError(f"resampling must be one of {RESAMPLING}, got {resampling!r}")
    moves = rwm_moves if moves is None else moves
    rng = np.random.default_rng(seed)
    records = []
    for _ in range(n_runs):
        particles = _initial(rng, sample_pi0, n_particles, log_pi0, log_pi1)
        beta, steps = 0.0, []
        while beta < 1.0:
            if len(steps) >= max_steps:
                raise RuntimeError(f"smc: beta = {beta} after max_steps = {max_steps}")
            new = (
                next_beta(particles, beta, q, target_ess)
                if betas is None
                else betas[len(steps) + 1]
            )
            log_w = log_incremental_weight(
                particles.log_pi0, particles.log_pi1, beta, new, q
            )
            increment = float(log_mean_exp(log_w))
            if not np.isfinite(increment):
                raise RuntimeError(
                    f"smc: all incremental weights are zero from beta = {beta} to "
                    f"{new}; use a finer schedule"
                )
            ancestors = resample(rng, log_w, resampling)
            particles = Particles(*(a[ancestors] for a in particles))
            particles, acceptance = moves(
                rng, particles, new, q, log_pi0, log_pi1, n_moves
            )
            steps.append((new, ess(log_w), acceptance, increment))
            beta = new
        records.append(np.array(steps))
    return _to_idata(
        records,
        ("beta", "ess", "acceptance", "log_z_increment"),
        algorithm="smc",
        q=q,
        n_particles=n_particles,
        n_moves=n_moves,
        schedule="adaptive" if betas is None else "fixed",
    )


def ais(
    log_pi0: LogDensity,
    sample_pi0: Sampler,
    log_pi1: LogDensity,
    schedule: ArrayLike,
    *,
    q: float = 1.0,
    n_particles: int = 1000,
    n_moves: int = 1,
    n_runs: int = 4,
    seed: int | None = None,
    moves: MoveKernel | None = None,
) -> az.InferenceData:
    """Annealed importance sampling along the q-path: particles as chains.

    Every particle is one chain through the fixed ``schedule``: its log weight
    accumulates the incremental weights, then it makes ``n_moves`` MCMC steps
    targeting the new ``pi_{beta,q}`` (proposal covariance from the current
    particles, as in :func:`smc`). No resampling. ``Z`` per run is the mean of
    the particles' weights.

    Parameters
    ----------
    schedule : array_like
        Increasing betas from 0 to 1.
    moves : callable, optional
        As in :func:`smc`; default :func:`rwm_moves`.
    Other parameters as in :func:`smc`.

    Returns
    -------
    arviz.InferenceData
        Group ``smc`` with ``beta``, ``ess`` (of the accumulated weights),
        ``acceptance`` and ``log_z_increment`` (dims ``run``, ``step``),
        ``n_steps`` and ``log_z`` per run; attributes as in :func:`smc`.
    """
    q = float(_check_q(q))
    _check_counts(
        n_particles=(n_particles, 2), n_moves=(n_moves, 1), n_runs=(n_runs, 2)
    )
    betas = _check_schedule(schedule)
    moves = rwm_moves if moves is None else moves
    rng = np.random.default_rng(seed)
    records = []
    for _ in range(n_runs):
        particles = _initial(rng, sample_pi0, n_particles, log_pi0, log_pi1)
        log_w, log_z, steps = np.zeros(n_particles), 0.0, []
        for beta, new in itertools.pairwise(betas):
            log_w = log_w + log_incremental_weight(
                particles.log_pi0, particles.log_pi1, beta, new, q
            )
            current = float(log_mean_exp(log_w))
            if not np.isfinite(current):
                raise RuntimeError(f"ais: all weights are zero at beta = {new}")
            particles, acceptance = moves(
                rng, particles, new, q, log_pi0, log_pi1, n_moves
            )
            steps.append((new, ess(log_w), acceptance, current - log_z))
            log_z = current
        records.append(np.array(steps))
    return _to_idata(
        records,
        ("beta", "ess", "acceptance", "log_z_increment"),
        algorithm="ais",
        q=q,
        n_particles=n_particles,
        n_moves=n_moves,
        schedule="fixed",
    )


def thermodynamic_integration(
    log_pi0: LogDensity,
    sample_pi0: Sampler,
    log_pi1: LogDensity,
    schedule: ArrayLike,
    *,
    q: float = 1.0,
    n_chains: int = 200,
    n_warmup: int = 50,
    n_draws: int = 100,
    seed: int | None = None,
) -> az.InferenceData:
    """Thermodynamic integration ``log Z = int_0^1 E_beta[d/dbeta log pi_{beta,q}]``.

    ``n_chains`` RWM chains start from the base and move through the schedule;
    at each beta they make ``n_warmup`` steps, then ``n_draws`` steps whose
    integrand values (:func:`~stanflow.qpaths.qmath.dlog_qpath_dbeta`) are
    averaged. The proposal covariance is ``(2.38^2 / d)`` times the chains'
    covariance, refreshed after warm-up. The means are integrated by the
    trapezoid rule.

    Parameters
    ----------
    schedule : array_like
        Increasing betas from 0 to 1 with an odd number (at least 3) of
        points, so that every other one is a coarser schedule for the
        discretisation error.
    q : float, default 1.0
    n_chains, n_warmup, n_draws : int
    seed : int, optional

    Returns
    -------
    arviz.InferenceData
        Group ``smc`` with ``beta``, ``integrand`` (mean), ``integrand_mcse``
        and ``acceptance`` (dim ``step``, one per beta). Attributes
        ``log_z`` (trapezoid sum), ``log_z_se`` (the Monte Carlo and
        discretisation errors combined in quadrature), ``log_z_mcse``,
        ``log_z_discretisation``, ``q``.
    """
    q = float(_check_q(q))
    _check_counts(n_chains=(n_chains, 2), n_warmup=(n_warmup, 0), n_draws=(n_draws, 1))
    betas = _check_schedule(schedule)
    if len(betas) % 2 == 0:
        raise ValueError(f"schedule must have an odd number of betas, got {len(betas)}")
    rng = np.random.default_rng(seed)
    chains = _initial(rng, sample_pi0, n_chains, log_pi0, log_pi1)
    means, mcse, rates = [], [], []
    for beta in betas:
        if n_warmup:
            chains, _ = rwm_moves(rng, chains, beta, q, log_pi0, log_pi1, n_warmup)
        chol = proposal_chol(chains.z)
        values, accepted = np.zeros((n_draws, n_chains)), 0.0
        for i in range(n_draws):
            chains, rate = rwm_move(rng, chains, beta, q, log_pi0, log_pi1, chol)
            values[i] = dlog_qpath_dbeta(chains.log_pi0, chains.log_pi1, beta, q)
            accepted += rate / n_draws
        per_chain = values.mean(axis=0)
        means.append(per_chain.mean())
        mcse.append(per_chain.std(ddof=1) / np.sqrt(n_chains))
        rates.append(accepted)
    return ti_result(
        betas, np.array(means), np.array(mcse),
        {"acceptance": ("step", np.array(rates))},
        q=q, n_chains=n_chains, n_draws=n_draws, moves="random-walk Metropolis",
    )


def ti_result(
    betas: np.ndarray,
    means: np.ndarray,
    mcse: np.ndarray,
    extra: dict[str, Any],
    **attrs: Any,
) -> az.InferenceData:
    """Integrate TI integrand means by the trapezoid rule, with error estimates.

    Parameters
    ----------
    betas : ndarray, shape (K,)
        The schedule (odd K: every other beta is the coarser rule whose
        difference estimates the discretisation error).
    means, mcse : ndarray, shape (K,)
        Integrand means and their Monte Carlo standard errors.
    extra : dict
        More ``step`` variables for the group.
    **attrs
        More attributes (``q``, sampler settings).

    Returns
    -------
    arviz.InferenceData
        Group ``smc`` as :func:`thermodynamic_integration` describes.
    """
    weights = _trapezoid_weights(betas)
    log_z = float(weights @ means)
    coarse = float(_trapezoid_weights(betas[::2]) @ means[::2])
    log_z_mcse = float(np.sqrt(np.sum((weights * mcse) ** 2)))
    discretisation = abs(log_z - coarse)
    group = xr.Dataset(
        {
            "beta": ("step", betas),
            "integrand": ("step", means),
            "integrand_mcse": ("step", mcse),
            **extra,
        },
        attrs={
            "algorithm": "ti",
            "log_z": log_z,
            "log_z_se": float(np.hypot(log_z_mcse, discretisation)),
            "log_z_mcse": log_z_mcse,
            "log_z_discretisation": discretisation,
            **attrs,
        },
    )
    return az.InferenceData(smc=group)


def rwm_moves(
    rng: np.random.Generator,
    particles: Particles,
    beta: float,
    q: float,
    log_pi0: LogDensity,
    log_pi1: LogDensity,
    n_moves: int,
) -> tuple[Particles, float]:
    """The default move kernel: ``n_moves`` RWM steps targeting ``pi_{beta,q}``.

    The proposal covariance is ``(2.38^2 / d)`` times the covariance of the
    particles before the first step. Any callable with this signature and
    return value (moved particles, mean acceptance) can be passed as
    ``moves`` to :func:`smc` and :func:`ais`, e.g.
    :class:`stanflow.qpaths.stan_moves.StanMoves`.
    """
    chol = proposal_chol(particles.z)
    total = 0.0
    for _ in range(n_moves):
        particles, rate = rwm_move(rng, particles, beta, q, log_pi0, log_pi1, chol)
        total += rate
    return particles, total / n_moves


def _initial(
    rng: np.random.Generator,
    sample_pi0: Sampler,
    n: int,
    log_pi0: LogDensity,
    log_pi1: LogDensity,
) -> Particles:
    z = np.asarray(sample_pi0(rng, n), dtype=float)
    if z.ndim != 2 or z.shape[0] != n:
        raise ValueError(f"sample_pi0 must return shape ({n}, d), got {z.shape}")
    particles = evaluate(z, log_pi0, log_pi1)
    if np.isneginf(particles.log_pi0).any():
        raise ValueError("log_pi0 is -inf at draws of sample_pi0; they disagree")
    return particles


def _to_idata(
    records: Sequence[np.ndarray], names: Sequence[str], **attrs: object
) -> az.InferenceData:
    n_steps = np.array([len(r) for r in records])
    padded = np.full((len(records), n_steps.max(), len(names)), np.nan)
    for i, r in enumerate(records):
        padded[i, : len(r)] = r
    per_run = np.array([r[:, names.index("log_z_increment")].sum() for r in records])
    z = np.exp(per_run - per_run.max())
    log_z = float(np.log(z.mean()) + per_run.max())
    se = float(z.std(ddof=1) / np.sqrt(len(z)) / z.mean())
    group = xr.Dataset(
        {name: (("run", "step"), padded[..., k]) for k, name in enumerate(names)}
        | {"n_steps": ("run", n_steps), "log_z": ("run", per_run)},
        attrs={"log_z": log_z, "log_z_se": se} | attrs,
    )
    return az.InferenceData(smc=group)


def _check_counts(**counts: tuple[int, int]) -> None:
    """Check ``name=(value, lowest allowed)`` integer arguments."""
    for name, (value, low) in counts.items():
        if isinstance(value, bool) or int(value) != value or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value}")


def _check_schedule(schedule: ArrayLike) -> np.ndarray:
    betas = _check_beta(np.asarray(schedule, dtype=float), "schedule")
    if betas.ndim != 1 or len(betas) < 2 or betas[0] != 0 or betas[-1] != 1:
        raise ValueError("schedule must be a 1-D array from 0 to 1")
    if np.any(np.diff(betas) <= 0):
        raise ValueError("schedule must be strictly increasing")
    return betas


def _trapezoid_weights(x: np.ndarray) -> np.ndarray:
    steps = np.diff(x)
    return np.concatenate([[0.0], steps / 2]) + np.concatenate([steps / 2, [0.0]])
