"""Losses for Gibbs posteriors: NumPy versions of ``stan/losses/*.stanfunctions``.

A loss ``loss(y, f, *params)`` scores a prediction ``f`` (a location ``theta``
or a linear predictor ``x' beta``) for an observation ``y``. Each shipped loss
is a :class:`Loss`: the Stan file the Gibbs templates include as
``loss.stanfunctions``, and the same function in NumPy with its first and
second derivatives in ``f`` for grid posteriors and plug-in calibration.

==========  =========================================  ==============  ====
name        loss(y, f)                                 parameters      jump
==========  =========================================  ==============  ====
absolute    ``|y - f|``                                --              2
check       ``u (tau - [u < 0])``, ``u = y - f``       tau in (0, 1)   1
squared     ``(y - f)^2``                              --              0
huber       ``u^2/2`` if ``|u| <= delta``, else        delta > 0       0
            ``delta (|u| - delta/2)``
hinge       ``max(0, 1 - y f)``, ``y`` in {-1, 1}      --              None
logistic    ``log(1 + exp(-y f))``, ``y`` in {-1, 1}   --              0
normal_nll  ``-log normal(y | f, sigma)``              sigma > 0       0
==========  =========================================  ==============  ====

``jump`` is the jump of ``d loss / d f`` as ``f`` increases through ``y``; the
risk's curvature then gains ``jump`` times the density of ``y - f`` at 0, which
:mod:`stanflow.gibbs.plugin` estimates by a kernel density estimate. ``None``
means the kinks are elsewhere (the hinge's at ``y f = 1``), where the plug-in
cannot see them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stanflow.models import STAN_DIR
from stanflow.parameters import Parameter, bind

LossFunction = Callable[..., np.ndarray]

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


@dataclass(frozen=True)
class Loss:
    """A loss in Stan and in NumPy.

    Parameters
    ----------
    name : str
        Its registry name, e.g. ``"check"``.
    stan_file : pathlib.Path
        The ``.stanfunctions`` file defining
        ``real loss(real y, real f, vector loss_params)``.
    value, gradient, curvature : callable
        ``(y, f, *params) -> ndarray``, broadcasting ``y`` against ``f``: the
        loss, its derivative in ``f`` and its second derivative in ``f`` where
        it exists (0 on the linear pieces of a kinked loss).
    jump : float or None
        Jump of the derivative in ``f`` at ``f = y`` (0 for differentiable
        losses); ``None`` if the loss has kinks elsewhere.
    params : tuple of Parameter
        Its parameters, in the order of the Stan vector ``loss_params``.
    """

    name: str
    stan_file: Path
    value: LossFunction
    gradient: LossFunction
    curvature: LossFunction
    jump: float | None
    params: tuple[Parameter, ...] = ()

    def bind(self, params: Mapping[str, Any] | None) -> tuple[float, ...]:
        """Check ``params`` (names to values) and return them in Stan order."""
        return bind(self.params, params, "loss_params", f"loss {self.name!r}")


def absolute(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``|y - f|``."""
    return np.abs(y - f)


def check(y: np.ndarray, f: np.ndarray, tau: float) -> np.ndarray:
    """``u (tau - [u < 0])`` with ``u = y - f``: the tau-quantile's loss."""
    u = y - f
    return u * (tau - (u < 0))


def squared(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``(y - f)^2``."""
    return np.square(y - f)


def huber(y: np.ndarray, f: np.ndarray, delta: float) -> np.ndarray:
    """``u^2 / 2`` for ``|u| <= delta``, else ``delta (|u| - delta / 2)``."""
    a = np.abs(y - f)
    return np.where(a <= delta, 0.5 * a**2, delta * (a - 0.5 * delta))


def hinge(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``max(0, 1 - y f)`` for labels ``y`` in {-1, 1}."""
    return np.maximum(0.0, 1.0 - y * f)


def logistic(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``log(1 + exp(-y f))`` for labels ``y`` in {-1, 1}."""
    return np.logaddexp(0.0, -y * f)


def normal_nll(y: np.ndarray, f: np.ndarray, sigma: float) -> np.ndarray:
    """``-log normal(y | f, sigma)``."""
    return 0.5 * np.square((y - f) / sigma) + math.log(sigma) + _HALF_LOG_2PI


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _zero(y: np.ndarray, f: np.ndarray, *params: float) -> np.ndarray:
    return np.zeros(np.broadcast(y, f).shape)


def _file(name: str) -> Path:
    return STAN_DIR / "losses" / f"{name}.stanfunctions"


LOSSES: dict[str, Loss] = {
    loss.name: loss
    for loss in (
        Loss(
            "absolute",
            _file("absolute"),
            absolute,
            lambda y, f: np.sign(f - y),
            _zero,
            jump=2.0,
        ),
        Loss(
            "check",
            _file("check"),
            check,
            lambda y, f, tau: (f > y) - tau,
            _zero,
            jump=1.0,
            params=(Parameter("tau", 0.0, 1.0),),
        ),
        Loss(
            "squared",
            _file("squared"),
            squared,
            lambda y, f: 2.0 * (f - y),
            lambda y, f: np.full(np.broadcast(y, f).shape, 2.0),
            jump=0.0,
        ),
        Loss(
            "huber",
            _file("huber"),
            huber,
            lambda y, f, delta: np.clip(f - y, -delta, delta),
            lambda y, f, delta: (np.abs(y - f) <= delta).astype(float),
            jump=0.0,
            params=(Parameter("delta", 0.0),),
        ),
        Loss(
            "hinge",
            _file("hinge"),
            hinge,
            lambda y, f: -y * (y * f < 1),
            _zero,
            jump=None,
        ),
        Loss(
            "logistic",
            _file("logistic"),
            logistic,
            lambda y, f: -y * _sigmoid(-y * f),
            lambda y, f: y**2 * _sigmoid(y * f) * _sigmoid(-y * f),
            jump=0.0,
        ),
        Loss(
            "normal_nll",
            _file("normal_nll"),
            normal_nll,
            lambda y, f, sigma: (f - y) / sigma**2,
            lambda y, f, sigma: np.full(np.broadcast(y, f).shape, sigma**-2.0),
            jump=0.0,
            params=(Parameter("sigma", 0.0),),
        ),
    )
}
"""The shipped losses by name."""


def get_loss(loss: str | Loss) -> Loss:
    """Return the shipped loss called ``loss`` (a :class:`Loss` is returned as is).

    Raises
    ------
    ValueError
        If no loss has that name; the message lists the shipped ones.
    """
    if isinstance(loss, Loss):
        return loss
    if not isinstance(loss, str) or loss not in LOSSES:
        raise ValueError(
            f"loss: unknown loss {loss!r}; shipped losses: {', '.join(LOSSES)}"
        )
    return LOSSES[loss]


def loss_function(
    loss: str | Loss, params: Mapping[str, Any] | None = None
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Return ``(y, f) -> loss(y, f, *params)`` with checked parameters.

    Parameters
    ----------
    loss : str or Loss
        A shipped loss name (see :data:`LOSSES`) or a :class:`Loss`.
    params : mapping of str to float, optional
        Its parameters by name, e.g. ``{"tau": 0.25}`` for ``"check"``.

    Returns
    -------
    callable
        Broadcasting ``y`` against ``f``, as :func:`stanflow.gibbs.grid.loss_sums`
        expects.

    Raises
    ------
    ValueError
        If the loss is unknown or a parameter is missing, unknown or out of range
        (e.g. ``tau`` outside (0, 1)).
    """
    loss = get_loss(loss)
    values = loss.bind(params)

    def function(y: np.ndarray, f: np.ndarray) -> np.ndarray:
        return loss.value(y, f, *values)

    return function
