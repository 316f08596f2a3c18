"""Holmes and Walker's information matching: ``omega = tr(H) / tr(J)``.

Holmes, C. C. and Walker, S. G. (2017), "Assigning a value to a power
likelihood in a general Bayesian model", *Biometrika* 104(2), 497-503.

They choose the power ``omega`` so that the expected information gained in
going from prior to posterior, measured by the Fisher divergence
``int |grad log pi_n - grad log pi|^2 pi_n``, is the same for the Gibbs (power)
posterior as for the Bayesian posterior under the data's true distribution.
With ``grad log pi_n - grad log pi = -omega grad L_n`` the Gibbs posterior's
gain is ``omega^2`` times the model-based (curvature) information, while the
reference gain is the variance of the score; their large-sample solution
(Section 3 of the paper) matches the two traces:

    omega_HW = tr(H) / tr(J),
    H = E[d^2 loss(Y, theta*) / d theta d theta']   (sensitivity; the model's Fisher
                                                       information when loss = -log p)
    J = E[grad loss grad loss']                     (variability: the actual information)

estimated here at the empirical risk minimiser by the same ``H_hat`` and
``J_hat`` as :mod:`stanflow.gibbs.plugin` (kinks smoothed by a kernel). In one
dimension it equals the plug-in ``H / J``; for vectors it differs from the
loss-likelihood bootstrap's ``tr(H J^-1 H) / tr(H)`` (Lyddon, Holmes and Walker
2019, who note the agreement in one dimension). For a correctly specified
likelihood ``H = J`` and ``omega_HW = 1``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs.plugin import calibrate_plugin, check_sensitivity_and_variability

if TYPE_CHECKING:
    from stanflow.gibbs.program import LossProgram

FORMULA = "tr(H) / tr(J)"


def omega_from_traces(H: np.ndarray, J: np.ndarray) -> np.ndarray:
    """``tr(H) / tr(J)`` over the last two axes.

    Parameters
    ----------
    H, J : array_like, shape (..., K, K)
        Sensitivity (positive trace) and variability (positive trace).

    Returns
    -------
    ndarray, shape (...)
    """
    H, J = check_sensitivity_and_variability(H, J)
    trace_j = np.trace(J, axis1=-2, axis2=-1)
    if np.any(~(trace_j > 0)):
        raise ValueError("J must have a positive trace (the loss gradient must vary)")
    trace_h = np.trace(H, axis1=-2, axis2=-1)
    return trace_h / trace_j


def calibrate_holmes_walker(
    program: LossProgram, *, estimate: Any = None, bandwidth: Any = None
) -> Results:
    """Holmes and Walker's ``omega = tr(H_hat) / tr(J_hat)`` as a ``calibration`` group.

    Parameters
    ----------
    program, estimate, bandwidth
        As in :func:`stanflow.gibbs.plugin.calibrate_plugin`.

    Returns
    -------
    Results
        Group ``calibration`` with ``omega``, ``estimate``, ``sensitivity``,
        ``variability``, ``bandwidth`` (as the plug-in's) and
        ``trace_sensitivity``, ``trace_variability``; attributes ``method =
        "holmes_walker"``, ``formula``, ``reference``.
    """
    group = arviz_compat.group(
        calibrate_plugin(program, estimate=estimate, bandwidth=bandwidth), "calibration")
    H, J = group["sensitivity"].values, group["variability"].values
    group = group.assign(
        omega=((), float(omega_from_traces(H, J))),
        trace_sensitivity=((), float(np.trace(H))),
        trace_variability=((), float(np.trace(J))),
    )
    group.attrs.update(
        method="holmes_walker",
        formula=FORMULA,
        reference="Holmes and Walker (2017), Biometrika 104(2) 497-503",
    )
    return arviz_compat.build({"calibration": group})
