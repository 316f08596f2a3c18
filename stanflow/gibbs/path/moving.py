"""Moving particles to bootstrap resamples' Gibbs posteriors: the kernel of one block.

:class:`~stanflow.gibbs.path.transport.TransportCoverage` decides which
resamples to move at which ``omega`` and from which proposals; a block of them
is moved by :func:`move_block`, a pure function of the loss program's target
and a :class:`MoveTask` (picklable, so that blocks run wherever the run layer's
executors put them, :class:`stanflow.runs.Workers`). Every resample draws from
its own random stream, ``SeedSequence(entropy, spawn_key=(b, k))`` for
resample ``b`` moved for the ``k``-th time, and nothing in a block mixes its
resamples: a resample's particles are the same whichever block, process or
machine moved it.

For each resample (counts ``c``, proposal a multivariate t with
:data:`DEGREES` degrees of freedom):

- ``S`` draws weighted exactly to its Gibbs posterior, ``log w = log pi(z) -
  omega c . l(z) - log q(z)``; while its effective size is below ``target_ess
  * S`` the proposal is refitted to its weighted mean (and covariance, once the
  effective size reaches :data:`SCALE_FIT` times the dimension), at most
  ``max_passes`` fits, keeping the best;
- still below, its draws are resampled by their weights and moved by
  independent Metropolis-Hastings steps from its best proposal (at most
  ``max_steps``), the proposal refitted to the particles' mean (and
  covariance, once that many have moved) every :data:`REFIT_EVERY` steps;
  each step's fresh draws are an importance sample of their own, and the
  resample keeps the one with the largest effective size
  (:func:`_adapt_by_moves`). Its placement is an importance sample, weighted
  exactly, with its Kish effective size: never the moved particles, whose
  distance from the posterior after a few steps no effective size states
  honestly. A resample still short is bridged by SMC
  (:mod:`stanflow.gibbs.path.bridge`).
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypeVar

import numpy as np
from scipy.linalg import solve_triangular
from threadpoolctl import ThreadpoolController

from stanflow.gibbs.path.resamples import prior_and_resample_loss
from stanflow.gibbs.path.target import PathTarget
from stanflow.gibbs.shape import weighted_moments
from stanflow.qpaths.kernels import resample

SCALE_FIT = 10
"""A resample's own covariance replaces the anchor's once its effective size
reaches this many times the dimension (below, its estimate is too noisy)."""
DEGREES = 30
"""Degrees of freedom of the proposals' multivariate t (tails heavier than a Gaussian's)."""
REFIT_EVERY = 5
"""Metropolis-Hastings steps between refits of a resample's proposal to its particles."""

_BLAS = ThreadpoolController()


class Placement(NamedTuple):
    """Resamples' particles at their posteriors (arrays over ``R`` resamples).

    Attributes
    ----------
    z : ndarray, shape (R, S, d)
        The particles.
    loss : ndarray, shape (R, S)
        ``c_b . l`` at them.
    log_rest : ndarray, shape (R, S)
        The importance log weight at ``omega = 0``: ``log pi(z) - log q_b(z)``
        for an importance sample; ``omega_b c_b . l(z)`` for particles bridged
        by SMC to ``omega_b`` (equally weighted there).
    efficiency : ndarray, shape (R,)
        The share of the particles' count that their dependence leaves
        effective at equal weights: 1 for an importance sample (independent
        draws), the clustered effective size over ``S`` for particles bridged
        by SMC (:func:`stanflow.gibbs.path.bridge.clustered_ess`).
    families : ndarray of int, shape (R, S)
        Each particle's family: itself in an importance sample; for bridged
        particles the particle of the bridge's start they descend from.
    """

    z: np.ndarray
    loss: np.ndarray
    log_rest: np.ndarray
    efficiency: np.ndarray
    families: np.ndarray

    def log_weights(self, omega: float) -> np.ndarray:
        """Each resample's log weights at ``omega``, shape ``(R, S)``."""
        return self.log_rest - omega * self.loss

    def ess(self, omega: float) -> np.ndarray:
        """Each resample's effective sample size at ``omega``, shape ``(R,)``: Kish's of
        the weights times the particles' efficiency (the two design effects multiply)."""
        return kish(self.log_weights(omega)) * self.efficiency


class Proposal(NamedTuple):
    """Resamples' proposals: multivariate t (:data:`DEGREES`) with these locations and scales.

    Attributes
    ----------
    mean : ndarray, shape (R, d)
    scale : ndarray, shape (R, d, d)
        Lower-triangular: ``z = mean + scale eps``.
    """

    mean: np.ndarray
    scale: np.ndarray


class MoveSettings(NamedTuple):
    """How hard a resample is moved (:class:`~stanflow.gibbs.path.transport.TransportCoverage`)."""

    draws: int
    target_ess: float
    keep_ess: float
    """A resample whose best effective size is at least ``keep_ess * draws`` and has not
    grown in :data:`REFIT_EVERY` steps stops short of ``target_ess``."""
    max_passes: int
    max_steps: int


class MoveTask(NamedTuple):
    """One block of resamples to move to their posteriors at ``omega``.

    Attributes
    ----------
    omega : float
    counts : ndarray, shape (R, n)
        The resamples' counts of each observation.
    proposal : Proposal
        Where each resample's first draws come from.
    entropy : int
        The calibration's seed.
    streams : ndarray of int, shape (R, 2)
        Each resample's index ``b`` and how often it was moved before, ``k``:
        its draws come from ``SeedSequence(entropy, spawn_key=(b, k))``.
    settings : MoveSettings
    """

    omega: float
    counts: np.ndarray
    proposal: Proposal
    entropy: int
    streams: np.ndarray
    settings: MoveSettings


class Moved(NamedTuple):
    """A block's resamples at their posteriors, and its Metropolis-Hastings record.

    Attributes
    ----------
    placement : Placement
    proposal : Proposal
        The proposal each resample's placement was drawn from (where a later
        move of it starts).
    steps : int
        Independent Metropolis-Hastings steps, summed over the block's resamples.
    accepted : float
        The sum of those steps' acceptance rates.
    hmc_steps : int
        HMC moves of resamples bridged by SMC (:mod:`stanflow.gibbs.path.bridge`), summed.
    hmc_accepted : float
        The sum of those moves' mean acceptance probabilities.
    """

    placement: Placement
    proposal: Proposal
    steps: int
    accepted: float
    hmc_steps: int = 0
    hmc_accepted: float = 0.0


_Rows = TypeVar("_Rows", Placement, Proposal)


def move_block(target: PathTarget, task: MoveTask) -> Moved:
    """Move the block's resamples to their Gibbs posteriors at ``task.omega`` (module docstring)."""
    with one_blas_thread():
        return _move_block(target, task)


def one_blas_thread() -> Any:
    """A context in which BLAS runs on one thread: the small products of a block's
    proposals gain nothing from more, and an idle BLAS thread spins on the core
    that Stan's evaluations use."""
    return _BLAS.limit(limits=1, user_api="blas")


def _move_block(target: PathTarget, task: MoveTask) -> Moved:
    omega, settings = task.omega, task.settings
    rngs = [np.random.default_rng(np.random.SeedSequence(task.entropy, spawn_key=(int(b), int(k))))
            for b, k in task.streams]
    d = task.proposal.mean.shape[1]
    wanted = settings.target_ess * settings.draws
    proposal = best_proposal = task.proposal
    best = _sample(target, rngs, proposal, task.counts, settings.draws)[0]
    for _ in range(settings.max_passes - 1):
        log_w = best.log_weights(omega)
        ess = kish(log_w)
        short = np.flatnonzero(ess < wanted)
        if not short.size:
            break
        mean, scale = proposal.mean.copy(), proposal.scale.copy()
        for j in short[ess[short] >= 3]:
            m, c = moments(best.z[j], log_w[j])
            mean[j] = m
            if ess[j] >= SCALE_FIT * d:
                scale[j] = cholesky(c)
        proposal = Proposal(mean, scale)
        candidate = _sample(target, [rngs[j] for j in short], take(proposal, short),
                            task.counts[short], settings.draws)[0]
        better = candidate.ess(omega) > best.ess(omega)[short]
        best = put(best, short[better], take(candidate, np.flatnonzero(better)))
        best_proposal = put(best_proposal, short[better], take(proposal, short[better]))
    poor = np.flatnonzero(best.ess(omega) < settings.keep_ess * settings.draws)
    if not poor.size or not settings.max_steps:
        return Moved(best, best_proposal, 0, 0.0)
    moved = _adapt_by_moves(target, [rngs[j] for j in poor], take(best_proposal, poor),
                            task.counts[poor], omega, take(best, poor), settings)
    return moved._replace(placement=put(best, poor, moved.placement),
                          proposal=put(best_proposal, poor, moved.proposal))


def _sample(
    target: PathTarget, rngs: list[np.random.Generator], proposal: Proposal,
    counts: np.ndarray, draws: int,
) -> tuple[Placement, np.ndarray]:
    """Fresh draws from each resample's proposal, with their importance weights, and
    the proposal's log density at them."""
    z, log_q = t_draws(rngs, proposal.mean, proposal.scale, draws)
    prior, loss = prior_and_resample_loss(target, z, counts)
    families = np.broadcast_to(np.arange(draws), (len(z), draws)).copy()
    return Placement(z, loss, prior - log_q, np.ones(len(z)), families), log_q


def _adapt_by_moves(
    target: PathTarget, rngs: list[np.random.Generator], proposal: Proposal,
    counts: np.ndarray, omega: float, start: Placement, settings: MoveSettings,
) -> Moved:
    """Importance sampling from proposals fitted to particles that an independence sampler moves.

    The particles, resampled by ``start``'s weights, take independent
    Metropolis-Hastings steps with the proposal, which is refitted to them
    every :data:`REFIT_EVERY` steps: equally weighted, they describe the
    posterior's spread better than degenerate weights do. Every step's fresh
    draws are also importance draws from the proposal of that step, weighted
    exactly; a resample keeps the set with the largest effective size, and its
    moves end when that reaches ``target_ess * S``, or when it is at least
    ``keep_ess * S`` and has not grown for :data:`REFIT_EVERY` steps (in tens
    of dimensions a fitted t rarely reaches half of its draws effective; more
    steps then buy little). The particles themselves
    are never the placement: how far a chain of a few steps is from its
    posterior has no honest effective size, an importance sample's has.
    """
    R, S, d = start.z.shape
    log_w = start.log_weights(omega)
    best, best_ess = start, kish(log_w)
    pick = np.stack([resample(rngs[j], log_w[j], "systematic") for j in range(R)])
    take_rows = np.arange(R)[:, None], pick
    log_target = log_w + t_log_density(start.z, proposal)
    z, log_target = start.z[take_rows], log_target[take_rows]
    mean, scale = proposal.mean.copy(), proposal.scale.copy()
    best_proposal = Proposal(mean.copy(), scale.copy())
    log_q = t_log_density(z, Proposal(mean, scale))
    moved_once = np.zeros((R, S), bool)
    wanted, enough = settings.target_ess * S, settings.keep_ess * S
    grown = np.zeros(R, np.int64)  # the last step at which the best grew
    active = np.arange(R)
    steps, accepted = 0, 0.0
    for step in range(settings.max_steps):
        if step and step % REFIT_EVERY == 0:
            for j in active:
                m, c = moments(z[j], np.zeros(S))
                mean[j] = m
                if moved_once[j].sum() >= SCALE_FIT * d:
                    scale[j] = cholesky(c)
            log_q[active] = t_log_density(z[active], Proposal(mean[active], scale[active]))
        live = [rngs[j] for j in active]
        fresh, fresh_q = _sample(target, live, Proposal(mean[active], scale[active]),
                                 counts[active], S)
        log_new = fresh.log_weights(omega)
        fresh_ess = kish(log_new)
        better = np.flatnonzero(fresh_ess > best_ess[active])
        best = put(best, active[better], take(fresh, better))
        best_ess[active[better]] = fresh_ess[better]
        best_proposal.mean[active[better]] = mean[active[better]]
        best_proposal.scale[active[better]] = scale[active[better]]
        grown[active[better]] = step
        u = np.stack([rng.uniform(size=S) for rng in live])
        accept = np.log(u) < log_new - (log_target[active] - log_q[active])
        z[active] = np.where(accept[:, :, None], fresh.z, z[active])
        log_target[active] = np.where(accept, log_new + fresh_q, log_target[active])
        log_q[active] = np.where(accept, fresh_q, log_q[active])
        moved_once[active] |= accept
        steps += len(active)
        accepted += float(accept.mean(axis=1).sum())
        stalled = (best_ess[active] >= enough) & (step - grown[active] >= REFIT_EVERY)
        active = active[(best_ess[active] < wanted) & ~stalled]
        if not active.size:
            break
    return Moved(best, best_proposal, steps, accepted)


def t_log_density(z: np.ndarray, proposal: Proposal) -> np.ndarray:
    """Each resample's proposal's log density at its particles ``(R, S, d)``, shape ``(R, S)``,
    up to the constant :func:`t_draws` leaves out."""
    out = np.empty(z.shape[:2])
    for j in range(len(z)):
        eps = solve_triangular(proposal.scale[j], (z[j] - proposal.mean[j]).T, lower=True).T
        out[j] = _log_t(eps, proposal.scale[j])
    return out


def t_draws(
    rngs: list[np.random.Generator], mean: np.ndarray, scale: np.ndarray, draws: int
) -> tuple[np.ndarray, np.ndarray]:
    """``draws`` t draws through each ``mean + scale eps``, row ``j`` from ``rngs[j]``.

    Parameters
    ----------
    mean : ndarray, shape (R, d)
    scale : ndarray, shape (R, d, d)
        Lower-triangular.

    Returns
    -------
    z : ndarray, shape (R, draws, d)
    log_q : ndarray, shape (R, draws)
        Up to a constant common to all.
    """
    R, d = mean.shape
    z, log_q = np.empty((R, draws, d)), np.empty((R, draws))
    for j, rng in enumerate(rngs):
        eps = rng.standard_normal((draws, d))
        eps /= np.sqrt(rng.chisquare(DEGREES, size=(draws, 1)) / DEGREES)
        z[j] = mean[j] + eps @ scale[j].T
        log_q[j] = _log_t(eps, scale[j])
    return z, log_q


def _log_t(eps: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The t's log density at ``mean + scale eps`` for standardised ``eps`` ``(S, d)``,
    up to a constant common to all proposals of dimension ``d``."""
    d = eps.shape[1]
    return (-0.5 * (DEGREES + d) * np.log1p(np.sum(eps**2, axis=1) / DEGREES)
            - np.sum(np.log(np.abs(np.diagonal(scale)))))


def kish(log_w: np.ndarray) -> np.ndarray:
    """Kish effective sample size of each row of log weights (0 for a row of ``-inf``)."""
    top = log_w.max(axis=1, keepdims=True)
    w = np.exp(log_w - np.where(np.isfinite(top), top, 0.0))
    total = w.sum(axis=1)
    squares = np.einsum("bs,bs->b", w, w)
    return np.divide(total**2, squares, out=np.zeros(len(w)), where=squares > 0)


def cholesky(cov: np.ndarray) -> np.ndarray:
    """Cholesky factor of a covariance, with a growing ridge when it is (nearly) singular
    (particles piled on a bound, or weights on a few draws)."""
    scale = float(np.mean(np.diag(cov))) or 1.0
    for ridge in (0.0, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2):
        try:
            return np.linalg.cholesky(cov + ridge * scale * np.eye(len(cov)))
        except np.linalg.LinAlgError:
            continue
    raise ValueError("the particles' covariance is not finite")


def moments(z: np.ndarray, log_w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted mean and covariance of draws ``(S, d)`` with log weights ``(S,)``."""
    w = np.exp(log_w - log_w.max())
    mean, cov = weighted_moments(z, w / w.sum())
    return mean, 0.5 * (cov + cov.T) + 1e-12 * np.trace(cov) * np.eye(len(mean))


def take(arrays: _Rows, rows: np.ndarray) -> _Rows:
    """The resamples ``rows`` of a tuple of arrays over resamples."""
    return type(arrays)(*(a[rows] for a in arrays))


def put(arrays: _Rows, rows: np.ndarray, new: _Rows) -> _Rows:
    """A copy of ``arrays`` with the resamples ``rows`` replaced by ``new``'s."""
    fields = []
    for old, values in zip(arrays, new, strict=True):
        copy = old.copy()
        copy[rows] = values
        fields.append(copy)
    return type(arrays)(*fields)


def concatenate(parts: list[_Rows]) -> _Rows:
    """The resamples of several blocks, in order, as one."""
    return type(parts[0])(*(np.concatenate(columns) for columns in zip(*parts, strict=True)))
