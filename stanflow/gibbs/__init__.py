"""Gibbs (generalised) posteriors ``pi_n(theta) ∝ exp(-omega sum_i w_i l_i(theta)) pi(theta)``.

Everything here takes one object, a loss program bound to its data:

- :class:`LossProgram` (:mod:`~stanflow.gibbs.program`): any Stan program meeting
  the contract of :mod:`~stanflow.gibbs.contract` (data ``omega`` and
  ``weights``, target ``-omega * sum_i weights[i] * loss_i + log prior``),
  evaluated in process by :mod:`~stanflow.gibbs.evaluation`;
  :func:`location_program` and :func:`linear_program`
  (:mod:`~stanflow.gibbs.templates`): the shipped templates with a loss of
  ``(y, f)`` and a prior, each a slot file;
- :func:`posterior` (:mod:`~stanflow.gibbs.sampling`): NUTS at any ``omega`` and
  weights, through cmdstanpy;
- the learning rate, each calibration as a ``calibration`` group:
  :func:`calibrate_plugin` (:mod:`~stanflow.gibbs.plugin`, ``tr(H J^-1 H) /
  tr(H)``), :func:`calibrate_holmes_walker` (:mod:`~stanflow.gibbs.information`,
  ``tr(H) / tr(J)``), :func:`calibrate_gpc` (the subpackage
  :mod:`~stanflow.gibbs.gpc`, Syring and Martin's bootstrap; backends
  :class:`StanBackend`, :class:`GridBackend`),
  :func:`calibrate_safebayes` (:mod:`~stanflow.gibbs.safebayes`); closed forms
  for conjugate normal linear models (:func:`calibrate_safebayes_conjugate`,
  :func:`calibrate_safebayes_averaged`);
- the learning-rate path (the subpackage :mod:`~stanflow.gibbs.path`): every
  Gibbs posterior from ``omega = 0`` to ``omega_max`` in one SMC sweep
  (:func:`gibbs_path`), and :func:`calibrate_path`: GPC by root finding,
  plug-in and Holmes-Walker on it, for many coefficients with particles
  moved to every resample (:mod:`~stanflow.gibbs.path.transport`); the
  sweep's particles and moves are one argument object, :class:`PathSampler`;
- :func:`calibrate_importance` (:mod:`~stanflow.gibbs.importance`): GPC, the
  plug-in and Holmes-Walker from one importance sample of a Student-t fitted
  to the sandwich, for a few parameters in milliseconds;
- the shape fix (:mod:`~stanflow.gibbs.shape`): draws moved to the sandwich's
  shape, from ``H`` and ``J`` or from the bootstrap's resamples
  (:func:`adjust_draws`, :func:`sandwich_shape`, :func:`bootstrap_shape`;
  ``calibrate_path(..., adjust="sandwich")`` or ``adjust="bootstrap"``);
- exact posteriors of a scalar parameter on a grid (:mod:`~stanflow.gibbs.grid`).

See ``docs/gibbs.md`` and ``docs/your-own-model.md``.
"""

from stanflow.gibbs.contract import ContractError
from stanflow.gibbs.gpc import GridBackend, StanBackend, calibrate_gpc
from stanflow.gibbs.importance import calibrate_importance
from stanflow.gibbs.information import calibrate_holmes_walker
from stanflow.gibbs.path import LearningRatePath, PathSampler, calibrate_path, gibbs_path
from stanflow.gibbs.path.resample_means import bootstrap_shape
from stanflow.gibbs.plugin import calibrate_plugin
from stanflow.gibbs.priors import PRIORS, Prior, get_prior, log_prior_on_grid
from stanflow.gibbs.program import LossProgram
from stanflow.gibbs.safebayes import calibrate_safebayes, calibrate_safebayes_conjugate
from stanflow.gibbs.safebayes_averaging import calibrate_safebayes_averaged
from stanflow.gibbs.sampling import posterior
from stanflow.gibbs.shape import adjust_draws, sandwich_shape
from stanflow.gibbs.templates import TemplateProgram, linear_program, location_program

__all__ = [
    "PRIORS",
    "ContractError",
    "GridBackend",
    "LearningRatePath",
    "LossProgram",
    "PathSampler",
    "Prior",
    "StanBackend",
    "TemplateProgram",
    "adjust_draws",
    "bootstrap_shape",
    "calibrate_gpc",
    "calibrate_holmes_walker",
    "calibrate_importance",
    "calibrate_path",
    "calibrate_plugin",
    "calibrate_safebayes",
    "calibrate_safebayes_averaged",
    "calibrate_safebayes_conjugate",
    "get_prior",
    "gibbs_path",
    "linear_program",
    "location_program",
    "log_prior_on_grid",
    "posterior",
    "sandwich_shape",
]
