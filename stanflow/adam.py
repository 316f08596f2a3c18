"""Adam's update (Kingma and Ba 2015), one small kernel for the in-process optimisers.

Used by LCVI's joint optimisation (:mod:`stanflow.lcvi.joint`), and beside their
workflows by the VAE of the q-path AIS experiment (``workflows/_qpaths_vae.py``)
and the authors' LCVI recipe (``workflows/_lcvi_mf_recipe.py``), and the WBB
network's minibatch solver (:func:`stanflow.wbb.neural_net.train_adam`).

Guarantee: :func:`adam_update` changes ``param``, ``m`` and ``v`` in place, in
their own dtype (float32 stays float32), by exactly::

    m <- beta1 m + (1 - beta1) g
    v <- beta2 v + (1 - beta2) g^2   (computed as (1 - beta2) * g**2)
    param <- param -/+ lr (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)

(``+`` for ``ascent``), ``t`` counting steps from 1.
"""

from __future__ import annotations

import numpy as np

BETAS = (0.9, 0.999)
"""Adam's default moment decay rates."""


def adam_update(
    param: np.ndarray,
    grad: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    t: int,
    lr: float,
    *,
    betas: tuple[float, float] = BETAS,
    eps: float = 1e-8,
    ascent: bool = False,
) -> None:
    """One bias-corrected Adam step of ``param`` along ``grad``, in place.

    Parameters
    ----------
    param, grad, m, v : ndarray, one shape
        The parameters, their gradient, and the first and second moments
        (zeros before the first step); ``param``, ``m``, ``v`` are updated.
    t : int
        The step's number, from 1.
    lr : float
        The learning rate.
    betas : (float, float), default (0.9, 0.999)
    eps : float, default 1e-8
    ascent : bool, default False
        Step up the gradient (maximise) instead of down.
    """
    beta1, beta2 = betas
    m *= beta1
    m += (1 - beta1) * grad
    v *= beta2
    v += (1 - beta2) * grad**2
    m_hat = m / (1 - beta1**t)
    v_hat = v / (1 - beta2**t)
    step = lr * m_hat / (np.sqrt(v_hat) + eps)
    if ascent:
        param += step
    else:
        param -= step
