"""Bootstrap resamples as targets of their own: where each one's posterior sits, and its loss.

A resample with counts ``c_b`` has the Gibbs posterior
``pi(theta) exp(-omega c_b . l(theta))``. :func:`influence_shifts` gives the
first-order move of its estimate from the full data's, and
:func:`prior_and_resample_loss` its prior and total loss at particles of its own
(:mod:`stanflow.gibbs.path.transport`).
"""

from __future__ import annotations

import numpy as np

from stanflow.gibbs.path.sweep import LearningRatePath
from stanflow.gibbs.path.target import PathTarget
from stanflow.gibbs.sandwich import constrain_jacobian


def influence_shifts(path: LearningRatePath, estimate: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each resample's first-order shift of the estimate on the particles' scale, ``(B, d)``.

    ``-H^-1 (1/n) sum_i (c_bi - 1) g_i`` with the program's plug-in ``H`` and
    per-observation gradients at ``estimate``, taken to Stan's unconstrained
    scale by the Jacobian when the particles live there.
    """
    target = path.target
    program = target.program
    found = program.estimate_at(estimate)
    s = program.sandwich(found)
    shifts = -np.linalg.solve(s.H, ((counts - 1.0) @ s.gradients / target.n).T).T
    if target.space == "box" or s.scale == "unconstrained":
        return shifts
    jac = constrain_jacobian(program, program.unconstrain(found.theta[None, :])[0])
    return shifts if jac is None else np.linalg.solve(jac, shifts.T).T


def prior_and_resample_loss(
    target: PathTarget, z: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The prior's log density and ``c_b . l`` (up to a constant) at each resample's particles.

    On the box of a shipped prior the prior is NumPy's and the loss one
    in-process row per particle, ``log pi_Stan(theta) - log p(theta | omega = 1,
    c_b)`` without the Jacobian: the loss up to the constant by which Stan's
    prior differs from the box's normalised one, which cancels in every
    resample's self-normalised weights. Elsewhere the prior (with the
    Jacobian) and the loss come from two rows per particle.

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
                loss[b, inside] = prior[b, inside] - program.log_density(
                    target.unconstrained(z[b, inside]), 1.0, counts[b], jacobian=False)
        else:
            prior[b], loss[b] = program.prior_and_loss(z[b], counts[b])
    bad = ~(np.isfinite(prior) & np.isfinite(loss))
    prior[bad], loss[bad] = -np.inf, 0.0
    return prior, loss
