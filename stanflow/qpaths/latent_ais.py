"""AIS with HMC moves along q-paths for latent-variable models, over many chains at once.

The model is ``z ~ N(0, I_d)`` (the base ``pi0``, normalised) and a likelihood
``p(x | z)``; the target is the joint ``pi1(z) = p(z) p(x | z)``, so ``Z = p(x)``.
A likelihood is a vectorised callable::

    log_likelihood(x_rows, z) -> (log p(x_i | z_i) of shape (N,), its z-gradient (N, d))

``x_rows`` holding the data point of every row of ``z`` (one row per chain),
e.g. the VAE decoder's of the workflow ``qpaths-ais`` (``workflows/_qpaths_vae.py``).

- :func:`qpath_point`: ``log pi_{beta,q}`` and its gradient. With ``l = log p(x | z)``
  and ``s = 1 - q``, ``grad log pi_{beta,q} = -z + w grad l``, where
  ``w = beta e^{s l} / ((1 - beta) + beta e^{s l})`` (``w = beta`` on the geometric
  path), computed in log space.
- :func:`hmc_move`: one HMC transition (``n_leapfrog`` leapfrog steps, identity
  mass, Metropolis accept/reject), batched over chains.
- :func:`ais_hmc`: AIS along a schedule that runs from 0 to 1 (forward: from
  prior draws; ``log mean w`` estimates ``log p(x)``) or from 1 to 0 (reverse:
  from exact posterior draws; ``log mean w`` estimates ``-log p(x)``).

The bounds per data point and the BDMC sandwich built on it are
:mod:`stanflow.qpaths.bdmc`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from stanflow.qpaths.qmath import check_q, log_incremental_weight, log_qpath
from stanflow.validation import check_int

LogLikelihood = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""``log_likelihood(x_rows, z) -> (log p(x | z) (N,), gradient in z (N, d))``."""

TARGET_ACCEPT = 0.65


class Point(NamedTuple):
    """Chains at ``z`` with what the q-path needs of them.

    Attributes
    ----------
    z : ndarray, shape (N, d)
    log_prior : ndarray, shape (N,)
        ``log N(z; 0, I)``.
    log_lik : ndarray, shape (N,)
    grad_lik : ndarray, shape (N, d)
    log_density : ndarray, shape (N,)
        ``log pi_{beta,q}(z)`` at the current ``beta``.
    grad : ndarray, shape (N, d)
        Its gradient in ``z``.
    """

    z: np.ndarray
    log_prior: np.ndarray
    log_lik: np.ndarray
    grad_lik: np.ndarray
    log_density: np.ndarray
    grad: np.ndarray


def log_standard_normal(z: np.ndarray) -> np.ndarray:
    """``log N(z; 0, I_d)`` of every row."""
    return -0.5 * np.sum(z**2, axis=1) - 0.5 * z.shape[1] * np.log(2 * np.pi)


def target_weight(log_lik: ArrayLike, beta: float, q: ArrayLike) -> np.ndarray:
    """``w = beta pi1^s / ((1 - beta) pi0^s + beta pi1^s)``, ``s = 1 - q``, ``l = log pi1/pi0``.

    The gradient of ``log pi_{beta,q}`` is ``(1 - w) grad log pi0 + w grad log pi1``.
    ``w = beta`` at ``q = 1``; 0 at ``beta = 0`` and 1 at ``beta = 1`` exactly.
    """
    log_lik = np.asarray(log_lik, dtype=float)
    s = 1.0 - np.asarray(q, dtype=float)
    if beta <= 0.0:
        return np.zeros(np.broadcast(log_lik, s).shape)
    if beta >= 1.0:
        return np.ones(np.broadcast(log_lik, s).shape)
    with np.errstate(invalid="ignore"):
        a = np.log(beta) + np.where(s == 0, 0.0, s * log_lik)
        log_w = a - np.logaddexp(np.log1p(-beta), a)
    return np.exp(log_w)


def qpath_point(
    z: np.ndarray,
    log_lik: np.ndarray,
    grad_lik: np.ndarray,
    beta: float,
    q: ArrayLike,
    log_prior: np.ndarray | None = None,
) -> Point:
    """The q-path density between ``N(0, I)`` and ``N(0, I) p(x | z)`` at ``z``, with gradient."""
    log_prior = log_standard_normal(z) if log_prior is None else log_prior
    density = log_qpath(log_prior, log_prior + log_lik, beta, q)
    weight = target_weight(log_lik, beta, q)
    return Point(z, log_prior, log_lik, grad_lik, density, -z + weight[:, None] * grad_lik)


def hmc_move(
    rng: np.random.Generator,
    current: Point,
    evaluate: Callable[[np.ndarray], Point],
    step_size: ArrayLike,
    n_leapfrog: int,
) -> tuple[Point, np.ndarray]:
    """One HMC transition of every chain (identity mass matrix), batched.

    Parameters
    ----------
    rng : numpy.random.Generator
    current : Point
        The chains, with ``log_density`` and ``grad`` of the target.
    evaluate : callable
        ``evaluate(z) -> Point`` for the same target.
    step_size : float or array_like, shape (N,)
        Leapfrog step size(s), positive.
    n_leapfrog : int
        Leapfrog steps per transition.

    Returns
    -------
    (Point, ndarray)
        The chains after the Metropolis accept/reject, and which of them moved.
        Proposals with a non-finite density are rejected.
    """
    eps = np.broadcast_to(np.asarray(step_size, dtype=float), current.log_density.shape)[:, None]
    momentum = rng.standard_normal(current.z.shape)
    start_energy = current.log_density - 0.5 * np.sum(momentum**2, axis=1)
    point = current
    p = momentum + 0.5 * eps * point.grad
    for step in range(n_leapfrog):
        point = evaluate(point.z + eps * p)
        p = p + (eps if step < n_leapfrog - 1 else 0.5 * eps) * point.grad
    with np.errstate(invalid="ignore", over="ignore"):
        log_ratio = point.log_density - 0.5 * np.sum(p**2, axis=1) - start_energy
    log_ratio = np.where(np.isfinite(log_ratio), log_ratio, -np.inf)
    accept = np.log(rng.uniform(size=log_ratio.shape)) < log_ratio
    moved = Point(*(
        np.where(accept[:, None] if new.ndim == 2 else accept, new, old)
        for new, old in zip(point, current, strict=True)
    ))
    return moved, accept


class StepSizes(NamedTuple):
    """HMC step size as a function of ``beta``: log-linear interpolation.

    Attributes
    ----------
    beta : ndarray
        Increasing temperatures of the pilot run.
    step_size : ndarray
        The adapted step size at each.
    """

    beta: np.ndarray
    step_size: np.ndarray

    def __call__(self, beta: float) -> float:
        return float(np.exp(np.interp(beta, self.beta, np.log(self.step_size))))


class AISRun(NamedTuple):
    """One AIS run over chains.

    Attributes
    ----------
    log_weights : ndarray, shape (N,)
        Accumulated log weights per chain.
    acceptance : ndarray, shape (K - 2,)
        Mean HMC acceptance after each intermediate temperature.
    step_size : ndarray, shape (K - 2,)
        Step size used at each intermediate temperature.
    z : ndarray, shape (N, d)
        Final states.
    """

    log_weights: np.ndarray
    acceptance: np.ndarray
    step_size: np.ndarray
    z: np.ndarray


def ais_hmc(
    log_likelihood: LogLikelihood,
    x_rows: np.ndarray,
    z0: ArrayLike,
    schedule: ArrayLike,
    *,
    q: ArrayLike = 1.0,
    step_size: float | Callable[[float], float] = 0.1,
    n_leapfrog: int = 10,
    seed: int | np.random.Generator | None = None,
    adapt: bool = False,
    target_accept: float = TARGET_ACCEPT,
) -> AISRun:
    """AIS with HMC moves along the q-path, over the rows of ``z0`` as chains.

    At each step ``beta -> beta'`` of the schedule every chain's log weight gains
    ``log pi_{beta',q}(z) - log pi_{beta,q}(z)``, then (except after the last step)
    the chain makes one HMC transition leaving ``pi_{beta',q}`` invariant.

    Parameters
    ----------
    log_likelihood : callable
        See :data:`LogLikelihood`.
    x_rows : ndarray, shape (N, ...)
        The data point of each chain.
    z0 : array_like, shape (N, d)
        Starting states: prior draws for a schedule from 0 to 1, exact
        posterior draws for a schedule from 1 to 0.
    schedule : array_like, shape (K,)
        Strictly monotone, ``K >= 2``, from 0 to 1 or from 1 to 0.
    q : float or array_like, shape (N,)
        Path parameter per chain (finite); 1 is the geometric path.
    step_size : float or callable
        Fixed, or a function of ``beta`` (:class:`StepSizes`). With ``adapt``
        the starting value, multiplied after every transition by
        ``exp(clip(2 (acceptance - target_accept), -1, 1))``.
    n_leapfrog : int, default 10
    seed : int or Generator, optional
    adapt : bool, default False
        Adapt the step size from the chains' mean acceptance (pilot runs only:
        it makes the kernels depend on the run).
    target_accept : float, default 0.65

    Returns
    -------
    AISRun
    """
    betas = check_monotone_schedule(schedule)
    z = np.asarray(z0, dtype=float)
    if z.ndim != 2 or z.shape[0] < 1 or z.shape[1] < 1:
        raise ValueError(f"z0 must have shape (N, d), got {z.shape}")
    if not np.isfinite(z).all():
        raise ValueError("z0 must be finite")
    x_rows = np.asarray(x_rows)
    if x_rows.shape[0] != z.shape[0]:
        raise ValueError(
            f"x_rows must have one row per chain ({z.shape[0]}), got {x_rows.shape[0]}"
        )
    q = check_q(q)
    if q.ndim > 1 or (q.ndim == 1 and q.shape != (z.shape[0],)):
        raise ValueError(f"q must be a scalar or have shape ({z.shape[0]},), got {q.shape}")
    check_int(n_leapfrog, "n_leapfrog")
    if adapt and callable(step_size):
        raise ValueError("step_size must be a number when adapt is True")
    if not callable(step_size) and not (np.isfinite(step_size) and step_size > 0):
        raise ValueError(f"step_size must be positive, got {step_size}")
    if not 0 < target_accept < 1:
        raise ValueError(f"target_accept must lie in (0, 1), got {target_accept}")
    rng = np.random.default_rng(seed)

    def model_point(z_new: np.ndarray, beta: float) -> Point:
        log_lik, grad_lik = log_likelihood(x_rows, z_new)
        log_lik = np.asarray(log_lik, dtype=float)
        grad_lik = np.asarray(grad_lik, dtype=float)
        if log_lik.shape != z_new.shape[:1] or grad_lik.shape != z_new.shape:
            raise ValueError(
                f"log_likelihood must return shapes ({z_new.shape[0]},) and {z_new.shape}, "
                f"got {log_lik.shape} and {grad_lik.shape}"
            )
        # A NaN or +inf likelihood (a diverging leapfrog) is a rejected proposal.
        bad = ~np.isfinite(log_lik) | ~np.isfinite(grad_lik).all(axis=1)
        log_lik = np.where(bad, -np.inf, log_lik)
        grad_lik = np.where(bad[:, None], 0.0, grad_lik)
        return qpath_point(z_new, log_lik, grad_lik, beta, q)

    point = model_point(z, betas[0])
    if not np.isfinite(point.log_density).all():
        raise ValueError("z0: some chains start where the density is zero or undefined")
    log_w = np.zeros(z.shape[0])
    # The fixed (or adapted) step size; unused when step_size is a function of beta.
    eps = 0.0 if callable(step_size) else float(step_size)
    acceptance, used = [], []
    for i, (beta, new) in enumerate(itertools.pairwise(betas)):
        log_w = log_w + log_incremental_weight(
            point.log_prior, point.log_prior + point.log_lik, beta, new, q
        )
        if i == len(betas) - 2:
            break
        point = qpath_point(point.z, point.log_lik, point.grad_lik, new, q, point.log_prior)
        size = float(step_size(new)) if callable(step_size) else eps
        if not (np.isfinite(size) and size > 0):
            raise ValueError(f"step_size({new}) must be positive, got {size}")
        point, accepted = hmc_move(rng, point, partial(model_point, beta=new), size, n_leapfrog)
        rate = float(accepted.mean())
        acceptance.append(rate)
        used.append(size)
        if adapt:
            eps = eps * float(np.exp(np.clip(2.0 * (rate - target_accept), -1.0, 1.0)))
    return AISRun(log_w, np.array(acceptance), np.array(used), point.z)


def check_monotone_schedule(schedule: ArrayLike) -> np.ndarray:
    """A schedule from 0 to 1 or from 1 to 0, strictly monotone, or a ``ValueError``."""
    betas = np.asarray(schedule, dtype=float)
    if betas.ndim != 1 or len(betas) < 2 or not np.isfinite(betas).all():
        raise ValueError("schedule must be a 1-D array of at least 2 finite betas")
    if (betas < 0).any() or (betas > 1).any():
        raise ValueError("schedule must lie in [0, 1]")
    steps = np.diff(betas)
    ends = (betas[0], betas[-1])
    if ends == (0.0, 1.0) and (steps > 0).all():
        return betas
    if ends == (1.0, 0.0) and (steps < 0).all():
        return betas
    raise ValueError(
        "schedule must be strictly increasing from 0 to 1 (forward AIS) or strictly "
        "decreasing from 1 to 0 (reverse AIS)"
    )


def linear_schedule(n_distributions: int) -> np.ndarray:
    """``linspace(0, 1, K)``: ``K`` distributions, ``K - 1`` AIS steps."""
    check_int(n_distributions, "n_distributions", 2)
    return np.linspace(0.0, 1.0, n_distributions)
