"""Loss-calibrated variational inference (LCVI) for continuous decisions.

Kusmierczyk, Sakaya and Klami (2019), "Variational Bayesian decision-making for
continuous utilities", NeurIPS. ADVI maximises ``ELBO(lambda) + U(lambda, h)``,
``U = sum_n E_q[log E_{y_n | theta} u(y_n, h_n)]``, alternated with the choice
of the decisions ``h``.

- :mod:`~stanflow.lcvi.utility_transform`: utilities of losses and their
  scale (M90); the losses and their Bayes decisions are the package's one
  registry, :mod:`stanflow.losses`;
- :mod:`~stanflow.lcvi.numeric_decisions`: Bayes decisions of a loss given only
  as a Stan file, by numerical optimisation in process (:func:`stan_loss`); its
  search in :mod:`~stanflow.lcvi.decision_search`, normal mixtures as samples in
  :mod:`~stanflow.lcvi.mixture_nodes`;
- :mod:`~stanflow.lcvi.utility`: the utility term's estimators in NumPy, and
  :class:`Utility`, the utility term as every LCVI procedure takes it
  (``utility=``);
- :mod:`~stanflow.lcvi.contract`: what a Stan program of your own declares to be an
  LCVI program (``docs/your-own-model.md``);
- :mod:`~stanflow.lcvi.program`: such a program bound to its data
  (:class:`LcviProgram`), compiled with a loss (:class:`LcviModel`);
- :mod:`~stanflow.lcvi.predictive`: its outcomes' predictive at draws of the
  parameters, read from Stan in process, and its Bayes decisions;
- :mod:`~stanflow.lcvi.problem`: the shipped programs (eight schools, normal mean);
- :mod:`~stanflow.lcvi.mf`: probabilistic matrix factorisation of Last.fm counts;
- :mod:`~stanflow.lcvi.baseline`: the HMC baseline, NUTS on the program with
  the utility term off;
- :mod:`~stanflow.lcvi.loop`: the LCVI loop (:func:`run_lcvi`, :func:`lcvi`);
  its schedule and ADVI runs in :mod:`~stanflow.lcvi.advi_runs`;
- :mod:`~stanflow.lcvi.joint`: the paper's joint gradient optimisation, in
  process (:func:`run_lcvi_joint`); its optimiser in
  :mod:`~stanflow.lcvi.joint_optimiser`;
- :mod:`~stanflow.lcvi.decision_step`: the loop's decision step and the record
  of each fit (empirical risk, settling);
- :mod:`~stanflow.lcvi.results`: what the loop returns (:class:`Loop`,
  :class:`Step`, :class:`PlainVI`) and its InferenceData (:func:`to_idata`).

No exported name is also the name of a module of this package.

See ``docs/lcvi.md``.
"""

from stanflow.lcvi.baseline import NutsBaseline, nuts_baseline
from stanflow.lcvi.decision_step import empirical_risk, predictive_decisions, settled
from stanflow.lcvi.joint import JointLoop, joint_to_idata, lcvi_joint, run_lcvi_joint
from stanflow.lcvi.joint_optimiser import JointFit
from stanflow.lcvi.loop import ADVI_DEFAULTS, lcvi, run_lcvi
from stanflow.lcvi.numeric_decisions import stan_loss
from stanflow.lcvi.predictive import Predictive
from stanflow.lcvi.problem import eight_schools, normal_mean
from stanflow.lcvi.program import LcviModel, LcviProgram
from stanflow.lcvi.results import Loop, PlainVI, Step, to_idata
from stanflow.lcvi.utility import (
    Utility,
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
    "LcviModel",
    "LcviProgram",
    "Loop",
    "NutsBaseline",
    "PlainVI",
    "Predictive",
    "Step",
    "Utility",
    "eight_schools",
    "empirical_risk",
    "joint_to_idata",
    "lcvi",
    "lcvi_joint",
    "normal_mean",
    "normal_outcomes",
    "nuts_baseline",
    "predictive_decisions",
    "run_lcvi",
    "run_lcvi_joint",
    "settled",
    "stan_loss",
    "theta_draws",
    "to_idata",
    "utility_at_locations",
    "utility_from_losses",
    "utility_per_theta",
    "utility_scale",
    "utility_term",
]
