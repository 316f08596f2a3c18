"""Weighted Bayesian bootstrap: posterior draws from randomly weighted optimisation.

- :mod:`~stanflow.wbb.weights`: Exp(1) weights per draw from one root seed;
- :mod:`~stanflow.wbb.lasso`: weighted lasso by coordinate descent, all draws at once;
- :mod:`~stanflow.wbb.ridge`: weighted ridge in closed form;
- :mod:`~stanflow.wbb.trend_filtering`: weighted trend filtering of order k
  (barrier method on the dual, banded Newton steps);
- :mod:`~stanflow.wbb.glm`: :class:`GlmProblem`, the smooth penalised problem of
  the shipped template (data, ``lam``, a loss and a penalty, shipped or files
  of yours, and their parameters), checked when it is made; the two solvers
  below take it first;
- :mod:`~stanflow.wbb.stan_optimize`: smooth losses and penalties through
  CmdStan ``optimize`` on ``stan/wbb/weighted_glm.stan``, one run per draw
  through :mod:`stanflow.runs` (imported on demand: it needs the toolchain);
- :mod:`~stanflow.wbb.inprocess`: the same smooth problems optimised in
  process by its own L-BFGS, run on all draws of a batch at once in NumPy with
  one batched call of Stan's gradients (``bridgestan``) per iteration, no
  process per draw;
- :mod:`~stanflow.wbb.penalties`: the penalty slot of those smooth problems
  (a shipped name or a file of yours) and its parameters;
- :mod:`~stanflow.wbb.program`: any loss program (:class:`stanflow.gibbs.LossProgram`):
  its weighted losses plus its prior as a penalty, all draws optimised in
  process in one batch;
- :mod:`~stanflow.wbb.neural_net`: a ReLU network classifier with per-example
  loss weights, trained by full-batch L-BFGS or by minibatch Adam from each
  draw's own random start;
- :mod:`~stanflow.wbb.normal_means`: the exact toy (one normal observation,
  Laplace prior): WBB draws by soft thresholding, the exact posterior mean and
  the exact WBB mean;
- :mod:`~stanflow.bridge`: bridge sampling (Meng and Wong's
  iterative estimator, normal proposal fitted to posterior draws);
- :mod:`~stanflow.wbb.bayes_lasso`: the Bayesian lasso with a known noise
  scale (posterior mode = the lasso): Gibbs draws and ``log p(y | lam)``;
- :mod:`~stanflow.wbb.trend_filter_cv`: K-fold cross-validation of the
  trend-filtering penalty;
- :mod:`~stanflow.wbb.modes`: the atom at zero and the number of modes of one
  coefficient's draws;
- :mod:`~stanflow.wbb.bootstrap`: the driver, results as InferenceData with
  ``posterior``, ``sample_stats`` (``converged``) and ``weights`` groups.

See ``docs/wbb.md``.
"""

import importlib

from stanflow.bridge import BridgeResult, bridge_sampling
from stanflow.wbb.bayes_lasso import (
    LassoMarginal,
    gibbs_lasso,
    lasso_log_density,
    lasso_log_marginal,
)
from stanflow.wbb.bootstrap import Draws, wbb, wbb_lasso, wbb_ridge, wbb_trend_filter
from stanflow.wbb.lasso import (
    LassoResult,
    kkt_violation,
    lambda_max,
    lasso_path,
    solve_lasso,
)
from stanflow.wbb.modes import count_modes, shape_summary, silverman_bandwidth
from stanflow.wbb.normal_means import (
    laplace_posterior_mean,
    soft_threshold,
    wbb_mean,
    wbb_normal_means,
    wbb_prob_zero,
)
from stanflow.wbb.ridge import RidgeResult, solve_ridge
from stanflow.wbb.trend_filter_cv import TrendFilterCV, cv_trend_filter
from stanflow.wbb.trend_filtering import TrendFilterResult, trend_filter
from stanflow.wbb.weights import bootstrap_weights, draw_weights

# Imported on first use: these need cmdstanpy or bridgestan and the toolchain,
# which the other solvers do not (GlmProblem binds slot files: stanc checks yours).
_ON_DEMAND = {
    "GlmProblem": "stanflow.wbb.glm",
    "wbb_glm": "stanflow.wbb.stan_optimize",
    "wbb_glm_inprocess": "stanflow.wbb.inprocess",
    "WeightedGlm": "stanflow.wbb.inprocess",
    "lbfgs_draws": "stanflow.wbb.inprocess",
    "wbb_program": "stanflow.wbb.program",
}


def __getattr__(name: str) -> object:
    if name in _ON_DEMAND:
        return getattr(importlib.import_module(_ON_DEMAND[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BridgeResult",
    "Draws",
    "GlmProblem",
    "LassoMarginal",
    "LassoResult",
    "RidgeResult",
    "TrendFilterCV",
    "TrendFilterResult",
    "WeightedGlm",
    "bootstrap_weights",
    "bridge_sampling",
    "count_modes",
    "cv_trend_filter",
    "draw_weights",
    "gibbs_lasso",
    "kkt_violation",
    "lambda_max",
    "laplace_posterior_mean",
    "lasso_log_density",
    "lasso_log_marginal",
    "lasso_path",
    "lbfgs_draws",
    "shape_summary",
    "silverman_bandwidth",
    "soft_threshold",
    "solve_lasso",
    "solve_ridge",
    "trend_filter",
    "wbb",
    "wbb_glm",
    "wbb_glm_inprocess",
    "wbb_lasso",
    "wbb_mean",
    "wbb_normal_means",
    "wbb_prob_zero",
    "wbb_program",
    "wbb_ridge",
    "wbb_trend_filter",
]
