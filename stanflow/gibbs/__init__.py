"""Gibbs (generalised) posteriors ``pi_n(theta) ∝ exp(-omega L_n(theta)) pi(theta)``.

- :mod:`~stanflow.gibbs.losses`, :mod:`~stanflow.gibbs.priors`: the shipped
  losses and priors, in Stan (``stan/losses/``, ``stan/priors/``) and NumPy;
- :mod:`~stanflow.gibbs.grid`: exact posteriors of a scalar parameter on a grid
  (density, CDF, intervals, ``log Z_n(omega)``), vectorised;
- :mod:`~stanflow.gibbs.plugin`: the plug-in learning rate
  ``tr(H J^-1 H) / tr(H)`` as a ``calibration`` InferenceData group;
- :mod:`~stanflow.gibbs.sampling`: the Stan templates (``stan/gibbs/``) compiled
  with a loss and a prior, sampled into InferenceData;
- :mod:`~stanflow.gibbs.path`: the learning-rate path, every Gibbs posterior from
  ``omega = 0`` to ``omega_max`` in one SMC sweep, and
  :mod:`~stanflow.gibbs.path_calibration`: GPC by root finding, plug-in and
  Holmes-Walker on it.

See ``docs/gibbs.md``.
"""

from stanflow.gibbs.gpc import gpc
from stanflow.gibbs.information import information_matching
from stanflow.gibbs.losses import LOSSES, Loss, get_loss, loss_function
from stanflow.gibbs.path import LearningRatePath, gibbs_path
from stanflow.gibbs.path_calibration import calibrate_path
from stanflow.gibbs.plugin import calibrate
from stanflow.gibbs.priors import PRIORS, Prior, get_prior, log_prior_on_grid
from stanflow.gibbs.safebayes import safebayes
from stanflow.gibbs.sampling import gibbs_model, posterior, stan_data

__all__ = [
    "LOSSES",
    "PRIORS",
    "LearningRatePath",
    "Loss",
    "Prior",
    "calibrate",
    "calibrate_path",
    "get_loss",
    "get_prior",
    "gibbs_model",
    "gibbs_path",
    "gpc",
    "information_matching",
    "log_prior_on_grid",
    "loss_function",
    "posterior",
    "safebayes",
    "stan_data",
]
