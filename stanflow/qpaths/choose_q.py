"""Choosing the path parameter ``q = 1 - 10^(-delta)``.

- :func:`heuristic_q`: the ESS heuristic. At the first SMC step, from
  particles of the base ``pi0`` to ``pi_{beta_1,q}``, the incremental weights are
  ``(1/s) log(1 + beta_1 expm1(s l))`` with ``s = 1 - q`` and ``l = log pi1 -
  log pi0``. On the geometric path (``delta = inf``) they are ``beta_1 l``, which
  for a peaked target leaves one particle; as ``delta`` decreases the path bends
  towards the mixture and the weights flatten. The heuristic takes the largest
  ``delta`` (the path closest to geometric) whose first-step ESS is at least
  ``target_ess * N``, by bisection on ``delta``.
- :func:`q_grid`: the grid ``1 - q = logspace(-1, -5, 20)`` and ``q = 1``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from stanflow.qpaths.qmath import (
    _check_beta,
    _check_log_densities,
    log_incremental_weight,
    q_from_delta,
)

DELTA_RANGE = (0.0, 15.0)
"""Bisection bracket for ``delta``: ``q`` from 0 (mixture) to ``1 - 1e-15``."""


def q_grid(n: int = 20, low: float = 1.0, high: float = 5.0) -> np.ndarray:
    """``q = 1 - logspace(-low, -high, n)`` followed by ``q = 1``, shape ``(n + 1,)``.

    The defaults give the grid ``1 - q = 10^-1, ..., 10^-5`` (20 values) of
    Masrani, Brekelmans et al. (UAI 2021) plus the geometric path.
    """
    if n < 1 or not 0 <= low < high:
        raise ValueError(
            f"q_grid needs n >= 1 and 0 <= low < high, got {n}, {low}, {high}"
        )
    return np.append(q_from_delta(np.linspace(low, high, n)), 1.0)


def first_step_ess(
    log_pi0: ArrayLike, log_pi1: ArrayLike, beta_1: float, q: float
) -> float:
    """Normalised ESS (in ``(0, 1]``) of the weights from ``pi0`` to ``pi_{beta_1,q}``.

    Parameters
    ----------
    log_pi0, log_pi1 : array_like, shape (N,)
        At draws from the base.
    beta_1 : float
        The first temperature, in ``(0, 1]``.
    q : float
    """
    log_w = log_incremental_weight(log_pi0, log_pi1, 0.0, beta_1, q)
    w = np.exp(log_w - np.max(log_w))
    return float(w.sum() ** 2 / np.sum(w**2) / len(w))


def heuristic_q(
    log_pi0: ArrayLike,
    log_pi1: ArrayLike,
    beta_1: float,
    target_ess: float = 0.5,
    iterations: int = 50,
) -> float:
    """The ESS heuristic: the ``q`` whose first SMC step keeps ``target_ess``.

    Bisection on ``delta`` in :data:`DELTA_RANGE` for
    ``first_step_ess(delta) = target_ess`` (the ESS grows as ``delta``
    decreases). Returns 1 (geometric) if the geometric first step already
    keeps the target, and ``q = 0`` (mixture) if even that does not.

    Parameters
    ----------
    log_pi0, log_pi1 : array_like, shape (N,)
        Base and target log densities at ``N >= 2`` draws from the base; finite
        or ``-inf`` (target) only.
    beta_1 : float
        The first temperature of the schedule, in ``(0, 1]``.
    target_ess : float, default 0.5
        Fraction of ``N`` in ``(0, 1)``.
    iterations : int, default 50
        Bisection steps.

    Returns
    -------
    float
    """
    log_pi0, log_pi1 = _check_log_densities(log_pi0, log_pi1)
    if log_pi0.ndim != 1 or log_pi0.shape != log_pi1.shape or len(log_pi0) < 2:
        raise ValueError(
            "log_pi0, log_pi1 must be 1-D of the same length >= 2, got shapes "
            f"{log_pi0.shape}, {log_pi1.shape}"
        )
    if not np.isfinite(log_pi0).all():
        raise ValueError("log_pi0 must be finite at draws from the base")
    beta_1 = float(_check_beta(beta_1, "beta_1"))
    if beta_1 == 0:
        raise ValueError("beta_1 must lie in (0, 1], got 0")
    if not 0 < target_ess < 1:
        raise ValueError(f"target_ess must lie in (0, 1), got {target_ess}")

    def keeps(delta: float) -> bool:
        ess = first_step_ess(log_pi0, log_pi1, beta_1, float(q_from_delta(delta)))
        return ess >= target_ess

    if first_step_ess(log_pi0, log_pi1, beta_1, 1.0) >= target_ess:
        return 1.0
    lo, hi = DELTA_RANGE
    if not keeps(lo):
        return 0.0
    if keeps(hi):
        return float(q_from_delta(hi))
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if keeps(mid):
            lo = mid
        else:
            hi = mid
    return float(q_from_delta(lo))
