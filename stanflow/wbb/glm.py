"""The smooth penalised problem of the shipped WBB template, as one checked object.

A :class:`GlmProblem` is the data, the penalty level, the loss and the penalty
(and their parameters) of

    minimise_{alpha, beta}  sum_i w_i loss(y_i, alpha + x_i' beta)  +  lam * wp * penalty(beta),

the problem every WBB draw of :func:`stanflow.wbb.stan_optimize.wbb_glm`
(CmdStan ``optimize`` on ``stan/wbb/weighted_glm.stan``) and of
:func:`stanflow.wbb.inprocess.wbb_glm_inprocess` (in process, on Stan's
gradients) solves with its own weights. It is the shipped-template counterpart
of a loss program of your own (:class:`stanflow.gibbs.LossProgram`, which
:func:`stanflow.wbb.program.wbb_program` takes): both drivers take it first,
and everything about it is checked when it is made, before any solve or
compile; the drivers' own arguments are the bootstrap's (``B``, ``seed``,
``prior``, ...) and their solver's.

Scaling: the losses of ``stan/losses`` are not halved (``squared`` is
``(y - f)^2``), so ``loss="squared"`` with ``penalty="ridge"`` (``|beta|^2 / 2``)
at ``lam`` is :func:`stanflow.wbb.ridge.solve_ridge` at ``lam / 2``.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stanflow.losses import loss_parameters, loss_slot_file
from stanflow.losses.registry import Params
from stanflow.wbb._checks import check_lam, check_X_y
from stanflow.wbb.penalties import penalty_parameters, penalty_slot_file


@dataclass(frozen=True, eq=False, init=False)
class GlmProblem:
    """A weighted penalised GLM of the shipped template, checked when it is made.

    Parameters
    ----------
    X : ndarray, shape (n, p)
        Finite design matrix (kept as a read-only float copy).
    y : ndarray, shape (n,)
        Finite responses (kept as a read-only float copy); labels in
        {-1, 1} for ``loss="logistic"``.
    lam : float
        Penalty level, finite and ``>= 0``.
    loss : str or path, default "squared"
        A name in ``stan/losses`` (``squared``, ``logistic``, ``huber``, ...)
        or the path of a file defining ``real loss(real y, real f, vector
        loss_params)`` (checked by stanc for that signature).
    penalty : str or path, default "ridge"
        A name in ``stan/wbb/penalties`` (``ridge``, ``pseudo_huber``) or the
        path of a file defining ``real penalty(vector beta, vector
        penalty_params)`` (checked by stanc for that signature).
    fit_intercept : bool, default False
        Fit an unpenalised intercept ``alpha``.
    loss_params, penalty_params : sequence of float or mapping, default ()
        The slots' parameters, in declared order or by name
        (:func:`stanflow.losses.loss_parameters`,
        :func:`stanflow.wbb.penalties.penalty_parameters`), checked against
        the files' ``// params:`` lines; kept as tuples in declared order.
    feature_names : sequence, optional
        Coordinates of ``beta``'s ``feature`` dimension, ``p`` of them
        (0..p-1 if omitted).

    Attributes
    ----------
    X, y, lam, loss, penalty, fit_intercept
        As given, checked (``X``, ``y`` read-only float arrays, ``lam`` a float).
    loss_params, penalty_params : tuple of float
        The Stan vectors, in declared order.
    feature_names : tuple or None
    loss_file, penalty_file : pathlib.Path
        The slot files of ``loss`` and ``penalty``.

    A changed copy, ``dataclasses.replace(problem, lam=2.0)``, is checked again.

    Raises
    ------
    ValueError
        Naming the field: bad data, ``lam``, parameters, an unknown loss or
        penalty or a missing file, ``feature_names`` of the wrong length.
    TypeError
        Naming the field: ``lam`` not a real number, ``fit_intercept`` not a
        bool, ``feature_names`` a string, parameters neither a mapping nor a
        sequence.
    stanflow.models.CompileError
        If a loss or penalty file does not define its slot's signature.
    """

    X: np.ndarray = field(repr=False)
    y: np.ndarray = field(repr=False)
    lam: float
    loss: str | os.PathLike
    penalty: str | os.PathLike
    fit_intercept: bool
    loss_params: tuple[float, ...]
    penalty_params: tuple[float, ...]
    feature_names: tuple[Hashable, ...] | None
    loss_file: Path = field(init=False, repr=False)
    penalty_file: Path = field(init=False, repr=False)

    def __init__(
        self,
        X: np.ndarray,
        y: np.ndarray,
        lam: float,
        *,
        loss: str | os.PathLike = "squared",
        penalty: str | os.PathLike = "ridge",
        fit_intercept: bool = False,
        loss_params: Params = (),
        penalty_params: Params = (),
        feature_names: Sequence[Hashable] | None = None,
    ) -> None:
        X, y = check_X_y(X, y)
        X, y = X.copy(), y.copy()
        X.setflags(write=False)
        y.setflags(write=False)
        if isinstance(lam, bool) or not isinstance(lam, (int, float, np.number)):
            raise TypeError(f"lam must be a real number, got {lam!r}")
        if not isinstance(fit_intercept, (bool, np.bool_)):
            raise TypeError(f"fit_intercept must be True or False, got {fit_intercept!r}")
        names = None
        if feature_names is not None:
            if isinstance(feature_names, (str, bytes)):
                raise TypeError(f"feature_names must be a sequence of names, got {feature_names!r}")
            names = tuple(feature_names)
            if len(names) != X.shape[1]:
                raise ValueError(f"feature_names must have {X.shape[1]} entries, got {len(names)}")
        values: dict[str, Any] = {
            "X": X, "y": y, "lam": check_lam(lam), "loss": loss, "penalty": penalty,
            "fit_intercept": bool(fit_intercept),
            "loss_params": loss_parameters(loss, loss_params),
            "penalty_params": penalty_parameters(penalty, penalty_params),
            "feature_names": names,
            "loss_file": loss_slot_file(loss),
            "penalty_file": penalty_slot_file(penalty),
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def n(self) -> int:
        """The number of observations."""
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """``p``, the number of coefficients ``beta``."""
        return int(self.X.shape[1])

    @property
    def features(self) -> list[Hashable]:
        """The coordinates of ``feature``: ``feature_names``, or 0..p-1."""
        if self.feature_names is None:
            return list(range(self.n_features))
        return list(self.feature_names)

    def describe(self) -> dict[str, Any]:
        """The root attributes the drivers record: ``lam``, ``loss`` and ``penalty`` as given."""
        return {"lam": float(self.lam), "loss": str(self.loss), "penalty": str(self.penalty)}


def check_problem(problem: object) -> None:
    """Raise ``TypeError`` naming ``problem`` unless it is a :class:`GlmProblem`."""
    if not isinstance(problem, GlmProblem):
        raise TypeError(f"problem must be a GlmProblem, got {type(problem).__name__}")
