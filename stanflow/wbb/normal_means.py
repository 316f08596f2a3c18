"""The exact toy of the WBB paper: one normal observation with a Laplace prior.

Model: ``y | theta ~ N(theta, 1)`` and the Laplace (double-exponential) prior
``p(theta) = (lam / 2) exp(-lam |theta|)`` with rate ``lam > 0``. A WBB draw
(Newton, Polson and Xu 2021, "Weighted Bayesian bootstrap for scalable
posterior distributions") with weights ``w1`` (the observation) and ``w2``
(the prior) solves::

    theta = argmin_t  w1 (y - t)^2 / 2 + w2 lam |t|
          = sign(y) max(|y| - lam w2 / w1, 0),

soft thresholding at ``lam r`` with ``r = w2 / w1``. ``w1 ~ Exp(1)``, and
``w2 ~ Exp(1)`` (``prior="random"``) or ``w2 = 1`` (``prior="fixed"``),
from :func:`stanflow.wbb.weights.bootstrap_weights`.

**Exact posterior mean** (Pericchi and Smith 1992; Mitchell 1994). The
posterior is proportional to ``exp(-(y - t)^2 / 2 - lam |t|)``. Completing
the square on each half line,

- ``t > 0``: ``exp(-(t - (y - lam))^2 / 2) exp(lam^2 / 2 - lam y)``,
- ``t < 0``: ``exp(-(t - (y + lam))^2 / 2) exp(lam^2 / 2 + lam y)``,

so the posterior is a two-component mixture of ``N(y - lam, 1)`` truncated to
``(0, inf)`` and ``N(y + lam, 1)`` truncated to ``(-inf, 0)``, with weights
proportional to ``W+ = exp(-lam y) Phi(y - lam)`` and ``W- = exp(lam y)
Phi(-y - lam)``. The truncated means are ``(y - lam) + phi(y - lam) / Phi(y -
lam)`` and ``(y + lam) - phi(y + lam) / Phi(-y - lam)``; weighted, the
``phi`` terms cancel because ``exp(-lam y) phi(y - lam) = exp(lam y) phi(y +
lam) = phi(y) exp(-lam^2 / 2)``. Hence::

    E[theta | y] = y - lam (W+ - W-) / (W+ + W-)
                 = y - lam tanh(D / 2),
    D = log W+ - log W- = -2 lam y + log Phi(y - lam) - log Phi(-y - lam),

evaluated with ``log Phi`` (``scipy.special.log_ndtr``), so it is accurate for
any ``|y|`` and ``lam``; it tends to ``y - lam sign(y)`` as ``|y| -> inf``.

**Exact WBB mean** (the expectation of the WBB draw over the weights, which
the average of ``B`` draws estimates). ``E[theta_WBB] = sign(y) E[(|y| - lam
r)_+]``. With ``w2 ~ Exp(1)``, ``r = w2 / w1`` has density ``(1 + r)^-2`` and::

    E[theta_WBB] = sign(y) (|y| - lam log(1 + |y| / lam)),
    P(theta_WBB = 0) = P(r >= |y| / lam) = lam / (lam + |y|).

With ``w2 = 1``, ``r = 1 / w1`` and, with ``c = lam / |y|`` and ``E1`` the
exponential integral::

    E[theta_WBB] = sign(y) (|y| exp(-c) - lam E1(c)),
    P(theta_WBB = 0) = P(w1 <= c) = 1 - exp(-c).

Both means shrink large observations by about ``lam (log(|y| / lam) + const)``,
without bound, where the posterior mean shrinks by ``lam``: the WBB mean is
not the posterior mean (``docs/wbb.md``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from stanflow.arviz_compat import Results
from stanflow.wbb.bootstrap import Draws, wbb
from stanflow.wbb.weights import PRIORS


def soft_threshold(y: ArrayLike, threshold: ArrayLike) -> np.ndarray:
    """``sign(y) max(|y| - threshold, 0)``, the minimiser of ``(y - t)^2 / 2 + threshold |t|``.

    Parameters
    ----------
    y : array_like
        Observations.
    threshold : array_like
        Non-negative; broadcasts with ``y``.

    Returns
    -------
    ndarray, broadcast shape of ``y`` and ``threshold``
    """
    y = np.asarray(y, dtype=float)
    return np.sign(y) * np.maximum(np.abs(y) - threshold, 0.0)


def laplace_posterior_mean(y: ArrayLike, lam: ArrayLike) -> np.ndarray:
    """Exact posterior mean of ``theta`` given ``y ~ N(theta, 1)`` and a Laplace(``lam``) prior.

    ``y - lam tanh(D / 2)`` with ``D = -2 lam y + log Phi(y - lam) - log Phi(-y -
    lam)`` (derivation in the module docstring).

    Parameters
    ----------
    y : array_like
        Finite observations.
    lam : array_like
        Finite prior rates ``> 0``; broadcasts with ``y``.

    Returns
    -------
    ndarray, broadcast shape of ``y`` and ``lam``
    """
    y, lam = _check_y_lam(y, lam)
    d = -2 * lam * y + special.log_ndtr(y - lam) - special.log_ndtr(-y - lam)
    return y - lam * np.tanh(d / 2)


def wbb_mean(y: ArrayLike, lam: ArrayLike, prior: str = "random") -> np.ndarray:
    """Exact expectation of the WBB draw over the weights.

    Parameters
    ----------
    y : array_like
        Finite observations.
    lam : array_like
        Finite penalties ``> 0``; broadcasts with ``y``.
    prior : {"random", "fixed"}
        ``w2 ~ Exp(1)`` or ``w2 = 1``.

    Returns
    -------
    ndarray, broadcast shape of ``y`` and ``lam``
        ``sign(y) (|y| - lam log(1 + |y| / lam))`` (random) or ``sign(y) (|y|
        exp(-lam / |y|) - lam E1(lam / |y|))`` (fixed); 0 at ``y = 0``.
    """
    y, lam = _check_y_lam(y, lam)
    a = np.abs(y)
    if _check_prior(prior) == "random":
        return np.sign(y) * (a - lam * np.log1p(a / lam))
    with np.errstate(divide="ignore"):
        c = lam / a  # +inf at y = 0, where exp(-c) = E1(c) = 0
    return np.sign(y) * (a * np.exp(-c) - lam * special.exp1(c))


def wbb_prob_zero(y: ArrayLike, lam: ArrayLike, prior: str = "random") -> np.ndarray:
    """Exact probability that a WBB draw is exactly 0 (the threshold exceeds ``|y|``).

    Parameters
    ----------
    y, lam, prior
        As in :func:`wbb_mean`.

    Returns
    -------
    ndarray, broadcast shape of ``y`` and ``lam``
        ``lam / (lam + |y|)`` (random) or ``1 - exp(-lam / |y|)`` (fixed).
    """
    y, lam = _check_y_lam(y, lam)
    a = np.abs(y)
    if _check_prior(prior) == "random":
        return lam / (lam + a)
    with np.errstate(divide="ignore"):
        return -np.expm1(-lam / a)


def wbb_normal_means(
    y: ArrayLike, lam: ArrayLike, B: int, *, seed: int, prior: str = "random"
) -> Results:
    """``B`` WBB draws of ``theta`` for every observation ``y`` and penalty ``lam``.

    Draw ``b`` uses the weights ``(w1, w2)`` of :func:`stanflow.wbb.weights.bootstrap_weights`
    (``n = 1``) for every ``(lam, y)`` pair: common random numbers, so the
    curves over ``y`` are smooth; each pair on its own is an ordinary WBB of
    ``B`` draws.

    Parameters
    ----------
    y : array_like, shape (n_y,)
        Finite observations.
    lam : array_like, shape (n_lam,)
        Finite penalties ``> 0``.
    B : int
        Number of draws.
    seed : int
        Root seed of the weights.
    prior : {"random", "fixed"}
        ``w2 ~ Exp(1)`` or ``w2 = 1``.

    Returns
    -------
    Results
        ``posterior.theta`` with dims ``(chain, draw, lam, y)``; ``sample_stats``
        and ``weights`` as in :func:`stanflow.wbb.bootstrap.wbb`.
    """
    y, lam = (np.atleast_1d(v) for v in _check_y_lam(y, lam))
    if y.ndim != 1 or lam.ndim != 1:
        raise ValueError(f"y and lam must be 1-d, got shapes {y.shape} and {lam.shape}")

    def solve(w: np.ndarray, wp: np.ndarray) -> Draws:
        ratio = (wp / w[:, 0])[:, None, None]
        theta = soft_threshold(y[None, None, :], lam[None, :, None] * ratio)
        return Draws({"theta": theta}, np.ones(w.shape[0], dtype=bool))

    return wbb(
        solve, 1, B, seed=seed, prior=_check_prior(prior),
        coords={"lam": lam, "y": y}, dims={"theta": ["lam", "y"]},
        attrs={"solver": "soft_threshold", "model": "y ~ N(theta, 1), Laplace(lam) prior"},
    )


def _check_y_lam(y: ArrayLike, lam: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    y, lam = np.asarray(y, dtype=float), np.asarray(lam, dtype=float)
    if not np.all(np.isfinite(y)):
        raise ValueError("y contains NaN or infinite values")
    if not (np.all(np.isfinite(lam)) and np.all(lam > 0)):
        raise ValueError(f"lam must be finite and > 0, got {lam}")
    return y, lam


def _check_prior(prior: str) -> str:
    if prior not in PRIORS:
        raise ValueError(f"prior must be one of {PRIORS}, got {prior!r}")
    return prior
