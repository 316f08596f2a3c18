"""The learning-rate path: every Gibbs posterior from ``omega = 0`` to ``omega_max``, one sweep.

- :mod:`~stanflow.gibbs.path.target`: a loss program's losses and prior at
  many particles (:class:`PathTarget`), where the particles live;
- :mod:`~stanflow.gibbs.path.sampler`: the sweep's settings, one argument
  object (:class:`PathSampler`: particles, moves, ``target_ess``), and
  :func:`calibrate_path`'s own default, :data:`CALIBRATION_SAMPLER`;
- :mod:`~stanflow.gibbs.path.sweep`: the sweep (the extendable loop
  :class:`LearningRatePath`) and :func:`gibbs_path`, which returns the
  results; its kernels (:class:`PathLevel`, one schedule point, and the steps)
  are :mod:`~stanflow.gibbs.path.levels`, NUTS moves through the run layer
  :mod:`~stanflow.gibbs.path.moves`, a start at a Gaussian near the data
  instead of the prior (:class:`GaussianStart`) :mod:`~stanflow.gibbs.path.start`;
- :mod:`~stanflow.gibbs.path.read`: the Gibbs posterior at any ``omega`` from
  the particles (:func:`reweight`, :func:`cdf`, :func:`weighted_quantile`) and
  its functionals against ``omega`` (:func:`functionals`);
- :mod:`~stanflow.gibbs.path.gpc_root`: GPC by root finding on one path
  (:func:`path_gpc`), the search and its error in
  :mod:`~stanflow.gibbs.path.root_search`;
- :mod:`~stanflow.gibbs.path.calibration`: every calibration rule on one path
  (:func:`calibrate_path`, :func:`rules_on_path`);
- :mod:`~stanflow.gibbs.path.figure`: the path drawn (:func:`plot_path`).

See ``docs/gibbs.md``.
"""

from stanflow.gibbs.path.calibration import calibrate_path, rules_on_path
from stanflow.gibbs.path.figure import plot_path
from stanflow.gibbs.path.gpc_root import path_gpc
from stanflow.gibbs.path.levels import PathLevel
from stanflow.gibbs.path.read import cdf, functionals, reweight, weighted_quantile
from stanflow.gibbs.path.sampler import CALIBRATION_SAMPLER, PathSampler
from stanflow.gibbs.path.start import GaussianStart
from stanflow.gibbs.path.sweep import LearningRatePath, gibbs_path
from stanflow.gibbs.path.target import PathTarget

__all__ = [
    "CALIBRATION_SAMPLER",
    "GaussianStart",
    "LearningRatePath",
    "PathLevel",
    "PathSampler",
    "PathTarget",
    "calibrate_path",
    "cdf",
    "functionals",
    "gibbs_path",
    "path_gpc",
    "plot_path",
    "reweight",
    "rules_on_path",
    "weighted_quantile",
]
