"""GPC: Syring and Martin's bootstrap calibration of the learning rate, for any loss program.

- :mod:`~stanflow.gibbs.gpc.algorithm`: the algorithm (bootstrap resamples,
  the Robbins-Monro update, the stopping rule) and :func:`calibrate_gpc`, which
  runs it and returns the ``calibration`` group;
- its backends, each computing the resamples' coverage at one ``omega``
  (:mod:`~stanflow.gibbs.gpc.backend`): :class:`StanBackend`
  (:mod:`~stanflow.gibbs.gpc.stan_backend`: the program's executable through
  the run layer, by importance reweighting of one proposal sample,
  :mod:`~stanflow.gibbs.gpc.reweighting`, or by sampling every resample) and
  :class:`GridBackend` (:mod:`~stanflow.gibbs.gpc.grid_backend`: exact grid
  posteriors of a template's location);
- :mod:`~stanflow.gibbs.gpc.regions`: the credible regions whose coverage is
  counted, from draws;
- :mod:`~stanflow.gibbs.gpc.fixed_point`: the algorithm's fixed point,
  exactly, for a location under absolute or squared loss
  (:func:`gpc_fixed_points`).

GPC by root finding on one learning-rate path is
:func:`stanflow.gibbs.path.path_gpc`. See ``docs/gibbs.md``.
"""

from stanflow.gibbs.gpc.algorithm import bootstrap_indices, calibrate_gpc
from stanflow.gibbs.gpc.fixed_point import gpc_fixed_points
from stanflow.gibbs.gpc.grid_backend import GridBackend
from stanflow.gibbs.gpc.regions import draws_coverage, draws_inside
from stanflow.gibbs.gpc.stan_backend import StanBackend

__all__ = [
    "GridBackend",
    "StanBackend",
    "bootstrap_indices",
    "calibrate_gpc",
    "draws_coverage",
    "draws_inside",
    "gpc_fixed_points",
]
