"""SafeBayes: the learning rate of a power posterior by sequential log loss.

Grunwald, P. and van Ommen, T. (2017), "Inconsistency of Bayesian inference
for misspecified linear models, and a proposal for repairing it", *Bayesian
Analysis* 12(4), 1069-1103.

For a loss program whose losses are a model's log loss, ``loss_i = -log p(y_i |
theta)`` (a power posterior), and each ``eta`` of a grid, the posterior given
the observations before ``i`` scores observation ``i`` before it is seen:

- **R-log** (randomized): ``E_{pi_{eta, i-1}}[loss_i]``, the posterior-expected log loss;
- **I-log** (in-model): ``loss_i`` at the posterior mean of the parameters.

SafeBayes picks the ``eta`` with the smallest cumulative loss ``sum_i
score_i(eta)``. :func:`calibrate_safebayes` takes any loss program: its
sequential posteriors are the program with 0/1 weights, reached by one SMC
sweep over the data per ``eta`` (:mod:`stanflow.gibbs.sequential`).

The closed form (:func:`calibrate_safebayes_conjugate`)
-----------------------------------------------------

For a normal linear model ``y = x' beta + e``, ``e ~ N(0, sigma^2)``, and each
``eta`` of a grid, the power posterior ``pi(beta, sigma^2 | z_1..i, eta) ∝
prod_j p(y_j | x_j, beta, sigma^2)^eta pi(beta, sigma^2)`` is computed
sequentially, and each next point is scored before it is seen:

- **R-log** (randomized): ``E_{pi_{i-1}}[-log p(y_i | x_i, beta, sigma^2)]``, the
  posterior-expected log loss;
- **I-log** (in-model): ``-log p(y_i | x_i, beta_bar, sigma2_bar)`` at the
  posterior means ``beta_bar = E[beta]``, ``sigma2_bar = E[sigma^2]``.

SafeBayes picks the ``eta`` with the smallest cumulative loss
``sum_{i=1..n} loss_i(eta)``.

The conjugate power posterior is closed-form. With the normal-inverse-gamma
prior ``beta | sigma^2 ~ N(m0, sigma^2 V0)``, ``sigma^2 ~ InvGamma(a0, b0)``,
after points ``1..i`` at rate ``eta``:

    P = V0^-1 + eta X'X,        m = P^-1 (V0^-1 m0 + eta X'y),
    a = a0 + eta i / 2,         b = b0 + (eta y'y + m0' V0^-1 m0 - m' P m) / 2,

and, with ``r = y_i - x_i' m``, ``v = x_i' P^-1 x_i``,

    R-log_i = log(2 pi)/2 + (log b - digamma(a))/2 + (a / b) r^2 / 2 + v / 2,
    I-log_i = log(2 pi sigma2_bar)/2 + r^2 / (2 sigma2_bar),  sigma2_bar = b / (a - 1)

(``sigma2_bar = b / a`` while ``a <= 1``). With a known ``sigma`` the posterior
of ``beta`` is ``N(m, sigma^2 P^-1)`` with the same ``P`` and ``m``, and
``R-log_i = log(2 pi sigma^2)/2 + (r^2 + sigma^2 v) / (2 sigma^2)``,
``I-log_i = log(2 pi sigma^2)/2 + r^2 / (2 sigma^2)``. The updates are rank one
(Sherman-Morrison), vectorised over the ``eta`` grid.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import xarray as xr
from scipy.special import digamma

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs.path.target import PathTarget
from stanflow.gibbs.program import LossProgram
from stanflow.gibbs.sequential import sequential_scores
from stanflow.validation import check_int

VARIANTS = ("r-log", "i-log")
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def default_etas(n_points: int = 17, smallest: float = 2.0**-8) -> np.ndarray:
    """Geometric grid of learning rates from ``smallest`` to 1 (Grunwald and van Ommen use ``2^(-k/2)``)."""
    return np.geomspace(smallest, 1.0, n_points)


def sequential_losses(
    y: np.ndarray,
    X: np.ndarray,
    etas: np.ndarray,
    *,
    sigma: float | None = None,
    prior_mean: np.ndarray | None = None,
    prior_scale: float = 10.0,
    a0: float = 1.0,
    b0: float = 1.0,
) -> dict[str, np.ndarray]:
    """Per-point R-log and I-log losses of sequential power posteriors.

    Parameters
    ----------
    y : array_like, shape (n,)
    X : array_like, shape (n, K)
    etas : array_like, shape (E,)
        Learning rates, positive.
    sigma : float, optional
        Known noise standard deviation; default unknown, with the conjugate
        inverse-gamma prior.
    prior_mean : array_like, shape (K,), optional
        ``m0``; default 0.
    prior_scale : float, default 10.0
        ``V0 = prior_scale^2 I``; the prior of ``beta`` is ``N(m0, sigma^2 V0)``
        (with the known or the unknown ``sigma``).
    a0, b0 : float, default 1.0
        Inverse-gamma prior of ``sigma^2`` (unknown-variance case).

    Returns
    -------
    dict
        ``"r-log"`` and ``"i-log"``: arrays of shape ``(E, n)``, the loss of point
        ``i`` under the posterior given points ``1..i-1``.
    """
    y, X, etas = _check(y, X, etas)
    n, K = X.shape
    E = len(etas)
    for name, value in (("prior_scale", prior_scale), ("a0", a0), ("b0", b0)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be positive and finite, got {value!r}")
    if sigma is not None and not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be positive and finite, got {sigma!r}")
    m0 = np.zeros(K) if prior_mean is None else np.asarray(prior_mean, float)
    if m0.shape != (K,):
        raise ValueError(f"prior_mean must have shape ({K},), got {m0.shape}")

    cov = np.broadcast_to(np.eye(K) * prior_scale**2, (E, K, K)).copy()  # P^-1
    m = np.broadcast_to(m0, (E, K)).copy()
    a = np.full(E, float(a0))
    b = np.full(E, float(b0))
    r_log = np.empty((E, n))
    i_log = np.empty((E, n))
    for i in range(n):
        x, yi = X[i], y[i]
        r = yi - m @ x
        cx = cov @ x  # (E, K)
        v = cx @ x
        if sigma is None:
            sigma2_bar = np.where(a > 1, b / np.maximum(a - 1, 1e-300), b / a)
            r_log[:, i] = (
                _HALF_LOG_2PI + 0.5 * (np.log(b) - digamma(a)) + 0.5 * (a / b) * r**2 + 0.5 * v
            )
            i_log[:, i] = 0.5 * np.log(2 * math.pi * sigma2_bar) + r**2 / (2 * sigma2_bar)
        else:
            s2 = sigma**2
            r_log[:, i] = 0.5 * math.log(2 * math.pi * s2) + (r**2 + s2 * v) / (2 * s2)
            i_log[:, i] = 0.5 * math.log(2 * math.pi * s2) + r**2 / (2 * s2)
        # rank-one update of the power posterior by point i at rate eta
        denom = 1 + etas * v
        gain = cx / denom[:, None]  # (E, K)
        m = m + (etas * r)[:, None] * gain
        cov = cov - etas[:, None, None] * gain[:, :, None] * cx[:, None, :]
        a = a + etas / 2
        # b gains eta r^2 / (2 (1 + eta v)) (the conjugate update of the residual sum)
        b = b + etas * r**2 / (2 * denom)
    return {"r-log": r_log, "i-log": i_log}


def choose_eta(cumulative: np.ndarray, etas: np.ndarray) -> float:
    """The learning rate with the smallest cumulative loss (the largest on ties)."""
    cumulative = np.asarray(cumulative, float)
    best = np.flatnonzero(cumulative <= cumulative.min() + 1e-12)
    return float(np.asarray(etas)[best].max())


def calibrate_safebayes(
    program: LossProgram,
    *,
    etas: np.ndarray | None = None,
    n_particles: int = 2000,
    n_moves: int = 5,
    target_ess: float = 0.5,
    seed: int = 0,
) -> Results:
    """SafeBayes learning rates (R-log and I-log) of a loss program.

    Parameters
    ----------
    program : LossProgram
        A power posterior: ``loss_i = -log p(y_i | theta)``, in the order the
        observations are scored.
    etas : array_like, shape (E,), optional
        Candidate learning rates; default :func:`default_etas` (``2^-8`` to 1).
    n_particles, n_moves, target_ess, seed
        The SMC sweeps over the data (:func:`stanflow.gibbs.sequential.sequential_scores`).

    Returns
    -------
    Results
        Group ``calibration``: ``omega`` (dim ``variant``: the chosen ``eta``
        for ``r-log`` and ``i-log``), ``cumulative_loss`` (dims ``variant``,
        ``eta``), and by ``eta`` the Monte Carlo standard error of the
        cumulative R-log loss's differences between learning rates,
        ``cumulative_r_log_mcse`` (the terms after the first, the prior
        predictive's, which every ``eta`` shares; their errors added as if
        independent), and the sweeps' ``resamplings``, ``min_ess``
        and ``acceptance``; attributes ``method = "safebayes"``, ``reference``,
        the sampler's settings and the program's record.
    """
    if not isinstance(program, LossProgram):
        raise TypeError(f"program must be a LossProgram, got {type(program).__name__}")
    etas = _check_etas(default_etas() if etas is None else etas)
    for name, value, low in (("n_particles", n_particles, 50), ("n_moves", n_moves, 1)):
        check_int(value, name, low)
    if not (isinstance(target_ess, (int, float)) and 0 < target_ess < 1):
        raise ValueError(f"target_ess must lie in (0, 1), got {target_ess!r}")
    scores = sequential_scores(
        PathTarget(program), etas, n_particles=int(n_particles), n_moves=int(n_moves),
        target_ess=float(target_ess), seed=seed,
    )
    cumulative = np.array([scores.r_log.sum(axis=1), scores.i_log.sum(axis=1)])
    chosen = np.array([choose_eta(c, etas) for c in cumulative])
    group = xr.Dataset(
        {
            "omega": (("variant",), chosen),
            "cumulative_loss": (("variant", "eta"), cumulative),
            "cumulative_r_log_mcse": (("eta",), np.sqrt((scores.r_log_se[:, 1:] ** 2).sum(axis=1))),
            "resamplings": (("eta",), scores.resamplings),
            "min_ess": (("eta",), scores.min_ess),
            "acceptance": (("eta",), scores.acceptance),
        },
        coords={"variant": list(VARIANTS), "eta": etas},
        attrs={
            "method": "safebayes",
            "reference": "Grunwald and van Ommen (2017), Bayesian Analysis 12(4) 1069-1103",
            "sequential": "one SMC sweep over the data per eta (0/1 weights); after each "
            "resampling HMC moves on the unconstrained scale (random-walk on a template's box)",
            "n_particles": int(n_particles),
            "n_moves": int(n_moves),
            "target_ess": float(target_ess),
            "seed": seed,
            **program.describe(),
        },
    )
    return arviz_compat.build({"calibration": group})


def calibrate_safebayes_conjugate(
    y: np.ndarray,
    X: np.ndarray,
    *,
    etas: np.ndarray | None = None,
    sigma: float | None = None,
    prior_mean: np.ndarray | None = None,
    prior_scale: float = 10.0,
    a0: float = 1.0,
    b0: float = 1.0,
) -> Results:
    """SafeBayes learning rates (R-log and I-log) for a conjugate normal linear model, in closed form.

    Parameters
    ----------
    y : array_like, shape (n,)
    X : array_like, shape (n, K)
    etas : array_like, shape (E,), optional
        Candidate learning rates; default :func:`default_etas` (``2^-8`` to 1).
    sigma, prior_mean, prior_scale, a0, b0
        As in :func:`sequential_losses`.

    Returns
    -------
    Results
        Group ``calibration``: ``omega`` (dim ``variant``: the chosen ``eta``
        for ``r-log`` and ``i-log``), ``cumulative_loss`` (dims ``variant``,
        ``eta``); attributes ``method = "safebayes"``, ``reference``,
        ``variance`` (``known`` or ``conjugate``).
    """
    etas = default_etas() if etas is None else etas
    losses = sequential_losses(
        y, X, etas, sigma=sigma, prior_mean=prior_mean,
        prior_scale=prior_scale, a0=a0, b0=b0,
    )
    etas = np.asarray(etas, float)
    cumulative = np.array([losses[v].sum(axis=1) for v in VARIANTS])
    chosen = np.array([choose_eta(c, etas) for c in cumulative])
    group = xr.Dataset(
        {
            "omega": (("variant",), chosen),
            "cumulative_loss": (("variant", "eta"), cumulative),
        },
        coords={"variant": list(VARIANTS), "eta": etas},
        attrs={
            "method": "safebayes",
            "reference": "Grunwald and van Ommen (2017), Bayesian Analysis 12(4) 1069-1103",
            "variance": "conjugate" if sigma is None else "known",
            "prior": f"beta ~ N(m0, sigma^2 {prior_scale:g}^2 I)"
            + ("" if sigma is not None else f", sigma^2 ~ InvGamma({a0:g}, {b0:g})"),
        },
    )
    return arviz_compat.build({"calibration": group})


def _check(y: Any, X: Any, etas: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    y = np.asarray(y, dtype=float)
    if y.ndim != 1 or len(y) == 0 or not np.all(np.isfinite(y)):
        raise ValueError(f"y must be a finite 1-D array of at least one observation, got shape {y.shape}")
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[0] != len(y) or X.shape[1] == 0 or not np.all(np.isfinite(X)):
        raise ValueError(f"X must be a finite ({len(y)}, K) array matching y, got shape {X.shape}")
    return y, X, _check_etas(etas)


def _check_etas(etas: Any) -> np.ndarray:
    etas = np.asarray(etas, dtype=float)
    if etas.ndim != 1 or len(etas) == 0 or not np.all(np.isfinite(etas) & (etas > 0)):
        raise ValueError("etas must be a non-empty 1-D array of positive finite learning rates")
    return etas
