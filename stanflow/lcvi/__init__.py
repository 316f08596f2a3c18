"""Loss-calibrated variational inference (LCVI) for continuous decisions.

Kusmierczyk, Sakaya and Klami (2019), "Variational Bayesian decision-making for
continuous utilities", NeurIPS. ADVI maximises ``ELBO(lambda) + U(lambda, h)``,
``U = sum_n E_q[log E_{y_n | theta} u(y_n, h_n)]``, alternated with the choice
of the decisions ``h``.

- :mod:`~stanflow.lcvi.losses`: losses, their Bayes decisions, utilities and M90;
- :mod:`~stanflow.lcvi.utility`: the utility term's estimators in NumPy;
- :mod:`~stanflow.lcvi.stan`: the Stan template ``stan/lcvi/eight_schools_lcvi.stan``;
- :mod:`~stanflow.lcvi.loop`: the LCVI loop into InferenceData.

See ``docs/lcvi.md``.
"""

from stanflow.lcvi.loop import empirical_risk, lcvi, settled
from stanflow.lcvi.losses import LOSSES, Loss, get_loss, utility, utility_scale
from stanflow.lcvi.stan import lcvi_model, stan_data
from stanflow.lcvi.utility import (
    normal_outcomes,
    theta_draws,
    utility_per_theta,
    utility_term,
)

__all__ = [
    "LOSSES",
    "Loss",
    "empirical_risk",
    "get_loss",
    "lcvi",
    "lcvi_model",
    "normal_outcomes",
    "settled",
    "stan_data",
    "theta_draws",
    "utility",
    "utility_per_theta",
    "utility_scale",
    "utility_term",
]
