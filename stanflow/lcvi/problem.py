"""Models in LCVI templates: what the loop needs to know about each of them.

Every LCVI template (``stan/lcvi/*_lcvi.stan``) has a normal likelihood for the
``N`` outcomes ``y_n`` the decisions ``h_n`` are made for, ``y_n ~ N(loc_n(theta),
sd_n^2)``, and adds ``weight * U`` to the target from the losses of
``loc_n(theta) + sd_n * eps_y[s, n]``. A :class:`Problem` binds a template to
its data and says how to compute ``loc(theta)`` from draws of ADVI's
unconstrained parameters, so that the loop (:mod:`stanflow.lcvi.loop`) can take
Bayes decisions (with the noise integrated out,
:meth:`stanflow.losses.BoundLoss.mixture_decision`) and recompute ``U``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Problem:
    """A model in an LCVI template with its data.

    Parameters
    ----------
    name : str
        Short name, recorded in the results.
    template : str
        The template under ``stan/``, e.g. ``"lcvi/eight_schools_lcvi"``.
    data : mapping
        The model's own Stan data, without the LCVI fields (``S``, ``eps_y``,
        ``h``, ``n_loss_params``, ``loss_params``, ``utility``, ``scale``,
        ``estimator``, ``weight``).
    y : ndarray, shape (N,)
        The observed outcomes the decisions are for; the loop's risk is
        ``mean_n l(y_n, h_n)``.
    sd : ndarray, shape (N,)
        The likelihood's standard deviation of each ``y_n``.
    location : callable
        ``z -> ndarray (T, N)``: ``loc_n(theta)`` of draws ``z`` (T, D) of the
        unconstrained parameters, in Stan's order (matrices column-major).
    dims : mapping, optional
        ``dims`` for :func:`stanflow.idata.to_inference_data`.
    """

    name: str
    template: str
    data: Mapping[str, Any]
    y: np.ndarray
    sd: np.ndarray
    location: Callable[[np.ndarray], np.ndarray]
    dims: Mapping[str, list[str]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Number of outcomes, and so of decisions."""
        return int(self.y.shape[0])


def eight_schools(data: Mapping[str, Any]) -> Problem:
    """Centred eight schools (``stan/lcvi/eight_schools_lcvi.stan``).

    Parameters
    ----------
    data : mapping
        ``J``, ``y`` (shape (J,)), ``sigma`` (shape (J,), positive).
    """
    J = _count(data, "J")
    y = _vector(data, "y", J)
    sigma = _vector(data, "sigma", J)
    if np.any(sigma <= 0):
        raise ValueError("sigma must be positive")
    return Problem(
        name="eight_schools",
        template="lcvi/eight_schools_lcvi",
        data={"J": J, "y": y.tolist(), "sigma": sigma.tolist()},
        y=y,
        sd=sigma,
        location=lambda z: z[:, 2:],  # (mu, log tau, theta)
        dims={"theta": ["school"], "y_rep": ["school"], "log_lik": ["school"]},
    )


def normal_mean(
    y: np.ndarray, sigma: float, prior_mean: float = 0.0, prior_sd: float = 10.0
) -> Problem:
    """Normal mean with known ``sigma`` and a normal prior (``stan/lcvi/normal_mean_lcvi.stan``).

    ``theta ~ N(prior_mean, prior_sd^2)``, ``y_n ~ N(theta, sigma^2)``: the
    posterior is normal, so plain mean-field VI is exact and the calibrated
    optimum can be found by brute force (``tests/test_lcvi_conjugate_e2e.py``).

    Parameters
    ----------
    y : array_like, shape (N,)
    sigma, prior_sd : float
        Positive.
    prior_mean : float
    """
    y = np.asarray(y, dtype=float)
    if y.ndim != 1 or y.size == 0 or not np.all(np.isfinite(y)):
        raise ValueError(f"y must be a non-empty finite vector, got shape {y.shape}")
    for name, value in (("sigma", sigma), ("prior_sd", prior_sd)):
        if not float(value) > 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    data = {
        "N": y.size,
        "y": y.tolist(),
        "sigma": float(sigma),
        "prior_mean": float(prior_mean),
        "prior_sd": float(prior_sd),
    }
    return Problem(
        name="normal_mean",
        template="lcvi/normal_mean_lcvi",
        data=data,
        y=y,
        sd=np.full(y.size, float(sigma)),
        location=lambda z: np.repeat(z[:, :1], y.size, axis=1),
    )


def _count(data: Mapping[str, Any], name: str) -> int:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _vector(data: Mapping[str, Any], name: str, length: int) -> np.ndarray:
    value = np.asarray(data.get(name), dtype=float)
    if value.shape != (length,) or not np.all(np.isfinite(value)):
        raise ValueError(
            f"{name} must be a finite vector of length {length}, got shape {value.shape}"
        )
    return value
