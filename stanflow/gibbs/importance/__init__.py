"""GPC and the rules from one importance sample: calibrated intervals in milliseconds.

For a model with a few parameters the Gibbs posteriors that GPC reads (the
full data's and every bootstrap resample's, at every ``omega`` the root
search tries) are all close to Gaussians around the estimate, of spread
between the plug-in's posterior ``(omega n H)^-1`` and the estimate's
sampling covariance ``H^-1 J H^-1 / n``. One sample from a heavy-tailed
proposal covering both serves them all by importance weights, without a
sweep from the prior (:func:`~stanflow.gibbs.path.calibrate_path`) or a
Markov chain:

- the proposal: a multivariate Student-t with :data:`~stanflow.gibbs.importance.sample.DF` degrees of freedom,
  centred at the estimate, covariance ``widen^2 (H^-1 J H^-1 + H^-1 /
  omega_ref) / n`` (``H``, ``J`` the plug-in's, :func:`calibrate_plugin`),
  ``omega_ref`` the plug-in's ``omega`` at first; on the parameters' own
  scale for a shipped template with a shipped prior, else on Stan's
  unconstrained scale (the program's prior there, Jacobian included);
- resample ``b``'s posterior at ``omega``: ``log w_bs = -omega c_b . l(theta_s)
  + log prior(theta_s) - log q(theta_s)``, ``c_b`` its counts; GPC's regions
  and their Monte Carlo flip probabilities as on the path
  (:func:`~stanflow.gibbs.path.coverage.region_statistic`), the root by the
  same bracketing (:func:`~stanflow.gibbs.path.root_search.find_root`, guided by
  :func:`~stanflow.gibbs.path.root_search.chi2_root_guess`) and its standard
  error (:func:`~stanflow.gibbs.path.root_search.root_error`);
- when the root lies more than a factor :data:`~stanflow.gibbs.importance.calibrate.REDRAW_FACTOR` from
  ``omega_ref``, or more than :data:`~stanflow.gibbs.path.gpc_root.AUTO_LOW_ESS_SHARE`
  of the resamples are read from fewer than
  :data:`~stanflow.gibbs.path.coverage.LOW_ESS` effective draws there, the
  proposal is drawn again at ``omega_ref = root`` (at most :data:`~stanflow.gibbs.importance.calibrate.ROUNDS`
  proposals), its covariance ``widen^2`` times the pooled resample posteriors'
  second moment about the estimate that the last sample measured at the root
  (:meth:`ImportanceSample.mixture_scatter`; the plug-in's formula again when
  fewer than :data:`~stanflow.gibbs.path.coverage.LOW_ESS` pooled effective
  draws carry it): a plug-in ``H`` misled by one observation costs a round,
  not the root;
- each rule's posterior (GPC's, the plug-in's, Holmes and Walker's) read from
  the last sample; a rule that fewer than
  :data:`~stanflow.gibbs.path.coverage.LOW_ESS` effective draws carry there (a
  plug-in misled by one observation, its rate far from the root; many
  parameters) is read from proposals of its own at its ``omega``, the
  plug-in's formula first, then fitted to the posterior the last one measured.

The per-observation losses of a shipped template come from its loss's NumPy
twin (checked point by point against the Stan file by the tests); any other
program's from Stan in process. With many parameters the weights degenerate
(``low_ess_share`` says so, and a warning when it stays above
:data:`~stanflow.gibbs.path.gpc_root.AUTO_LOW_ESS_SHARE` after the last proposal): use
:func:`~stanflow.gibbs.path.calibrate_path` there.

Modules: :mod:`~stanflow.gibbs.importance.sample` (the proposal's draws and
everything their weights need: :class:`ImportanceProblem`,
:class:`ImportanceSample`), :mod:`~stanflow.gibbs.importance.calibrate` (the
root search and the rules: :func:`calibrate_importance`).
"""

from stanflow.gibbs.importance.calibrate import ImportanceCoverage, calibrate_importance
from stanflow.gibbs.importance.sample import ImportanceProblem, ImportanceSample, student_t_draws

__all__ = [
    "ImportanceCoverage",
    "ImportanceProblem",
    "ImportanceSample",
    "calibrate_importance",
    "student_t_draws",
]
