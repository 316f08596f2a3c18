"""What the plug-in calibrations need from a loss at the data: NumPy or its Stan file alone.

The plug-in and Holmes-Walker learning rates (:mod:`stanflow.gibbs.plugin`,
:mod:`stanflow.gibbs.information`) need, at the data and the empirical risk
minimiser, each observation's loss derivative ``g_i``, second derivative
``c_i`` and the jump ``j_i`` of the derivative as ``f`` passes through
``y_i`` (where the absolute, check and hinge losses have their kinks). A
shipped :class:`~stanflow.losses.Loss` has them in NumPy; for a loss
given only as a ``.stanfunctions`` file they come from Stan in process
(:class:`stanflow.losses.pointwise.PointwiseLoss`):

- ``g_i``: Stan's gradient in the predictions ``f``;
- ``c_i``: central differences of Stan's gradients, 0 on the linear pieces of
  a kinked loss; where the difference straddles the kink at ``f = y_i`` (at
  the median, one observation sits on it) the jump is taken out again;
- ``j_i = g(y_i, y_i + e_i) - g(y_i, y_i - e_i)`` with ``e_i = 1e-8 (1 + |y_i|)``,
  set to 0 where it is below ``1e-6 max(1, |g|)`` (a smooth loss changes its
  derivative by only ``2 e_i c_i`` over that step).

A kink away from ``f = y`` is invisible to both (as for a ``Loss`` whose
``jump`` is None).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from stanflow.losses import Loss, get_loss
from stanflow.losses.pointwise import PointwiseLoss, curvature_steps

PathLike = str | os.PathLike
KINK_STEP = 1e-8
"""Relative step ``e_i / (1 + |y_i|)`` on either side of ``f = y`` for the jump."""
JUMP_THRESHOLD = 1e-6
"""Jumps below this times ``max(1, |g|)`` are a smooth loss's, and set to 0."""


@dataclass(frozen=True)
class LossTerms:
    """Per-observation derivatives of a loss at the data, shape ``(..., n)`` each.

    Attributes
    ----------
    gradient : ndarray
        ``d loss(y_i, f_i) / d f``.
    curvature : ndarray
        ``d^2 loss(y_i, f_i) / d f^2`` where it exists (0 on linear pieces).
    jump : ndarray
        Jump of ``d loss(y_i, f) / d f`` as ``f`` increases through ``y_i``.
    residual : ndarray
        ``y_i - f_i``.
    """

    gradient: np.ndarray
    curvature: np.ndarray
    jump: np.ndarray
    residual: np.ndarray


def python_terms(
    y: np.ndarray, f: np.ndarray, loss: str | Loss, params: tuple[float, ...]
) -> LossTerms:
    """:class:`LossTerms` of a shipped or given :class:`~stanflow.losses.Loss`.

    Raises
    ------
    ValueError
        If the loss has kinks away from ``y = f`` (``jump`` is None).
    """
    loss = get_loss(loss)
    if loss.jump is None:
        raise ValueError(
            f"loss: the plug-in needs the risk's curvature, and loss {loss.name!r} "
            "has kinks away from y = f that it cannot estimate"
        )
    y, f = np.broadcast_arrays(np.asarray(y, float), np.asarray(f, float))
    return LossTerms(
        gradient=loss.gradient(y, f, *params),
        curvature=loss.curvature(y, f, *params),
        jump=np.full(y.shape, float(loss.jump)),
        residual=y - f,
    )


def stan_terms(
    loss_file: PathLike, params: np.ndarray, y: np.ndarray, f: np.ndarray
) -> LossTerms:
    """:class:`LossTerms` of a Stan loss for one data set or a stack of them.

    Parameters
    ----------
    loss_file : str or os.PathLike
    params : ndarray
        The loss's parameter vector.
    y, f : ndarray, shape (..., n)
        Observations and predictions.
    """
    y, f = np.broadcast_arrays(np.asarray(y, float), np.asarray(f, float))
    terms = [
        _one_data_set(PointwiseLoss(loss_file, y_r, params), y_r, f_r)
        for y_r, f_r in zip(y.reshape(-1, y.shape[-1]), f.reshape(-1, f.shape[-1]), strict=True)
    ]
    return LossTerms(
        *(np.stack([getattr(t, k) for t in terms]).reshape(y.shape)
          for k in ("gradient", "curvature", "jump", "residual"))
    )


def stan_location_risk(
    loss_file: PathLike, params: np.ndarray, y: np.ndarray
):
    """``(y, theta) -> loss values`` of a Stan loss, for the golden-section search.

    Returns a callable with the broadcasting of
    :func:`stanflow.losses.loss_function` (``y`` of shape ``(..., n)``,
    ``theta`` of shape ``(..., 1)``), evaluated by one loaded model per data set.
    """
    y = np.asarray(y, float)
    flat = y.reshape(-1, y.shape[-1])
    models = [PointwiseLoss(loss_file, y_r, params) for y_r in flat]

    def values(_y: np.ndarray, theta: np.ndarray) -> np.ndarray:
        theta = np.broadcast_to(theta, (*y.shape[:-1], 1)).reshape(-1)
        return np.stack(
            [m.values(np.full(flat.shape[1], t)) for m, t in zip(models, theta, strict=True)]
        ).reshape(y.shape)

    return values


def _one_data_set(model: PointwiseLoss, y: np.ndarray, f: np.ndarray) -> LossTerms:
    gradient = model.derivatives(f)
    step = KINK_STEP * (1 + np.abs(y))
    above, below = model.derivatives(y + step), model.derivatives(y - step)
    jump = above - below
    smooth = np.abs(jump) <= JUMP_THRESHOLD * np.maximum(
        1.0, np.maximum(np.abs(above), np.abs(below))
    )
    jump = np.where(smooth, 0.0, jump)
    curvature = model.second_derivatives(f)
    width = curvature_steps(f)
    straddled = np.abs(y - f) < width
    curvature = np.where(straddled, curvature - jump / (2 * width), curvature)
    return LossTerms(gradient, curvature, jump, y - f)
