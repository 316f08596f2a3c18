"""The LCVI loop's decision step, and what each of its fits is judged by.

After every ADVI fit the loop takes decisions from the fit's state and records
its ELBO, utility term and empirical risk as a
:class:`~stanflow.lcvi.results.Step` (:class:`Judge`). The decision step is
either the Bayes decision of the fit's predictive (``"bayes"``,
:meth:`stanflow.lcvi.predictive.Predictive.bayes_decisions`: for normal
outcomes of a known noise, that noise integrated out exactly) or the maximiser
of the estimated utility term (``"utility"``,
:func:`stanflow.lcvi.utility.utility_decisions`). The loop stops taking
decision steps once they have :func:`settled`.
"""

from __future__ import annotations

from dataclasses import dataclass

import cmdstanpy
import numpy as np

from stanflow.advi import AdviState
from stanflow.lcvi.predictive import Predictive
from stanflow.lcvi.program import LcviModel
from stanflow.lcvi.results import Step
from stanflow.lcvi.utility import Utility, utility_decisions
from stanflow.losses import BoundLoss

DECISIONS = ("bayes", "utility")
"""The decision steps: the predictive's Bayes decision, or the utility term's maximiser."""


def empirical_risk(y: np.ndarray | None, h: np.ndarray, loss: BoundLoss) -> float:
    """``mean_n l(y_n, h_n)``; ``y`` and ``h`` of one shape (NaN without ``y``)."""
    if y is None:
        return float("nan")
    y, h = np.asarray(y, dtype=float), np.asarray(h, dtype=float)
    if h.shape != y.shape:
        raise ValueError(f"h (decisions) must have shape {y.shape}, got {h.shape}")
    return float(loss.value(y, h).mean())


def settled(previous: np.ndarray, current: np.ndarray, tol: float) -> bool:
    """Whether ``max |current - previous| <= tol``."""
    return float(np.max(np.abs(np.asarray(current) - previous))) <= tol


def predictive_decisions(model: LcviModel, z: np.ndarray) -> np.ndarray:
    """Bayes decisions under the predictive of draws ``z`` (T, D) of the unconstrained parameters."""
    return Predictive(model, z).bayes_decisions()


@dataclass(frozen=True, eq=False)
class Judge:
    """The decision step and the record of every fit of one loop.

    Guarantee: a :class:`~stanflow.lcvi.results.Step` depends only on the
    ADVI state, the fit's ``log_p__`` draws and the decisions the fit was run
    with. The state's draws come from the loop's fixed base samples
    ``eps_theta`` and the outcomes from its fixed ``eps_y`` (common random
    numbers), so equal states get equal decisions: a decision moves only when
    the approximation does.

    Parameters
    ----------
    model : LcviModel
        The program bound to the loop's loss.
    utility : Utility
        The utility term, its scale set.
    decision : {"bayes", "utility"}
        The decision step (:data:`DECISIONS`).
    eps_y, eps_u : ndarray, shape (S, N)
        The loop's fixed outcome base samples (normal, uniform).
    eps_theta : ndarray, shape (T, D)
        The loop's fixed base samples of the draws of every state.
    """

    model: LcviModel
    utility: Utility
    decision: str
    eps_y: np.ndarray
    eps_u: np.ndarray
    eps_theta: np.ndarray

    def plain_vi(
        self,
        fit: cmdstanpy.CmdStanVB,
        state: AdviState,
        decisions: np.ndarray,
        seconds: float,
    ) -> Step:
        """A plain-VI fit (utility weight 0) at its own Bayes ``decisions``.

        Plain VI runs with the utility term switched off, so ``U`` is taken at
        these decisions too.
        """
        return self._step(fit, state, decisions, decisions, 0.0, seconds)

    def lcvi_block(
        self,
        fit: cmdstanpy.CmdStanVB,
        state: AdviState,
        h: np.ndarray,
        seconds: float,
        decided: tuple[Predictive, np.ndarray] | None = None,
    ) -> Step:
        """An LCVI block's fit (utility weight 1), run with decisions ``h``.

        Its own decisions, for the next block, are those of the decision step,
        ``decided`` if :meth:`decide` has already been taken on ``state``.
        """
        predictive, decisions = self.decide(state) if decided is None else decided
        return self._step(fit, state, h, decisions, 1.0, seconds, predictive)

    def decide(self, state: AdviState) -> tuple[Predictive, np.ndarray]:
        """The decision step at ``state``: the predictive of its draws and its decisions."""
        predictive = Predictive(self.model, state.draws(self.eps_theta))
        if self.decision == "bayes":
            return predictive, predictive.bayes_decisions()
        utility = self.utility
        return predictive, utility_decisions(
            predictive.outcomes(self.eps_y, self.eps_u),
            self.model.loss,
            utility.kind,
            utility.given_scale("the decision step"),
            utility.estimator,
        )

    def _step(
        self,
        fit: cmdstanpy.CmdStanVB,
        state: AdviState,
        h: np.ndarray,
        decisions: np.ndarray,
        weight: float,
        seconds: float,
        predictive: Predictive | None = None,
    ) -> Step:
        """Judge ``fit`` (at ``state``, whose draws have ``predictive``), run with
        decisions ``h`` and weight ``weight``; ``decisions`` are the fit's own."""
        if predictive is None:
            predictive = Predictive(self.model, state.draws(self.eps_theta))
        u = predictive.utility(h, self.eps_y, self.eps_u, self.utility)
        # log_p__ is the target, so it holds weight * U: take it out again
        log_p = np.mean(fit.variational_sample_pd["log_p__"].to_numpy())
        elbo = log_p + state.entropy() - (weight * np.mean(u) if weight else 0.0)
        risk = empirical_risk(self.model.program.y, decisions, self.model.loss)
        return Step(fit, state, decisions, float(elbo), float(u.mean()), risk, seconds)
