"""q-paths: power-mean annealing paths between a base and a target density.

- :mod:`~stanflow.qpaths.qmath`: ``ln_q``, ``exp_q``, the log q-path density,
  SMC incremental weights and the thermodynamic-integration integrand, stable
  in log space and exact at ``q = 1`` (geometric path);
- :mod:`~stanflow.qpaths.moment_averaging`: the moment-averaging path between
  two Gaussians in closed form (Grosse et al. 2013), for comparison;
- :mod:`~stanflow.qpaths.kernels`: the building blocks (particles, weights,
  resampling, the adaptive schedule, vectorised random-walk Metropolis);
- :mod:`~stanflow.qpaths.self_tuning`: the default moves of SMC and AIS, tuned
  from the particles (independence proposals or HMC, repeated until the
  particles decorrelate);
- :mod:`~stanflow.qpaths.densities`: densities with gradients
  (:class:`~stanflow.qpaths.densities.GaussianBase`);
- :mod:`~stanflow.qpaths.annealing`: SMC (adaptive or fixed schedule, pluggable move
  kernels) and AIS, returning ``InferenceData`` with an ``smc`` group;
- :mod:`~stanflow.qpaths.ti`: thermodynamic integration;
- :mod:`~stanflow.qpaths.stan_moves`: NUTS moves through the q-path Stan
  template and the run layer (particles as chains);
- :mod:`~stanflow.qpaths.stan_ti`: thermodynamic integration with NUTS at every
  beta, one run set through the run layer;
- :mod:`~stanflow.qpaths.choose_q`: the ESS heuristic for ``q`` and the q grid;
- :mod:`~stanflow.qpaths.choose_q_joint`: the authors' heuristic (``delta`` and
  the first ``beta`` from one ESS target);
- :mod:`~stanflow.qpaths.independence`: independence Metropolis-Hastings moves
  from a Gaussian fitted to the particles;
- :mod:`~stanflow.qpaths.reference`: reference ``log Z`` by importance
  sampling from a Student-t fitted to SMC particles;
- :mod:`~stanflow.qpaths.logistic`: Bayesian logistic regression on the UCI
  Pima and Sonar data with a vectorised log-likelihood;
- :mod:`~stanflow.qpaths.stan_density`: a base or target given as a Stan
  program, evaluated in process (a new target is one Stan file);
- :mod:`~stanflow.qpaths.latent_ais`: AIS with HMC moves along q-paths for
  latent-variable models (prior ``N(0, I)``), forward and reverse;
- :mod:`~stanflow.qpaths.bdmc`: its bounds per data point and the BDMC sandwich
  of ``log p(x)`` on simulated data (the workflow ``qpaths-ais`` runs them on a
  VAE's decoder, trained by code beside it: ``workflows/_qpaths_vae.py``).

The algorithms (``smc``, ``ais``, ``thermodynamic_integration`` and its Stan
NUTS form, the choice of ``q``, forward and reverse AIS with HMC and the BDMC
sandwich) are exported here.

See ``docs/qpaths.md``.
"""

from stanflow.qpaths.annealing import ais, smc
from stanflow.qpaths.bdmc import (
    LatentModel,
    bdmc_sandwich,
    forward_ais,
    reverse_ais,
    tune_step_size,
)
from stanflow.qpaths.choose_q import heuristic_q, q_grid
from stanflow.qpaths.choose_q_joint import JointChoice, joint_heuristic
from stanflow.qpaths.densities import GaussianBase
from stanflow.qpaths.independence import gaussian_independence_moves
from stanflow.qpaths.kernels import rwm_moves
from stanflow.qpaths.logistic import LogisticTarget, load_uci
from stanflow.qpaths.moment_averaging import gaussian_moment_average
from stanflow.qpaths.qmath import (
    dlog_qpath_dbeta,
    exp_q,
    ln_q,
    log_incremental_weight,
    log_qpath,
    q_from_delta,
)
from stanflow.qpaths.reference import reference_log_z
from stanflow.qpaths.self_tuning import SelfTuningMoves
from stanflow.qpaths.stan_density import StanLogDensity, stan_log_density
from stanflow.qpaths.stan_moves import StanMoves
from stanflow.qpaths.stan_ti import thermodynamic_integration_stan
from stanflow.qpaths.ti import thermodynamic_integration

__all__ = [
    "GaussianBase",
    "JointChoice",
    "LatentModel",
    "LogisticTarget",
    "SelfTuningMoves",
    "StanLogDensity",
    "StanMoves",
    "ais",
    "bdmc_sandwich",
    "dlog_qpath_dbeta",
    "exp_q",
    "forward_ais",
    "gaussian_independence_moves",
    "gaussian_moment_average",
    "heuristic_q",
    "joint_heuristic",
    "ln_q",
    "load_uci",
    "log_incremental_weight",
    "log_qpath",
    "q_from_delta",
    "q_grid",
    "reference_log_z",
    "reverse_ais",
    "rwm_moves",
    "smc",
    "stan_log_density",
    "thermodynamic_integration",
    "thermodynamic_integration_stan",
    "tune_step_size",
]
