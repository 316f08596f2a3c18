"""Plug-in calibration of the learning rate: ``omega = tr(H J^-1 H) / tr(H)``.

For a loss with minimiser ``theta*`` of the risk ``E loss(Y, f_theta)``, a Gibbs
posterior is close to ``N(theta_hat, (omega n H)^-1)`` for large ``n`` while
``theta_hat`` has sampling covariance ``H^-1 J H^-1 / n``, with

- ``H`` (sensitivity): the Hessian of the risk at ``theta*``;
- ``J`` (variability): the covariance of the loss gradient at ``theta*``.

In one dimension the posterior spread matches the sampling spread when
``omega = H / J``; for vector parameters the loss-likelihood bootstrap's scalar
``tr(H J^-1 H) / tr(H)`` (Lyddon, Holmes and Walker 2019) generalises it. The
plug-in estimates both matrices at the empirical risk minimiser, for a linear
predictor ``f = x' beta`` (a location is ``x = 1``):

    H_hat = (1/n) sum_i [loss''(y_i, f_i) + jump * K_h(y_i - f_i)] x_i x_i'
    J_hat = (1/n) sum_i (g_i - g_bar)(g_i - g_bar)',  g_i = loss'(y_i, f_i) x_i

The kernel term estimates honestly what the second derivative misses at a kink
of the loss at ``y = f`` (``jump`` in :class:`~stanflow.losses.Loss`):
a Gaussian kernel ``K_h`` on the residuals (Powell's estimator; for the median,
``H_hat = 2 f_hat(m)``), with Silverman's bandwidth
``h = 0.9 min(sd, IQR / 1.34) n^(-1/5)`` of the residuals by default.
Everything is vectorised over leading axes (many data sets at once).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs.loss_terms import (
    LossTerms,
    check_stan_loss,
    python_terms,
    stan_location_risk,
    stan_terms,
)
from stanflow.golden import golden_section, sections_for
from stanflow.losses import Loss, get_loss, loss_function
from stanflow.slots import is_slot_file

BANDWIDTH_RULE = "silverman: 0.9 * min(sd, IQR / 1.34) * n**(-1/5) of the residuals"


def silverman_bandwidth(u: np.ndarray) -> np.ndarray:
    """Silverman's rule of thumb for a Gaussian kernel density estimate.

    ``h = 0.9 min(sd, IQR / 1.34) n^(-1/5)`` (the sd alone where the IQR is 0),
    as R's ``bw.nrd0``.

    Parameters
    ----------
    u : array_like, shape (..., n)
        Samples along the last axis, ``n >= 2``.

    Returns
    -------
    ndarray, shape (...)
    """
    u = np.asarray(u, dtype=float)
    n = u.shape[-1]
    sd = np.std(u, axis=-1, ddof=1)
    q25, q75 = np.percentile(u, [25, 75], axis=-1)
    iqr = (q75 - q25) / 1.34
    spread = np.where(iqr > 0, np.minimum(sd, iqr), sd)
    if np.any(spread <= 0):
        raise ValueError("the samples have zero spread: no bandwidth can be chosen")
    return 0.9 * spread * n ** (-0.2)


def kernel_density(
    u: np.ndarray, at: float | np.ndarray, bandwidth: float | np.ndarray
) -> np.ndarray:
    """Gaussian kernel density estimate of the samples ``u`` at one point each.

    Parameters
    ----------
    u : array_like, shape (..., n)
        Samples along the last axis.
    at : float or array_like, shape (...)
        Where to evaluate, one point per sample set.
    bandwidth : float or array_like, shape (...)
        Positive kernel standard deviations.

    Returns
    -------
    ndarray, shape (...)
        ``mean_i phi((at - u_i) / h) / h``.
    """
    h = np.asarray(bandwidth, dtype=float)[..., None]
    z = (np.asarray(at, dtype=float)[..., None] - np.asarray(u, dtype=float)) / h
    return np.mean(np.exp(-0.5 * z**2) / (h * math.sqrt(2 * math.pi)), axis=-1)


def location_estimate(
    y: np.ndarray,
    loss: Callable[[np.ndarray, np.ndarray], np.ndarray],
    lower: float | np.ndarray,
    upper: float | np.ndarray,
    *,
    rtol: float = 1e-10,
) -> np.ndarray:
    """Minimise ``sum_i loss(y_i, theta)`` over ``theta`` in ``[lower, upper]``.

    Golden-section search, run for every data set at once; the total loss must
    be unimodal on the interval (true for convex losses). On a flat minimum
    (the median of an even sample) it returns a point of the flat part.

    Parameters
    ----------
    y : array_like, shape (..., n)
    loss : callable
        ``(y, f) -> ndarray``, e.g. ``losses.loss_function("absolute")``.
    lower, upper : float or array_like, shape (...)
        The search interval per data set.
    rtol : float, default 1e-10
        Stop when the interval is this fraction of its starting width.

    Returns
    -------
    ndarray, shape (...)
    """
    y = np.asarray(y, dtype=float)
    a, b = np.broadcast_arrays(
        np.asarray(lower, float), np.asarray(upper, float), y[..., 0]
    )[:2]

    def risk(theta: np.ndarray) -> np.ndarray:
        return np.sum(loss(y, theta[..., None]), axis=-1)

    a, b = golden_section(risk, a, b, sections_for(rtol))
    return (a + b) / 2


def sensitivity(
    y: np.ndarray,
    f: np.ndarray,
    X: np.ndarray,
    loss: str | Loss,
    params: tuple[float, ...],
    bandwidth: float | np.ndarray,
) -> np.ndarray:
    """Plug-in ``H_hat``: the Hessian of the empirical risk, kinks smoothed.

    Parameters
    ----------
    y, f : array_like, shape (..., n)
        Observations and predictions ``x_i' beta_hat``.
    X : array_like, shape (..., n, K)
        Predictors (a column of ones for a location).
    loss : str or Loss
    params : tuple of float
        The loss's parameters in order (``Loss.bind``).
    bandwidth : float or array_like, shape (...)
        Kernel bandwidth for the residuals ``y - f``.

    Returns
    -------
    ndarray, shape (..., K, K)
    """
    return sensitivity_from_terms(python_terms(y, f, loss, params), X, bandwidth)


def sensitivity_from_terms(
    terms: LossTerms, X: np.ndarray, bandwidth: float | np.ndarray
) -> np.ndarray:
    """``H_hat = (1/n) sum_i [c_i + j_i K_h(y_i - f_i)] x_i x_i'`` from per-observation terms.

    Parameters
    ----------
    terms : LossTerms
        Curvatures ``c_i`` and jumps ``j_i`` at the data, shape (..., n), and
        the residuals they were taken at (``terms.residual``).
    X : array_like, shape (..., n, K)
    bandwidth : float or array_like, shape (...)

    Returns
    -------
    ndarray, shape (..., K, K)
    """
    weight = terms.curvature
    if np.any(terms.jump != 0):
        h = np.asarray(bandwidth, float)[..., None]
        z = terms.residual / h
        kernel = np.exp(-0.5 * z**2) / (h * math.sqrt(2 * math.pi))
        weight = weight + terms.jump * kernel
    X = np.asarray(X, float)
    return np.einsum("...i,...ij,...ik->...jk", weight, X, X) / weight.shape[-1]


def variability(
    y: np.ndarray,
    f: np.ndarray,
    X: np.ndarray,
    loss: str | Loss,
    params: tuple[float, ...],
) -> np.ndarray:
    """Plug-in ``J_hat``: the covariance of the per-observation loss gradients.

    Parameters
    ----------
    y, f : array_like, shape (..., n)
    X : array_like, shape (..., n, K)
    loss : str or Loss
    params : tuple of float

    Returns
    -------
    ndarray, shape (..., K, K)
    """
    return variability_from_terms(python_terms(y, f, loss, params), X)


def variability_from_terms(terms: LossTerms, X: np.ndarray) -> np.ndarray:
    """``J_hat``, the covariance of ``g_i x_i``, from per-observation gradients ``g_i``.

    Parameters
    ----------
    terms : LossTerms
    X : array_like, shape (..., n, K)

    Returns
    -------
    ndarray, shape (..., K, K)
    """
    g = terms.gradient[..., None] * np.asarray(X, float)
    g = g - np.mean(g, axis=-2, keepdims=True)
    return np.einsum("...ij,...ik->...jk", g, g) / g.shape[-2]


def check_sensitivity_and_variability(
    H: np.ndarray, J: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``H`` and ``J`` as stacks of square matrices of one shape.

    Parameters
    ----------
    H, J : array_like, shape (..., K, K)

    Returns
    -------
    H, J : ndarray, shape (..., K, K)

    Raises
    ------
    ValueError
        If the shapes differ, are not square, or ``H`` has a trace that is not
        positive (the risk must curve up).
    """
    H, J = np.asarray(H, float), np.asarray(J, float)
    if H.ndim < 2 or H.shape[-1] != H.shape[-2] or H.shape != J.shape:
        raise ValueError(
            f"H and J must be square matrices of one shape (..., K, K), "
            f"got {H.shape} and {J.shape}"
        )
    if np.any(~(np.trace(H, axis1=-2, axis2=-1) > 0)):
        raise ValueError("H must have a positive trace (the risk must curve up)")
    return H, J


def omega_from_matrices(H: np.ndarray, J: np.ndarray) -> np.ndarray:
    """The learning rate ``tr(H J^-1 H) / tr(H)`` (``H / J`` in one dimension).

    Parameters
    ----------
    H, J : array_like, shape (..., K, K)
        Sensitivity (positive trace) and variability (positive definite).

    Returns
    -------
    ndarray, shape (...)
    """
    H, J = check_sensitivity_and_variability(H, J)
    trace_h = np.trace(H, axis1=-2, axis2=-1)
    if np.any(~(np.linalg.eigvalsh(J)[..., 0] > 0)):
        raise ValueError("J must be positive definite")
    return np.trace(H @ np.linalg.solve(J, H), axis1=-2, axis2=-1) / trace_h


def calibrate_plugin(
    y: np.ndarray,
    *,
    loss: str | os.PathLike | Loss = "absolute",
    loss_params: Mapping[str, Any] | Sequence[float] | None = None,
    X: np.ndarray | None = None,
    estimate: np.ndarray | None = None,
    bounds: tuple[float, float] | None = None,
    bandwidth: float | None = None,
) -> Results:
    """Plug-in learning rate for one data set or many, as a ``calibration`` group.

    Parameters
    ----------
    y : array_like, shape (n,) or (R, n)
        One data set, or ``R`` data sets (replicates) of ``n`` observations.
    loss : str, os.PathLike or Loss, default "absolute"
        A shipped loss (see :data:`stanflow.losses.LOSSES`), a
        :class:`~stanflow.losses.Loss`, or the path of a
        ``.stanfunctions`` file defining ``real loss(real y, real f, vector
        loss_params)``: its derivatives are then Stan's, in process
        (:mod:`stanflow.gibbs.loss_terms`), with no Python beside the file.
    loss_params : mapping of str to float, or sequence of float, optional
        The loss's parameters, e.g. ``{"tau": 0.25}``; for a file, its
        parameter vector (a sequence, or a mapping's values in order).
    X : array_like, shape (n, K), optional
        Predictors of a linear predictor ``f = X beta``; without it the
        parameter is a location ``theta`` (``X`` a column of ones).
    estimate : array_like, shape (K,) or (R, K), optional
        The empirical risk minimiser; required with ``X``. For a location it
        is found by golden-section search over ``bounds``.
    bounds : (float, float), optional
        Search interval for a location; default the range of each data set,
        which holds the minimiser of the residual losses.
    bandwidth : float, optional
        Kernel bandwidth for kinked losses; default Silverman's rule on the
        residuals (:data:`BANDWIDTH_RULE`).

    Returns
    -------
    Results
        Group ``calibration`` with ``omega``, ``estimate`` (dim ``param``),
        ``sensitivity`` and ``variability`` (dims ``param``, ``param2``) and
        ``bandwidth``, with a leading ``replicate`` dim for 2-D ``y``; the
        attributes name the method, loss, formula and bandwidth rule.
    """
    stan_file = is_slot_file(loss)
    if stan_file:
        loss_file, stan_params = check_stan_loss(loss, loss_params)
        name, params = os.fspath(loss_file), tuple(stan_params)
        params_record = json.dumps(list(params))
    else:
        loss = get_loss(loss)
        params = loss.bind(loss_params)
        name = loss.name
        params_record = json.dumps(dict(zip([p.name for p in loss.params], params)))
    y = np.asarray(y, dtype=float)
    if y.ndim not in (1, 2) or y.shape[-1] < 2:
        raise ValueError(
            f"y must have shape (n,) or (R, n) with n >= 2, got shape {y.shape}"
        )
    if not np.all(np.isfinite(y)):
        raise ValueError("y must be finite")
    if X is None:
        X, names = np.ones((y.shape[-1], 1)), ["theta"]
        if estimate is None:
            lower, upper = _search_bounds(y, bounds)
            risk = (
                stan_location_risk(loss_file, stan_params, y)
                if stan_file
                else loss_function(loss, loss_params)
            )
            estimate = location_estimate(y, risk, lower, upper)[..., None]
    else:
        X = _check_design(X, y.shape[-1])
        if estimate is None:
            raise ValueError(
                "estimate is required with X: pass the risk minimiser beta_hat"
            )
        names = [f"beta[{k + 1}]" for k in range(X.shape[1])]
    estimate = np.asarray(estimate, dtype=float)
    shape = y.shape[:-1] + (len(names),)
    if estimate.shape not in (shape[-1:], shape) or not np.all(np.isfinite(estimate)):
        raise ValueError(
            f"estimate must be finite with shape {shape[-1:]} or {shape}, "
            f"got shape {estimate.shape}"
        )
    estimate = np.broadcast_to(estimate, shape)
    f = np.einsum("ik,...k->...i", X, estimate)
    if bandwidth is None:
        h = silverman_bandwidth(y - f)
    elif (
        isinstance(bandwidth, (int, float))
        and math.isfinite(bandwidth)
        and bandwidth > 0
    ):
        h = np.full(y.shape[:-1], float(bandwidth))
    else:
        raise ValueError(f"bandwidth must be a positive number, got {bandwidth!r}")
    terms = (
        stan_terms(loss_file, stan_params, y, f)
        if stan_file
        else python_terms(y, f, loss, params)
    )
    H = sensitivity_from_terms(terms, X, h)
    J = variability_from_terms(terms, X)
    lead = ("replicate",) * (y.ndim - 1)
    group = xr.Dataset(
        {
            "omega": (lead, omega_from_matrices(H, J)),
            "estimate": (lead + ("param",), estimate),
            "sensitivity": (lead + ("param", "param2"), H),
            "variability": (lead + ("param", "param2"), J),
            "bandwidth": (lead, h),
        },
        coords={"param": names, "param2": names},
        attrs={
            "method": "plugin",
            "formula": "tr(H J^-1 H) / tr(H)",
            "loss": name,
            "loss_params": params_record,
            "derivatives": "stan (in process)" if stan_file else "numpy",
            "bandwidth_rule": BANDWIDTH_RULE if bandwidth is None else "given",
        },
    )
    return arviz_compat.build({"calibration": group})


def _search_bounds(
    y: np.ndarray, bounds: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray]:
    """The golden-section interval: ``bounds``, or each data set's range."""
    if bounds is None:
        return y.min(axis=-1), y.max(axis=-1)
    try:
        lower, upper = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(
            f"bounds must be a pair (lower, upper) of numbers, got {bounds!r}"
        ) from None
    if not lower < upper:
        raise ValueError(f"bounds must have lower < upper, got {bounds!r}")
    return np.asarray(lower), np.asarray(upper)


def _check_design(X: np.ndarray, n: int) -> np.ndarray:
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[0] != n or not np.all(np.isfinite(X)):
        raise ValueError(
            f"X must be a finite ({n}, K) array matching y, got shape {X.shape}"
        )
    return X
