"""A Gibbs posterior as NumPy functions of many particles, for the learning-rate path.

The Gibbs posterior ``pi_omega(theta) ∝ exp(-omega L_n(theta)) pi(theta)`` on the
box ``[lower, upper]`` is, as ``omega`` grows from 0, a tempering path from the
prior. A path sampler (:mod:`stanflow.gibbs.path`) needs, at particles ``theta``
of shape ``(N, K)``:

- the per-observation losses ``l_i(theta) = loss(y_i, f_i(theta))``, shape
  ``(N, n)``, with ``f = theta`` (the location template) or ``f = X theta``
  (the linear template), and their sums ``L_n(theta)``;
- the prior's log density, **normalised** on the box (the path's base, so that
  the sampler's ``log Z`` is ``log Z_n(omega)``), and exact draws from it.

Losses, as for the Stan templates: a shipped name or a
:class:`~stanflow.losses.Loss` (NumPy), or the path of a
``.stanfunctions`` file defining ``real loss(real y, real f, vector
loss_params)``, evaluated in process by :class:`stanflow.losses.pointwise.PointwiseLoss`
on blocks of particles (the observations tiled, one call per block), so no
Python twin of the file is needed. Priors: the shipped ``uniform`` (finite
bounds) and ``normal`` (truncated to the bounds), whose draws are exact.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import special, stats

from stanflow.gibbs.sampling import LOSS_SIGNATURE, stan_data
from stanflow.losses import Loss, get_loss
from stanflow.models import CompileError
from stanflow.slots import is_slot_file

SAMPLED_PRIORS = ("uniform", "normal")
"""Priors the path can start from (exact draws and a normalised density)."""
STAN_BLOCK = 2**17
"""Largest number of ``(y, f)`` pairs per in-process call of a Stan loss."""


class GibbsTarget:
    """Losses and prior of a Gibbs posterior, evaluated at particles ``(N, K)``.

    Parameters
    ----------
    y : array_like, shape (n,)
        Observations.
    loss : str, os.PathLike or Loss, default "absolute"
        A shipped loss name, a :class:`~stanflow.losses.Loss`, or a
        ``.stanfunctions`` file defining :data:`~stanflow.gibbs.sampling.LOSS_SIGNATURE`.
    loss_params : mapping or sequence of float, optional
        As in :func:`stanflow.gibbs.stan_data`.
    prior : {"uniform", "normal"}, default "uniform"
        The path's starting distribution; ``uniform`` needs finite ``bounds``.
    prior_params : mapping, optional
        ``{"mean": m, "sd": s}`` for ``normal``.
    X : array_like, shape (n, K), optional
        Predictors (the linear template); without it ``theta`` is a location.
    bounds : (lower, upper), optional
        The parameters' box, numbers or shape-``(K,)`` arrays; default unbounded.

    Attributes
    ----------
    y : ndarray, shape (n,)
    X : ndarray, shape (n, K), or None
    data : dict
        The Stan template's data (:func:`stanflow.gibbs.stan_data`, ``omega``
        set per use), for NUTS moves.
    lower, upper : ndarray, shape (K,)
    dim : int
        ``K``, the number of parameters.
    loss : str, os.PathLike or Loss
        The loss as given (the Stan templates take it too).
    loss_label : str
        The loss's name, or the file's path.
    loss_values : callable
        ``f -> loss(y_i, f_ji)`` at predictions ``f`` of shape ``(M, n)``,
        returning shape ``(M, n)`` (NumPy, or the Stan file in process).

    Raises
    ------
    ValueError, TypeError
        Naming the argument, before any compile: see :func:`stan_data`; an
        unsupported prior, a uniform prior without finite bounds, a
        :class:`Loss` whose ``value`` cannot be called as ``value(y, f,
        *params)``.
    stanflow.models.CompileError
        If a loss file does not compile; the message names the file and the
        signature it must define.
    """

    def __init__(
        self,
        y: np.ndarray,
        *,
        loss: str | os.PathLike | Loss = "absolute",
        loss_params: Mapping[str, float] | Sequence[float] | None = None,
        prior: str = "uniform",
        prior_params: Mapping[str, float] | None = None,
        X: np.ndarray | None = None,
        bounds: tuple[Any, Any] | None = None,
    ) -> None:
        if not (isinstance(prior, str) and prior in SAMPLED_PRIORS):
            raise ValueError(
                f"prior: the path starts from exact draws of the prior, so it must be "
                f"one of {SAMPLED_PRIORS}, got {prior!r}"
            )
        bounds = (-math.inf, math.inf) if bounds is None else bounds
        self.data = stan_data(
            y, omega=1.0, loss=loss, loss_params=loss_params, prior=prior,
            prior_params=prior_params, X=X, bounds=bounds,
        )
        self.y = self.data["y"]
        self.X = self.data.get("X")
        self.dim = 1 if self.X is None else int(self.data["K"])
        self.lower = np.broadcast_to(np.asarray(self.data["lower_bound"], float), (self.dim,))
        self.upper = np.broadcast_to(np.asarray(self.data["upper_bound"], float), (self.dim,))
        self.loss = loss
        self.prior = prior
        self.prior_params = tuple(float(v) for v in self.data["prior_params"])
        if prior == "uniform" and not np.all(np.isfinite(self.lower) & np.isfinite(self.upper)):
            raise ValueError(
                "bounds: the uniform prior is the path's starting distribution and "
                f"needs finite bounds, got {bounds!r}"
            )
        self._log_box = self._box_log_mass()
        params = tuple(float(v) for v in self.data["loss_params"])
        if is_slot_file(loss):
            self.loss_label = os.fspath(os.path.abspath(loss))
            self.loss_values = _stan_values(loss, self.y, params)
        else:
            loss = get_loss(loss)
            self.loss_label = loss.name
            self.loss_values = _numpy_values(loss, self.y, params)

    @property
    def names(self) -> list[str]:
        """Parameter names: ``["theta"]`` or ``["beta[1]", ...]``."""
        if self.X is None:
            return ["theta"]
        return [f"beta[{k + 1}]" for k in range(self.dim)]

    def predictions(self, theta: np.ndarray) -> np.ndarray:
        """``f_i(theta)`` at every particle, shape ``(N, n)``."""
        theta = self._check(theta)
        if self.X is None:
            return np.broadcast_to(theta, (len(theta), len(self.y)))
        return theta @ self.X.T

    def pointwise_loss(self, theta: np.ndarray) -> np.ndarray:
        """``loss(y_i, f_i(theta))`` at every particle, shape ``(N, n)``."""
        return self.loss_values(self.predictions(theta))

    def total_loss(self, theta: np.ndarray) -> np.ndarray:
        """``L_n(theta) = sum_i loss(y_i, f_i(theta))``, shape ``(N,)``."""
        return self.pointwise_loss(theta).sum(axis=1)

    def log_prior(self, theta: np.ndarray) -> np.ndarray:
        """The prior's log density normalised on the box; ``-inf`` outside, shape ``(N,)``."""
        theta = self._check(theta)
        inside = np.all((theta >= self.lower) & (theta <= self.upper), axis=1)
        if self.prior == "uniform":
            value = np.full(len(theta), -self._log_box)
        else:
            mean, sd = self.prior_params
            z = (theta - mean) / sd
            value = np.sum(-0.5 * z**2 - math.log(sd) - 0.5 * math.log(2 * math.pi), axis=1)
            value = value - self._log_box
        return np.where(inside, value, -np.inf)

    def sample_prior(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` exact draws from the prior on the box, shape ``(n, K)``."""
        if self.prior == "uniform":
            return rng.uniform(self.lower, self.upper, size=(n, self.dim))
        mean, sd = self.prior_params
        a, b = (self.lower - mean) / sd, (self.upper - mean) / sd
        return stats.truncnorm.rvs(a, b, loc=mean, scale=sd, size=(n, self.dim), random_state=rng)

    def _box_log_mass(self) -> float:
        """``log`` of the prior's mass on the box (its normalising constant)."""
        if self.prior == "uniform":
            return float(np.sum(np.log(self.upper - self.lower)))
        mean, sd = self.prior_params
        a, b = (self.lower - mean) / sd, (self.upper - mean) / sd
        # log(Phi(b) - Phi(a)), accurate in either tail.
        upper_tail = a > 0
        lo = np.where(upper_tail, -b, a)
        hi = np.where(upper_tail, -a, b)
        return float(np.sum(special.log_ndtr(hi) + np.log1p(-np.exp(special.log_ndtr(lo) - special.log_ndtr(hi)))))

    def _check(self, theta: np.ndarray) -> np.ndarray:
        theta = np.asarray(theta, dtype=float)
        if theta.ndim != 2 or theta.shape[1] != self.dim:
            raise ValueError(f"theta must have shape (N, {self.dim}), got {theta.shape}")
        return theta


def _numpy_values(loss: Loss, y: np.ndarray, params: tuple[float, ...]) -> Callable[[np.ndarray], np.ndarray]:
    """``f (N, n) -> loss(y, f)`` of a :class:`Loss`, its signature checked once."""
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

    def values(f: np.ndarray) -> np.ndarray:
        out = np.asarray(loss.value(y[None, :], f, *params), dtype=float)
        _check_finite(out)
        return out

    return values


def _stan_values(loss_file: os.PathLike | str, y: np.ndarray, params: tuple[float, ...]) -> Callable[[np.ndarray], np.ndarray]:
    """``f (N, n) -> loss(y, f)`` of a Stan loss file, in process.

    The observations are tiled ``rows`` times into one
    :class:`~stanflow.losses.pointwise.PointwiseLoss`, so a block of ``rows`` particles
    costs one call; the last block is padded with its last particle.
    """
    from stanflow.losses.pointwise import PointwiseLoss

    n = len(y)
    rows = max(1, STAN_BLOCK // n)
    try:
        model = PointwiseLoss(loss_file, np.tile(y, rows), params)
    except CompileError as err:
        raise CompileError(
            f"loss: the loss file {os.fspath(loss_file)} did not compile; it must define "
            f"`{LOSS_SIGNATURE}`.\n{err}",
            err.console,
        ) from None

    def values(f: np.ndarray) -> np.ndarray:
        N = f.shape[0]
        out = np.empty((N, n))
        for start in range(0, N, rows):
            block = f[start : start + rows]
            padded = np.concatenate([block, np.repeat(block[-1:], rows - len(block), axis=0)])
            out[start : start + len(block)] = model.values(padded.reshape(-1)).reshape(rows, n)[: len(block)]
        _check_finite(out)
        return out

    return values


def _check_finite(values: np.ndarray) -> None:
    if not np.all(np.isfinite(values)):
        raise ValueError("loss returned values that are not finite at some particles")
