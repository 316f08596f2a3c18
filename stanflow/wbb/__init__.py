"""Weighted Bayesian bootstrap: posterior draws from randomly weighted optimisation.

- :mod:`~stanflow.wbb.weights`: Exp(1) weights per draw from one root seed;
- :mod:`~stanflow.wbb.lasso`: weighted lasso by coordinate descent, all draws at once;
- :mod:`~stanflow.wbb.ridge`: weighted ridge in closed form;
- :mod:`~stanflow.wbb.trend_filtering`: weighted trend filtering of order k
  (barrier method on the dual, banded Newton steps);
- :mod:`~stanflow.wbb.stan_optimize`: smooth losses and penalties through
  CmdStan ``optimize`` on ``stan/wbb/weighted_glm.stan``, one run per draw
  through :mod:`stanflow.runs` (imported on demand: it needs the toolchain);
- :mod:`~stanflow.wbb.inprocess`: the same smooth problems optimised in
  process by its own L-BFGS, run on all draws of a batch at once in NumPy with
  one batched call of Stan's gradients (``bridgestan``) per iteration, no
  process per draw;
- :mod:`~stanflow.wbb.neural_net`: a ReLU network classifier trained by
  full-batch L-BFGS with per-example loss weights;
- :mod:`~stanflow.wbb.bootstrap`: the driver, results as InferenceData with
  ``posterior``, ``sample_stats`` (``converged``) and ``weights`` groups.

See ``docs/wbb.md``.
"""

import importlib

from stanflow.wbb.bootstrap import Draws, wbb, wbb_lasso, wbb_ridge, wbb_trend_filter
from stanflow.wbb.lasso import (
    LassoResult,
    kkt_violation,
    lambda_max,
    lasso_path,
    solve_lasso,
)
from stanflow.wbb.ridge import RidgeResult, solve_ridge
from stanflow.wbb.trend_filtering import TrendFilterResult, trend_filter
from stanflow.wbb.weights import bootstrap_weights, draw_weights

# Imported on first use: these need cmdstanpy or bridgestan and the toolchain,
# which the other solvers do not.
_ON_DEMAND = {
    "wbb_glm": "stanflow.wbb.stan_optimize",
    "wbb_glm_inprocess": "stanflow.wbb.inprocess",
    "WeightedGlm": "stanflow.wbb.inprocess",
    "lbfgs_draws": "stanflow.wbb.inprocess",
}


def __getattr__(name: str) -> object:
    if name in _ON_DEMAND:
        return getattr(importlib.import_module(_ON_DEMAND[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Draws",
    "LassoResult",
    "RidgeResult",
    "TrendFilterResult",
    "WeightedGlm",
    "bootstrap_weights",
    "draw_weights",
    "kkt_violation",
    "lambda_max",
    "lasso_path",
    "lbfgs_draws",
    "solve_lasso",
    "solve_ridge",
    "trend_filter",
    "wbb",
    "wbb_glm",
    "wbb_glm_inprocess",
    "wbb_lasso",
    "wbb_ridge",
    "wbb_trend_filter",
]
