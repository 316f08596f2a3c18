"""The grid backend of GPC: exact posteriors of a template's scalar location on a finite box.

Step 2 of Syring and Martin's algorithm (:func:`stanflow.gibbs.gpc.calibrate_gpc`
with a :class:`GridBackend`) without sampling: each bootstrap resample's Gibbs
posterior of a location is computed on a grid over the box
(:mod:`stanflow.gibbs.grid`), and its equal-tailed interval checked against the
full-data estimate. The ``B`` total-loss curves are computed once
(:func:`grid_evaluator`); each step costs one vectorised normalisation
(:func:`grid_coverage`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stanflow.gibbs import grid
from stanflow.gibbs.box import LOGIT_LIMIT, unconstrain
from stanflow.gibbs.gpc.backend import Evaluator
from stanflow.gibbs.program import LossProgram
from stanflow.gibbs.templates import TemplateProgram
from stanflow.validation import check_int


@dataclass(frozen=True)
class GridBackend:
    """GPC's posteriors exactly, on a grid: a template's scalar location on a finite box.

    Parameters
    ----------
    points : int, default 801
        The grid's size over the box.
    """

    points: int = 801

    def __post_init__(self) -> None:
        check_int(self.points, "points")


def grid_coverage(
    theta: np.ndarray,
    sums: np.ndarray,
    omega: float,
    estimate: float,
    alpha: float,
    log_prior: np.ndarray | None = None,
) -> tuple[float, np.ndarray]:
    """Fraction of grid posteriors whose equal-tailed interval holds ``estimate``.

    Parameters
    ----------
    theta : ndarray, shape (G,)
        The grid.
    sums : ndarray, shape (B, G)
        Total losses of each resample on the grid (:func:`grid.loss_sums`).
    omega : float
        Learning rate.
    estimate : float
        The full-data estimate.
    alpha : float
        The intervals are ``100(1 - alpha)%``.
    log_prior : ndarray, shape (G,), optional
        Prior log density on the grid; default uniform.

    Returns
    -------
    coverage : float
    intervals : ndarray, shape (B, 2)
    """
    post = grid.posterior(theta, sums, omega, log_prior=log_prior)
    intervals = grid.interval(post, 1 - alpha)
    inside = (intervals[:, 0] <= estimate) & (estimate <= intervals[:, 1])
    return float(np.mean(inside)), intervals


def grid_evaluator(
    program: TemplateProgram,
    indices: np.ndarray,
    estimate: float,
    alpha: float,
    points: int,
) -> Evaluator:
    """The grid backend's step: the exact coverage of the resamples' grid posteriors.

    The ``B`` total-loss curves are computed once, here; each step is then one
    vectorised normalisation (:func:`grid_coverage`). The prior's log density on
    the grid is the program's (its target at ``omega = 0``).

    Parameters
    ----------
    program : TemplateProgram
        A location on a finite box.
    indices : ndarray of int, shape (B, n)
        The bootstrap resamples (:func:`~stanflow.gibbs.gpc.algorithm.bootstrap_indices`).
    estimate : float
        The full-data estimate.
    alpha : float
        Intervals of level ``1 - alpha``.
    points : int
        The grid's size.

    Returns
    -------
    callable ``(omega, t) -> dict``
        ``{"coverage": c}``.
    """
    lower, upper = float(program.lower[0]), float(program.upper[0])
    theta = np.linspace(lower, upper, points)
    sums = grid.loss_sums(theta, program.y[indices], program.loss_values())
    u = np.clip(unconstrain(theta[:, None], program.lower, program.upper), -LOGIT_LIMIT, LOGIT_LIMIT)
    log_prior = program.log_prior(u, jacobian=False)

    def evaluate(omega: float, t: int) -> dict[str, float]:
        return {"coverage": grid_coverage(theta, sums, omega, estimate, alpha, log_prior)[0]}

    return evaluate


def check_grid_program(program: LossProgram) -> None:
    """A ``ValueError`` naming ``backend`` unless ``program`` is a location with finite bounds."""
    if not (isinstance(program, TemplateProgram) and program.template == "location"):
        raise ValueError(
            "backend: GridBackend computes exact posteriors of a scalar location, so it "
            "needs location_program(...); use StanBackend() for other programs"
        )
    if not np.all(np.isfinite(program.lower) & np.isfinite(program.upper)):
        raise ValueError(
            "backend: GridBackend needs finite bounds on the location (they are the "
            "grid's range): location_program(..., bounds=(lower, upper))"
        )
