"""q-paths: power-mean annealing paths between a base and a target density.

- :mod:`~stanflow.qpaths.qmath`: ``ln_q``, ``exp_q``, the log q-path density,
  SMC incremental weights and the thermodynamic-integration integrand, stable
  in log space and exact at ``q = 1`` (geometric path);
- :mod:`~stanflow.qpaths.smc`: SMC (adaptive or fixed schedule, resampling,
  pluggable move kernels, vectorised random-walk Metropolis by default), AIS and
  thermodynamic integration in NumPy, returning ``InferenceData`` with an
  ``smc`` group;
- :mod:`~stanflow.qpaths.stan_moves`: NUTS moves through the q-path Stan
  template and the run layer (particles as chains);
- :mod:`~stanflow.qpaths.stan_ti`: thermodynamic integration with NUTS at every
  beta, one run set through the run layer;
- :mod:`~stanflow.qpaths.choose_q`: the ESS heuristic for ``q`` and the q grid;
- :mod:`~stanflow.qpaths.logistic`: Bayesian logistic regression on the UCI
  Pima and Sonar data with a vectorised log-likelihood.

See ``docs/qpaths.md``.
"""

from stanflow.qpaths.qmath import (
    dlog_qpath_dbeta,
    exp_q,
    ln_q,
    log_incremental_weight,
    log_qpath,
    q_from_delta,
)

__all__ = [
    "dlog_qpath_dbeta",
    "exp_q",
    "ln_q",
    "log_incremental_weight",
    "log_qpath",
    "q_from_delta",
]
