"""The LCVI Stan templates ``stan/lcvi/*_lcvi.stan``: compiling them and their data.

Each template is a model whose target gains ``weight * utility_term`` at
ADVI's draw of ``theta`` (see :mod:`stanflow.lcvi.utility` for the
estimators), with the loss bound to the slot ``loss.stanfunctions``; the
templates share the LCVI data fields (:func:`stan_data`).
"""

from __future__ import annotations

from typing import Any

import cmdstanpy
import numpy as np

from stanflow.lcvi.problem import Problem
from stanflow.lcvi.utility import ESTIMATORS, check_estimator
from stanflow.lcvi.utility_transform import UTILITIES, check_utility
from stanflow.losses import BoundLoss, Loss, get_loss
from stanflow.models import compile_model, program_path

TEMPLATE = "lcvi/eight_schools_lcvi"


def lcvi_model(
    loss: str | Loss | BoundLoss, template: str = TEMPLATE) -> cmdstanpy.CmdStanModel:
    """Compile (or fetch from the cache) an LCVI template with ``loss`` in its slot.

    Parameters
    ----------
    loss : str, Loss or BoundLoss
        A shipped loss's name or a loss object: only its Stan file matters,
        its parameters are data.
    template : str, default ``"lcvi/eight_schools_lcvi"``
        The template under ``stan/`` (:attr:`stanflow.lcvi.problem.Problem.template`).
    """
    source = loss.stan_file if isinstance(loss, (Loss, BoundLoss)) else get_loss(loss).stan_file
    # Resumable ADVI is an extension of stanflow's driver: build with stanflow's
    # installation even when a CmdStan of the user's is active.
    return compile_model(
        program_path(template), slots={"loss.stanfunctions": source}, driver="stanflow"
    )


def stan_data(
    problem: Problem,
    h: np.ndarray,
    eps_y: np.ndarray,
    loss: BoundLoss,
    kind: str,
    scale: float,
    estimator: str = "linearised",
    weight: float = 1.0,
) -> dict[str, Any]:
    """The problem's data with the LCVI fields of its template.

    Parameters
    ----------
    problem : Problem
        With ``N = problem.n`` outcomes the decisions are for.
    h : array_like, shape (N,)
        Decisions.
    eps_y : array_like, shape (S, N)
        Fixed standard normal base samples of the outcomes.
    loss : BoundLoss
        Its parameters become ``loss_params``.
    kind : {"linear", "exp"}
        Utility ``M - l`` or ``exp(-gamma l)``.
    scale : float
        ``M`` or ``gamma``, positive.
    estimator : {"naive", "linearised"}, default "linearised"
    weight : float, default 1
        Weight of the utility term, ``>= 0``; 0 is plain VI.

    Returns
    -------
    dict
    """
    kind, scale = check_utility(kind, scale)
    check_estimator(estimator)
    N = problem.n
    h, eps_y = np.asarray(h, dtype=float), np.asarray(eps_y, dtype=float)
    if h.shape != (N,):
        raise ValueError(f"h (decisions) must have shape ({N},), got {h.shape}")
    if not np.all(np.isfinite(h)):
        raise ValueError("h (decisions) must be finite")
    if eps_y.ndim != 2 or eps_y.shape[1] != N or eps_y.shape[0] == 0:
        raise ValueError(
            f"eps_y must have shape (S, {N}) with S >= 1, got {eps_y.shape}"
        )
    if not weight >= 0:
        raise ValueError(f"weight must be >= 0, got {weight!r}")
    return (
        dict(problem.data)
        | {"S": eps_y.shape[0], "eps_y": eps_y, "h": h}
        | utility_fields(loss, kind, scale, estimator, weight)
    )


def utility_fields(
    loss: BoundLoss, kind: str, scale: float, estimator: str, weight: float
) -> dict[str, Any]:
    """The data fields of the utility term shared by every LCVI template.

    ``loss_params``, ``utility``, ``scale``, ``estimator`` and ``weight``, from
    arguments already checked (:func:`stan_data`).
    """
    return {
        "n_loss_params": len(loss.params),
        "loss_params": list(loss.params),
        "utility": UTILITIES.index(kind) + 1,
        "scale": scale,
        "estimator": ESTIMATORS.index(estimator) + 1,
        "weight": float(weight),
    }
