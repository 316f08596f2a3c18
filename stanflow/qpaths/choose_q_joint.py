"""The authors' heuristic for ``q``: ``delta`` and the first ``beta`` from one ESS target.

Masrani, Brekelmans et al. (UAI 2021), Section 7, and their published SMC code
(``learn_delta`` in ``smc/src/utils.py`` of plai-group/qpaths_uai_2021) choose
``q = 1 - 10^(-delta)`` at the first SMC step, from draws of the base, together
with the first temperature ``beta_1``: ``(beta_1, delta)`` minimise
``(ESS(beta_1, delta) - target_ess * N)^2`` (the ESS of the incremental weights
``pi0 -> pi_{beta_1,q}``), by Powell's method started at ``beta_1 = 1`` and
``delta_0 = log10 max_i |log pi1(z_i) / pi0(z_i)|``, with ``delta`` bounded to
``[0, 18]`` (``delta > 18`` is the geometric path).

The objective is zero on a whole curve of ``(beta_1, delta)``, so the answer is
where the optimiser first reaches that curve: Powell's first line search runs
along ``beta_1`` with ``delta = delta_0`` fixed and stops at the ESS root, after
which ``delta`` has nothing left to gain. Here that point is computed
directly: ``delta = delta_0`` (clipped to ``[0, 18]``) and ``beta_1`` the root
of ``ESS(beta_1) = target_ess * N`` on that path by bisection (``beta_1 = 1``
when even the full step keeps the target; at ``beta_1 = 1`` every q-path is
``pi1``, so ``delta`` cannot change that ESS). Their code's 500 random restarts
(``delta`` started at ``N(delta_0, 0.1)``) choose among points that all reach
a zero objective, so they move ``delta`` by about 0.1 at random; they are
left out.

Contrast :func:`stanflow.qpaths.choose_q.heuristic_q`, which fixes ``beta_1``
and takes the largest ``delta`` keeping the target ESS.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from stanflow.qpaths.choose_q import first_step_ess
from stanflow.qpaths.qmath import _check_log_densities, q_from_delta
from stanflow.validation import check_int

DELTA_BOUNDS = (0.0, 18.0)
"""The authors' bounds on ``delta``; ``delta >= 18`` is the geometric path."""


class JointChoice(NamedTuple):
    """The authors' heuristic: the path and the first temperature it implies.

    Attributes
    ----------
    q : float
        ``1 - 10^(-delta)``, or 1.0 (geometric) at the upper bound.
    delta : float
        ``log10 max |log pi1 / pi0|``, clipped to :data:`DELTA_BOUNDS`.
    beta_1 : float
        The first temperature whose incremental weights keep ``target_ess``.
    """

    q: float
    delta: float
    beta_1: float


def joint_heuristic(
    log_pi0: ArrayLike,
    log_pi1: ArrayLike,
    target_ess: float = 0.5,
    iterations: int = 60,
) -> JointChoice:
    """``delta`` and ``beta_1`` of the authors' heuristic, from draws of the base.

    Parameters
    ----------
    log_pi0, log_pi1 : array_like, shape (N,)
        Base and target log densities at ``N >= 2`` draws from the base; both
        finite (``delta_0`` needs every ``log pi1 / pi0``).
    target_ess : float, default 0.5
        Fraction of ``N`` in ``(0, 1)``.
    iterations : int, default 60
        Bisection steps for ``beta_1`` (at least 1).

    Returns
    -------
    JointChoice
    """
    log_pi0, log_pi1 = _check_log_densities(log_pi0, log_pi1)
    if log_pi0.ndim != 1 or log_pi0.shape != log_pi1.shape or len(log_pi0) < 2:
        raise ValueError(
            "log_pi0, log_pi1 must be 1-D of the same length >= 2, got shapes "
            f"{log_pi0.shape}, {log_pi1.shape}"
        )
    for name, value in (("log_pi0", log_pi0), ("log_pi1", log_pi1)):
        if not np.isfinite(value).all():
            raise ValueError(f"{name} must be finite at draws from the base")
    if not 0 < target_ess < 1:
        raise ValueError(f"target_ess must lie in (0, 1), got {target_ess}")
    iterations = check_int(iterations, "iterations")
    delta = initial_delta(log_pi1 - log_pi0)
    q = 1.0 if delta >= DELTA_BOUNDS[1] else float(q_from_delta(delta))
    return JointChoice(
        q, delta, first_beta(log_pi0, log_pi1, q, target_ess, iterations)
    )


def initial_delta(log_ratio: np.ndarray) -> float:
    """``log10 max |log_ratio|`` clipped to :data:`DELTA_BOUNDS` (the authors' start)."""
    largest = float(np.max(np.abs(log_ratio)))
    if largest == 0:
        return DELTA_BOUNDS[0]
    return float(np.clip(np.log10(largest), *DELTA_BOUNDS))


def first_beta(
    log_pi0: np.ndarray,
    log_pi1: np.ndarray,
    q: float,
    target_ess: float,
    iterations: int,
) -> float:
    """Largest ``beta_1`` in ``(0, 1]`` whose first-step ESS on path ``q`` keeps the target.

    Bisection on ``first_step_ess(beta_1) >= target_ess`` (the ESS falls as
    ``beta_1`` grows); 1 when the full step keeps the target.
    """
    if first_step_ess(log_pi0, log_pi1, 1.0, q) >= target_ess:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if first_step_ess(log_pi0, log_pi1, mid, q) >= target_ess:
            lo = mid
        else:
            hi = mid
    return lo if lo > 0 else hi
