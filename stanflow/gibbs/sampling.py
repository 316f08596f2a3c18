"""Gibbs posteriors sampled by Stan: the templates, their data, and a one-call helper.

Two templates in ``stan/gibbs/`` share the slots ``loss.stanfunctions`` and
``prior.stanfunctions``:

- ``location.stan``: a scalar ``theta``, predictions ``f_i = theta``;
- ``linear.stan``: coefficients ``beta`` (K), predictions ``f = X beta``.

Their target is ``-omega * sum_i loss(y[i], f[i], loss_params) +
log_prior(theta, prior_params)`` on the box ``[lower_bound, upper_bound]``.
``omega`` and the loss and prior parameters are data, so one executable serves
every learning rate. The split is cmdstanpy's: :func:`gibbs_model` compiles
(once, cached), :func:`stan_data` builds the data, and :func:`posterior` does
both, samples, and returns an ``InferenceData``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import cmdstanpy
import numpy as np

from stanflow.arviz_compat import Results
from stanflow.gibbs.priors import Prior, get_prior
from stanflow.idata import to_inference_data
from stanflow.losses import Loss, get_loss
from stanflow.models import CompileError, compile_model, program_path
from stanflow.parameters import check_vector
from stanflow.slots import is_slot_file, slot_file

LossSpec = str | os.PathLike | Loss
PriorSpec = str | os.PathLike | Prior
Params = Mapping[str, float] | Sequence[float] | None

LOSS_SIGNATURE = "real loss(real y, real f, vector loss_params)"
PRIOR_SIGNATURE = "real log_prior(vector theta, vector prior_params)"


def gibbs_model(
    loss: LossSpec = "absolute",
    prior: PriorSpec = "uniform",
    *,
    linear: bool = False,
    driver: str = "active",
) -> cmdstanpy.CmdStanModel:
    """Compile (once per content) a Gibbs template with a loss and a prior.

    Parameters
    ----------
    loss : str, path or Loss, default "absolute"
        A shipped loss name (``stanflow.losses.LOSSES``), a
        :class:`~stanflow.losses.Loss`, or the path of a
        ``.stanfunctions`` file defining :data:`LOSS_SIGNATURE`.
    prior : str, path or Prior, default "uniform"
        A shipped prior name (``stanflow.gibbs.priors.PRIORS``), a
        :class:`~stanflow.gibbs.priors.Prior`, or a file defining
        :data:`PRIOR_SIGNATURE`.
    linear : bool, default False
        ``linear.stan`` (coefficients ``beta`` of ``f = X beta``) instead of
        ``location.stan`` (a scalar ``theta``).
    driver : {"active", "stanflow"}, default "active"
        See :func:`stanflow.models.compile_model`; ``"stanflow"`` for run sets
        (batch mode).

    Returns
    -------
    cmdstanpy.CmdStanModel

    Raises
    ------
    stanflow.models.CompileError
        If the program does not compile; the message names the loss and prior
        files and the signatures they must define.
    """
    loss_file = _stan_file(loss, get_loss, "loss")
    prior_file = _stan_file(prior, get_prior, "prior")
    template = "linear" if linear else "location"
    try:
        return compile_model(
            program_path(f"gibbs/{template}"),
            name=f"gibbs_{template}",
            slots={"loss.stanfunctions": loss_file, "prior.stanfunctions": prior_file},
            driver=driver,
        )
    except CompileError as err:
        raise CompileError(
            f"the Gibbs template {template}.stan did not compile with loss file "
            f"{loss_file} and prior file {prior_file}; they must define "
            f"`{LOSS_SIGNATURE}` and `{PRIOR_SIGNATURE}`.\n{err}",
            err.console,
        ) from None


def stan_data(
    y: np.ndarray,
    *,
    omega: float,
    loss: LossSpec = "absolute",
    loss_params: Params = None,
    prior: PriorSpec = "uniform",
    prior_params: Params = None,
    X: np.ndarray | None = None,
    bounds: tuple[Any, Any] = (-math.inf, math.inf),
    save_pointwise_loss: bool = False,
) -> dict[str, Any]:
    """Check the inputs of a Gibbs posterior and build the templates' data.

    Parameters
    ----------
    y : array_like, shape (N,)
        Observations (labels in {-1, 1} for ``hinge`` and ``logistic``).
    omega : float
        Learning rate, positive and finite.
    loss, prior
        As in :func:`gibbs_model`.
    loss_params, prior_params : mapping or sequence of float, optional
        Parameters by name for shipped losses and priors (``{"tau": 0.25}``,
        ``{"mean": 0, "sd": 10}``); for a file, a sequence, or a mapping whose
        values are taken in order, forming the Stan vector.
    X : array_like, shape (N, K), optional
        Predictors, for ``linear.stan``.
    bounds : (lower, upper), default (-inf, inf)
        Support of the parameters, floats or (with ``X``) shape-(K,) arrays;
        the uniform prior is uniform on it.
    save_pointwise_loss : bool, default False
        Save ``pointwise_loss`` (the N losses of every draw) as a generated
        quantity, for importance reweighting (:mod:`stanflow.gibbs.reweighting`).

    Returns
    -------
    dict
        Data for ``location.stan`` (``X`` is None) or ``linear.stan``.

    Raises
    ------
    ValueError
        Naming the argument: empty or non-finite ``y``, ``omega <= 0``, a loss
        parameter out of range (``tau`` outside (0, 1)), mismatched ``X`` or
        ``bounds``.
    """
    y = np.asarray(y, dtype=float)
    if y.ndim != 1 or len(y) == 0:
        raise ValueError(
            f"y must be a 1-D array of at least one observation, got shape {y.shape}"
        )
    if not np.all(np.isfinite(y)):
        raise ValueError("y must be finite")
    if isinstance(omega, bool) or not isinstance(omega, (int, float, np.number)):
        raise TypeError(f"omega must be a number, got {type(omega).__name__}")
    if not (math.isfinite(omega) and omega > 0):
        raise ValueError(f"omega must be positive and finite, got {omega!r}")
    loss_values = _params(loss, loss_params, get_loss, "loss")
    prior_values = _params(prior, prior_params, get_prior, "prior")
    data: dict[str, Any] = {
        "N": len(y),
        "y": y,
        "omega": float(omega),
        "n_loss_params": len(loss_values),
        "loss_params": loss_values,
        "n_prior_params": len(prior_values),
        "prior_params": prior_values,
        "save_pointwise_loss": int(bool(save_pointwise_loss)),
    }
    shape: tuple[int, ...] = ()
    if X is not None:
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[0] != len(y) or X.shape[1] == 0:
            raise ValueError(
                f"X must have shape ({len(y)}, K) with K >= 1 to match y, "
                f"got shape {X.shape}"
            )
        if not np.all(np.isfinite(X)):
            raise ValueError("X must be finite")
        data.update(K=X.shape[1], X=X)
        shape = (X.shape[1],)
    data["lower_bound"], data["upper_bound"] = _bounds(bounds, shape)
    return data


def posterior(
    y: np.ndarray,
    *,
    omega: float,
    loss: LossSpec = "absolute",
    loss_params: Params = None,
    prior: PriorSpec = "uniform",
    prior_params: Params = None,
    X: np.ndarray | None = None,
    bounds: tuple[Any, Any] = (-math.inf, math.inf),
    save_pointwise_loss: bool = False,
    **sample_kwargs: Any,
) -> Results:
    """Sample a Gibbs posterior with Stan (NUTS) and return it as InferenceData.

    Inputs are checked (:func:`stan_data`) before anything compiles or runs.

    Parameters
    ----------
    y, omega, loss, loss_params, prior, prior_params, X, bounds, save_pointwise_loss
        As in :func:`stan_data`; the pointwise losses get dim ``obs``.
    **sample_kwargs
        Passed to ``CmdStanModel.sample`` (``chains``, ``iter_sampling``,
        ``seed``, ...); ``show_progress`` defaults to False.

    Returns
    -------
    Results
        ``posterior`` (``theta``, or ``beta`` with ``X``), ``sample_stats``,
        ``observed_data`` (``y``) and ``constant_data`` (``omega``, ``X``, the
        bounds and non-empty parameter vectors), with dims ``obs`` and (with
        ``X``) ``coef``; the root attributes add ``omega``, ``loss``,
        ``prior``, ``template`` and the parameter vectors.
    """
    data = stan_data(
        y,
        omega=omega,
        loss=loss,
        loss_params=loss_params,
        prior=prior,
        prior_params=prior_params,
        X=X,
        bounds=bounds,
        save_pointwise_loss=save_pointwise_loss,
    )
    model = gibbs_model(loss, prior, linear=X is not None)
    fit = model.sample(data=data, **{"show_progress": False, **sample_kwargs})
    constant = {
        name: value
        for name, value in data.items()
        if name
        not in ("N", "K", "y", "n_loss_params", "n_prior_params", "save_pointwise_loss")
        and np.size(value) > 0
    }
    dims = {"y": ["obs"]}
    if save_pointwise_loss:
        dims["pointwise_loss"] = ["obs"]
    if X is not None:
        dims.update(
            beta=["coef"], X=["obs", "coef"], lower_bound=["coef"], upper_bound=["coef"]
        )
    idata = to_inference_data(
        fit, dims=dims, observed_data={"y": data["y"]}, constant_data=constant
    )
    idata.attrs.update(
        omega=data["omega"],
        loss=_label(loss),
        prior=_label(prior),
        template="linear" if X is not None else "location",
        loss_params=json.dumps(list(data["loss_params"])),
        prior_params=json.dumps(list(data["prior_params"])),
    )
    return idata


def _stan_file(spec: Any, lookup: Callable[[Any], Loss | Prior], kind: str) -> Path:
    if is_slot_file(spec):
        return slot_file(spec, "", kind)
    return lookup(spec).stan_file


def _params(
    spec: Any, given: Params, lookup: Callable[[Any], Loss | Prior], kind: str
) -> np.ndarray:
    """The Stan parameter vector of a loss or prior, checked."""
    argument = f"{kind}_params"
    if not is_slot_file(spec):
        return np.array(lookup(spec).bind(given), dtype=float)
    path = _stan_file(spec, lookup, kind)
    try:
        return np.array(check_vector(path, given, argument), dtype=float)
    except TypeError:
        raise ValueError(
            f"{argument} must be numbers for a {kind} file, got {given!r}"
        ) from None


def _bounds(bounds: Any, shape: tuple[int, ...]) -> tuple[Any, Any]:
    """``(lower, upper)`` broadcast to ``shape``, with ``lower < upper``."""
    try:
        lower, upper = (
            np.broadcast_to(np.asarray(b, dtype=float), shape) for b in bounds
        )
    except (TypeError, ValueError):
        raise ValueError(
            f"bounds must be a pair (lower, upper) of numbers or shape {shape} "
            f"arrays, got {bounds!r}"
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
