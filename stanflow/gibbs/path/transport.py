"""Each bootstrap resample's Gibbs posterior from particles moved to it.

Reweighting one path to every resample (:class:`~stanflow.gibbs.path.coverage.PathCoverage`)
serves one or two coefficients; with many, a resample's posterior sits a
fraction of a standard deviation away from the full data's in every
coordinate, and the weights degenerate (their effective size falls roughly
like ``exp(-c K)``). Here each resample gets particles of its own, by
importance sampling and, where that is not enough, Metropolis-Hastings:

- the **anchor**: the full data's posterior at ``omega``, its mean and
  covariance from the path's level at or below ``omega`` (reweighted), refitted
  by importance sampling from a multivariate t (:data:`DEGREES`) until half of
  its draws are effective (the level's particles, a few random-walk moves from
  their ancestors, can be off in tens of dimensions);
- a resample ``b`` (counts ``c_b``) draws ``S`` points from the t with the
  anchor's covariance, centred at the anchor's mean plus the resample's
  influence ``-H^-1 (1/n) sum_i (c_bi - 1) g_i`` (``H`` and the
  per-observation gradients ``g_i`` of the plug-in,
  :meth:`~stanflow.gibbs.program.LossProgram.sandwich`), weighted exactly to
  its Gibbs posterior, ``log w = log pi(z) - omega c_b . l(z) - log q_b(z)``;
  while its effective size is below ``target_ess * S`` its proposal is
  refitted to its weighted mean (and covariance, once the effective size
  reaches :data:`SCALE_FIT` times the dimension), at most ``max_passes`` fits,
  keeping the best;
- a resample still below ``target_ess * S`` is resampled by its weights and
  moved by independent Metropolis-Hastings steps from its proposal (at most
  ``max_steps``): exact for its posterior. Its effective size then counts the
  particles that moved at least once (share ``f``) as fresh draws and the
  others as the resampled set's, ``ESS = f S + (1 - f) ESS_0``;
- at another ``omega`` the particles are reweighted by ``exp(-(omega' -
  omega) c_b . l)``; a resample below ``target_ess * S`` there is moved again,
  its proposal starting from its particles' moments.

Its region's statistic is cross-fitted
(:func:`~stanflow.gibbs.path.coverage.region_statistic_per_resample`), and a
resample whose effective size stays below
:data:`~stanflow.gibbs.path.coverage.LOW_ESS` is counted in the evaluation's
``low_ess`` (and its verdict's Monte Carlo error in the count's variance),
never hidden.

The cost of a pass is ``B S`` evaluations of a resample's prior and total
loss, through Stan in process with each row's own weights (the program's
threads): linear in ``n`` and in ``B``.
"""

from __future__ import annotations

import math
from typing import NamedTuple, TypeVar

import numpy as np

from stanflow.gibbs.gpc.reweighting import resample_counts
from stanflow.gibbs.path.coverage import (
    LOW_ESS,
    BootstrapProblem,
    Evaluation,
    inside_and_flip,
    region_statistic_per_resample,
)
from stanflow.gibbs.path.resamples import influence_shifts, prior_and_resample_loss
from stanflow.gibbs.shape import weighted_moments
from stanflow.qpaths.kernels import resample

DRAWS = 400
"""Particles per resample by default."""
TARGET_ESS = 0.5
"""A resample is moved again while its effective size is below this share of ``S``."""
MAX_PASSES = 3
"""Proposal fits per move at most (the first included)."""
SCALE_FIT = 10
"""A resample's own covariance replaces the anchor's once its effective size
reaches this many times the dimension (below, its estimate is too noisy)."""
ANCHOR_PASSES = 5
"""Fits of the full data's posterior at ``omega`` at most."""
DEGREES = 30
"""Degrees of freedom of the proposals' multivariate t (tails heavier than a Gaussian's)."""
MAX_STEPS = 20
"""Independent Metropolis-Hastings steps per move at most (each for the resamples
still short of ``target_ess * S``)."""


class Placement(NamedTuple):
    """Resamples' particles at their posteriors (arrays over the ``B`` resamples).

    Attributes
    ----------
    z : ndarray, shape (B, S, d)
        The particles.
    loss : ndarray, shape (B, S)
        ``c_b . l`` at them.
    log_rest : ndarray, shape (B, S)
        The log weight at ``omega = 0``: ``log pi(z) - log q_b(z)`` for
        importance-sampled particles, 0 for equally weighted ones.
    quality : ndarray, shape (B,)
        The effective size's share of the weights' Kish size (below 1 once
        resampled particles share values).
    """

    z: np.ndarray
    loss: np.ndarray
    log_rest: np.ndarray
    quality: np.ndarray

    def log_weights(self, omega: float) -> np.ndarray:
        """Each resample's log weights at ``omega``, shape ``(B, S)``."""
        return self.log_rest - omega * self.loss

    def ess(self, omega: float) -> np.ndarray:
        """Each resample's effective sample size at ``omega``, shape ``(B,)``."""
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


_Rows = TypeVar("_Rows", Placement, Proposal)


class TransportCoverage:
    """``omega -> Evaluation``: the bootstrap coverage from particles moved to each resample.

    Parameters
    ----------
    problem : BootstrapProblem
        Its path (``q = 1``) is extended on demand.
    draws : int, default :data:`DRAWS`
        Particles per resample, ``S``.
    target_ess : float, default :data:`TARGET_ESS`
    max_passes : int, default :data:`MAX_PASSES`
    max_steps : int, default :data:`MAX_STEPS`
    seed : int, default 0
        Seeds the proposals' draws and the Metropolis-Hastings steps.

    Attributes
    ----------
    moves : int
        Resample moves made so far (one per resample moved at one ``omega``).
    steps : int
        Independent Metropolis-Hastings steps made so far, over all resamples.
    acceptance : float
        Their mean acceptance rate (``nan`` before the first).
    """

    def __init__(
        self,
        problem: BootstrapProblem,
        *,
        draws: int = DRAWS,
        target_ess: float = TARGET_ESS,
        max_passes: int = MAX_PASSES,
        max_steps: int = MAX_STEPS,
        seed: int = 0,
    ) -> None:
        problem = problem.checked()
        path = problem.path
        if path.q != 1:
            raise ValueError(f"path: moving particles to resamples needs q = 1, got q = {path.q}")
        for name, value, low in (("draws", draws, 10), ("max_passes", max_passes, 1),
                                 ("max_steps", max_steps, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if not (isinstance(target_ess, (int, float)) and 0 < target_ess <= 1):
            raise ValueError(f"target_ess must be in (0, 1], got {target_ess!r}")
        self.path = path
        self.counts = resample_counts(problem.indices, path.target.n).astype(float)
        self.estimate = problem.estimate
        self.alpha = problem.alpha
        self.draws = draws
        self.target_ess = target_ess
        self.max_passes = max_passes
        self.max_steps = max_steps
        self.shape = problem.shape
        self.rng = np.random.default_rng(seed)
        self.shifts = influence_shifts(path, self.estimate, self.counts)
        self.placement: Placement | None = None
        self._placed_theta: np.ndarray | None = None
        self._anchors: dict[float, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.region: np.ndarray | None = None
        """The posteriors' shape for the regions: the full data's posterior
        covariance at the first ``omega`` evaluated."""
        self.moves = 0
        self.steps = 0
        self._accepted = 0.0

    @property
    def acceptance(self) -> float:
        return self._accepted / self.steps if self.steps else math.nan

    def __call__(self, omega: float) -> Evaluation:
        omega = float(omega)
        if self.path.end is None or omega > self.path.end:
            self.path.extend(omega)
        B = len(self.counts)
        ess = np.zeros(B) if self.placement is None else self.placement.ess(omega)
        stale = np.flatnonzero(ess < self.target_ess * self.draws)
        if stale.size:
            self._move(omega, stale)
        assert self.placement is not None
        ess = self.placement.ess(omega)
        if self._placed_theta is None:  # the parameters of the particles, once per placement
            self._placed_theta = self._theta(self.placement.z)
        theta = self._placed_theta
        if self.region is None:
            self.region = self._anchor(omega)[2]
        statistic = region_statistic_per_resample(
            theta, self.placement.log_weights(omega), self.estimate, self.region, self.shape)
        inside, flip = inside_and_flip(statistic, ess, self.alpha, theta.shape[2] == 1)
        return Evaluation(
            omega=omega,
            count=int(inside.sum()),
            count_variance=float(np.sum(flip * (1 - flip))),
            ess_min=float(ess.min()),
            ess_median=float(np.median(ess)),
            low_ess=int(np.sum(ess < LOW_ESS)),
            step=self._level(omega),
        )

    # -- moving resamples -------------------------------------------------------

    def _level(self, omega: float) -> int:
        return int(np.flatnonzero(self.path.omegas <= omega)[-1])

    def _theta(self, z: np.ndarray) -> np.ndarray:
        B, S, d = z.shape
        return self.path.target.theta(z.reshape(B * S, d)).reshape(B, S, -1)

    def _move(self, omega: float, rows: np.ndarray) -> None:
        """Move the resamples ``rows`` to their posteriors at ``omega`` (module docstring)."""
        d = self.path.target.dim
        full_mean, full_cov, _ = self._anchor(omega)
        proposal = Proposal(
            full_mean + self.shifts[rows],
            np.broadcast_to(_cholesky(full_cov), (len(rows), d, d)).copy(),
        )
        if self.placement is not None:
            # A resample placed before starts from the moments its particles have at omega.
            log_w = self.placement.log_weights(omega)[rows]
            for j in np.flatnonzero(kish(log_w) >= SCALE_FIT * d):
                m, c = _moments(self.placement.z[rows[j]], log_w[j])
                proposal.mean[j], proposal.scale[j] = m, _cholesky(c)
        wanted = self.target_ess * self.draws
        best = self._sample(proposal, rows)
        best_proposal = proposal
        for _ in range(self.max_passes - 1):
            log_w = best.log_weights(omega)
            ess = kish(log_w)
            if np.all(ess >= wanted):
                break
            mean, scale = proposal.mean.copy(), proposal.scale.copy()
            for j in np.flatnonzero(ess >= 3):
                m, c = _moments(best.z[j], log_w[j])
                mean[j] = m
                if ess[j] >= SCALE_FIT * d:
                    scale[j] = _cholesky(c)
            proposal = Proposal(mean, scale)
            candidate = self._sample(proposal, rows)
            better = candidate.ess(omega) > best.ess(omega)
            best = _select(better, candidate, best)
            best_proposal = _select(better, proposal, best_proposal)
        poor = np.flatnonzero(best.ess(omega) < wanted)
        if poor.size and self.max_steps:
            moved = self._resample_move(
                _take(best_proposal, poor), rows[poor], omega, _take(best, poor))
            best = _put(best, poor, moved)
        self.moves += len(rows)
        self._store(rows, best)

    def _anchor(self, omega: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The full data's posterior mean and covariance at ``omega``, and the covariance
        of the parameters (on their own scale).

        From the path's level at or below ``omega``, reweighted, then refitted
        by importance sampling from the t proposal (as many draws as the path
        has particles) until half of them are effective: the level's particles
        may be too few moves from their ancestors to give the covariance in
        tens of dimensions, and every resample's proposal starts from it.
        """
        if omega in self._anchors:
            return self._anchors[omega]
        level = self.path.levels[self._level(omega)]
        N = len(level.z)
        mean, cov = _moments(level.z, -(omega - level.omega) * level.loss)
        ones = np.ones((1, self.path.target.n))
        theta_cov = _moments(self.path.target.theta(level.z), -(omega - level.omega) * level.loss)[1]
        best_ess, best = -1.0, (mean, cov, theta_cov)
        for _ in range(ANCHOR_PASSES):
            z, log_base = _t_draws(self.rng, mean, _cholesky(cov)[None], N)
            prior, loss = prior_and_resample_loss(self.path, z, ones)
            log_w = prior[0] - omega * loss[0] - log_base[0]
            ess = float(kish(log_w[None])[0])
            if ess < 2:
                break
            mean, cov = _moments(z[0], log_w)
            if ess > best_ess:
                theta_cov = _moments(self.path.target.theta(z[0]), log_w)[1]
                best_ess, best = ess, (mean, cov, theta_cov)
            if ess >= 0.5 * N:
                break
        self._anchors[omega] = best
        return best

    def _sample(self, proposal: Proposal, rows: np.ndarray) -> Placement:
        """Fresh draws from each resample's proposal, with their importance weights."""
        z, log_q = _t_draws(self.rng, proposal.mean, proposal.scale, self.draws)
        prior, loss = prior_and_resample_loss(self.path, z, self.counts[rows])
        log_rest = prior - log_q
        return Placement(z, loss, log_rest, np.ones(len(rows)))

    def _resample_move(
        self, proposal: Proposal, rows: np.ndarray, omega: float, start: Placement
    ) -> Placement:
        """Resample by the weights, then independent Metropolis-Hastings steps with the proposal."""
        R, S, _ = start.z.shape
        log_w = start.log_weights(omega)
        ess0 = kish(log_w)
        pick = np.stack([resample(self.rng, log_w[j], "systematic") for j in range(R)])
        take = np.arange(R)[:, None], pick
        z, loss, log_q = start.z[take], start.loss[take], log_w[take]
        moved_once = np.zeros((R, S), bool)
        active = np.arange(R)
        for _ in range(self.max_steps):
            fresh = self._sample(_take(proposal, active), rows[active])
            log_new = fresh.log_weights(omega)
            accept = np.log(self.rng.uniform(size=(len(active), S))) < log_new - log_q[active]
            z[active] = np.where(accept[:, :, None], fresh.z, z[active])
            loss[active] = np.where(accept, fresh.loss, loss[active])
            log_q[active] = np.where(accept, log_new, log_q[active])
            moved_once[active] |= accept
            self.steps += len(active)
            self._accepted += float(accept.mean(axis=1).sum())
            share = moved_once[active].mean(axis=1)
            active = active[share * S + (1 - share) * ess0[active] < self.target_ess * S]
            if not active.size:
                break
        share = moved_once.mean(axis=1)
        quality = (share * S + (1 - share) * ess0) / S
        return Placement(z, loss, omega * loss, quality)

    def _store(self, rows: np.ndarray, new: Placement) -> None:
        self._placed_theta = None
        if self.placement is None:
            self.placement = new
        else:
            self.placement = _put(self.placement, rows, new)


def _t_draws(
    rng: np.random.Generator, mean: np.ndarray, scale: np.ndarray, draws: int
) -> tuple[np.ndarray, np.ndarray]:
    """``draws`` common t draws through each ``mean + scale eps``, and their log densities.

    Parameters
    ----------
    mean : ndarray, shape (d,) or (R, d)
    scale : ndarray, shape (R, d, d)
        Lower-triangular.

    Returns
    -------
    z : ndarray, shape (R, draws, d)
    log_q : ndarray, shape (R, draws)
        Up to a constant common to all.
    """
    d = scale.shape[-1]
    eps = rng.standard_normal((draws, d))
    eps /= np.sqrt(rng.chisquare(DEGREES, size=(draws, 1)) / DEGREES)
    log_base = -0.5 * (DEGREES + d) * np.log1p(np.sum(eps**2, axis=1) / DEGREES)
    z = np.atleast_2d(mean)[:, None, :] + np.einsum("sd,bed->bse", eps, scale)
    log_det = np.sum(np.log(np.abs(np.diagonal(scale, axis1=1, axis2=2))), axis=1)
    return z, log_base[None, :] - log_det[:, None]


def kish(log_w: np.ndarray) -> np.ndarray:
    """Kish effective sample size of each row of log weights (0 for a row of ``-inf``)."""
    top = log_w.max(axis=1, keepdims=True)
    w = np.exp(log_w - np.where(np.isfinite(top), top, 0.0))
    total = w.sum(axis=1)
    squares = np.einsum("bs,bs->b", w, w)
    return np.divide(total**2, squares, out=np.zeros(len(w)), where=squares > 0)


def _cholesky(cov: np.ndarray) -> np.ndarray:
    """Cholesky factor of a covariance, with a growing ridge when it is (nearly) singular
    (particles piled on a bound, or weights on a few draws)."""
    scale = float(np.mean(np.diag(cov))) or 1.0
    for ridge in (0.0, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2):
        try:
            return np.linalg.cholesky(cov + ridge * scale * np.eye(len(cov)))
        except np.linalg.LinAlgError:
            continue
    raise ValueError("the particles' covariance is not finite")


def _moments(z: np.ndarray, log_w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w = np.exp(log_w - log_w.max())
    mean, cov = weighted_moments(z, w / w.sum())
    return mean, 0.5 * (cov + cov.T) + 1e-12 * np.trace(cov) * np.eye(len(mean))


def _select(mask: np.ndarray, new: _Rows, old: _Rows) -> _Rows:
    """Per resample (the first axis), ``new``'s arrays where ``mask`` else ``old``'s."""
    return type(old)(*(np.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), b, a)
                       for a, b in zip(old, new, strict=True)))


def _take(arrays: _Rows, rows: np.ndarray) -> _Rows:
    """The resamples ``rows`` of a tuple of arrays over resamples."""
    return type(arrays)(*(a[rows] for a in arrays))


def _put(arrays: _Rows, rows: np.ndarray, new: _Rows) -> _Rows:
    """A copy of ``arrays`` with the resamples ``rows`` replaced by ``new``'s."""
    fields = []
    for old, values in zip(arrays, new, strict=True):
        copy = old.copy()
        copy[rows] = values
        fields.append(copy)
    return type(arrays)(*fields)
