"""Each bootstrap resample's Gibbs posterior from particles moved to it.

Reweighting one path to every resample (:class:`~stanflow.gibbs.path.coverage.PathCoverage`)
serves one or two coefficients; with many, a resample's posterior sits a
fraction of a standard deviation away from the full data's in every
coordinate, and the weights degenerate (their effective size falls roughly
like ``exp(-c K)``). Here each resample gets particles of its own, by
importance sampling and, where that is not enough, Metropolis-Hastings:

- the **anchor**: the full data's posterior at ``omega``, its mean and
  covariance refitted by importance sampling from a multivariate t until half
  of its draws are effective, from the better of two starts: the path's level
  at or below ``omega`` (reweighted; the path starts near the data,
  :meth:`TransportCoverage.path_start`) and the Laplace approximation
  ``N(estimate, (omega n H)^-1)``;
- a resample ``b`` (counts ``c_b``) is moved to its Gibbs posterior
  (:func:`~stanflow.gibbs.path.moving.move_block`: importance sampling with
  refitted proposals, then independent Metropolis-Hastings steps where that is
  not enough, then, where even that is not, an SMC bridge with HMC moves on
  Stan's gradients, :mod:`~stanflow.gibbs.path.bridge`) from a t with the
  anchor's covariance, centred at the anchor's mean plus the resample's
  influence ``-H^-1 (1/n) sum_i (c_bi - 1) g_i``
  (``H`` and the per-observation gradients ``g_i`` of the plug-in,
  :meth:`~stanflow.gibbs.program.LossProgram.sandwich`);
- at another ``omega`` the particles are reweighted by ``exp(-(omega' -
  omega) c_b . l)``; a resample below :data:`KEEP_ESS` ``* S`` there is moved
  again, from its last proposal widened by ``sqrt(omega_then / omega)`` (as a
  Gibbs posterior's spread is) and centred at its particles' mean. Its particles
  are an importance sample weighted exactly, with the weights' (Kish's)
  effective size, or particles moved by HMC, with the effective size of a
  clustered sample (:func:`~stanflow.gibbs.path.bridge.clustered_ess`): never
  the count of particles.

Its region's statistic is cross-fitted
(:func:`~stanflow.gibbs.path.coverage.region_statistic_per_resample`), and a
resample whose effective size stays below
:data:`~stanflow.gibbs.path.coverage.LOW_ESS` is counted in the evaluation's
``low_ess`` (and its verdict's Monte Carlo error in the count's variance),
never hidden.

The cost of a pass is ``B S`` evaluations of a resample's prior and total
loss, through Stan in process with each row's own weights (the program's
threads): linear in ``n`` and in ``B``. Blocks of :data:`BLOCK` resamples are
independent calls, spread by :class:`stanflow.runs.Workers` (this process, or
a Dask cluster) and kept for a rerun when it has a folder; each resample draws
from its own random stream, so where a block runs never changes a number.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from stanflow.gibbs.gpc.reweighting import normalise, resample_counts
from stanflow.gibbs.path.bridge import (
    MAX_MOVES,
    BridgeStart,
    BridgeTask,
    bridge_block,
    full_population,
)
from stanflow.gibbs.path.coverage import (
    LOW_ESS,
    BootstrapProblem,
    Evaluation,
    cross_fit_variance,
    inside_and_flip,
    region_statistic_per_resample,
)
from stanflow.gibbs.path.moving import (
    MoveSettings,
    MoveTask,
    Placement,
    Proposal,
    cholesky,
    concatenate,
    kish,
    moments,
    move_block,
    put,
    t_draws,
    take,
)
from stanflow.gibbs.path.resample_means import means_shape
from stanflow.gibbs.path.resamples import first_order, prior_and_resample_loss, target_digest
from stanflow.gibbs.path.start import GaussianStart
from stanflow.runs.calls import Workers, as_workers
from stanflow.validation import check_int

DRAWS = 400
"""Particles per resample by default."""
TARGET_ESS = 0.5
"""A resample is moved until its effective size reaches this share of ``S`` (or its moves run out)."""
KEEP_ESS = 0.3
"""A resample's particles serve another ``omega``, reweighted, while their effective size
there stays at or above this share of ``S``; below it they are moved again."""
START_SHARE = 0.25
"""A path not yet swept starts at this share of the first-order root
(:meth:`TransportCoverage.path_start`)."""
MAX_PASSES = 3
"""Proposal fits per move at most (the first included)."""
ANCHOR_PASSES = 5
"""Fits of the full data's posterior at ``omega`` at most."""
MAX_STEPS = 20
"""Independent Metropolis-Hastings steps per move at most (each for the resamples
still short of ``target_ess * S``)."""
BLOCK = 25
"""Resamples per call of :func:`~stanflow.gibbs.path.moving.move_block` (the unit
the executors spread and ``Workers.out_dir`` keeps)."""


class TransportCoverage:
    """``omega -> Evaluation``: the bootstrap coverage from particles moved to each resample.

    Parameters
    ----------
    problem : BootstrapProblem
        Its path (``q = 1``) is extended on demand.
    draws : int, default :data:`DRAWS`
        Particles per resample, ``S``.
    target_ess : float, default :data:`TARGET_ESS`
        A resample is moved until its effective size reaches ``target_ess * S``
        (or ``max_steps`` run out, or it stalls above the keep share); it is
        moved again at an ``omega`` where its effective size falls below
        ``min(KEEP_ESS, target_ess) * S``, the keep share.
    max_passes : int, default :data:`MAX_PASSES`
    max_steps : int, default :data:`MAX_STEPS`
    max_hmc : int, default :data:`~stanflow.gibbs.path.bridge.MAX_MOVES`
        A resample that importance sampling and the independence sampler leave
        below the keep share is bridged by SMC from the full data's posterior
        (:mod:`stanflow.gibbs.path.bridge`); at most this many HMC moves after
        the bridge's last step while its clustered effective size is short of
        ``target_ess * S`` (0: no bridges, such a resample is reported).
    seed : int, default 0
        Seeds the anchors' draws and every resample's own stream (its
        proposals' draws and Metropolis-Hastings steps).
    workers : Workers, optional
        Where the blocks of :data:`BLOCK` resamples are moved (this process by
        default, or a Dask cluster), how often a failed block is retried, and
        the folder keeping moved blocks for a rerun
        (:class:`stanflow.runs.Workers`). The numbers do not depend on it.
    start_path : bool, default True
        Start a path not yet swept (its moves not NUTS) at :meth:`path_start`,
        not at the prior (which costs ``n log n``, :mod:`~stanflow.gibbs.path.start`).

    Attributes
    ----------
    moves : int
        Resample moves made so far (one per resample moved at one ``omega``).
    steps : int
        Independent Metropolis-Hastings steps made so far, over all resamples.
    acceptance : float
        Their mean acceptance rate (``nan`` before the first).
    hmc_moves : int
        Resample moves that went on to an SMC bridge with HMC moves.
    hmc_acceptance : float
        The mean acceptance probability of their HMC moves (``nan`` before the first).
    """

    def __init__(
        self,
        problem: BootstrapProblem,
        *,
        draws: int = DRAWS,
        target_ess: float = TARGET_ESS,
        max_passes: int = MAX_PASSES,
        max_steps: int = MAX_STEPS,
        max_hmc: int = MAX_MOVES,
        seed: int = 0,
        workers: Workers | None = None,
        start_path: bool = True,
    ) -> None:
        problem = problem.checked()
        path = problem.path
        if path.q != 1:
            raise ValueError(f"path: moving particles to resamples needs q = 1, got q = {path.q}")
        for name, value, low in (("draws", draws, 10), ("max_passes", max_passes, 1),
                                 ("max_steps", max_steps, 0), ("max_hmc", max_hmc, 0)):
            check_int(value, name, low)
        if not (isinstance(target_ess, (int, float)) and 0 < target_ess <= 1):
            raise ValueError(f"target_ess must be in (0, 1], got {target_ess!r}")
        self.path = path
        self.counts = resample_counts(problem.indices, path.target.n).astype(float)
        self.estimate = problem.estimate
        self.alpha = problem.alpha
        self.workers = as_workers(workers)
        self.settings = MoveSettings(draws, float(target_ess), min(KEEP_ESS, float(target_ess)),
                                     max_passes, max_steps)
        self.max_hmc = max_hmc
        self.shape = problem.shape
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._times_moved = np.zeros(len(self.counts), np.int64)
        self._context = target_digest(path.target)
        self.first_order = first_order(path, self.estimate, self.counts)
        if start_path and not path.levels and path.start is None and path.sampler.moves != "nuts":
            start = self.path_start()
            if start is not None:
                path.start_from(start)
        self.placement: Placement | None = None
        self.proposals: Proposal | None = None
        """Each resample's proposal of its placement (where its next move starts)."""
        self._proposal_omega = np.zeros(len(self.counts))
        """The ``omega`` each resample's proposal was for (0 before its first move)."""
        self._placed_theta: np.ndarray | None = None
        self._anchors: dict[float, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._populations: dict[float, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.region: np.ndarray | None = None
        """The posteriors' shape for the regions: the full data's posterior
        covariance at the first ``omega`` evaluated."""
        self.moves = 0
        self.steps = 0
        self._accepted = 0.0
        self.hmc_moves = 0
        self._hmc_steps = 0
        self._hmc_accepted = 0.0

    @property
    def acceptance(self) -> float:
        return self._accepted / self.steps if self.steps else math.nan

    @property
    def hmc_acceptance(self) -> float:
        return self._hmc_accepted / self._hmc_steps if self._hmc_steps else math.nan

    def __call__(self, omega: float) -> Evaluation:
        omega = float(omega)
        theta, log_w, ess = self.placed(omega)
        if self.region is None:
            self.region = self._anchor(omega)[2]
        statistic = region_statistic_per_resample(theta, log_w, self.estimate, self.region, self.shape)
        K = theta.shape[2]
        inside, flip = inside_and_flip(statistic, ess, self.alpha, K == 1,
                                       cross_fit_variance(K, self.alpha))
        return Evaluation(
            omega=omega,
            count=int(inside.sum()),
            count_variance=float(np.sum(flip * (1 - flip))),
            ess_min=float(ess.min()),
            ess_median=float(np.median(ess)),
            low_ess=int(np.sum(ess < LOW_ESS)),
            step=self._level(omega),
        )

    def placed(self, omega: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every resample's particles at ``omega``, moved there where too few serve:
        their parameters ``(B, S, K)``, log weights ``(B, S)`` and effective sizes ``(B,)``."""
        if self.path.end is None or omega > self.path.end:
            start = self.path.start
            self.path.extend(omega if start is None else max(omega, start.omega))
        B = len(self.counts)
        ess = np.zeros(B) if self.placement is None else self.placement.ess(omega)
        stale = np.flatnonzero(ess < self.settings.keep_ess * self.settings.draws)
        if stale.size:
            self._move(omega, stale)
        assert self.placement is not None
        if self._placed_theta is None:  # the parameters of the particles, once per placement
            self._placed_theta = self._theta(self.placement.z)
        return self._placed_theta, self.placement.log_weights(omega), self.placement.ess(omega)

    def bootstrap_shape(self, omega: float) -> tuple[np.ndarray, np.ndarray]:
        """The resamples' posterior means' shape at ``omega`` from their own particles
        (:func:`~stanflow.gibbs.path.resample_means.means_shape`), and their effective sizes."""
        theta, log_w, ess = self.placed(float(omega))
        return means_shape(np.einsum("bs,bsk->bk", normalise(log_w), theta)), ess

    def first_order_root(self) -> float:
        """Where the coverage's first-order model crosses ``1 - alpha``.

        Resample ``b``'s posterior, ``N(center + shift_b, (omega n H)^-1)`` to
        first order (:func:`~stanflow.gibbs.path.resamples.first_order`), holds
        the estimate when ``omega shift_b' n H shift_b`` is below the ``chi2_d``
        quantile at ``1 - alpha``; the root is that quantile over the ``1 -
        alpha`` quantile of ``shift_b' n H shift_b`` over the resamples (1 if
        ``n H`` is not positive definite). No Stan evaluation: where GPC's
        search starts (:func:`~stanflow.gibbs.path.gpc_root.path_gpc`).
        """
        shifts, precision = self.first_order.shifts, self.first_order.precision
        distances = np.einsum("bi,ij,bj->b", shifts, precision, shifts)
        spread = float(np.quantile(distances, 1 - self.alpha))
        if not (np.isfinite(spread) and spread > 0 and np.all(distances >= 0)):
            return 1.0
        return float(stats.chi2.ppf(1 - self.alpha, shifts.shape[1])) / spread

    def path_start(self) -> GaussianStart | None:
        """The Laplace approximation ``N(estimate, (omega_0 n H)^-1)`` at ``omega_0 =``
        :data:`START_SHARE` times :meth:`first_order_root`, where the path starts
        (:mod:`stanflow.gibbs.path.start`); None if ``n H`` is not positive definite."""
        omega = START_SHARE * self.first_order_root()
        try:
            cov = np.linalg.inv(omega * self.first_order.precision)
            return GaussianStart(omega, self.first_order.center, 0.5 * (cov + cov.T))
        except (np.linalg.LinAlgError, ValueError):
            return None

    # -- moving resamples -------------------------------------------------------

    def _level(self, omega: float) -> int:
        """The path's point at or below ``omega`` (its first below its start)."""
        return max(0, int(np.searchsorted(self.path.omegas, omega, side="right") - 1))

    def _theta(self, z: np.ndarray) -> np.ndarray:
        B, S, d = z.shape
        return self.path.target.theta(z.reshape(B * S, d)).reshape(B, S, -1)

    def _move(self, omega: float, rows: np.ndarray) -> None:
        """Move the resamples ``rows`` to their posteriors at ``omega`` (module docstring).

        A resample bridged before is bridged again from its own particles, along
        ``omega`` (and from the full data's posterior should that leave it
        short: on a long bridge its families can collapse); the others are
        importance sampled (:meth:`_importance`), and those still short bridged
        from the full data's posterior.
        """
        keep = self.settings.keep_ess * self.settings.draws
        again = np.zeros(len(rows), bool)
        if self.placement is not None:
            bridged = np.any(self.placement.families[rows]
                             != np.arange(self.settings.draws), axis=1)
            again = (self._proposal_omega[rows] > 0) & bridged
        fresh, own = rows[~again], rows[again]
        if fresh.size:
            placement, used = self._importance(omega, fresh)
            short = np.flatnonzero(placement.ess(omega) < keep)
            if short.size and self.max_hmc:
                placement, used = self._keep_better(
                    omega, placement, used, short,
                    *self._bridged(omega, fresh[short], used.scale[short], own=False))
            self._place(omega, fresh, placement, used)
        if own.size:
            assert self.proposals is not None
            placement, used = self._bridged(omega, own, self.proposals.scale[own], own=True)
            short = np.flatnonzero(placement.ess(omega) < keep)
            if short.size:
                placement, used = self._keep_better(
                    omega, placement, used, short,
                    *self._bridged(omega, own[short], used.scale[short], own=False))
            self._place(omega, own, placement, used)
        self._times_moved[rows] += 1

    def _place(self, omega: float, rows: np.ndarray, placement: Placement,
               used: Proposal) -> None:
        """Keep ``placement`` and the proposals ``used`` as the resamples ``rows``' at ``omega``."""
        self._store(rows, placement)
        self.proposals = used if self.proposals is None else put(self.proposals, rows, used)
        self._proposal_omega[rows] = omega

    @staticmethod
    def _keep_better(
        omega: float, placement: Placement, used: Proposal, rows: np.ndarray,
        found: Placement, found_used: Proposal,
    ) -> tuple[Placement, Proposal]:
        """``placement``'s resamples ``rows`` replaced by ``found``'s where those are more effective."""
        better = np.flatnonzero(found.ess(omega) > placement.ess(omega)[rows])
        return (put(placement, rows[better], take(found, better)),
                put(used, rows[better], take(found_used, better)))

    def _importance(
        self, omega: float, rows: np.ndarray
    ) -> tuple[Placement, Proposal]:
        """Importance samples for the resamples ``rows``
        (:func:`~stanflow.gibbs.path.moving.move_block`), and their proposals."""
        d = self.path.target.dim
        full_mean, full_cov, _ = self._anchor(omega)
        proposal = Proposal(
            full_mean + self.first_order.shifts[rows],
            np.broadcast_to(cholesky(full_cov), (len(rows), d, d)).copy(),
        )
        if self.proposals is not None and self.placement is not None:
            # A resample placed before starts from its particles' mean at omega and
            # its last proposal's scale, widened as its posterior is (by omega_then / omega).
            placed = np.flatnonzero(self._proposal_omega[rows] > 0)
            widen = np.sqrt(self._proposal_omega[rows[placed]] / omega)
            proposal.scale[placed] = self.proposals.scale[rows[placed]] * widen[:, None, None]
            proposal.mean[placed] = self.proposals.mean[rows[placed]]
            log_w = self.placement.log_weights(omega)[rows[placed]]
            for j in np.flatnonzero(kish(log_w) >= 3):
                proposal.mean[placed[j]] = moments(self.placement.z[rows[placed[j]]], log_w[j])[0]
        blocks = [np.arange(i, min(i + BLOCK, len(rows))) for i in range(0, len(rows), BLOCK)]
        tasks = [
            MoveTask(omega, self.counts[rows[block]],
                     Proposal(proposal.mean[block], proposal.scale[block]), self.seed,
                     np.column_stack([rows[block], self._times_moved[rows[block]]]),
                     self.settings)
            for block in blocks
        ]
        moved = self.workers.map(move_block, self.path.target, tasks, context=self._context,
                                 desc=f"GPC, omega {omega:.4g}: importance sampling, blocks")
        self.moves += len(rows)
        self.steps += sum(m.steps for m in moved)
        self._accepted += sum(m.accepted for m in moved)
        return (concatenate([m.placement for m in moved]),
                concatenate([m.proposal for m in moved]))

    def _bridged(
        self, omega: float, rows: np.ndarray, scales: np.ndarray, *, own: bool,
    ) -> tuple[Placement, Proposal]:
        """The resamples ``rows`` bridged by SMC (:mod:`stanflow.gibbs.path.bridge`) to
        ``omega``: from their own particles (``own``, along ``omega``) or from the full
        data's posterior at ``omega``. ``scales``: their last proposals' scales, kept
        where the bridged particles are too few to fit their own."""
        R, S = len(rows), self.settings.draws
        if omega not in self._populations:
            mean, cov, _ = self._anchor(omega)
            self._populations[omega] = full_population(
                self.path.target, self.rng, mean, cov, omega, S)
        population, families, chol = self._populations[omega]
        target = self.path.target
        if own:
            assert self.placement is not None
            then = self._proposal_omega[rows]
            start = BridgeStart(
                np.stack([target.unconstrained(self.placement.z[b]) for b in rows]),
                self.placement.log_rest[rows] - then[:, None] * self.placement.loss[rows],
                self.placement.families[rows], then[:, None] * self.counts[rows])
        else:
            start = BridgeStart(np.broadcast_to(population, (R, *population.shape)).copy(),
                                np.zeros((R, S)), np.broadcast_to(families, (R, S)).copy(),
                                np.full((R, target.n), omega))
        attempt = 1 if own else 2
        tasks = [
            BridgeTask(omega, self.counts[rows[block]],
                       BridgeStart(*(field[block] for field in start)), chol,
                       Proposal(np.zeros((len(block), target.dim)), scales[block]), self.seed,
                       np.column_stack([rows[block], self._times_moved[rows[block]],
                                        np.full(len(block), attempt)]),
                       self.settings.target_ess, self.max_hmc)
            for block in (np.arange(i, min(i + BLOCK, R)) for i in range(0, R, BLOCK))
        ]
        bridged = self.workers.map(bridge_block, target, tasks, context=self._context,
                                   desc=f"GPC, omega {omega:.4g}: SMC bridges, blocks")
        self.hmc_moves += R
        self._hmc_steps += sum(m.hmc_steps for m in bridged)
        self._hmc_accepted += sum(m.hmc_accepted for m in bridged)
        return (concatenate([m.placement for m in bridged]),
                concatenate([m.proposal for m in bridged]))

    def _anchor(self, omega: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The full data's posterior mean and covariance at ``omega``, and the covariance
        of the parameters (on their own scale).

        Refitted by importance sampling from a t (as many draws as the path
        has particles) until half of them are effective, from two starts, the
        better kept: the path's level at or below ``omega``, reweighted (its
        particles may be too few random-walk moves from their ancestors to be
        right in tens of dimensions), and the Laplace approximation
        ``N(estimate, (omega n H)^-1)``. Every resample's proposal starts from it.
        """
        if omega in self._anchors:
            return self._anchors[omega]
        level = self.path.levels[self._level(omega)]
        log_w = -(omega - level.omega) * level.loss
        mean, cov = moments(level.z, log_w)
        starts = [(mean, cov)]
        precision = omega * self.first_order.precision
        try:
            np.linalg.cholesky(precision)
            laplace = np.linalg.inv(precision)
            starts.append((self.first_order.center, 0.5 * (laplace + laplace.T)))
        except np.linalg.LinAlgError:
            pass  # H not positive definite: the path's level alone
        # the level's own draws, should no refit do better
        best = (-1.0, (mean, cov, moments(self.path.target.theta(level.z), log_w)[1]))
        for start_mean, start_cov in starts:
            found = self._refit_anchor(omega, start_mean, start_cov, len(level.z))
            if found is not None and found[0] > best[0]:
                best = found
        self._anchors[omega] = best[1]
        return best[1]

    def _refit_anchor(
        self, omega: float, mean: np.ndarray, cov: np.ndarray, N: int
    ) -> tuple[float, tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
        """Importance-sampling refits from ``N(mean, cov)`` (:meth:`_anchor`): the best
        effective size and its moments, or None if no pass had two effective draws."""
        ones = np.ones((1, self.path.target.n))
        best = None
        for _ in range(ANCHOR_PASSES):
            z, log_base = t_draws([self.rng], mean[None], cholesky(cov)[None], N)
            prior, loss = prior_and_resample_loss(self.path.target, z, ones)
            log_w = prior[0] - omega * loss[0] - log_base[0]
            ess = float(kish(log_w[None])[0])
            if ess < 2:
                break
            mean, cov = moments(z[0], log_w)
            if best is None or ess > best[0]:
                best = (ess, (mean, cov, moments(self.path.target.theta(z[0]), log_w)[1]))
            if ess >= 0.5 * N:
                break
        return best

    def _store(self, rows: np.ndarray, new: Placement) -> None:
        self._placed_theta = None
        if self.placement is None:
            self.placement = new
        else:
            self.placement = put(self.placement, rows, new)

