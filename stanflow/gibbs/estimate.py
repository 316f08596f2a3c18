"""The empirical risk minimiser of a loss program: ``argmin_theta sum_i loss_i(theta)``.

The full-data estimate ``theta_hat`` whose coverage GPC calibrates and where the
plug-in rules take their curvature. For a program of the user's it is found on
Stan's unconstrained scale (the minimiser of the loss does not depend on the
parametrisation) from :data:`STARTS` random starts, drawn as Stan draws its
initial values, by L-BFGS on Stan's gradients of the loss alone (the target at
``omega = 1`` minus the target at ``omega = 0``, so the prior plays no part),
all starts in one batch (:func:`stanflow.lbfgs.minimise_batch`). A kinked loss
(absolute, check) stops L-BFGS near its minimum without a converged status; the
best point is then polished by Nelder-Mead, which needs no derivatives. The
shipped templates keep their own searches (golden section for a location,
Nelder-Mead from least squares for coefficients;
:meth:`stanflow.gibbs.templates.TemplateProgram.estimate`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.optimize import minimize

from stanflow.gibbs.loss_functions import LossFunctions
from stanflow.lbfgs import CONVERGED, minimise_batch

INIT_RADIUS = 2.0
"""Starts are uniform on ``(-2, 2)`` in every unconstrained coordinate, as Stan's
initialisation draws them."""
STARTS = 8
"""Random starts of the search."""
POLISH_DIMENSIONS = 20
"""Nelder-Mead polishes a non-converged search only up to this many parameters."""


class Estimate(NamedTuple):
    """The risk minimiser.

    Attributes
    ----------
    theta : ndarray, shape (P,)
        On the parameters' own scale (:attr:`LossProgram.names`).
    u : ndarray, shape (D,)
        On Stan's unconstrained scale.
    risk : float
        ``sum_i loss_i`` there.
    method : str
        How it was found (``"lbfgs"``, ``"lbfgs+nelder-mead"``, ...).
    """

    theta: np.ndarray
    u: np.ndarray
    risk: float
    method: str


def risk_minimiser(program: LossFunctions, *, seed: int = 0) -> Estimate:
    """Minimise the program's total loss over its parameters.

    Parameters
    ----------
    program : LossFunctions
    seed : int, default 0
        Seed of the random starts.

    Returns
    -------
    Estimate

    Raises
    ------
    RuntimeError
        If the loss is not finite at any start.
    """
    rng = np.random.default_rng(seed)
    starts = rng.uniform(-INIT_RADIUS, INIT_RADIUS, size=(STARTS, program.dim))

    def evaluate(u: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        value, grad = program.loss_gradient(u)
        bad = ~(np.isfinite(value) & np.isfinite(grad).all(axis=1))
        value[bad], grad[bad] = np.inf, np.nan
        return value, grad

    found = minimise_batch(evaluate, starts, gtol=1e-10, ftol=1e-15, max_iter=2000)
    if not np.isfinite(found.value).any():
        raise RuntimeError(
            f"{program.source.path.name}: the loss is not finite at any of {STARTS} random starts"
        )
    best = int(np.argmin(np.where(np.isfinite(found.value), found.value, np.inf)))
    u, risk, method = found.theta[best], float(found.value[best]), "lbfgs"
    if found.status[best] != CONVERGED and program.dim <= POLISH_DIMENSIONS:
        u, risk = _nelder_mead(program, u)
        method = "lbfgs+nelder-mead"
    theta = program.constrain(u[None])[0]
    return Estimate(theta, u, risk, method)


def _nelder_mead(program: LossFunctions, u: np.ndarray) -> tuple[np.ndarray, float]:
    """Nelder-Mead from ``u``, restarted once from its own end."""

    def objective(point: np.ndarray) -> float:
        value = float(program.total_loss(point[None])[0])
        return value if np.isfinite(value) else np.inf

    for _ in range(2):
        result = minimize(objective, u, method="Nelder-Mead",
                          options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000})
        u = result.x
    return u, float(result.fun)
