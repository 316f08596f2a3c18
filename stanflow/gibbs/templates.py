"""The shipped Gibbs templates as loss programs: a loss of ``(y, f)`` and a prior.

Two templates in ``stan/gibbs/`` meet the loss-program contract
(:mod:`stanflow.gibbs.contract`) with the slots ``loss.stanfunctions`` (``real
loss(real y, real f, vector loss_params)``, a shipped name or a file of yours)
and ``prior.stanfunctions`` (``real log_prior(vector theta, vector
prior_params)``):

- ``location.stan``: a scalar ``theta``, predictions ``f_i = theta``
  (:func:`location_program`);
- ``linear.stan``: coefficients ``beta`` (K), predictions ``f = X beta``
  (:func:`linear_program`);

both on the box ``[lower_bound, upper_bound]``. A :class:`TemplateProgram` is a
:class:`~stanflow.gibbs.program.LossProgram` like any other, served by the same
algorithms; what it knows beyond a user's program is the structure of its
losses, which some algorithms use:

- the plug-in's curvature of a kinked loss by a kernel on the residuals
  ``y - f`` (:meth:`TemplateProgram.loss_terms`, :mod:`stanflow.gibbs.plugin`);
- exact draws from a shipped prior on the box and its normalised density, where
  the learning-rate path starts (:attr:`TemplateProgram.exact_prior`, a
  :class:`~stanflow.gibbs.box.BoxPrior`);
- the risk minimiser by golden-section search (a location) or Nelder-Mead from
  the least-squares fit (coefficients);
- the exact grid posterior of a location (GPC's grid backend).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import xarray as xr
from scipy.optimize import minimize

from stanflow.gibbs.box import BoxPrior
from stanflow.gibbs.estimate import Estimate
from stanflow.gibbs.loss_terms import (
    LossTerms,
    python_terms,
    stan_location_risk,
    stan_terms,
)
from stanflow.gibbs.plugin import (
    location_estimate,
    sensitivity_from_terms,
    silverman_bandwidth,
    variability_from_terms,
)
from stanflow.gibbs.priors import Prior, prior_parameters, prior_slot_file
from stanflow.gibbs.program import LossProgram
from stanflow.gibbs.sandwich import Sandwich
from stanflow.losses import (
    Loss,
    get_loss,
    loss_function,
    loss_parameters,
    loss_slot_file,
)
from stanflow.losses.registry import Params
from stanflow.models import CompileError, program_path
from stanflow.signatures import LOSS, PRIOR, slot_compile_error
from stanflow.slots import is_slot_file, slot_file

LossSpec = str | os.PathLike | Loss
PriorSpec = str | os.PathLike | Prior

LOSS_SIGNATURE = LOSS.signature
PRIOR_SIGNATURE = PRIOR.signature
SAMPLED_PRIORS = ("uniform", "normal")
"""Shipped priors with exact draws on the box (where the learning-rate path starts)."""


class TemplateProgram(LossProgram):
    """A shipped Gibbs template bound to a loss, a prior, bounds and data.

    Made by :func:`location_program` or :func:`linear_program`.

    Attributes
    ----------
    template : {"location", "linear"}
    y : ndarray, shape (n,)
    X : ndarray, shape (n, K), or None for a location
    loss : str, os.PathLike or Loss
        As given.
    loss_label : str
        The shipped loss's name, or the file's path.
    loss_params, prior_params : ndarray
        The slots' parameter vectors.
    prior_label : str
    lower, upper : ndarray, shape (K,)
        The box.
    exact_prior : BoxPrior or None
        For the shipped ``uniform`` (finite bounds) and ``normal`` priors.
    """

    def __init__(
        self,
        y: Any,
        *,
        X: Any = None,
        loss: LossSpec = "absolute",
        loss_params: Params = None,
        prior: PriorSpec = "uniform",
        prior_params: Params = None,
        bounds: tuple[Any, Any] = (-math.inf, math.inf),
        threads: int | None = None,
    ) -> None:
        data = template_data(y, X=X, loss=loss, loss_params=loss_params, prior=prior,
                             prior_params=prior_params, bounds=bounds)
        self.template = "location" if X is None else "linear"
        self.y = data["y"]
        self.X = data.get("X")
        self.loss = loss
        self.loss_label = _label(loss)
        self.loss_params = data["loss_params"]
        self.prior = prior
        self.prior_label = _label(prior)
        self.prior_params = data["prior_params"]
        K = 1 if self.X is None else self.X.shape[1]
        self.lower = np.broadcast_to(np.asarray(data["lower_bound"], float), (K,)).copy()
        self.upper = np.broadcast_to(np.asarray(data["upper_bound"], float), (K,)).copy()
        self.exact_prior = _box_prior(prior, self.prior_params, self.lower, self.upper)
        if not is_slot_file(loss):
            _check_numpy_loss(get_loss(cast("str | Loss", loss)), tuple(self.loss_params), self.y)
        loss_file = loss_slot_file(loss)
        prior_file = prior_slot_file(prior)
        try:
            super().__init__(
                program_path(f"gibbs/{self.template}"), data,
                slots={LOSS.include: loss_file, PRIOR.include: prior_file},
                name=f"gibbs_{self.template}", threads=threads,
            )
        except CompileError as err:
            raise slot_compile_error(
                err, f"the Gibbs template {self.template}.stan",
                {LOSS: loss_file, PRIOR: prior_file},
            ) from None

    @property
    def design(self) -> np.ndarray:
        """The predictors of ``f = X theta``: ``X``, or a column of ones for a location."""
        return np.ones((len(self.y), 1)) if self.X is None else self.X

    def loss_values(self) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """The loss as a broadcasting function ``(y, f) -> loss(y, f)`` (NumPy or the file)."""
        return loss_function(self.loss, self._params_for_functions())

    def loss_terms(self, estimate: np.ndarray) -> LossTerms:
        """Per-observation derivatives of the loss at ``f = X estimate`` (the plug-in's input)."""
        f = self.design @ np.asarray(estimate, float)
        if is_slot_file(self.loss):
            return stan_terms(slot_file(self.loss, "", "loss"), self.loss_params, self.y, f)
        return python_terms(self.y, f, cast("str | Loss", self.loss), tuple(self.loss_params))

    def location_risk(self, y: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """``(y, theta) -> losses`` for the golden-section search of a location, any ``y`` stack."""
        if is_slot_file(self.loss):
            return stan_location_risk(slot_file(self.loss, "", "loss"), self.loss_params, y)
        return self.loss_values()

    def loss_record(self) -> tuple[str, str]:
        """The loss's name (or file) and its parameters as JSON, for results' attributes."""
        if is_slot_file(self.loss):
            return self.loss_label, json.dumps(self.loss_params.tolist())
        names = [p.name for p in get_loss(cast("str | Loss", self.loss)).params]
        return self.loss_label, json.dumps(dict(zip(names, self.loss_params.tolist(), strict=True)))

    def result_data(
        self, data: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, list[str]], dict[str, Any]]:
        """``y`` as observed data; the rate, weights, ``X``, bounds and slot parameters as constants."""
        keep = ("omega", "weights", "X", "lower_bound", "upper_bound", "loss_params",
                "prior_params")
        constant = {name: data[name] for name in keep if name in data and np.size(data[name]) > 0}
        dims = {"y": ["obs"], "weights": ["obs"]}
        if self.X is not None:
            dims.update(beta=["coef"], X=["obs", "coef"], lower_bound=["coef"],
                        upper_bound=["coef"])
        return {"y": self.y}, constant, dims, {}

    def check_proper_prior(self) -> None:
        """A uniform prior on an unbounded box is improper: ``ValueError`` naming ``bounds``."""
        if self.prior_label == "uniform" and not np.all(
                np.isfinite(self.lower) & np.isfinite(self.upper)):
            raise ValueError(
                "bounds: the uniform prior is improper without finite bounds, and the "
                "learning-rate path starts from the prior; give finite bounds or a normal prior"
            )

    def data_groups(self) -> dict[str, Any]:
        """``observed_data`` (``y``) and, with ``X``, ``constant_data``."""
        groups = {"observed_data": xr.Dataset({"y": ("obs", self.y)})}
        if self.X is not None:
            groups["constant_data"] = xr.Dataset(
                {"X": (("obs", "param"), self.X)}, coords={"param": self.names})
        return groups

    def describe(self) -> dict[str, Any]:
        """What a result records of the template, its loss and prior."""
        loss, loss_params = self.loss_record()
        return {
            "program": str(self.source.path),
            "template": self.template,
            "loss": loss,
            "loss_params": loss_params,
            "prior": self.prior_label,
            "prior_params": json.dumps(self.prior_params.tolist()),
            "derivatives": "stan (in process)" if is_slot_file(self.loss) else "numpy",
        }

    def estimate(self, *, seed: int = 0) -> Estimate:
        """The risk minimiser: golden-section search (a location, over the box where it
        is finite, else the data's range) or Nelder-Mead from least squares."""
        if self.X is None:
            lower, upper = self.lower[0], self.upper[0]
            if not (np.isfinite(lower) and np.isfinite(upper)):
                lower, upper = self.y.min(), self.y.max()
            theta = np.atleast_1d(location_estimate(
                self.y, self.location_risk(self.y), np.asarray(lower), np.asarray(upper)))
            method = "golden section"
        else:
            theta, method = glm_minimiser(self.y, self.X, self.loss_values()), "nelder-mead"
        if np.any((theta <= self.lower) | (theta >= self.upper)):
            raise ValueError(
                f"bounds: the risk minimiser {np.asarray(theta).tolist()} lies on the "
                f"boundary of the box (lower {self.lower.tolist()}, upper "
                f"{self.upper.tolist()}): the data's minimiser is outside it; widen bounds"
            )
        estimate = self.estimate_at(theta)
        return estimate._replace(method=method)

    def sandwich(self, estimate: Estimate, bandwidth: Any = None) -> Sandwich:
        """``H`` and ``J`` from the loss's derivatives in ``f``, a kernel on the
        residuals at a kink (:mod:`stanflow.gibbs.plugin`).

        ``bandwidth``: the kernel's, default Silverman's rule on the residuals.
        """
        if self.n < 2:
            raise ValueError(
                f"y: the plug-in's curvature needs n >= 2 observations, got n = {self.n}")
        terms = self.loss_terms(estimate.theta)
        if bandwidth is None:
            h, curvature = float(silverman_bandwidth(terms.residual)), "kernel (silverman)"
        elif isinstance(bandwidth, (int, float)) and math.isfinite(bandwidth) and bandwidth > 0:
            h, curvature = float(bandwidth), "kernel (given)"
        else:
            raise ValueError(f"bandwidth must be a positive number, got {bandwidth!r}")
        X = self.design
        H = sensitivity_from_terms(terms, X, h)
        J = variability_from_terms(terms, X)
        return Sandwich(H, J, "constrained", curvature, np.array([h]),
                        terms.gradient[:, None] * X)

    def _params_for_functions(self) -> Any:
        if is_slot_file(self.loss):
            return self.loss_params.tolist()
        names = [p.name for p in get_loss(cast("str | Loss", self.loss)).params]
        return dict(zip(names, self.loss_params.tolist(), strict=True))


def location_program(
    y: Any,
    *,
    loss: LossSpec = "absolute",
    loss_params: Params = None,
    prior: PriorSpec = "uniform",
    prior_params: Params = None,
    bounds: tuple[Any, Any] = (-math.inf, math.inf),
    threads: int | None = None,
) -> TemplateProgram:
    """The location template (``f_i = theta``) as a loss program.

    Parameters
    ----------
    y : array_like, shape (n,)
        Observations.
    loss : str, path or Loss, default "absolute"
        A shipped loss (``stanflow.losses.LOSSES``), a :class:`~stanflow.losses.Loss`,
        or a ``.stanfunctions`` file defining :data:`LOSS_SIGNATURE`.
    loss_params : mapping or sequence of float, optional
        By name (``{"tau": 0.25}``) or in declared order (``[0.25]``), for
        shipped losses and files alike (:func:`stanflow.losses.loss_parameters`;
        a file declares its names in its ``// params:`` line).
    prior : str, path or Prior, default "uniform"
        A shipped prior (``uniform``, ``normal``) or a file defining
        :data:`PRIOR_SIGNATURE`.
    prior_params : mapping or sequence of float, optional
        E.g. ``{"mean": 0, "sd": 10}`` or ``[0, 10]``.
    bounds : (lower, upper), default (-inf, inf)
        The support of ``theta``; the uniform prior is uniform on it.
    threads : int, optional
        Threads of the in-process calls.

    Returns
    -------
    TemplateProgram

    Raises
    ------
    ValueError, TypeError
        Naming the argument, before anything compiles.
    stanflow.models.CompileError
        If a loss or prior file does not define its slot's signature (the
        message names the file and the signature, before any C++ compile).
    """
    return TemplateProgram(y, loss=loss, loss_params=loss_params, prior=prior,
                           prior_params=prior_params, bounds=bounds, threads=threads)


def linear_program(
    y: Any,
    X: Any,
    *,
    loss: LossSpec = "absolute",
    loss_params: Params = None,
    prior: PriorSpec = "uniform",
    prior_params: Params = None,
    bounds: tuple[Any, Any] = (-math.inf, math.inf),
    threads: int | None = None,
) -> TemplateProgram:
    """The linear template (``f = X beta``) as a loss program.

    Parameters
    ----------
    y : array_like, shape (n,)
        Observations (labels in {-1, 1} for ``hinge`` and ``logistic``).
    X : array_like, shape (n, K)
        Predictors.
    loss, loss_params, prior, prior_params, threads
        As in :func:`location_program`.
    bounds : (lower, upper), default (-inf, inf)
        Numbers or shape-``(K,)`` arrays.

    Returns
    -------
    TemplateProgram
    """
    if X is None:
        raise ValueError("X is required for the linear template: shape (n, K)")
    return TemplateProgram(y, X=X, loss=loss, loss_params=loss_params, prior=prior,
                           prior_params=prior_params, bounds=bounds, threads=threads)


def template_data(
    y: Any,
    *,
    X: Any = None,
    loss: LossSpec = "absolute",
    loss_params: Params = None,
    prior: PriorSpec = "uniform",
    prior_params: Params = None,
    bounds: tuple[Any, Any] = (-math.inf, math.inf),
) -> dict[str, Any]:
    """Check a template's inputs and build its data (all but ``omega`` and ``weights``).

    Raises
    ------
    ValueError
        Naming the argument: empty or non-finite ``y``, a loss parameter out
        of range, mismatched ``X`` or ``bounds``.
    """
    y = np.asarray(y, dtype=float)
    if y.ndim != 1 or len(y) == 0:
        raise ValueError(f"y must be a 1-D array of at least one observation, got shape {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError("y must be finite")
    loss_values = np.array(loss_parameters(loss, loss_params), dtype=float)
    prior_values = np.array(prior_parameters(prior, prior_params), dtype=float)
    data: dict[str, Any] = {
        "N": len(y),
        "y": y,
        "n_loss_params": len(loss_values),
        "loss_params": loss_values,
        "n_prior_params": len(prior_values),
        "prior_params": prior_values,
    }
    shape: tuple[int, ...] = ()
    if X is not None:
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[0] != len(y) or X.shape[1] == 0:
            raise ValueError(
                f"X must have shape ({len(y)}, K) with K >= 1 to match y, got shape {X.shape}"
            )
        if not np.all(np.isfinite(X)):
            raise ValueError("X must be finite")
        data.update(K=X.shape[1], X=X)
        shape = (X.shape[1],)
    data["lower_bound"], data["upper_bound"] = _bounds(bounds, shape)
    return data


def glm_minimiser(
    y: np.ndarray, X: np.ndarray, loss: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> np.ndarray:
    """``argmin_beta sum_i loss(y_i, x_i' beta)`` by Nelder-Mead from the least-squares fit.

    Derivative-free, so kinked losses are fine; restarted once from its own
    optimum; adequate for the few coefficients of the examples.
    """
    start = np.linalg.lstsq(X, y, rcond=None)[0]

    def objective(beta: np.ndarray) -> float:
        return float(np.sum(loss(y, X @ beta)))

    for _ in range(2):
        start = minimize(objective, start, method="Nelder-Mead",
                         options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 20000}).x
    return start


def _check_numpy_loss(loss: Loss, params: tuple[float, ...], y: np.ndarray) -> None:
    """A :class:`Loss`'s NumPy value must broadcast as ``value(y, f, *params)``."""
    try:
        probe = np.asarray(loss.value(y[None, :1], np.zeros((1, 1)), *params), dtype=float)
    except TypeError as err:
        raise TypeError(
            f"loss: {loss.name!r}.value must be callable as value(y, f, *params) with "
            f"{len(params)} parameter(s), broadcasting y against f ({err})"
        ) from None
    if probe.shape != (1, 1):
        raise ValueError(
            f"loss: {loss.name!r}.value must return the broadcast shape of y and f, "
            f"got {probe.shape} for shapes (1, 1) and (1, 1)"
        )


def _box_prior(prior: PriorSpec, params: np.ndarray, lower: np.ndarray,
               upper: np.ndarray) -> BoxPrior | None:
    name = prior.name if isinstance(prior, Prior) else prior
    if not (isinstance(name, str) and name in SAMPLED_PRIORS) or is_slot_file(prior):
        return None
    if name == "uniform" and not np.all(np.isfinite(lower) & np.isfinite(upper)):
        return None
    return BoxPrior(name, tuple(float(v) for v in params), lower, upper)


def _bounds(bounds: Any, shape: tuple[int, ...]) -> tuple[Any, Any]:
    """``(lower, upper)`` broadcast to ``shape``, with ``lower < upper``."""
    try:
        lower, upper = (np.broadcast_to(np.asarray(b, dtype=float), shape) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(
            f"bounds must be a pair (lower, upper) of numbers or shape {shape} arrays, "
            f"got {bounds!r}"
        ) from None
    if np.any(np.isnan(lower) | np.isnan(upper)) or not np.all(lower < upper):
        raise ValueError(f"bounds must have lower < upper, got {bounds!r}")
    if shape:
        return lower.copy(), upper.copy()
    return float(lower), float(upper)


def _label(spec: Any) -> str:
    if is_slot_file(spec):
        return str(Path(spec).resolve())
    return spec.name if isinstance(spec, (Loss, Prior)) else str(spec)
