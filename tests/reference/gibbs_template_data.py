"""The data of the Gibbs template reference (make_gibbs_template_reference.py)."""

from __future__ import annotations

import numpy as np

CAUCHY = """\
// Cauchy (Lorentzian) loss log(1 + ((y - f) / s)^2), s = loss_params[1].
real loss(real y, real f, vector loss_params) {
  return log1p(square((y - f) / loss_params[1]));
}
"""


def location_data() -> np.ndarray:
    return np.random.default_rng(1).gamma(2.0, 1.0, size=120)


def linear_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    x = rng.chisquare(2, size=150) - 2
    y = 2 + x + (1 + 0.5 * (x + 2)) * rng.standard_normal(150)
    return y, np.column_stack([np.ones(150), x])
