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
  covariance, as above) every :data:`REFIT_EVERY` steps: each step exact for
  its posterior. Its effective size then counts the
  particles that moved at least once (share ``f``) as fresh draws and the
  others as the resampled set's, ``ESS = f S + (1 - f) ESS_0``.
"""

from __future__ import annotations

from typing import NamedTuple, TypeVar

import numpy as np
from scipy.linalg import solve_triangular

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


class Placement(NamedTuple):
    """Resamples' particles at their posteriors (arrays over ``R`` resamples).

    Attributes
    ----------
    z : ndarray, shape (R, S, d)
        The particles.
    loss : ndarray, shape (R, S)
        ``c_b . l`` at them.
    log_rest : ndarray, shape (R, S)
        The log weight at ``omega = 0``: ``log pi(z) - log q_b(z)`` for
        importance-sampled particles, 0 for equally weighted ones.
    quality : ndarray, shape (R,)
        The effective size's share of the weights' Kish size (below 1 once
        resampled particles share values).
    """

    z: np.ndarray
    loss: np.ndarray
    log_rest: np.ndarray
    quality: np.ndarray

    def log_weights(self, omega: float) -> np.ndarray:
        """Each resample's log weights at ``omega``, shape ``(R, S)``."""
        return self.log_rest - omega * self.loss

    def ess(self, omega: float) -> np.ndarray:
        """Each resample's effective sample size at ``omega``, shape ``(R,)``."""
        return kish(self.log_weights(omega)) * self.quality


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
    steps : int
        Independent Metropolis-Hastings steps, summed over the block's resamples.
    accepted : float
        The sum of those steps' acceptance rates.
    """

    placement: Placement
    steps: int
    accepted: float


_Rows = TypeVar("_Rows", Placement, Proposal)


def move_block(target: PathTarget, task: MoveTask) -> Moved:
    """Move the block's resamples to their Gibbs posteriors at ``task.omega`` (module docstring)."""
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
    poor = np.flatnonzero(best.ess(omega) < wanted)
    if not poor.size or not settings.max_steps:
        return Moved(best, 0, 0.0)
    moved = _resample_move(target, [rngs[j] for j in poor], take(best_proposal, poor),
                           task.counts[poor], omega, take(best, poor), settings)
    return moved._replace(placement=put(best, poor, moved.placement))


def _sample(
    target: PathTarget, rngs: list[np.random.Generator], proposal: Proposal,
    counts: np.ndarray, draws: int,
) -> tuple[Placement, np.ndarray]:
    """Fresh draws from each resample's proposal, with their importance weights, and
    the proposal's log density at them."""
    z, log_q = t_draws(rngs, proposal.mean, proposal.scale, draws)
    prior, loss = prior_and_resample_loss(target, z, counts)
    return Placement(z, loss, prior - log_q, np.ones(len(rngs))), log_q


def _resample_move(
    target: PathTarget, rngs: list[np.random.Generator], proposal: Proposal,
    counts: np.ndarray, omega: float, start: Placement, settings: MoveSettings,
) -> Moved:
    """Resample by the weights, then independent Metropolis-Hastings steps with the proposal,
    refitted to the particles every :data:`REFIT_EVERY` steps (adaptive independence sampler:
    the moved particles describe the posterior better than the importance weights did)."""
    R, S, d = start.z.shape
    log_w = start.log_weights(omega)
    ess0 = kish(log_w)
    pick = np.stack([resample(rngs[j], log_w[j], "systematic") for j in range(R)])
    take_rows = np.arange(R)[:, None], pick
    log_target = log_w + t_log_density(start.z, proposal)
    z, loss, log_target = start.z[take_rows], start.loss[take_rows], log_target[take_rows]
    mean, scale = proposal.mean.copy(), proposal.scale.copy()
    log_q = t_log_density(z, Proposal(mean, scale))
    moved_once = np.zeros((R, S), bool)
    active = np.arange(R)
    steps, accepted = 0, 0.0
    for step in range(settings.max_steps):
        if step and step % REFIT_EVERY == 0:
            effective = moved_once.mean(axis=1) * S + (1 - moved_once.mean(axis=1)) * ess0
            for j in active:
                m, c = moments(z[j], np.zeros(S))
                mean[j] = m
                if effective[j] >= SCALE_FIT * d:
                    scale[j] = cholesky(c)
            log_q[active] = t_log_density(z[active], Proposal(mean[active], scale[active]))
        live = [rngs[j] for j in active]
        fresh, fresh_q = _sample(target, live, Proposal(mean[active], scale[active]),
                                 counts[active], S)
        log_new = fresh.log_weights(omega)
        u = np.stack([rng.uniform(size=S) for rng in live])
        accept = np.log(u) < log_new - (log_target[active] - log_q[active])
        z[active] = np.where(accept[:, :, None], fresh.z, z[active])
        loss[active] = np.where(accept, fresh.loss, loss[active])
        log_target[active] = np.where(accept, log_new + fresh_q, log_target[active])
        log_q[active] = np.where(accept, fresh_q, log_q[active])
        moved_once[active] |= accept
        steps += len(active)
        accepted += float(accept.mean(axis=1).sum())
        share = moved_once[active].mean(axis=1)
        active = active[share * S + (1 - share) * ess0[active] < settings.target_ess * S]
        if not active.size:
            break
    share = moved_once.mean(axis=1)
    quality = (share * S + (1 - share) * ess0) / S
    return Moved(Placement(z, loss, omega * loss, quality), steps, accepted)


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
