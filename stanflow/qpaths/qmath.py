"""q-logarithms, q-exponentials and q-path densities, in log space.

Between a normalised base ``pi0`` and an unnormalised target ``pi1`` the q-path
(Masrani, Brekelmans et al., UAI 2021, "q-Paths: Generalizing the geometric
annealing path using power means") is the
power mean with exponent ``s = 1 - q``::

    pi_{beta,q}(z) = [(1 - beta) pi0(z)^s + beta pi1(z)^s]^(1/s)
                   = pi0(z) exp_q(beta ln_q(pi1(z) / pi0(z))),

    ln_q(u) = (u^s - 1) / s,      exp_q(x) = [1 + s x]_+^(1/s).

``q = 0`` is the mixture ``(1 - beta) pi0 + beta pi1``, ``q -> 1`` the geometric
path ``pi0^(1-beta) pi1^beta`` (computed exactly at ``q = 1``), ``q -> -inf``
tends to ``max(pi0, pi1)`` and ``q -> +inf`` to ``min(pi0, pi1)``. Following the
paper, ``q = 1 - 10^(-delta)`` (:func:`q_from_delta`).

Everything works on log densities. With ``l = log pi1 - log pi0``::

    log pi_{beta,q} = log pi0 + (1/s) log1p(beta expm1(s l)),

evaluated with ``log1p``/``expm1`` where ``|s l|`` is small (so the result is
continuous as ``q -> 1``, no 0/0) and with log-sum-exp elsewhere (no overflow).
Arrays broadcast; ``beta`` and ``q`` are scalars or arrays.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

SMALL = 0.5
"""Below this ``|s l|`` the ``log1p(beta expm1(s l))`` form is used."""


def q_from_delta(delta: ArrayLike) -> np.ndarray:
    """``q = 1 - 10^(-delta)``; ``delta = inf`` gives ``q = 1`` (geometric).

    Parameters
    ----------
    delta : array_like
        Real, not NaN; ``+inf`` allowed.

    Returns
    -------
    ndarray, shape of ``delta``
    """
    delta = np.asarray(delta, dtype=float)
    if np.isnan(delta).any():
        raise ValueError("delta must not be NaN")
    return 1.0 - 10.0 ** (-delta)


def ln_q(u: ArrayLike, q: ArrayLike) -> np.ndarray:
    """q-logarithm ``(u^(1-q) - 1) / (1-q)``, ``log u`` at ``q = 1``.

    Parameters
    ----------
    u : array_like
        Positive (``0`` gives ``-1/(1-q)`` for ``q < 1``, ``-inf`` otherwise).
    q : array_like
        Finite; broadcasts with ``u``.

    Returns
    -------
    ndarray, broadcast shape of ``u`` and ``q``
    """
    u = np.asarray(u, dtype=float)
    s = 1.0 - check_q(q)
    if np.isnan(u).any() or (u < 0).any():
        raise ValueError("u must be non-negative and not NaN")
    with np.errstate(divide="ignore", invalid="ignore"):
        log_u = np.log(u)
        general = np.expm1(s * log_u) / np.where(s == 0, 1.0, s)
    return np.where(s == 0, log_u, general)


def exp_q(x: ArrayLike, q: ArrayLike) -> np.ndarray:
    """q-exponential ``[1 + (1-q) x]_+^(1/(1-q))``, ``exp(x)`` at ``q = 1``.

    The inverse of :func:`ln_q` on its range.

    Parameters
    ----------
    x : array_like
        Not NaN.
    q : array_like
        Finite; broadcasts with ``x``.

    Returns
    -------
    ndarray, broadcast shape of ``x`` and ``q``
    """
    x = np.asarray(x, dtype=float)
    s = 1.0 - check_q(q)
    if np.isnan(x).any():
        raise ValueError("x must not be NaN")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        base = s * x
        positive = base > -1
        log_value = np.log1p(np.where(positive, base, 0.0)) / np.where(s == 0, 1.0, s)
        # Outside the support [1 + s x]_+ = 0, whose power 1/s is 0 (s > 0) or inf.
        general = np.where(positive, np.exp(log_value), np.where(s > 0, 0.0, np.inf))
        return np.where(s == 0, np.exp(x), general)


def log_qpath(
    log_pi0: ArrayLike, log_pi1: ArrayLike, beta: ArrayLike, q: ArrayLike
) -> np.ndarray:
    """Log density of the q-path, ``log pi_{beta,q}``.

    Parameters
    ----------
    log_pi0, log_pi1 : array_like
        Log base and log target densities at the same points, shape ``(...)``;
        finite or ``-inf`` (zero density), never NaN or ``+inf``.
    beta : array_like
        In ``[0, 1]``; ``0`` returns ``log_pi0`` and ``1`` returns ``log_pi1``
        exactly.
    q : array_like
        Finite; ``q = 1`` is the exact geometric path
        ``(1 - beta) log_pi0 + beta log_pi1``.

    Returns
    -------
    ndarray, broadcast shape of the arguments
    """
    log_pi0, log_pi1 = _check_log_densities(log_pi0, log_pi1)
    beta = _check_beta(beta, "beta")
    q = check_q(q)
    ref, _, _, g, s = _log_power_mean(log_pi0, log_pi1, beta, q)
    with np.errstate(invalid="ignore"):
        geometric = (1 - beta) * log_pi0 + beta * log_pi1
        value = np.where(s == 0, geometric, ref + g / np.where(s == 0, 1.0, s))
        value = np.where(np.isneginf(ref), -np.inf, value)
    return np.where(beta == 0, log_pi0, np.where(beta == 1, log_pi1, value))


def log_incremental_weight(
    log_pi0: ArrayLike,
    log_pi1: ArrayLike,
    beta: ArrayLike,
    beta_next: ArrayLike,
    q: ArrayLike,
) -> np.ndarray:
    """SMC/AIS incremental log weight ``log pi_{beta',q} - log pi_{beta,q}``.

    Computed as ``(1/s) [log1p(beta' expm1(s l)) - log1p(beta expm1(s l))]``
    (in the stable form of :func:`log_qpath`), ``(beta' - beta) l`` at ``q = 1``.

    Parameters
    ----------
    log_pi0, log_pi1 : array_like, shape (N,)
        At the particles; as in :func:`log_qpath`. The particles must have
        positive density under ``pi_{beta,q}``.
    beta, beta_next : array_like
        In ``[0, 1]``.
    q : array_like
        Finite.

    Returns
    -------
    ndarray, broadcast shape of the arguments

    Raises
    ------
    ValueError
        For invalid inputs, or a particle with zero density under
        ``pi_{beta,q}`` (the weight would be undefined).
    """
    log_pi0, log_pi1 = _check_log_densities(log_pi0, log_pi1)
    beta = _check_beta(beta, "beta")
    beta_next = _check_beta(beta_next, "beta_next")
    q = check_q(q)
    if np.isneginf(log_qpath(log_pi0, log_pi1, beta, q)).any():
        raise ValueError(
            "log_pi0, log_pi1: some points have zero density under pi_{beta,q}; "
            "incremental weights need points from its support"
        )
    *_, g, s = _log_power_mean(log_pi0, log_pi1, beta, q)
    *_, g_next, _ = _log_power_mean(log_pi0, log_pi1, beta_next, q)
    with np.errstate(invalid="ignore"):
        l = log_pi1 - log_pi0
        geometric = np.where(beta_next == beta, 0.0, (beta_next - beta) * l)
        general = (g_next - g) / np.where(s == 0, 1.0, s)
        return np.where(s == 0, geometric, general)


def dlog_qpath_dbeta(
    log_pi0: ArrayLike, log_pi1: ArrayLike, beta: ArrayLike, q: ArrayLike
) -> np.ndarray:
    """Thermodynamic-integration integrand ``d/dbeta log pi_{beta,q}``.

    ``(pi1^s - pi0^s) / (s [(1-beta) pi0^s + beta pi1^s])``, computed with the
    larger log density factored out; ``log pi1 - log pi0`` at ``q = 1``.
    ``log Z = integral_0^1 E_{pi_{beta,q}}[d/dbeta log pi_{beta,q}] dbeta``.

    Parameters
    ----------
    log_pi0, log_pi1 : array_like
        Finite, at the same points.
    beta : array_like
        In ``[0, 1]``.
    q : array_like
        Finite.

    Returns
    -------
    ndarray, broadcast shape of the arguments
    """
    log_pi0, log_pi1 = _check_log_densities(log_pi0, log_pi1)
    if not (np.isfinite(log_pi0).all() and np.isfinite(log_pi1).all()):
        raise ValueError("log_pi0, log_pi1 must be finite for the TI integrand")
    beta = _check_beta(beta, "beta")
    q = check_q(q)
    _, a, base_is_ref, g, s = _log_power_mean(log_pi0, log_pi1, beta, q)
    # e^{s (log pi1 - ref)} - e^{s (log pi0 - ref)}, one of the exponents being 0.
    difference = np.where(base_is_ref, np.expm1(a), -np.expm1(a))
    safe_s = np.where(s == 0, 1.0, s)
    general = difference / np.exp(g) / safe_s
    return np.where(s == 0, log_pi1 - log_pi0, general)


def _log_power_mean(
    log_pi0: np.ndarray,
    log_pi1: np.ndarray,
    beta: np.ndarray | np.floating,
    q: np.ndarray | np.floating,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | np.floating]:
    """Pieces of ``log pi_{beta,q} = ref + g / s`` for ``s = 1 - q != 0``.

    Returns ``(ref, a, base_is_ref, g, s)``: ``ref`` is the log density with the
    larger ``s log pi_k`` (the max for ``s > 0``, the min for ``s < 0``), ``a =
    s (log pi_other - ref) <= 0`` and ``g = log(w_ref + w_other e^a)`` with
    weights ``1 - beta`` (base) and ``beta`` (target), by ``log1p``/``expm1``
    when ``|a|`` is small. Meaningless where ``s == 0``.
    """
    s = 1.0 - q
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        base_is_ref = s * log_pi0 >= s * log_pi1
        ref = np.where(base_is_ref, log_pi0, log_pi1)
        w_ref = np.where(base_is_ref, 1 - beta, beta)
        w_other = np.where(base_is_ref, beta, 1 - beta)
        a = s * (np.where(base_is_ref, log_pi1, log_pi0) - ref)
        a = np.where(np.isnan(a), 0.0, a)  # ref = -inf: overwritten by callers
        small = np.abs(a) < SMALL
        near = np.log1p(w_other * np.expm1(np.where(small, a, 0.0)))
        far = np.logaddexp(np.log(w_ref), np.log(w_other) + a)
        g = np.where(small, near, far)
    return ref, a, base_is_ref, g, s


def _check_log_densities(
    log_pi0: ArrayLike, log_pi1: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    out = []
    for name, given in (("log_pi0", log_pi0), ("log_pi1", log_pi1)):
        value = np.asarray(given, dtype=float)
        bad = np.isnan(value) | np.isposinf(value)
        if bad.any():
            first = np.argwhere(bad)[0]
            raise ValueError(
                f"{name} contains NaN or +inf at {int(bad.sum())} of {value.size} "
                f"points (first at index {tuple(int(i) for i in first)}); log "
                "densities must be finite or -inf"
            )
        out.append(value)
    return out[0], out[1]


def _check_beta(beta: ArrayLike, name: str) -> np.ndarray:
    beta = np.asarray(beta, dtype=float)
    if np.isnan(beta).any() or (beta < 0).any() or (beta > 1).any():
        raise ValueError(f"{name} must lie in [0, 1], got {beta}")
    return beta


def check_q(q: ArrayLike) -> np.ndarray:
    """The path parameter ``q`` as a float array, or a ``ValueError`` naming it.

    Any finite real number (an array of them for paths evaluated per point);
    ``q = 1`` is the geometric path.
    """
    if isinstance(q, (bool, np.bool_)) or not isinstance(
            q, (int, float, np.number, np.ndarray, list, tuple)):
        raise ValueError(f"q must be finite (a real number; 1 is the geometric path), got {q!r}")
    q = np.asarray(q, dtype=float)
    if not np.isfinite(q).all():
        raise ValueError(f"q must be finite (a real number; 1 is the geometric path), got {q}")
    return q


def target_share(
    log_pi0: ArrayLike, log_pi1: ArrayLike, beta: ArrayLike, q: ArrayLike
) -> np.ndarray:
    """The target's share ``a`` in the gradient of ``log pi_{beta,q}``.

    ``grad log pi_{beta,q} = (1 - a) grad log pi0 + a grad log pi1`` with
    ``a = beta pi1^s / ((1 - beta) pi0^s + beta pi1^s)``, ``s = 1 - q``: the
    logistic function of ``log(beta / (1 - beta)) + s (log pi1 - log pi0)``,
    and ``beta`` itself at ``q = 1``. Gradient-based moves along the path
    combine the two densities' gradients with it.

    Parameters
    ----------
    log_pi0, log_pi1 : array_like, shape (N,)
        Finite log densities at the same points.
    beta : float
        In ``[0, 1]``.
    q : float
        Finite.

    Returns
    -------
    ndarray, shape (N,)
    """
    log_pi0, log_pi1 = _check_log_densities(log_pi0, log_pi1)
    beta = _check_beta(beta, "beta")
    s = 1.0 - check_q(q)
    if s == 0 or beta in (0, 1):
        return np.broadcast_to(beta, np.broadcast(log_pi0, log_pi1).shape).astype(float)
    logit = np.log(beta) - np.log1p(-beta) + s * (log_pi1 - log_pi0)
    return 0.5 * (1 + np.tanh(0.5 * logit))
