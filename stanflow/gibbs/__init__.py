"""Gibbs (generalised) posteriors ``pi_n(theta) ∝ exp(-omega L_n(theta)) pi(theta)``.

- :mod:`~stanflow.gibbs.priors`: the shipped priors, in Stan (``stan/priors/``)
  and NumPy; the losses are the package's one registry, :mod:`stanflow.losses`;
- :mod:`~stanflow.gibbs.grid`: exact posteriors of a scalar parameter on a grid
  (density, CDF, intervals, ``log Z_n(omega)``), vectorised;
- the learning rate, each calibration as a ``calibration`` InferenceData
  group: :func:`calibrate_plugin` (:mod:`~stanflow.gibbs.plugin`, the plug-in
  ``tr(H J^-1 H) / tr(H)``), :func:`calibrate_holmes_walker`
  (:mod:`~stanflow.gibbs.information`, ``tr(H) / tr(J)``),
  :func:`calibrate_gpc` (:mod:`~stanflow.gibbs.gpc`, Syring and Martin's
  bootstrap; its Stan backend :mod:`~stanflow.gibbs.gpc_stan`) and
  :func:`calibrate_safebayes` (:mod:`~stanflow.gibbs.safebayes`), and
  :func:`calibrate_safebayes_averaged` for model averaging over nested
  normal linear models (:mod:`~stanflow.gibbs.safebayes_averaging`);
- :mod:`~stanflow.gibbs.sampling`: the Stan templates (``stan/gibbs/``) compiled
  with a loss and a prior, sampled into InferenceData;
- :mod:`~stanflow.gibbs.path`: the learning-rate path, every Gibbs posterior from
  ``omega = 0`` to ``omega_max`` in one SMC sweep, and
  :func:`calibrate_path` (:mod:`~stanflow.gibbs.path_calibration`): GPC by
  root finding, plug-in and Holmes-Walker on it.

See ``docs/gibbs.md``.
"""

from stanflow.gibbs.gpc import calibrate_gpc
from stanflow.gibbs.information import calibrate_holmes_walker
from stanflow.gibbs.path import LearningRatePath, gibbs_path
from stanflow.gibbs.path_calibration import calibrate_path
from stanflow.gibbs.plugin import calibrate_plugin
from stanflow.gibbs.priors import PRIORS, Prior, get_prior, log_prior_on_grid
from stanflow.gibbs.safebayes import calibrate_safebayes
from stanflow.gibbs.safebayes_averaging import calibrate_safebayes_averaged
from stanflow.gibbs.sampling import gibbs_model, posterior, stan_data

__all__ = [
    "PRIORS",
    "LearningRatePath",
    "Prior",
    "calibrate_gpc",
    "calibrate_holmes_walker",
    "calibrate_path",
    "calibrate_plugin",
    "calibrate_safebayes",
    "calibrate_safebayes_averaged",
    "get_prior",
    "gibbs_model",
    "gibbs_path",
    "log_prior_on_grid",
    "posterior",
    "stan_data",
]
