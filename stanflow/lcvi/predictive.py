"""The predictive of an LCVI program's outcomes at draws of its parameters.

:class:`Predictive` holds ``T`` draws of the unconstrained parameters and what
the decision steps need of them, read from the program in process
(:class:`~stanflow.lcvi.program.LcviModel`):

- **normal outcomes** (``lcvi_utility(loc, sd, ...)``): ``loc`` and ``sd`` of
  every draw. Where ``sd`` is the same at every draw (a known noise), the
  Bayes decision integrates the noise out exactly
  (:meth:`stanflow.losses.BoundLoss.mixture_decision`); otherwise it pools
  :data:`NODES` stratified noise nodes per draw;
- **outcomes of any form** (``lcvi_utility(outcomes, ...)``): the Bayes
  decision pools the outcomes of :data:`NODES` base samples per draw, one in
  each of :data:`NODES` equal-probability strata of the standard normal
  (offset from draw to draw by a golden-ratio sequence,
  :func:`stanflow.lcvi.mixture_nodes.noise_nodes`) and, for a program
  that uses them, of the uniform, paired at random.

Outcomes for the utility term are those of the loop's fixed base samples, so
a decision moves only when the approximation does.
"""

from __future__ import annotations

import numpy as np

from stanflow.lcvi.mixture_nodes import noise_nodes
from stanflow.lcvi.program import LcviModel
from stanflow.lcvi.utility import (
    Utility,
    normal_outcomes,
    utility_at_locations,
    utility_per_theta,
)
from stanflow.losses.decisions import CHUNK_ELEMENTS

NODES = 8
"""Base samples per draw for the Bayes decisions of sampled outcomes: with the loops'
1000 draws, 8000 outcomes per decision, whose Monte Carlo error is that of a
sample of 8000 (stratified in the normal base); each node is a gradient row of
the program's evaluation form, the main cost of a decision step."""


class Predictive:
    """The outcomes' predictive at draws ``theta`` (T, D) of an LCVI program.

    Parameters
    ----------
    model : LcviModel
    theta : ndarray, shape (T, D)
        Draws of the unconstrained parameters.
    """

    def __init__(self, model: LcviModel, theta: np.ndarray) -> None:
        self.model, self.theta = model, np.asarray(theta, dtype=float)
        # (loc, sd) of normal outcomes (a program of the normal form), else None
        self.normal: tuple[np.ndarray, np.ndarray] | None = None
        if model.form == "normal":
            loc, sd = model.normal_parts(self.theta)
            # a known noise: one sd per outcome, and the noise integrates out exactly
            self.normal = (loc, sd[0] if np.all(sd == sd[0]) else sd)

    @property
    def loc(self) -> np.ndarray | None:
        """Locations (T, N) of normal outcomes; None for outcomes of any form."""
        return None if self.normal is None else self.normal[0]

    @property
    def sd(self) -> np.ndarray | None:
        """Their sd: (N,) for a known noise, (T, N) otherwise; None for outcomes of any form."""
        return None if self.normal is None else self.normal[1]

    @property
    def exact_noise(self) -> bool:
        """Whether the outcomes are normal with the same sd at every draw."""
        return self.normal is not None and self.normal[1].ndim == 1

    def bayes_decisions(self) -> np.ndarray:
        """The Bayes decisions of the predictive under the model's loss, shape (N,)."""
        loss = self.model.loss
        if self.normal is not None and self.exact_noise:
            return loss.mixture_decision(*self.normal)
        return loss.bayes_decision(self.node_outcomes().reshape(-1, self.model.program.n))

    def node_outcomes(self) -> np.ndarray:
        """Outcomes (T, NODES, N) of :data:`NODES` stratified base samples per draw."""
        T, N = self.theta.shape[0], self.model.program.n
        z = noise_nodes(T, NODES)[:, :, None]
        if self.normal is not None:
            loc, sd = self.normal
            return loc[:, None, :] + np.atleast_2d(sd)[:, None, :] * z
        rng = np.random.default_rng(T)  # the pairing with the uniforms: fixed per T
        strata = (np.arange(NODES) + 0.5) / NODES
        u = np.stack([rng.permutation(strata) for _ in range(T)])[:, :, None]
        return self._chunks(np.broadcast_to(z, (T, NODES, N)), np.broadcast_to(u, (T, NODES, N)))

    def outcomes(self, z: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Outcomes (T, S, N) from base samples ``z``, ``u`` (S, N) shared by all draws."""
        if self.normal is not None:
            loc, sd = self.normal
            if self.exact_noise:
                return normal_outcomes(loc, sd, z)
            return loc[:, None, :] + sd[:, None, :] * z[None]
        return self._chunks(z[None], u[None])

    def utility(self, h: np.ndarray, z: np.ndarray, u: np.ndarray, utility: Utility) -> np.ndarray:
        """The utility term per draw (T,) at decisions ``h``, outcomes from ``z``, ``u``.

        ``utility`` must have its scale set.
        """
        loss, kind, estimator = self.model.loss, utility.kind, utility.estimator
        scale = utility.given_scale("the utility term")
        if self.normal is not None and self.exact_noise:
            return utility_at_locations(*self.normal, z, h, loss, kind, scale, estimator)
        return utility_per_theta(self.outcomes(z, u), h, loss, kind, scale, estimator)

    def one_outcome(self, rng: np.random.Generator) -> np.ndarray:
        """One outcome per draw and decision (T, N), its base samples drawn from ``rng``."""
        T, N = self.theta.shape[0], self.model.program.n
        if self.normal is not None:
            loc, sd = self.normal
            return loc + sd * rng.standard_normal(loc.shape)
        z = rng.standard_normal((T, 1, N))
        u = rng.uniform(size=(T, 1, N))
        return self._chunks(z, u)[:, 0, :]

    def _chunks(self, z: np.ndarray, u: np.ndarray) -> np.ndarray:
        """:meth:`LcviModel.outcomes` of all draws, a few at a time."""
        T = self.theta.shape[0]
        step = max(1, CHUNK_ELEMENTS // max(1, z[0].size))
        parts = []
        for start in range(0, T, step):
            block = slice(start, min(start + step, T))
            zb = z[block] if z.shape[0] == T else z
            ub = u[block] if u.shape[0] == T else u
            parts.append(self.model.outcomes(self.theta[block], zb, ub))
        return np.concatenate(parts)
