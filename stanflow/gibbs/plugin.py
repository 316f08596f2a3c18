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
The kernels are vectorised over leading axes (many data sets at once,
:func:`replicate_location_plugin`).

That is how the shipped templates, losses of ``(y, f)``, get ``H`` and ``J``
(:meth:`~stanflow.gibbs.templates.TemplateProgram.sandwich`). Any other loss
program gets them from Stan's gradients in process
(:mod:`stanflow.gibbs.sandwich`); :func:`calibrate_plugin` takes either.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs.estimate import Estimate
from stanflow.gibbs.loss_terms import LossTerms, python_terms
from stanflow.gibbs.sandwich import Sandwich
from stanflow.golden import golden_section, sections_for
from stanflow.losses import Loss, get_loss, loss_function, loss_parameters

if TYPE_CHECKING:
    from stanflow.gibbs.program import LossProgram

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
    program: LossProgram,
    *,
    estimate: Any = None,
    bandwidth: Any = None,
) -> Results:
    """Plug-in learning rate ``tr(H J^-1 H) / tr(H)`` of a loss program, as a ``calibration`` group.

    Parameters
    ----------
    program : LossProgram
        Any loss program; the shipped templates
        (:func:`~stanflow.gibbs.location_program`,
        :func:`~stanflow.gibbs.linear_program`) take their curvature from the
        loss's derivatives in ``f`` with a kernel on the residuals at a kink
        (module docstring), any other program from Stan's gradients in process
        (:mod:`stanflow.gibbs.sandwich`).
    estimate : array_like, shape (P,), optional
        The empirical risk minimiser; default :meth:`LossProgram.estimate`.
    bandwidth : float or array_like, optional
        Templates: the kernel bandwidth for a kinked loss, default Silverman's
        rule on the residuals (:data:`BANDWIDTH_RULE`). Other programs: the
        central-difference steps of ``H`` on the unconstrained scale, default
        :mod:`stanflow.gibbs.sandwich`'s rule.

    Returns
    -------
    Results
        Group ``calibration`` with ``omega``, ``estimate`` (dim ``param``),
        ``sensitivity`` and ``variability`` (dims ``param``, ``param2``; dims
        ``coord``, ``coord2`` labelled ``u[k]`` when they are on Stan's
        unconstrained scale, see ``scale``) and ``bandwidth`` (the kernel's, or the
        steps by unconstrained coordinate);
        attributes: method, formula, the program and (templates) its loss, how
        the curvature was found, and the scale.
    """
    est = program.estimate() if estimate is None else program.estimate_at(estimate)
    s = program.sandwich(est, bandwidth)
    return arviz_compat.build({"calibration": plugin_group(program, est, s)})


def plugin_group(program: LossProgram, estimate: Estimate, s: Sandwich) -> xr.Dataset:
    """The plug-in's ``calibration`` Dataset from an estimate and its sandwich."""
    names = list(program.names)
    if s.scale == "constrained":
        dims, coords = ("param", "param2"), {"param2": names}
    else:  # fewer (or more) unconstrained coordinates than values: H and J on their own
        coordinates = [f"u[{k + 1}]" for k in range(program.dim)]
        dims, coords = ("coord", "coord2"), {"coord": coordinates, "coord2": coordinates}
    return xr.Dataset(
        {
            "omega": ((), float(omega_from_matrices(s.H, s.J))),
            "estimate": (("param",), estimate.theta),
            "sensitivity": (dims, s.H),
            "variability": (dims, s.J),
            "bandwidth": (("bandwidth_dim",), np.atleast_1d(s.steps)),
        },
        coords={"param": names, **coords},
        attrs={
            "method": "plugin",
            "formula": "tr(H J^-1 H) / tr(H)",
            **program.describe(),
            "curvature": s.curvature,
            "scale": s.scale,
            "estimate_method": estimate.method,
        },
    )


def replicate_location_plugin(
    y: np.ndarray,
    loss: str | Loss = "absolute",
    loss_params: Mapping[str, Any] | Sequence[float] | None = None,
    bandwidth: float | None = None,
) -> xr.Dataset:
    """The location template's plug-in for many data sets at once (NumPy losses).

    The same kernels as :meth:`~stanflow.gibbs.templates.TemplateProgram.sandwich`,
    vectorised over replicates for simulation studies: the estimate by
    golden-section search over each data set's range, ``H`` and ``J`` from the
    loss's derivatives with Silverman's bandwidth on the residuals.

    Parameters
    ----------
    y : array_like, shape (R, n)
    loss : str or Loss, default "absolute"
        A shipped loss.
    loss_params : mapping or sequence of float, optional
        By name or in declared order (:func:`stanflow.losses.loss_parameters`).
    bandwidth : float, optional

    Returns
    -------
    xarray.Dataset
        ``omega``, ``estimate``, ``sensitivity``, ``variability``, ``bandwidth``
        with a leading ``replicate`` dim.
    """
    y = np.asarray(y, dtype=float)
    if y.ndim != 2 or y.shape[-1] < 2 or not np.all(np.isfinite(y)):
        raise ValueError(f"y must be a finite (R, n) array with n >= 2, got shape {y.shape}")
    loss = get_loss(loss)
    params = loss_parameters(loss, loss_params)
    estimate = location_estimate(y, loss_function(loss, params), y.min(-1), y.max(-1))
    f = np.broadcast_to(estimate[:, None], y.shape)
    h = silverman_bandwidth(y - f) if bandwidth is None else np.full(len(y), float(bandwidth))
    terms = python_terms(y, f, loss, params)
    X = np.ones((y.shape[-1], 1))
    H, J = sensitivity_from_terms(terms, X, h), variability_from_terms(terms, X)
    return xr.Dataset(
        {
            "omega": ("replicate", omega_from_matrices(H, J)),
            "estimate": (("replicate", "param"), estimate[:, None]),
            "sensitivity": (("replicate", "param", "param2"), H),
            "variability": (("replicate", "param", "param2"), J),
            "bandwidth": ("replicate", h),
        },
        coords={"param": ["theta"], "param2": ["theta"]},
        attrs={"method": "plugin", "formula": "tr(H J^-1 H) / tr(H)", "template": "location",
               "loss": loss.name,
               "loss_params": json.dumps(
                   dict(zip([p.name for p in loss.params], params, strict=True))
               ),
               "derivatives": "numpy",
               "curvature": "kernel (silverman)" if bandwidth is None else "kernel (given)",
               "bandwidth_rule": BANDWIDTH_RULE if bandwidth is None else "given"},
    )
