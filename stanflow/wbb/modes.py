"""Shape summaries of one coefficient's draws: the atom at zero and the modes off it.

WBB draws of a lasso coefficient are a mixture of an atom at exactly 0 and a
continuous part; a Bayesian posterior under a continuous prior has no atom.
The summaries here make "sparser" and "multimodal" numbers:

- ``p_zero``: the fraction of draws exactly equal to 0;
- ``p_small``: the fraction with ``|beta| <= eps`` (comparable across methods
  with and without an atom);
- :func:`count_modes`: the number of modes of the continuous part, defined as
  the peaks of the Gaussian kernel density estimate of the *non-zero* draws,
  with Silverman's rule-of-thumb bandwidth ``h = 0.9 min(sd, IQR / 1.349)
  m^(-1/5)`` (Silverman 1986, eq. 3.31; ``m`` the number of non-zero draws),
  evaluated on an evenly spaced grid from ``min - 3h`` to ``max + 3h`` with
  step ``h / 8`` (at most ``MAX_GRID`` points), whose topographic prominence
  (height above the higher of the two lowest points separating the peak from
  any higher one, ``scipy.signal.find_peaks``) is at least ``MIN_PROMINENCE``
  times the highest density. The prominence rule drops the ripples that
  sampling noise puts on a single mode; the atom is left out, so it cannot
  count as a mode; fewer than ``MIN_DRAWS`` non-zero draws (or no spread among
  them) give 0 modes.
"""

from __future__ import annotations

import numpy as np
from scipy.signal import find_peaks

from stanflow.validation import check_finite_vector, check_positive

MAX_GRID = 20_000
MIN_PROMINENCE = 0.05
"""Smallest prominence of a counted mode, relative to the highest density."""
MIN_DRAWS = 10


def silverman_bandwidth(x: np.ndarray) -> float:
    """Silverman's rule-of-thumb bandwidth ``0.9 min(sd, IQR / 1.349) m^(-1/5)``.

    Parameters
    ----------
    x : ndarray, shape (m,)
        Finite values, ``m >= 2``.

    Returns
    -------
    float
        0 when the values do not vary.
    """
    x = check_finite_vector(x, "x")
    if x.size < 2:
        raise ValueError(f"x must have at least 2 values, got {x.size}")
    q75, q25 = np.percentile(x, [75, 25])
    spread = min(x.std(ddof=1), (q75 - q25) / 1.349)
    if spread == 0:
        spread = x.std(ddof=1)
    return float(0.9 * spread * x.size ** -0.2)


def count_modes(draws: np.ndarray) -> int:
    """Modes of the continuous part of ``draws`` (definition in the module docstring).

    Parameters
    ----------
    draws : ndarray, shape (m,)
        Finite draws of one coefficient; exact zeros are the atom and are left out.

    Returns
    -------
    int
    """
    draws = check_finite_vector(draws, "draws")
    x = draws[draws != 0]
    if x.size < MIN_DRAWS:
        return 0
    h = silverman_bandwidth(x)
    if h == 0:
        return 0
    points = int(min(MAX_GRID, np.ceil((x.max() - x.min() + 6 * h) / (h / 8)) + 1))
    grid = np.linspace(x.min() - 3 * h, x.max() + 3 * h, points)
    density = np.zeros(points)
    for chunk in np.array_split(x, max(1, x.size // 256)):
        density += np.exp(-0.5 * ((grid[:, None] - chunk[None, :]) / h) ** 2).sum(axis=1)
    peaks, _ = find_peaks(density, prominence=MIN_PROMINENCE * density.max())
    return int(peaks.size)


def shape_summary(draws: np.ndarray, eps: float) -> dict[str, float | int]:
    """``p_zero``, ``p_small`` (``|beta| <= eps``), ``sd`` and ``n_modes`` of one coefficient.

    Parameters
    ----------
    draws : ndarray, shape (m,)
        Finite draws.
    eps : float
        Half-width of the "small" interval around 0, ``> 0``.

    Returns
    -------
    dict
    """
    draws = check_finite_vector(draws, "draws")
    eps = check_positive(eps, "eps")
    return {
        "p_zero": float(np.mean(draws == 0)),
        "p_small": float(np.mean(np.abs(draws) <= eps)),
        "sd": float(draws.std(ddof=1)) if draws.size > 1 else 0.0,
        "n_modes": count_modes(draws),
    }
