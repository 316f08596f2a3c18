"""Self-tuning MCMC moves: the default kernel of SMC and AIS along q-paths.

Everything the moves need is read from the particles at each temperature, so a
user tunes nothing:

- **Preconditioning.** The particles' mean ``m`` and covariance ``C = L L'``
  whiten the target: the moves act on ``u = L^-1 (z - m)``, where a
  posterior close to Gaussian is close to ``N(0, I)`` whatever its scales and
  correlations.
- **The move.** The cheapest move that works. First an independence
  proposal from ``N(m, 1.1^2 C)``: an accepted one forgets its start entirely,
  at the cost of one density evaluation. Where it is accepted often
  (:data:`INDEPENDENCE_ENOUGH`; the path is close to Gaussian), the moves go
  on as independence proposals. Where it is not, and the densities give no
  gradients, each independence proposal is followed by a random-walk step in
  ``u`` whose scale is adapted to the acceptance rate (aim :data:`RWM_ACCEPT`).
  Where the base and the target both give gradients
  (:mod:`~stanflow.qpaths.densities`: a Stan program in process, or
  :class:`~stanflow.qpaths.densities.GaussianBase`), the moves are
  Hamiltonian Monte Carlo in ``u``: leapfrog trajectories of length about
  ``pi / 2`` (a quarter period of ``N(0, I)``, drawn anew each move so no
  trajectory is periodic), the step size jittered per particle and adapted to
  the acceptance rate (aim :data:`HMC_ACCEPT`). Step size and scale carry
  over from one temperature to the next.
- **How many moves.** Moves repeat until the particles forget where they
  started: until the largest correlation, over the coordinates of ``u``,
  between the particles before the first move and now is below
  ``decorrelation`` (default 0.1), at most ``max_moves``. Resampling leaves
  duplicates; this criterion runs the moves until they have separated, which a
  fixed count cannot promise in every dimension and at every temperature.

All particles move in one vectorised step (one call of each density per
leapfrog step or proposal), so a Stan program's batch evaluation in process
keeps every core busy. A particle whose trajectory meets a point the program
rejects (``-inf``) or a non-finite gradient stops there and is not moved.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.linalg import solve_triangular

from stanflow.qpaths.densities import is_differentiable
from stanflow.qpaths.kernels import LogDensity, MoveInfo, Particles, evaluate
from stanflow.qpaths.qmath import log_qpath, target_share
from stanflow.validation import check_int

HMC_ACCEPT = 0.8
"""Mean acceptance probability the HMC step size aims at."""
RWM_ACCEPT = 0.3
"""Acceptance rate the random-walk scale aims at."""
INDEPENDENCE_ENOUGH = 0.5
"""Acceptance of the first independence proposal above which no gradient is used."""
INDEPENDENCE_SCALE = 1.1
"""Independence proposal ``N(m, scale^2 C)``: a little wider than the particles."""
TRAJECTORY = (0.5 * math.pi / 2, 1.5 * math.pi / 2)
"""Range of the trajectory length drawn for each HMC move (whitened units)."""
MAX_LEAPFROG = 64
"""Most leapfrog steps in one trajectory."""
JITTER = 0.2
"""Each particle's step size is the tuned one times ``U(1 - JITTER, 1 + JITTER)``."""


class SelfTuningMoves:
    """The default move kernel of :func:`~stanflow.qpaths.annealing.smc` and ``ais``.

    See the module docstring for what it tunes and how. One instance serves one
    run (its step size carries over the temperatures); ``smc`` and ``ais``
    make a fresh one per run.

    Parameters
    ----------
    kind : {"auto", "independence", "independence-rwm", "hmc"}, default "auto"
        ``"auto"``: choose at each temperature as the module docstring says
        (HMC only where both densities are differentiable); the others force
        one move.
    decorrelation : float, default 0.01
        The correlation, in ``(0, 1)``, that the moves aim to leave between
        the particles before and after them, for the slowest of their
        whitened coordinates, squares and log density.
    max_moves : int, default 30
        Upper bound on the moves per temperature.

    Attributes
    ----------
    step_size, walk_scale : float or None
        HMC step size and random-walk scale (whitened units) for the next call.
    history : list of dict
        Per call: ``beta``, ``move`` (``"independence"``, ``"independence-rwm"``
        or ``"hmc"``),
        ``n_moves``, ``acceptance``.
    """

    def __init__(
        self, kind: str = "auto", decorrelation: float = 0.01, max_moves: int = 30
    ) -> None:
        if kind != "auto" and kind not in MOVES:
            raise ValueError(f"kind must be 'auto' or one of {sorted(MOVES)}, got {kind!r}")
        if not 0 < decorrelation < 1:
            raise ValueError(f"decorrelation must lie in (0, 1), got {decorrelation}")
        max_moves = check_int(max_moves, "max_moves")
        self.kind = kind
        self.decorrelation = float(decorrelation)
        self.max_moves = max_moves
        self.step_size: float | None = None
        self.walk_scale: float | None = None
        self.history: list[dict[str, float | int | str]] = []

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
        """Move the particles so that ``pi_{beta,q}`` stays invariant.

        ``n_moves`` fixes the number of moves; ``None`` moves until the
        particles have decorrelated (see the module docstring).
        """
        n, d = particles.z.shape
        if n <= d:
            raise ValueError(
                f"particles: self-tuning moves need more particles than dimensions, "
                f"got {n} particles in {d} dimensions"
            )
        gradients = is_differentiable(log_pi0) and is_differentiable(log_pi1)
        if self.kind == "hmc" and not gradients:
            name = "log_pi1" if is_differentiable(log_pi0) else "log_pi0"
            raise ValueError(
                f"{name}: HMC moves need value_and_gradient(z) (see stanflow.qpaths.densities)"
            )
        whitening = Whitening.fit(particles.z)
        level = Level(beta, q, log_pi0, log_pi1)
        start = _features(particles, whitening, level)
        limit = self.max_moves if n_moves is None else n_moves
        state, accepted, done, kind = particles, 0.0, 0, self.kind
        if kind == "auto":
            state, accepted = _independence_step(rng, state, whitening, level)
            done = 1
            if accepted >= INDEPENDENCE_ENOUGH:
                kind = "independence"
            else:
                kind = "hmc" if gradients else "independence-rwm"
        move = MOVES[kind](self, whitening, level)
        state = move.init(state)
        needed = limit
        while done < min(limit, needed):
            state, rate = move.step(rng, state)
            accepted += rate
            done += 1
            if n_moves is None:
                left = _max_correlation(start, _features(state, whitening, level))
                needed = self._moves_needed(left, done, n, needed)
        info = MoveInfo(accepted / done, done)
        self.history.append(
            {"beta": beta, "move": kind, "n_moves": done, "acceptance": info.acceptance}
        )
        return state, info


    def _moves_needed(self, correlation: float, done: int, n: int, previous: int) -> int:
        """Moves that bring the largest correlation to ``decorrelation``, from its decay so far.

        Each move multiplies the correlation by about ``rho = correlation^(1 / done)``,
        so ``log(decorrelation) / log(rho)`` moves reach the aim. Below the noise
        floor of a correlation of ``n`` particles (``3 / sqrt(n)``) the decay cannot
        be read and the previous estimate stands.
        """
        if correlation <= 3 / math.sqrt(n):
            return previous if previous < self.max_moves else done
        if correlation >= 1:
            return self.max_moves
        per_move = math.log(correlation) / done
        return max(done, math.ceil(math.log(self.decorrelation) / per_move))


class Whitening:
    """``u = L^-1 (z - m)`` for the particles' mean ``m`` and covariance ``L L'``."""

    def __init__(self, mean: np.ndarray, chol: np.ndarray) -> None:
        self.mean, self.chol = mean, chol

    @classmethod
    def fit(cls, z: np.ndarray) -> Whitening:
        """From particles ``z`` of shape ``(N, d)``, with a small ridge."""
        d = z.shape[1]
        cov = np.atleast_2d(np.cov(z, rowvar=False))
        ridge = 1e-10 * (np.trace(cov) / d + 1e-300)
        return cls(z.mean(axis=0), np.linalg.cholesky(cov + ridge * np.eye(d)))

    def white(self, z: np.ndarray) -> np.ndarray:
        return solve_triangular(self.chol, (z - self.mean).T, lower=True).T

    def unwhite(self, u: np.ndarray) -> np.ndarray:
        return self.mean + u @ self.chol.T


def _features(state: Particles, whitening: Whitening, level: Level) -> np.ndarray:
    """What must forget its start: whitened coordinates, their squares, the log density.

    Shape ``(N, 2 d + 1)``. The squares see a spread the moves have not
    restored yet, which the coordinates alone miss; the log density is the
    slowest function of the state for HMC (its energy) and sees the tails.
    """
    u = whitening.white(state.z)
    return np.hstack([u, u**2, level.log_density(state)[:, None]])


def _max_correlation(start: np.ndarray, now: np.ndarray) -> float:
    """Largest ``|corr|`` between the columns of two ``(N, k)`` arrays; a constant column counts as 1."""
    a = start - start.mean(axis=0)
    b = now - now.mean(axis=0)
    scale = np.sqrt(np.sum(a**2, axis=0) * np.sum(b**2, axis=0))
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.abs(np.sum(a * b, axis=0)) / scale
    return float(np.max(np.where(scale > 0, corr, 1.0)))


def _adapt(size: float, rate: float, aim: float) -> float:
    """Multiply a step size by ``exp(2 (rate - aim))``, a factor in ``[0.5, 2]``."""
    return size * float(np.clip(np.exp(2.0 * (rate - aim)), 0.5, 2.0))


class Level(NamedTuple):
    """The tempered target ``pi_{beta,q}`` the moves leave invariant."""

    beta: float
    q: float
    log_pi0: LogDensity
    log_pi1: LogDensity

    def log_density(self, particles: Particles) -> np.ndarray:
        """``log pi_{beta,q}`` at evaluated particles, shape ``(N,)``."""
        return log_qpath(particles.log_pi0, particles.log_pi1, self.beta, self.q)

    def evaluate(self, z: np.ndarray) -> Particles:
        """Both densities at ``z`` (checked)."""
        return evaluate(z, self.log_pi0, self.log_pi1)

    def gradients(self, z: np.ndarray) -> tuple[np.ndarray, ...]:
        """``(log pi0, grad log pi0, log pi1, grad log pi1)`` at ``z`` (unchecked)."""
        v0, g0 = self.log_pi0.value_and_gradient(z)  # type: ignore[attr-defined]
        v1, g1 = self.log_pi1.value_and_gradient(z)  # type: ignore[attr-defined]
        return np.asarray(v0, dtype=float), g0, np.asarray(v1, dtype=float), g1


class _HmcMove:
    """HMC in whitened coordinates; ``step`` is one trajectory of every particle."""

    def __init__(self, owner: SelfTuningMoves, whitening: Whitening, level: Level) -> None:
        self.owner, self.whitening, self.level = owner, whitening, level
        self.grad = np.empty((0, 0))

    def init(self, particles: Particles) -> Particles:
        if self.owner.step_size is None:
            self.owner.step_size = min(1.0, particles.z.shape[1] ** -0.25)
        _, grad0, _, grad1 = self.level.gradients(particles.z)
        self.grad = self._combine(particles.log_pi0, particles.log_pi1, grad0, grad1)
        return particles

    def step(self, rng: np.random.Generator, state: Particles) -> tuple[Particles, float]:
        n, d = state.z.shape
        size = float(self.owner.step_size)  # type: ignore[arg-type]
        steps = int(min(MAX_LEAPFROG, max(1, round(rng.uniform(*TRAJECTORY) / size))))
        eps = size * rng.uniform(1 - JITTER, 1 + JITTER, size=(n, 1))
        grad = self.grad
        u = self.whitening.white(state.z)
        momentum = rng.standard_normal((n, d))
        energy = -self.level.log_density(state) + 0.5 * np.sum(momentum**2, axis=1)
        alive = np.ones(n, dtype=bool)
        current = state
        momentum = momentum + 0.5 * eps * grad
        for k in range(steps):
            u = np.where(alive[:, None], u + eps * momentum, u)
            current, grad, alive = self._evaluate(u, alive, current, grad)
            momentum = momentum + (0.5 if k == steps - 1 else 1.0) * eps * grad
        with np.errstate(invalid="ignore", over="ignore"):
            proposed = -self.level.log_density(current) + 0.5 * np.sum(momentum**2, axis=1)
            log_ratio = np.where(alive, energy - proposed, -np.inf)
        log_ratio = np.where(np.isnan(log_ratio), -np.inf, log_ratio)
        accept = np.log(rng.uniform(size=n)) < log_ratio
        rate = float(np.mean(np.exp(np.minimum(log_ratio, 0.0))))
        self.owner.step_size = _adapt(size, rate, HMC_ACCEPT)
        self.grad = np.where(accept[:, None], grad, self.grad)
        return _choose(accept, current, state), rate

    def _combine(
        self, lp0: np.ndarray, lp1: np.ndarray, grad0: np.ndarray, grad1: np.ndarray
    ) -> np.ndarray:
        """Gradient of ``log pi_{beta,q}`` in whitened coordinates."""
        share = target_share(lp0, lp1, self.level.beta, self.level.q)[:, None]
        return ((1 - share) * grad0 + share * grad1) @ self.whitening.chol

    def _evaluate(
        self, u: np.ndarray, alive: np.ndarray, current: Particles, grad: np.ndarray
    ) -> tuple[Particles, np.ndarray, np.ndarray]:
        """Densities and whitened gradient at the live rows of ``u``; rows that fail die."""
        rows = np.flatnonzero(alive & np.isfinite(u).all(axis=1))
        alive = np.zeros_like(alive)
        z = current.z.copy()
        lp0, lp1 = current.log_pi0.copy(), current.log_pi1.copy()
        grad = grad.copy()
        if rows.size:
            z_rows = self.whitening.unwhite(u[rows])
            # A diverging trajectory overflows the densities: those rows die below.
            with np.errstate(over="ignore", invalid="ignore"):
                v0, g0, v1, g1 = self.level.gradients(z_rows)
            ok = (
                np.isfinite(v0)
                & np.isfinite(v1)
                & np.isfinite(g0).all(axis=1)
                & np.isfinite(g1).all(axis=1)
            )
            good = rows[ok]
            z[good], lp0[good], lp1[good] = z_rows[ok], v0[ok], v1[ok]
            grad[good] = self._combine(v0[ok], v1[ok], g0[ok], g1[ok])
            alive[good] = True
        return Particles(z, lp0, lp1), grad, alive


class _IndependenceRwmMove:
    """An independence proposal from the fitted Gaussian, then a whitened random-walk step."""

    def __init__(self, owner: SelfTuningMoves, whitening: Whitening, level: Level) -> None:
        self.owner, self.whitening, self.level = owner, whitening, level

    def init(self, particles: Particles) -> Particles:
        if self.owner.walk_scale is None:
            self.owner.walk_scale = 2.38 / math.sqrt(particles.z.shape[1])
        return particles

    def step(self, rng: np.random.Generator, state: Particles) -> tuple[Particles, float]:
        n, d = state.z.shape
        state, independence = _independence_step(rng, state, self.whitening, self.level)
        size = float(self.owner.walk_scale)  # type: ignore[arg-type]
        walk = self.whitening.white(state.z) + size * rng.standard_normal((n, d))
        state, local = _metropolis(rng, state, self.whitening.unwhite(walk), self.level, 0.0)
        self.owner.walk_scale = _adapt(size, local, RWM_ACCEPT)
        return state, 0.5 * (independence + local)


class _IndependenceMove:
    """Independence proposals from the fitted Gaussian alone (a path close to Gaussian)."""

    def __init__(self, owner: SelfTuningMoves, whitening: Whitening, level: Level) -> None:
        self.whitening, self.level = whitening, level

    def init(self, particles: Particles) -> Particles:
        return particles

    def step(self, rng: np.random.Generator, state: Particles) -> tuple[Particles, float]:
        return _independence_step(rng, state, self.whitening, self.level)


MOVES: dict[str, type[_HmcMove | _IndependenceRwmMove | _IndependenceMove]] = {
    "independence": _IndependenceMove,
    "independence-rwm": _IndependenceRwmMove,
    "hmc": _HmcMove,
}


def _independence_step(
    rng: np.random.Generator, state: Particles, whitening: Whitening, level: Level
) -> tuple[Particles, float]:
    """One independence Metropolis-Hastings step from ``N(m, 1.1^2 C)``; the acceptance rate."""
    n, d = state.z.shape
    scale = INDEPENDENCE_SCALE

    def log_g(u: np.ndarray) -> np.ndarray:
        return -0.5 * np.sum(u**2, axis=1) / scale**2

    draws = scale * rng.standard_normal((n, d))
    correction = log_g(whitening.white(state.z)) - log_g(draws)
    return _metropolis(rng, state, whitening.unwhite(draws), level, correction)


def _metropolis(
    rng: np.random.Generator,
    state: Particles,
    proposal_z: np.ndarray,
    level: Level,
    log_correction: np.ndarray | float,
) -> tuple[Particles, float]:
    """Accept ``proposal_z`` row by row by Metropolis-Hastings; the acceptance rate."""
    proposal = level.evaluate(proposal_z)
    log_ratio = level.log_density(proposal) - level.log_density(state) + log_correction
    accept = np.log(rng.uniform(size=len(log_ratio))) < log_ratio
    return _choose(accept, proposal, state), float(accept.mean())


def _choose(accept: np.ndarray, proposed: Particles, current: Particles) -> Particles:
    """The proposed particles where ``accept``, the current ones elsewhere."""
    return Particles(
        np.where(accept[:, None], proposed.z, current.z),
        np.where(accept, proposed.log_pi0, current.log_pi0),
        np.where(accept, proposed.log_pi1, current.log_pi1),
    )
