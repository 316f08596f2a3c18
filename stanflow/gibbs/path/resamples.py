"""Bootstrap resamples as targets of their own: where each one's posterior sits, and its loss.

A resample with counts ``c_b`` has the Gibbs posterior
``pi(theta) exp(-omega c_b . l(theta))``. :func:`first_order` gives the
full data's Laplace approximation and the first-order move of each resample's
estimate from the full data's, and
:func:`prior_and_resample_loss` its prior and total loss at particles of its own
(:mod:`stanflow.gibbs.path.transport`); :func:`target_digest` names what that loss
depends on, for calls kept by content.
"""

from __future__ import annotations

import hashlib
import pickle
from typing import NamedTuple

import numpy as np

from stanflow.gibbs.path.sweep import LearningRatePath
from stanflow.gibbs.path.target import PathTarget
from stanflow.gibbs.sandwich import constrain_jacobian


class FirstOrder(NamedTuple):
    """The full data's estimate and curvature, and each resample's shift, on the particles' scale.

    Attributes
    ----------
    center : ndarray, shape (d,)
        The estimate.
    precision : ndarray, shape (d, d)
        ``n H``: the Gibbs posterior at ``omega`` is close to ``N(center,
        (omega n H)^-1)`` (Laplace).
    shifts : ndarray, shape (B, d)
        Each resample's first-order move of the estimate, ``-H^-1 (1/n) sum_i
        (c_bi - 1) g_i``.
    """

    center: np.ndarray
    precision: np.ndarray
    shifts: np.ndarray


def first_order(path: LearningRatePath, estimate: np.ndarray, counts: np.ndarray) -> FirstOrder:
    """Where the resamples' posteriors sit to first order (:class:`FirstOrder`).

    With the program's plug-in ``H`` and per-observation gradients at
    ``estimate``, taken to Stan's unconstrained scale by the Jacobian when the
    particles live there.
    """
    target = path.target
    program = target.program
    found = program.estimate_at(estimate)
    s = program.sandwich(found)
    shifts = -np.linalg.solve(s.H, ((counts - 1.0) @ s.gradients / target.n).T).T
    precision = target.n * s.H
    if target.space == "box":
        return FirstOrder(np.asarray(found.theta, float), precision, shifts)
    center = program.unconstrain(found.theta[None, :])[0]
    if s.scale == "unconstrained":
        return FirstOrder(center, precision, shifts)
    jac = constrain_jacobian(program, center)
    if jac is None:
        return FirstOrder(center, precision, shifts)
    return FirstOrder(center, jac.T @ precision @ jac, np.linalg.solve(jac, shifts.T).T)


def prior_and_resample_loss(
    target: PathTarget, z: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The prior's log density and ``c_b . l`` at each resample's particles.

    On the box of a shipped prior the prior is NumPy's and the loss one
    in-process row per particle (:meth:`PathTarget.weighted_loss`). Elsewhere the
    prior (with the Jacobian) and the loss come from two rows per particle.

    Parameters
    ----------
    target : PathTarget
        The path's target (:attr:`LearningRatePath.target`).
    z : ndarray, shape (R, S, d)
    counts : ndarray, shape (R, n)

    Returns
    -------
    log_prior, loss : ndarray, shape (R, S)
        A point outside the prior's support (or rejected by the program) has
        log prior ``-inf`` and loss 0.
    """
    program = target.program
    R, S, _ = z.shape
    prior, loss = np.empty((R, S)), np.empty((R, S))
    for b in range(R):
        if target.space == "box":
            prior[b] = target.log_prior(z[b])
            inside = np.isfinite(prior[b])
            loss[b] = 0.0
            if inside.any():
                loss[b, inside] = target.weighted_loss(z[b, inside], counts[b])
        else:
            prior[b], loss[b] = program.prior_and_loss(z[b], counts[b])
    bad = ~(np.isfinite(prior) & np.isfinite(loss))
    prior[bad], loss[bad] = -np.inf, 0.0
    return prior, loss


def target_digest(target: PathTarget) -> str:
    """A digest of what a resample's loss depends on: the program's text, its data,
    where the particles live."""
    program = target.program
    digest = hashlib.sha256(program.source.code.encode())
    data = {name: np.asarray(value) for name, value in sorted(program.data.items())}
    digest.update(pickle.dumps((data, target.space), protocol=5))
    return digest.hexdigest()
