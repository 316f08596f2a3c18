"""SafeBayes with model averaging over nested normal linear models.

Grunwald and van Ommen's (2017) experiments average over the nested models
``M_0, M_1, ..., M_P``, model ``M_p`` using the first ``p + 1`` columns of
``X`` (polynomial degree ``p`` with an intercept), each with the conjugate
normal-inverse-gamma prior ``beta_p | sigma^2 ~ N(0, sigma^2 s0^2 I)``,
``sigma^2 ~ InvGamma(a0, b0)``, and a prior ``pi(p)`` over the models. The
eta-generalized posterior raises the likelihood to the power ``eta``:
``pi(p, beta, sigma^2 | z_1..i) ∝ pi(p) pi(beta, sigma^2 | p) prod_j f(y_j | x_j, beta, sigma^2)^eta``.

Within a model it is the conjugate power posterior of
:mod:`stanflow.gibbs.safebayes` (``P = V0^-1 + eta X'X``,
``a = a0 + eta i / 2``, ``b = b0 + (eta y'y + m0' V0^-1 m0 - m' P m) / 2``), and the
model weights are ``pi(p) Z_p(eta)`` with the closed-form generalized marginal
likelihood

    log Z_p = -(eta i / 2) log(2 pi) - (1/2) log|V0 P| + a0 log b0 - log Gamma(a0)
              + log Gamma(a) - a log b,

which at ``eta = 1`` is the multivariate Student-t marginal likelihood of the
conjugate model (:func:`power_log_marginal`). :func:`sequential_models` evaluates it after
every point for every model from one Cholesky factor of the largest model's
precision (the nested models' precisions and factors are its leading blocks).

SafeBayes scores every point before it is seen (:func:`sequential_models`
per model, :func:`mixture_losses` for the mixture over models):

- **R-log**: the posterior-expected log loss, ``sum_p w_p E_p[-log f(y_i | x_i, beta, sigma^2)]``
  with ``E_p[...] = log(2 pi)/2 + (log b - digamma(a))/2 + (a / b) r^2 / 2 + v / 2``;
- **I-log**: the log loss at the posterior means, ``-log N(y_i | x_i' beta_bar, sigma2_bar)``,
  ``beta_bar = sum_p w_p m_p`` (a smaller model's coefficients padded with
  zeros) and ``sigma2_bar = sum_p w_p b_p / (a_p - 1)`` (``b_p / a_p`` while ``a_p <= 1``);

with ``r = y_i - x_i' m_p``, ``v = x_i' P_p^-1 x_i`` and ``w_p`` the posterior
model weights given the points before ``i``, and picks the ``eta`` of the smallest cumulative loss
(:func:`stanflow.gibbs.safebayes.choose_eta`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import xarray as xr
from scipy.special import digamma, gammaln, softmax

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs.safebayes import VARIANTS, choose_eta, default_etas

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class ModelSequences(NamedTuple):
    """Per-model quantities of sequential power posteriors, before each point.

    Dims: ``E`` learning rates, ``M`` models (``M_0..M_{M-1}``), ``n`` points,
    ``C`` checkpoints, ``K`` columns of ``X``.

    Attributes
    ----------
    r_log : ndarray, shape (E, M, n)
        Posterior-expected log loss of point ``i`` given points ``1..i-1``.
    prediction : ndarray, shape (E, M, n)
        Posterior mean ``x_i' m`` of point ``i``'s regression function.
    sigma2 : ndarray, shape (E, M, n)
        Posterior mean of ``sigma^2`` (``b / a`` while ``a <= 1``).
    log_z : ndarray, shape (E, M, n + 1)
        ``log Z_p`` after ``0..n`` points.
    checkpoint_means : ndarray, shape (C, E, M, K)
        Posterior means of ``beta`` (zero-padded) after each checkpoint's points.
    checkpoints : ndarray of int, shape (C,)
    """

    r_log: np.ndarray
    prediction: np.ndarray
    sigma2: np.ndarray
    log_z: np.ndarray
    checkpoint_means: np.ndarray
    checkpoints: np.ndarray


def power_log_marginal(
    y: Any, X: Any, eta: float, *, prior_scale: float = 1.0, a0: float = 1.0, b0: float = 1.0
) -> float:
    """``log Z(eta) = log integral prod_i f(y_i | x_i, beta, sigma^2)^eta dprior`` in one batch.

    Parameters
    ----------
    y : array_like, shape (n,)
    X : array_like, shape (n, K)
    eta : float
        Learning rate, positive.
    prior_scale, a0, b0 : float
        ``beta | sigma^2 ~ N(0, sigma^2 prior_scale^2 I)``, ``sigma^2 ~ InvGamma(a0, b0)``.

    Returns
    -------
    float
    """
    y, X = _data(y, X)
    etas = _etas([eta])
    _positive(prior_scale=prior_scale, a0=a0, b0=b0)
    n, K = X.shape
    precision = np.eye(K) / prior_scale**2 + etas[0] * X.T @ X
    mean = np.linalg.solve(precision, etas[0] * X.T @ y)
    a = a0 + etas[0] * n / 2
    b = b0 + (etas[0] * y @ y - mean @ precision @ mean) / 2
    log_det = np.linalg.slogdet(precision)[1] + 2 * K * math.log(prior_scale)
    return float(
        -etas[0] * n * _HALF_LOG_2PI - 0.5 * log_det + a0 * math.log(b0) - gammaln(a0)
        + gammaln(a) - a * math.log(b)
    )


def sequential_models(
    y: Any,
    X: Any,
    etas: Any,
    *,
    prior_scale: float = 1.0,
    a0: float = 1.0,
    b0: float = 1.0,
    checkpoints: Any = None,
) -> ModelSequences:
    """Sequential power posteriors of the nested models ``M_p`` (first ``p + 1`` columns of ``X``).

    One Cholesky factor ``L`` of the largest model's precision
    ``P = V0^-1 + eta X'X`` serves every model: ``M_p``'s precision is the
    leading ``(p + 1)``-block of ``P``, whose factor is the leading block of
    ``L``, so with ``w = L^-1 x_i`` and ``z = L^-1 (eta X'y)`` (forward
    substitution is nested too) model ``M_p`` has ``x_i' P_p^-1 x_i``,
    ``x_i' m_p``, ``m_p' P_p m_p`` and ``log|P_p|`` as the cumulative sums of
    ``w^2``, ``w z``, ``z^2`` and ``2 log diag L`` up to ``p``.

    Parameters
    ----------
    y : array_like, shape (n,)
    X : array_like, shape (n, K)
        Columns in nesting order (``M_p`` uses columns ``0..p``); ``K`` models.
    etas : array_like, shape (E,)
        Learning rates, positive.
    prior_scale, a0, b0 : float
        The conjugate prior of every model (module docstring).
    checkpoints : array_like of int, optional
        Sample sizes (1..n) after which the posterior means of ``beta`` are
        kept; default ``[n]``.

    Returns
    -------
    ModelSequences
    """
    y, X = _data(y, X)
    etas = _etas(etas)
    _positive(prior_scale=prior_scale, a0=a0, b0=b0)
    n, K = X.shape
    checkpoints = np.array([n] if checkpoints is None else checkpoints, dtype=int).reshape(-1)
    if checkpoints.size == 0 or np.any((checkpoints < 1) | (checkpoints > n)):
        raise ValueError(f"checkpoints must be sample sizes in [1, {n}], got {checkpoints!r}")
    E = len(etas)
    eta = etas[:, None]
    precision = np.broadcast_to(np.eye(K) / prior_scale**2, (E, K, K)).copy()
    linear = np.zeros((E, K))  # eta X'y
    squares = np.zeros(E)  # eta y'y
    prior_log_det = np.arange(1, K + 1) * 2 * math.log(prior_scale)  # log|V0| of each model
    constant = a0 * math.log(b0) - gammaln(a0)
    log_z = np.empty((E, K, n + 1))
    r_log, prediction, sigma2 = (np.empty((E, K, n)) for _ in range(3))
    kept = np.empty((len(checkpoints), E, K, K))
    for i in range(n + 1):
        factor = np.linalg.cholesky(precision)
        columns = [linear] if i == n else [linear, np.broadcast_to(X[i], linear.shape)]
        solved = _forward(factor, np.stack(columns, axis=-1))
        z = solved[..., 0]
        a = a0 + eta * i / 2  # (E, 1), the same for every model
        b = b0 + (squares[:, None] - np.cumsum(z**2, axis=1)) / 2  # (E, M)
        log_det = np.cumsum(2 * np.log(np.diagonal(factor, axis1=1, axis2=2)), axis=1)
        log_z[:, :, i] = (
            -eta * i * _HALF_LOG_2PI - 0.5 * (log_det + prior_log_det) + constant
            + gammaln(a) - a * np.log(b)
        )
        for c in np.flatnonzero(checkpoints == i):
            kept[c] = _nested_means(factor, z)
        if i == n:
            break
        w = solved[..., 1]
        fit = np.cumsum(w * z, axis=1)
        v = np.cumsum(w**2, axis=1)
        r = y[i] - fit
        prediction[:, :, i] = fit
        sigma2[:, :, i] = np.where(a > 1, b / np.maximum(a - 1, 1e-300), b / a)
        r_log[:, :, i] = _HALF_LOG_2PI + 0.5 * (np.log(b) - digamma(a)) + 0.5 * (a / b) * r**2 + 0.5 * v
        precision += eta[..., None] * np.outer(X[i], X[i])
        linear += eta * y[i] * X[i]
        squares += etas * y[i] ** 2
    return ModelSequences(r_log, prediction, sigma2, log_z, kept, checkpoints)


def model_weights(log_z: np.ndarray, log_prior: np.ndarray) -> np.ndarray:
    """Posterior model weights ``∝ pi(p) Z_p`` along the last-but-one axis.

    Parameters
    ----------
    log_z : ndarray, shape (..., M, T)
        ``log Z_p`` (e.g. :attr:`ModelSequences.log_z`).
    log_prior : ndarray, shape (M,)
        ``log pi(p)`` up to a constant (``-inf`` excludes a model).

    Returns
    -------
    ndarray, shape (..., M, T)
    """
    log_prior = np.asarray(log_prior, dtype=float)
    if log_prior.shape != (log_z.shape[-2],) or not np.any(np.isfinite(log_prior)):
        raise ValueError(
            f"log_prior must have shape ({log_z.shape[-2]},), one value per model, "
            "not all -inf"
        )
    return softmax(log_z + log_prior[:, None], axis=-2)


def mixture_losses(
    sequences: ModelSequences, y: Any, log_prior: Any
) -> dict[str, np.ndarray]:
    """R-log and I-log of the mixture over models, point by point.

    Parameters
    ----------
    sequences : ModelSequences
        From :func:`sequential_models` on ``y``.
    y : array_like, shape (n,)
    log_prior : array_like, shape (M,)
        ``log pi(p)`` up to a constant.

    Returns
    -------
    dict
        ``"r-log"`` and ``"i-log"``: arrays of shape ``(E, n)``.
    """
    y = np.asarray(y, dtype=float)
    if y.shape != sequences.r_log.shape[-1:]:
        raise ValueError(f"y must have shape {sequences.r_log.shape[-1:]}, got {y.shape}")
    weights = model_weights(sequences.log_z[..., :-1], log_prior)  # before each point
    fit = np.sum(weights * sequences.prediction, axis=-2)
    sigma2 = np.sum(weights * sequences.sigma2, axis=-2)
    return {
        "r-log": np.sum(weights * sequences.r_log, axis=-2),
        "i-log": 0.5 * np.log(2 * math.pi * sigma2) + (y - fit) ** 2 / (2 * sigma2),
    }


def mixture_means(sequences: ModelSequences, log_prior: Any) -> np.ndarray:
    """Posterior means of ``beta`` under the mixture, at every checkpoint.

    Returns
    -------
    ndarray, shape (C, E, K)
        ``sum_p w_p m_p`` with the weights after the checkpoint's points.
    """
    log_z = sequences.log_z[..., sequences.checkpoints]  # (E, M, C)
    weights = np.moveaxis(model_weights(log_z, log_prior), -1, 0)  # (C, E, M)
    return np.einsum("cem,cemk->cek", weights, sequences.checkpoint_means)


def mean_degree(sequences: ModelSequences, log_prior: Any) -> np.ndarray:
    """Posterior mean of the model index ``p`` at every checkpoint, shape (C, E)."""
    log_z = sequences.log_z[..., sequences.checkpoints]
    weights = model_weights(log_z, log_prior)  # (E, M, C)
    return np.einsum("emc,m->ce", weights, np.arange(weights.shape[1], dtype=float))


def calibrate_safebayes_averaged(
    y: Any,
    X: Any,
    *,
    log_prior: Any = None,
    etas: Any = None,
    prior_scale: float = 1.0,
    a0: float = 1.0,
    b0: float = 1.0,
) -> Results:
    """SafeBayes learning rates (R-log, I-log) for model averaging over nested models.

    Parameters
    ----------
    y : array_like, shape (n,)
    X : array_like, shape (n, K)
        ``M_p`` uses columns ``0..p``.
    log_prior : array_like, shape (K,), optional
        ``log pi(p)`` up to a constant; default uniform over the ``K`` models.
    etas : array_like, optional
        Candidate learning rates; default :func:`stanflow.gibbs.safebayes.default_etas`.
    prior_scale, a0, b0 : float
        The conjugate prior of every model.

    Returns
    -------
    Results
        Group ``calibration``: ``omega`` (dim ``variant``), ``cumulative_loss``
        (``variant``, ``eta``), ``model_weight`` (``eta``, ``model``: the
        posterior over models after all points) and ``beta_mean``
        (``eta``, ``coef``); attributes ``method = "safebayes"``,
        ``averaging``, ``prior``.
    """
    y, X = _data(y, X)
    K = X.shape[1]
    etas = _etas(default_etas() if etas is None else etas)
    log_prior = np.zeros(K) if log_prior is None else np.asarray(log_prior, dtype=float)
    sequences = sequential_models(y, X, etas, prior_scale=prior_scale, a0=a0, b0=b0)
    losses = mixture_losses(sequences, y, log_prior)
    cumulative = np.array([losses[v].sum(axis=1) for v in VARIANTS])
    weights = model_weights(sequences.log_z[..., -1:], log_prior)[..., 0]
    group = xr.Dataset(
        {
            "omega": (("variant",), [choose_eta(c, etas) for c in cumulative]),
            "cumulative_loss": (("variant", "eta"), cumulative),
            "model_weight": (("eta", "model"), weights),
            "beta_mean": (("eta", "coef"), mixture_means(sequences, log_prior)[0]),
        },
        coords={"variant": list(VARIANTS), "eta": etas, "model": np.arange(K), "coef": np.arange(K)},
        attrs={
            "method": "safebayes",
            "reference": "Grunwald and van Ommen (2017), Bayesian Analysis 12(4) 1069-1103",
            "averaging": "nested models M_p: the first p + 1 columns of X",
            "prior": f"beta | sigma^2 ~ N(0, sigma^2 {prior_scale:g}^2 I), "
            f"sigma^2 ~ InvGamma({a0:g}, {b0:g}), log pi(p) as given",
        },
    )
    return arviz_compat.build({"calibration": group})


def _forward(factor: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``L^-1 rhs`` per learning rate: ``factor`` (E, K, K) lower triangular, ``rhs`` (E, K, R).

    A batched general solve: faster here than a loop of triangular solves, and
    exact to rounding all the same.
    """
    return np.linalg.solve(factor, rhs)


def _nested_means(factor: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Every nested model's posterior mean ``m_p = L_p^-T z_p``, zero-padded: (E, M, K)."""
    E, K = z.shape
    means = np.zeros((E, K, K))
    for p in range(K):
        block = np.swapaxes(factor[:, : p + 1, : p + 1], 1, 2)
        means[:, p, : p + 1] = np.linalg.solve(block, z[:, : p + 1, None])[..., 0]
    return means


def _data(y: Any, X: Any) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y, dtype=float)
    if y.ndim != 1 or len(y) == 0 or not np.all(np.isfinite(y)):
        raise ValueError(f"y must be a finite 1-D array of at least one observation, got shape {y.shape}")
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[0] != len(y) or X.shape[1] == 0 or not np.all(np.isfinite(X)):
        raise ValueError(f"X must be a finite ({len(y)}, K) array matching y, got shape {X.shape}")
    return y, X


def _etas(etas: Any) -> np.ndarray:
    etas = np.asarray(etas, dtype=float)
    if etas.ndim != 1 or len(etas) == 0 or not np.all(np.isfinite(etas) & (etas > 0)):
        raise ValueError("etas must be a non-empty 1-D array of positive finite learning rates")
    return etas


def _positive(**values: float) -> None:
    for name, value in values.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be positive and finite, got {value!r}")
