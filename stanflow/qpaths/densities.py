"""Densities that also give their gradients, for gradient-based moves along a path.

A base or target density is any callable ``log_pi(z) -> (N,)`` on particles ``z`` of
shape ``(N, d)``. One that also has a method ``value_and_gradient(z) -> (values (N,),
gradients (N, d))`` is *differentiable*: when both the base and the target are, the
default moves of :func:`~stanflow.qpaths.annealing.smc` and
:func:`~stanflow.qpaths.annealing.ais` are Hamiltonian Monte Carlo
(:mod:`~stanflow.qpaths.self_tuning`). A Stan program evaluated in process
(:class:`~stanflow.qpaths.stan_density.StanLogDensity`) is differentiable through
Stan's reverse-mode gradients; :class:`GaussianBase` is the usual normalised base.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from stanflow.validation import check_int


@runtime_checkable
class DifferentiableDensity(Protocol):
    """A log density of particles with its gradient."""

    def __call__(self, z: np.ndarray) -> np.ndarray: ...

    def value_and_gradient(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


class GaussianBase:
    """The normalised base ``N(mean, sd^2 I)`` in ``d`` dimensions: density, gradient, draws.

    Pass the instance as ``log_pi0`` and its :meth:`sample` as ``sample_pi0``.

    Parameters
    ----------
    d : int
        Dimension, at least 1.
    sd : float, default 1.0
        Positive scale.
    mean : array_like, default 0
        Scalar or shape ``(d,)``.
    """

    def __init__(self, d: int, sd: float = 1.0, mean: ArrayLike = 0.0) -> None:
        d = check_int(d, "d")
        if not np.isfinite(sd) or sd <= 0:
            raise ValueError(f"sd must be positive and finite, got {sd}")
        centre = np.broadcast_to(np.asarray(mean, dtype=float), (d,)).copy()
        if not np.isfinite(centre).all():
            raise ValueError("mean must be finite")
        self.d, self.sd, self.mean = d, float(sd), centre

    def __call__(self, z: np.ndarray) -> np.ndarray:
        """Log density at particles ``z`` of shape ``(N, d)``, shape ``(N,)``."""
        white = (np.asarray(z, dtype=float) - self.mean) / self.sd
        return -0.5 * np.sum(white**2, axis=1) - self.d * (
            np.log(self.sd) + 0.5 * np.log(2 * np.pi)
        )

    def value_and_gradient(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log density and its gradient ``-(z - mean) / sd^2``, shapes ``(N,)``, ``(N, d)``."""
        return self(z), -(np.asarray(z, dtype=float) - self.mean) / self.sd**2

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws, shape ``(n, d)``."""
        return self.mean + self.sd * rng.standard_normal((n, self.d))

    def __repr__(self) -> str:
        return f"GaussianBase(d={self.d}, sd={self.sd})"


def is_differentiable(density: object) -> bool:
    """Whether ``density`` has ``value_and_gradient`` (see the module docstring)."""
    return callable(getattr(density, "value_and_gradient", None))
