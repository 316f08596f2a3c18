"""A loss program's Gibbs posteriors as functions of many particles, for the learning-rate path.

The Gibbs posterior ``pi_omega(theta) ∝ exp(-omega L_n(theta)) pi(theta)`` is, as
``omega`` grows from 0, a tempering path from the prior. A path sampler
(:mod:`stanflow.gibbs.path.sweep`; SafeBayes' sweep over the data,
:mod:`stanflow.gibbs.sequential`, too) needs, at particles ``z`` of shape ``(N, d)``:

- the per-observation losses ``l_i``, shape ``(N, n)``, and their sums ``L_n``,
  from the program in process (:class:`~stanflow.gibbs.program.LossProgram`);
- the prior's log density and draws from it, where the path starts.

Where the particles live depends on what is known of the prior:

- a shipped template with a shipped prior (``uniform`` on a finite box,
  ``normal`` truncated to it; :class:`~stanflow.gibbs.box.BoxPrior`):
  ``z`` is ``theta`` itself, the prior's draws are exact and its density is
  normalised on the box, so the sampler's ``log Z`` is ``log Z_n(omega)``;
- any other program: ``z`` is Stan's unconstrained scale, the prior's density
  the program's target at ``omega = 0`` with the log Jacobian (every constant
  kept, so ``log Z`` is ``log Z_n(omega)`` when the program's prior is a
  normalised density), and its draws come from NUTS at ``omega = 0``
  (:data:`PRIOR_CHAINS` chains through cmdstanpy, every :data:`PRIOR_THIN`-th
  draw kept). The prior must be proper:
  chains that do not mix (split R-hat above :data:`MAX_PRIOR_RHAT`) are an
  error before the sweep starts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stanflow import arviz_compat
from stanflow.gibbs.box import LOGIT_LIMIT, unconstrain
from stanflow.gibbs.program import LossProgram

PRIOR_CHAINS = 4
PRIOR_THIN = 2
MAX_PRIOR_RHAT = 1.1
PRIOR_WARMUP = 500


class PathTarget:
    """Losses and prior of a loss program, evaluated at particles ``(N, d)``.

    Parameters
    ----------
    program : LossProgram
    weights : array_like, shape (n,), optional
        The observations' weights in the losses (default all 1): the path of a
        weighted data set, e.g. a bootstrap resample's counts.

    Attributes
    ----------
    program : LossProgram
    space : {"box", "unconstrained"}
        Where the particles live (module docstring).
    names : list of str
        The parameters, as :attr:`LossProgram.names`.
    dim : int
        ``d``, the particles' dimension.
    n : int
        Number of observations.
    """

    def __init__(self, program: LossProgram, weights: np.ndarray | None = None) -> None:
        if not isinstance(program, LossProgram):
            raise TypeError(f"program must be a LossProgram, got {type(program).__name__}")
        self.weights = None if weights is None else program.check_weights(weights)
        program.check_proper_prior()
        self.program = program
        self.box = getattr(program, "exact_prior", None)
        self.space = "box" if self.box is not None else "unconstrained"
        self.names = list(program.names)
        self.dim = len(self.box.lower) if self.box is not None else program.dim
        self.n = program.n
        self._last: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._prior_offset = None if self.box is None else self._box_offset()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the last call's arrays (sent to other processes)."""
        return {**self.__dict__, "_last": None}

    def sample_prior(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws from the prior, shape ``(n, d)``."""
        if self.box is not None:
            return np.asarray(self.box.sample(rng, n), dtype=float)
        return self._nuts_prior(rng, n)

    def log_prior(self, z: np.ndarray) -> np.ndarray:
        """The prior's log density at ``z``; ``-inf`` outside its support, shape ``(N,)``.

        On the unconstrained scale the prior and the total loss come from one
        batched call, both kept for calls with the same array (which must not be
        changed in place meanwhile).
        """
        if self.box is not None:
            return self.box.log_density(self._check(z))
        if self._last is not None and self._last[0] is z:
            return self._last[1]
        prior, loss = self.program.prior_and_loss(self._check(z), self.weights)
        self._last = (z, prior, loss)
        return prior

    def pointwise_loss(self, z: np.ndarray) -> np.ndarray:
        """Every observation's loss at every particle, shape ``(N, n)``."""
        return _finite(self.program.losses(self.unconstrained(z)))

    def total_loss(self, z: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """``L_n(z) = sum_i weights[i] l_i``, shape ``(N,)``; ``weights`` default the target's."""
        if weights is None and self._last is not None and self._last[0] is z:
            return _finite(self._last[2])
        return _finite(self.weighted_loss(z, self.weights if weights is None else weights))

    def weighted_loss(self, z: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
        """``sum_i weights[i] l_i`` (all 1 for None), ``inf`` where the program rejects a point.

        On a shipped prior's box one in-process row per particle: Stan's prior
        is the box's up to a constant offset, measured when the target is made.
        """
        u = self.unconstrained(z)
        if self._prior_offset is None:
            return self.program.total_loss(u, weights)
        assert self.box is not None
        at_one = self.program.log_density(u, 1.0, weights, jacobian=False)
        prior = self.box.log_density(self._check(z)) - self._prior_offset
        return np.where(np.isfinite(at_one), prior - at_one, np.inf)

    def theta(self, z: np.ndarray) -> np.ndarray:
        """The parameters at the particles, shape ``(N, len(names))``."""
        z = self._check(z)
        return z if self.box is not None else self.program.constrain(z)

    def unconstrained(self, z: np.ndarray) -> np.ndarray:
        """Stan's unconstrained coordinates of the particles, shape ``(N, D)``."""
        z = self._check(z)
        if self.box is None:
            return z
        lower, upper = self.box.lower, self.box.upper
        u = unconstrain(z, lower, upper)
        bounded = np.isfinite(lower) | np.isfinite(upper)
        return np.where(bounded, np.clip(u, -LOGIT_LIMIT, LOGIT_LIMIT), u)

    def describe(self) -> dict[str, Any]:
        """What the path records of its target."""
        record = {**self.program.describe(), "particle_space": self.space,
                  "weights": "all 1" if self.weights is None else "given"}
        if self.box is not None:
            record.update(lower_bound=self.box.lower.tolist(), upper_bound=self.box.upper.tolist())
        return record

    def _box_offset(self) -> float | None:
        """The box prior's log density minus Stan's prior (at ``omega = 0``, no Jacobian).

        A constant for a template's shipped prior (the normalisation Stan's
        program leaves out), measured once at prior draws, so that the total
        loss takes one in-process row per particle instead of two; None (two
        rows) if the difference is not constant.
        """
        assert self.box is not None
        z = np.asarray(self.box.sample(np.random.default_rng(0), 8), dtype=float)
        gap = self.box.log_density(z) - self.program.log_prior(self.unconstrained(z),
                                                               jacobian=False)
        if not np.all(np.isfinite(gap)) or np.ptp(gap) > 1e-9 * (1 + abs(gap[0])):
            return None
        return float(np.mean(gap))

    def _nuts_prior(self, rng: np.random.Generator, n: int) -> np.ndarray:
        program = self.program
        fit = program.model().sample(
            data=program.stan_data(0.0), chains=PRIOR_CHAINS,
            iter_sampling=PRIOR_THIN * math.ceil(n / PRIOR_CHAINS), thin=PRIOR_THIN,
            iter_warmup=PRIOR_WARMUP,
            seed=int(rng.integers(2**31 - 1)), show_progress=False,
            sig_figs=18,  # full precision: a simplex read back must sum to one
        )
        draws = fit.draws(concat_chains=False)  # (draws, chains, columns)
        columns = [fit.column_names.index(name) for name in self.names]
        values = draws[:, :, columns]
        rhat = max(float(arviz_compat.rhat(values[:, :, j].T)) for j in range(len(columns)))
        if not rhat <= MAX_PRIOR_RHAT:
            raise ValueError(
                f"{program.source.path.name}: the path starts from the prior (the target at "
                f"omega = 0), and NUTS does not mix on it (split R-hat {rhat:.3g}): it must be "
                "a proper distribution"
            )
        flat = values.reshape(-1, len(columns))
        chosen = flat[rng.permutation(len(flat))[:n]]
        return program.unconstrain(chosen)

    def _check(self, z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=float)
        if z.ndim != 2 or z.shape[1] != self.dim:
            raise ValueError(f"z must have shape (N, {self.dim}), got {z.shape}")
        return z


def _finite(values: np.ndarray) -> np.ndarray:
    if not np.all(np.isfinite(values)):
        raise ValueError("loss returned values that are not finite at some particles")
    return values
