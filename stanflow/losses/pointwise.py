"""A loss given only as a Stan file, evaluated in process at many (y, f) pairs.

Any ``.stanfunctions`` file defining ``real loss(real y, real f, vector
loss_params)`` (the loss slot of every method's templates) is
bound into ``stan/losses/pointwise.stan``, whose parameters are the
predictions ``f``. One in-process call then gives every observation's loss
(the transformed parameter ``losses``) or every observation's derivative in
``f`` (the gradient, since the target is ``-sum_i loss(y_i, f_i)``); the
Hessian in ``f`` is diagonal, so one Hessian-vector product with a vector of
ones gives every second derivative. This is what the methods need from a
Python ``Loss`` object (values, derivatives, curvatures), read off the Stan
file itself.

:func:`file_loss_function` turns the same file into a broadcasting NumPy-style
function ``(y, f) -> losses`` of any shapes (``stan/losses/pair.stan``, one
pair per row of one batched call), for code written for NumPy losses: grid
posteriors, golden-section estimates, bootstrap loss sums.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import bridgestan
import numpy as np
from numpy.typing import ArrayLike

from stanflow.models import load, log_density_rows, program_path

PathLike = str | os.PathLike


class PointwiseLoss:
    """A Stan loss with fixed observations ``y``, as a function of predictions ``f``.

    Parameters
    ----------
    loss_file : str or os.PathLike
        The ``.stanfunctions`` file defining ``real loss(real y, real f,
        vector loss_params)``.
    y : array_like, shape (n,)
        Observations; finite.
    loss_params : array_like of float, default ()
        The loss's parameter vector, in the file's order.

    Attributes
    ----------
    model : bridgestan.StanModel
        The loaded ``pointwise.stan`` program with ``y`` as data.
    """

    def __init__(
        self, loss_file: PathLike, y: np.ndarray, loss_params: ArrayLike = ()
    ) -> None:
        y = np.asarray(y, dtype=float)
        if y.ndim != 1 or y.size == 0 or not np.isfinite(y).all():
            raise ValueError(f"y must be a finite 1-D array, got shape {y.shape}")
        params = np.asarray(loss_params, dtype=float).reshape(-1)
        if not np.isfinite(params).all():
            raise ValueError(f"loss_params must be finite, got {params.tolist()}")
        self.loss_file = loss_file
        self.y = y
        self.model: bridgestan.StanModel = load(
            program_path("losses/pointwise"),
            {"N": y.size, "y": y, "n_loss_params": params.size,
             "loss_params": params},
            slots={"loss.stanfunctions": loss_file},
            name="pointwise_loss",
        )

    def _check_f(self, f: np.ndarray) -> np.ndarray:
        f = np.ascontiguousarray(f, dtype=float)
        if f.shape != self.y.shape:
            raise ValueError(f"f must have shape {self.y.shape}, got {f.shape}")
        if not np.isfinite(f).all():
            raise ValueError("f must be finite")
        return f

    def values(self, f: np.ndarray) -> np.ndarray:
        """``loss(y_i, f_i)`` for every observation, shape (n,)."""
        f = self._check_f(f)
        out = np.asarray(self.model.param_constrain(f, include_tp=True))
        return out[f.size :]

    def derivatives(self, f: np.ndarray) -> np.ndarray:
        """``d loss(y_i, f_i) / d f_i`` for every observation, shape (n,)."""
        return -np.asarray(self.model.log_density_gradient(self._check_f(f), propto=False)[1])

    def second_derivatives(self, f: np.ndarray) -> np.ndarray:
        """``d^2 loss(y_i, f_i) / d f_i^2``, by central differences of Stan's gradients.

        The step is :func:`curvature_steps` per observation, which balances
        the truncation error against rounding. On the linear pieces of a
        kinked loss this is 0; a kink within a step of ``f_i`` adds the
        derivative's jump divided by twice the step.
        """
        f = self._check_f(f)
        step = curvature_steps(f)
        return (self.derivatives(f + step) - self.derivatives(f - step)) / (2 * step)


def curvature_steps(f: np.ndarray) -> np.ndarray:
    """Central-difference steps ``cbrt(machine epsilon) (1 + |f|)``."""
    return np.cbrt(np.finfo(float).eps) * (1 + np.abs(f))


def file_loss_function(
    loss_file: PathLike, loss_params: Sequence[float] = ()
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A Stan loss as a broadcasting function ``(y, f) -> loss(y, f)``.

    Parameters
    ----------
    loss_file : str or os.PathLike
        The ``.stanfunctions`` file defining ``real loss(real y, real f,
        vector loss_params)``.
    loss_params : sequence of float, default ()
        Its parameter vector.

    Returns
    -------
    callable
        ``(y, f) -> ndarray`` broadcasting ``y`` against ``f``, as the NumPy
        losses of :mod:`stanflow.losses`; about a microsecond per pair,
        the pairs split over threads. The loaded model is the attribute
        ``model`` of the function.
    """
    params = np.asarray(loss_params, dtype=float).reshape(-1)
    if not np.isfinite(params).all():
        raise ValueError(f"loss_params must be finite, got {params.tolist()}")
    model = load(
        program_path("losses/pair"),
        {"n_loss_params": params.size, "loss_params": params},
        slots={"loss.stanfunctions": loss_file},
        name="pair_loss",
    )

    def value(y: np.ndarray, f: np.ndarray) -> np.ndarray:
        y, f = np.broadcast_arrays(np.asarray(y, float), np.asarray(f, float))
        pairs = np.column_stack([y.reshape(-1), f.reshape(-1)])
        return -log_density_rows(model, pairs, propto=False, jacobian=False).reshape(
            y.shape
        )

    value.model = model  # type: ignore[attr-defined]
    return value

