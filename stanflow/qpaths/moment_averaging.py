"""The moment-averaging path between two Gaussians, in closed form.

Grosse, Maddison and Salakhutdinov (NeurIPS 2013, "Annealing between
distributions by averaging moments") define, for endpoints in an exponential
family with sufficient statistics ``T``, the intermediate distribution
``pi_beta`` as the member of the family whose mean parameters are the linear
interpolation of the endpoints'::

    E_{pi_beta}[T] = (1 - beta) E_{pi0}[T] + beta E_{pi1}[T].

Guarantee: ``pi_beta`` is the unique minimiser over the family of
``(1 - beta) KL(pi0 || q) + beta KL(pi1 || q)`` (the objective is, up to a
constant, ``-E_mix[log q]`` with ``mix`` the mixture
``(1 - beta) pi0 + beta pi1``, and an exponential family's maximum-likelihood
fit matches moments). So ``pi_beta`` is also the moment match (M-projection)
of the mixture path, the q-path at ``q = 0``: both have the same first two
moments, but ``pi_beta`` stays in the family, here a single Gaussian.

For univariate Gaussians ``T(x) = (x, x^2)``, which gives::

    mean_beta = (1 - beta) mu0 + beta mu1,
    var_beta  = (1 - beta) (var0 + mu0^2) + beta (var1 + mu1^2) - mean_beta^2
              = (1 - beta) var0 + beta var1 + beta (1 - beta) (mu1 - mu0)^2.

The second form, used here, is a sum of non-negative terms, so no rounding
makes it negative. Compare the geometric path (q = 1), also Gaussian but with
the *natural* parameters interpolated: precision
``(1 - beta) / var0 + beta / var1`` and precision-weighted mean. See
``docs/qpaths.md`` (workflow ``qpaths-toy``), where the paths are compared with
the q-paths of Masrani, Brekelmans et al. (UAI 2021, "q-Paths: Generalizing
the geometric annealing path using power means").
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from stanflow.qpaths.qmath import _check_beta


def gaussian_moment_average(
    mean0: float, var0: float, mean1: float, var1: float, beta: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of the moment-averaging path between two Gaussians.

    Parameters
    ----------
    mean0, var0 : float
        Mean and variance (> 0) of the base ``pi0 = N(mean0, var0)``.
    mean1, var1 : float
        Mean and variance (> 0) of the target ``pi1 = N(mean1, var1)``.
    beta : array_like
        In ``[0, 1]``; ``0`` and ``1`` give the endpoints exactly.

    Returns
    -------
    mean, var : ndarray, shape of ``beta``
        ``pi_beta = N(mean, var)``, whose first two moments are the linear
        interpolation of the endpoints' (module docstring).

    Raises
    ------
    ValueError
        If a mean is not finite, a variance is not finite and positive, or
        ``beta`` lies outside ``[0, 1]``; the message names the argument.
    """
    for name, value in (("mean0", mean0), ("mean1", mean1)):
        if not np.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
    for name, value in (("var0", var0), ("var1", var1)):
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    beta = _check_beta(beta, "beta")
    mean = (1 - beta) * mean0 + beta * mean1
    var = (1 - beta) * var0 + beta * var1 + beta * (1 - beta) * (mean1 - mean0) ** 2
    return mean, var
