"""Loss-calibrated variational inference (LCVI) for continuous decisions.

Kusmierczyk, Sakaya and Klami (2019), "Variational Bayesian decision-making for
continuous utilities", NeurIPS. ADVI maximises ``ELBO(lambda) + U(lambda, h)``,
``U = sum_n E_q[log E_{y_n | theta} u(y_n, h_n)]``, alternated with the choice
of the decisions ``h``.

- :mod:`~stanflow.lcvi.utility_transform`: utilities of losses and their
  scale (M90); the losses and their Bayes decisions are the package's one
  registry, :mod:`stanflow.losses`;
- :mod:`~stanflow.lcvi.numeric_decisions`: Bayes decisions of a loss given only
  as a Stan file, by numerical optimisation in process (:func:`stan_loss`);
- :mod:`~stanflow.lcvi.utility`: the utility term's estimators in NumPy;
- :mod:`~stanflow.lcvi.problem`: models in LCVI templates (eight schools, normal mean);
- :mod:`~stanflow.lcvi.mf`: probabilistic matrix factorisation of Last.fm counts;
- :mod:`~stanflow.lcvi.stan`: compiling the templates ``stan/lcvi/*_lcvi.stan``, their data;
- :mod:`~stanflow.lcvi.loop`: the LCVI loop (:func:`run_lcvi`, :func:`lcvi`);
- :mod:`~stanflow.lcvi.joint`: the paper's joint gradient optimisation, in
  process (:func:`run_lcvi_joint`);
- :mod:`~stanflow.lcvi.decision_step`: the loop's decision step and the record
  of each fit (empirical risk, settling);
- :mod:`~stanflow.lcvi.results`: what the loop returns (:class:`Loop`,
  :class:`Step`, :class:`PlainVI`) and its InferenceData (:func:`to_idata`).

No exported name is also the name of a module of this package.

See ``docs/lcvi.md``.
"""

from stanflow.lcvi.decision_step import empirical_risk, predictive_decisions, settled
from stanflow.lcvi.joint import JointFit, JointLoop, run_lcvi_joint
from stanflow.lcvi.loop import ADVI_DEFAULTS, lcvi, run_lcvi
from stanflow.lcvi.numeric_decisions import stan_loss
from stanflow.lcvi.problem import Problem, eight_schools, normal_mean
from stanflow.lcvi.results import Loop, PlainVI, Step, to_idata
from stanflow.lcvi.stan import lcvi_model, stan_data
from stanflow.lcvi.utility import (
    normal_outcomes,
    theta_draws,
    utility_at_locations,
    utility_per_theta,
    utility_term,
)
from stanflow.lcvi.utility_transform import utility_from_losses, utility_scale

__all__ = [
    "ADVI_DEFAULTS",
    "JointFit",
    "JointLoop",
    "Loop",
    "PlainVI",
    "Problem",
    "Step",
    "eight_schools",
    "empirical_risk",
    "lcvi",
    "lcvi_model",
    "normal_mean",
    "normal_outcomes",
    "predictive_decisions",
    "run_lcvi",
    "run_lcvi_joint",
    "settled",
    "stan_data",
    "stan_loss",
    "theta_draws",
    "to_idata",
    "utility_at_locations",
    "utility_from_losses",
    "utility_per_theta",
    "utility_scale",
    "utility_term",
]
