"""The one loss registry: each shipped loss in Stan, in NumPy, and its Bayes decision.

A loss ``loss(y, f, *params)`` scores a prediction or decision ``f`` (a
location ``theta``, a linear predictor ``x' beta``, a decision ``h``) for an
observation ``y``. Every method takes the same :class:`Loss`: its Stan file
``stan/losses/<name>.stanfunctions`` (``real loss(real y, real f, vector
loss_params)``, the slot ``loss.stanfunctions`` of every template), the
same function in NumPy with its derivatives in ``f`` (grid posteriors and the
plug-in calibrations) and, where one exists in closed form, its Bayes
decision (LCVI).

==========  =========================================  ==============  ====  ==================
name        loss(y, f)                                 parameters      jump  Bayes decision
==========  =========================================  ==============  ====  ==================
absolute    ``|y - f|``                                --              2     median
check       ``tau u - min(u, 0)``, ``u = y - f``       tau in (0, 1)   1     tau-quantile
squared     ``(y - f)^2``                              --              0     mean
huber       ``u^2/2`` if ``|u| <= delta``, else        delta > 0       0     numerical
            ``delta (|u| - delta/2)``
hinge       ``max(0, 1 - y f)``, ``y`` in {-1, 1}      --              None  --
logistic    ``log(1 + exp(-y f))``, ``y`` in {-1, 1}   --              0     --
normal_nll  ``-log normal(y | f, sigma)``              sigma > 0       0     mean
linex       ``exp(a) - a - 1``, ``a = c (f - y)``      c != 0          0     ``-(1/c) log E[e^(-c y)]``
==========  =========================================  ==============  ====  ==================

The check loss is also called the pinball loss, and the tilted loss with
level ``q`` in the LCVI paper; stanflow has one name for it, ``check``, with
parameter ``tau``. ``jump`` is the jump of ``d loss / d f`` as ``f`` increases
through ``y``; the risk's curvature then gains ``jump`` times the density of
``y - f`` at 0. ``None`` means the kinks are elsewhere (the hinge's at
``y f = 1``), where the plug-in cannot see them. LinEx with ``c > 0`` makes
over-prediction (``f > y``) cost exponentially and under-prediction
linearly, so its decision lies below the mean (``m - c s^2 / 2`` for a
normal predictive ``N(m, s^2)``).

A loss of your own is a Stan file with the same signature and a
``// params:`` line (:mod:`stanflow.parameters`); every method takes its path
where it takes a shipped name, and reads what it needs from Stan in process.
Every method binds a loss's parameters with :func:`loss_parameters` (by name
or in declared order, shipped losses and files alike) and takes a file
through :func:`loss_slot_file` (its signature checked by stanc first).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from stanflow.losses import decisions, functions
from stanflow.losses.pointwise import file_loss_function
from stanflow.models import STAN_DIR
from stanflow.parameters import Parameter, bind, check_vector
from stanflow.signatures import LOSS, check_signature
from stanflow.slots import is_slot_file, slot_file

LossFunction = Callable[..., np.ndarray]
Params = Mapping[str, Any] | Iterable[float] | None
"""A slot's parameters (a loss's, a prior's, a penalty's) as every method takes them: by name,
or in declared order."""

RENAMED = {"tilted": "check (parameter tau instead of q)", "pinball": "check"}
"""Other names of shipped losses, for the error that points to stanflow's."""


@dataclass(frozen=True)
class Loss:
    """A loss family: its Stan file, NumPy functions and Bayes decision rules.

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
    decision : callable, optional
        ``(draws, *params) -> ndarray``: the Bayes decision from draws of shape
        ``(S, *shape)``; ``None`` where there is no closed form.
    mixture : callable, optional
        ``(loc, sd, *params) -> ndarray``: the Bayes decision for the
        predictive ``(1/T) sum_t N(loc[t], sd^2)``; ``None`` likewise.
    """

    name: str
    stan_file: Path
    value: LossFunction
    gradient: LossFunction
    curvature: LossFunction
    jump: float | None
    params: tuple[Parameter, ...] = ()
    decision: LossFunction | None = None
    mixture: LossFunction | None = None

    def bind(self, params: Params = None) -> tuple[float, ...]:
        """Check ``params`` (by name, or in declared order) and return them in Stan order."""
        return bind(self.params, params, "loss_params", f"loss {self.name!r}")

    def with_params(self, params: Params = None) -> BoundLoss:
        """This loss with checked parameter values (:class:`BoundLoss`).

        Raises
        ------
        ValueError
            If a parameter is missing, unknown or out of range.
        """
        values = self.bind(params)

        def value(y: np.ndarray, f: np.ndarray) -> np.ndarray:
            return self.value(np.asarray(y, dtype=float), f, *values)

        def rule(function: LossFunction | None) -> Callable[..., np.ndarray] | None:
            if function is None:
                return None
            return lambda *arrays: function(*arrays, *values)

        return BoundLoss(
            self.name,
            values,
            value,
            self.stan_file,
            decision=rule(self.decision),
            mixture=rule(self.mixture),
        )


@dataclass(frozen=True)
class BoundLoss:
    """A loss with its parameter values: what a decision problem is judged by.

    Made by :meth:`Loss.with_params` for a shipped loss, or from a Stan file
    alone by :func:`stanflow.lcvi.numeric_decisions.stan_loss` (decisions by
    numerical optimisation).

    Parameters
    ----------
    name : str
        Recorded in results.
    params : tuple of float
        Values of the Stan vector ``loss_params``.
    value : callable
        ``(y, h) -> ndarray``, broadcasting ``y`` against ``h``.
    stan_file : pathlib.Path
        The slot file for ``loss.stanfunctions``.
    decision : callable, optional
        ``draws -> ndarray``: the Bayes decision from draws ``(S, *shape)``.
    mixture : callable, optional
        ``(loc, sd) -> ndarray``: the Bayes decision for the mixture
        ``(1/T) sum_t N(loc[t], sd^2)``.
    """

    name: str
    params: tuple[float, ...]
    value: Callable[[np.ndarray, np.ndarray], np.ndarray]
    stan_file: Path
    decision: Callable[[np.ndarray], np.ndarray] | None = field(default=None)
    mixture: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = field(default=None)

    def bayes_decision(self, draws: np.ndarray) -> np.ndarray:
        """Bayes decision from predictive draws.

        Parameters
        ----------
        draws : array_like, shape (S, *shape)
            Finite draws of ``y``, ``S >= 1``.

        Returns
        -------
        ndarray, shape shape
        """
        rule = self._rule(self.decision)
        draws = np.asarray(draws, dtype=float)
        if draws.ndim == 0 or draws.shape[0] == 0:
            raise ValueError(
                f"draws must have at least one draw along axis 0, got shape {draws.shape}"
            )
        if not np.all(np.isfinite(draws)):
            raise ValueError("draws must be finite")
        return rule(draws)

    def mixture_decision(self, loc: np.ndarray, sd: np.ndarray) -> np.ndarray:
        """Bayes decision for a normal likelihood averaged over draws of its location.

        The predictive of ``y`` is ``(1/T) sum_t N(loc[t], sd^2)``: the draws
        ``loc[t]`` of ``E[y | theta_t]`` with the likelihood's noise integrated
        out exactly, so the decision has no outcome-sampling noise.

        Parameters
        ----------
        loc : array_like, shape (T, *shape)
            Finite, ``T >= 1``.
        sd : array_like, broadcasting against ``shape``
            Positive likelihood standard deviations.

        Returns
        -------
        ndarray, shape shape
        """
        rule = self._rule(self.mixture)
        loc = np.asarray(loc, dtype=float)
        sd = np.asarray(sd, dtype=float)
        if loc.ndim == 0 or loc.shape[0] == 0:
            raise ValueError(
                f"loc must have at least one draw along axis 0, got shape {loc.shape}"
            )
        if not np.all(np.isfinite(loc)):
            raise ValueError("loc must be finite")
        if not np.all(sd > 0):
            raise ValueError("sd must be positive")
        try:
            np.broadcast_shapes(sd.shape, loc.shape[1:])
        except ValueError:
            raise ValueError(
                f"sd must broadcast against shape {loc.shape[1:]}, got {sd.shape}"
            ) from None
        return rule(loc, sd)

    def _rule(self, rule: Callable[..., np.ndarray] | None) -> Callable[..., np.ndarray]:
        if rule is None:
            raise ValueError(
                f"loss: {self.name!r} has no Bayes decision in closed form; pass its "
                f"Stan file ({self.stan_file}) for numerical decisions "
                "(stanflow.lcvi.numeric_decisions.stan_loss)"
            )
        return rule


def _file(name: str) -> Path:
    return STAN_DIR / "losses" / f"{name}.stanfunctions"


def _check_gradient(y: np.ndarray, f: np.ndarray, tau: float) -> np.ndarray:
    return (f > y) - tau


def _linex_gradient(y: np.ndarray, f: np.ndarray, c: float) -> np.ndarray:
    return c * np.expm1(c * (f - np.asarray(y)))


def _linex_curvature(y: np.ndarray, f: np.ndarray, c: float) -> np.ndarray:
    return c**2 * np.exp(c * (f - np.asarray(y)))


def _logistic_curvature(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    return y**2 * functions.sigmoid(y * f) * functions.sigmoid(-y * f)


LOSSES: dict[str, Loss] = {
    loss.name: loss
    for loss in (
        Loss(
            "absolute",
            _file("absolute"),
            functions.absolute,
            lambda y, f: np.sign(f - y),
            functions.zero,
            jump=2.0,
            decision=decisions.median,
            mixture=decisions.mixture_median,
        ),
        Loss(
            "check",
            _file("check"),
            functions.check,
            _check_gradient,
            functions.zero,
            jump=1.0,
            params=(Parameter("tau", 0.0, 1.0),),
            decision=decisions.quantile,
            mixture=decisions.mixture_quantile,
        ),
        Loss(
            "squared",
            _file("squared"),
            functions.squared,
            lambda y, f: 2.0 * (f - y),
            functions.constant(2.0),
            jump=0.0,
            decision=decisions.mean,
            mixture=decisions.mixture_mean,
        ),
        Loss(
            "huber",
            _file("huber"),
            functions.huber,
            lambda y, f, delta: np.clip(f - y, -delta, delta),
            lambda y, f, delta: (np.abs(y - f) <= delta).astype(float),
            jump=0.0,
            params=(Parameter("delta", 0.0),),
        ),
        Loss(
            "hinge",
            _file("hinge"),
            functions.hinge,
            lambda y, f: -y * (y * f < 1),
            functions.zero,
            jump=None,
        ),
        Loss(
            "logistic",
            _file("logistic"),
            functions.logistic,
            lambda y, f: -y * functions.sigmoid(-y * f),
            _logistic_curvature,
            jump=0.0,
        ),
        Loss(
            "normal_nll",
            _file("normal_nll"),
            functions.normal_nll,
            lambda y, f, sigma: (f - y) / sigma**2,
            lambda y, f, sigma: np.full(np.broadcast(y, f).shape, sigma**-2.0),
            jump=0.0,
            params=(Parameter("sigma", 0.0),),
            decision=decisions.mean,
            mixture=decisions.mixture_mean,
        ),
        Loss(
            "linex",
            _file("linex"),
            functions.linex,
            _linex_gradient,
            _linex_curvature,
            jump=0.0,
            params=(Parameter("c", nonzero=True),),
            decision=decisions.linex,
            mixture=decisions.mixture_linex,
        ),
    )
}
"""The shipped losses by name."""


def get_loss(loss: str | Loss) -> Loss:
    """Return the shipped loss called ``loss`` (a :class:`Loss` is returned as is).

    Raises
    ------
    ValueError
        If no loss has that name; the message lists the shipped ones (and
        names stanflow's loss for another name of it, e.g. ``"tilted"``).
    """
    if isinstance(loss, Loss):
        return loss
    if not isinstance(loss, str) or loss not in LOSSES:
        hint = f" (stanflow calls it {RENAMED[loss]})" if loss in RENAMED else ""
        raise ValueError(
            f"loss: unknown loss {loss!r}{hint}; shipped losses: {', '.join(LOSSES)}"
        )
    return LOSSES[loss]


def bound_loss(loss: str | Loss | BoundLoss, **params: Any) -> BoundLoss:
    """A shipped loss with its parameters as keywords, e.g. ``bound_loss("check", tau=0.2)``.

    A :class:`BoundLoss` is returned as is (and takes no parameters).

    Raises
    ------
    ValueError
        If the loss is unknown or a parameter is missing, unknown or out of
        range; or if parameters are given with a :class:`BoundLoss`.
    """
    if isinstance(loss, BoundLoss):
        if params:
            raise ValueError("params: cannot rebind the parameters of a BoundLoss")
        return loss
    return get_loss(loss).with_params(params)


def loss_parameters(loss: str | os.PathLike | Loss, params: Params = None) -> tuple[float, ...]:
    """The parameters of a loss, checked: the one binding every method uses.

    Parameters
    ----------
    loss : str, path or Loss
        A shipped loss name (see :data:`LOSSES`), a :class:`Loss`, or the path
        of a loss file (:func:`stanflow.slots.is_slot_file`).
    params : mapping of str to float, sequence of float, or None
        By name (``{"tau": 0.25}``) or in the declared order (``[0.25]``),
        for shipped losses and files alike; None for none. Checked against
        the loss's declaration (:mod:`stanflow.parameters`: a file's
        ``// params:`` line, a :class:`Loss`'s ``params``).

    Returns
    -------
    tuple of float
        The Stan vector ``loss_params``.

    Raises
    ------
    TypeError
        If ``params`` is neither a mapping nor a sequence.
    ValueError
        If the loss is unknown or its file missing, or a parameter is missing,
        unknown, of the wrong count or out of range; the message names
        ``loss_params``, the parameter and the loss or file.
    """
    if is_slot_file(loss):
        return check_vector(slot_file(loss, "losses", "loss"), params, "loss_params")
    return get_loss(cast("str | Loss", loss)).bind(params)


def loss_function(
    loss: str | os.PathLike | Loss, params: Params = None
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Return ``(y, f) -> loss(y, f, *params)`` with checked parameters.

    Parameters
    ----------
    loss : str, path or Loss
        A shipped loss name (see :data:`LOSSES`), a :class:`Loss`, or the
        path of a loss file (:func:`stanflow.slots.is_slot_file`), evaluated
        by Stan in process (:func:`stanflow.losses.pointwise.file_loss_function`).
    params : mapping of str to float, or sequence of float, optional
        Its parameters by name, e.g. ``{"tau": 0.25}`` for ``"check"``, or in
        declared order (:func:`loss_parameters`).

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
    stanflow.models.CompileError
        If a loss file does not define the loss slot's signature.
    """
    if is_slot_file(loss):
        values = loss_parameters(loss, params)
        return file_loss_function(loss_slot_file(loss), values)
    return get_loss(cast("str | Loss", loss)).with_params(params).value


def loss_slot_file(loss: str | os.PathLike | Loss) -> Path:
    """The Stan file of a loss, for the slot ``loss.stanfunctions`` of every program.

    A shipped name's or a :class:`Loss`'s own file; a file of yours is checked
    by stanc for the slot's signature first
    (:func:`stanflow.signatures.check_signature`), before anything compiles.

    Raises
    ------
    ValueError
        If the loss is unknown or the file does not exist.
    stanflow.models.CompileError
        If the file does not define the slot's signature; the message names
        the file and the signature.
    """
    if not is_slot_file(loss):
        return get_loss(cast("str | Loss", loss)).stan_file
    path = slot_file(loss, "losses", "loss")
    check_signature(path, LOSS)
    return path
