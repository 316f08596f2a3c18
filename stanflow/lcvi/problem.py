"""The shipped LCVI problems: LCVI programs of the contract with their data.

Each is a program under ``stan/lcvi/`` meeting the LCVI-program contract
(:mod:`stanflow.lcvi.contract`) with normal outcomes, bound to its data in an
:class:`~stanflow.lcvi.program.LcviProgram`, as a user's own program would be:
eight schools and the normal mean here, the matrix factorisation of Last.fm
counts in :mod:`stanflow.lcvi.mf`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from stanflow.lcvi.program import LcviProgram
from stanflow.models import program_path
from stanflow.validation import check_int


def eight_schools(data: Mapping[str, Any]) -> LcviProgram:
    """Centred eight schools (``stan/lcvi/eight_schools.stan``), one decision per school.

    Parameters
    ----------
    data : mapping
        ``J``, ``y`` (shape (J,)), ``sigma`` (shape (J,), positive).
    """
    J = _count(data, "J")
    y = _vector(data, "y", J)
    sigma = _vector(data, "sigma", J)
    if np.any(sigma <= 0):
        raise ValueError("sigma must be positive")
    return LcviProgram(
        program_path("lcvi/eight_schools"),
        {"J": J, "y": y.tolist(), "sigma": sigma.tolist()},
        y=y,
        name="eight_schools",
        dims={"theta": ["school"], "y_rep": ["school"], "log_lik": ["school"]},
    )


def normal_mean(
    y: np.ndarray, sigma: float, prior_mean: float = 0.0, prior_sd: float = 10.0
) -> LcviProgram:
    """Normal mean with known ``sigma`` and a normal prior (``stan/lcvi/normal_mean.stan``).

    ``theta ~ N(prior_mean, prior_sd^2)``, ``y_n ~ N(theta, sigma^2)``: the
    posterior is normal, so plain mean-field VI is exact and the calibrated
    optimum can be found by brute force (``tests/test_lcvi_conjugate_e2e.py``).

    Parameters
    ----------
    y : array_like, shape (N,)
    sigma, prior_sd : float
        Positive.
    prior_mean : float
    """
    y = np.asarray(y, dtype=float)
    if y.ndim != 1 or y.size == 0 or not np.all(np.isfinite(y)):
        raise ValueError(f"y must be a non-empty finite vector, got shape {y.shape}")
    for name, value in (("sigma", sigma), ("prior_sd", prior_sd)):
        if not float(value) > 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    data = {
        "N": y.size,
        "y": y.tolist(),
        "sigma": float(sigma),
        "prior_mean": float(prior_mean),
        "prior_sd": float(prior_sd),
    }
    return LcviProgram(program_path("lcvi/normal_mean"), data, y=y, name="normal_mean")


def _count(data: Mapping[str, Any], name: str) -> int:
    return check_int(data.get(name), name)


def _vector(data: Mapping[str, Any], name: str, length: int) -> np.ndarray:
    value = np.asarray(data.get(name), dtype=float)
    if value.shape != (length,) or not np.all(np.isfinite(value)):
        raise ValueError(
            f"{name} must be a finite vector of length {length}, got shape {value.shape}"
        )
    return value
