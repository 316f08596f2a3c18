"""The LCVI Stan template ``stan/lcvi/eight_schools_lcvi.stan``: compiling it and its data.

The template is centred eight schools whose target gains
``weight * utility_term`` at ADVI's draw of ``theta`` (see
:mod:`stanflow.lcvi.utility` for the estimators), with the loss bound to the
slot ``loss.stanfunctions``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cmdstanpy
import numpy as np

from stanflow.lcvi.losses import UTILITIES, Loss, check_utility, stan_file
from stanflow.lcvi.utility import ESTIMATORS
from stanflow.models import compile_model, program_path

TEMPLATE = "lcvi/eight_schools_lcvi"


def lcvi_model(loss: str | Loss) -> cmdstanpy.CmdStanModel:
    """Compile (or fetch from the cache) the template with ``loss`` in its slot.

    Parameters
    ----------
    loss : str or Loss
        A loss name or object: only its family matters, its parameters are data.
    """
    name = loss.name if isinstance(loss, Loss) else loss
    return compile_model(
        program_path(TEMPLATE), slots={"loss.stanfunctions": stan_file(name)}
    )


def stan_data(
    data: Mapping[str, Any],
    h: np.ndarray,
    eps_y: np.ndarray,
    loss: Loss,
    kind: str,
    scale: float,
    estimator: str = "linearised",
    weight: float = 1.0,
) -> dict[str, Any]:
    """Data for the template.

    Parameters
    ----------
    data : mapping
        Eight schools data: ``J``, ``y`` (shape (J,)), ``sigma`` (shape (J,)).
    h : array_like, shape (J,)
        Decisions.
    eps_y : array_like, shape (S, J)
        Fixed standard normal base samples of the outcomes.
    loss : Loss
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
    if estimator not in ESTIMATORS:
        raise ValueError(
            f"estimator: unknown estimator {estimator!r}; known: {list(ESTIMATORS)}"
        )
    J = int(data["J"])
    h, eps_y = np.asarray(h, dtype=float), np.asarray(eps_y, dtype=float)
    if h.shape != (J,):
        raise ValueError(f"h (decisions) must have shape ({J},), got {h.shape}")
    if eps_y.ndim != 2 or eps_y.shape[1] != J or eps_y.shape[0] == 0:
        raise ValueError(
            f"eps_y must have shape (S, {J}) with S >= 1, got {eps_y.shape}"
        )
    if not weight >= 0:
        raise ValueError(f"weight must be >= 0, got {weight!r}")
    return {
        "J": J,
        "y": list(map(float, data["y"])),
        "sigma": list(map(float, data["sigma"])),
        "S": eps_y.shape[0],
        "eps_y": eps_y.tolist(),
        "h": h.tolist(),
        "n_loss_params": len(loss.params),
        "loss_params": list(loss.params),
        "utility": UTILITIES.index(kind) + 1,
        "scale": scale,
        "estimator": ESTIMATORS.index(estimator) + 1,
        "weight": float(weight),
    }
