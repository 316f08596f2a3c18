"""Losses shared by the four methods: one registry, one Stan file per loss.

- :mod:`~stanflow.losses.registry`: :class:`Loss` (a family: Stan file, NumPy
  value and derivatives, Bayes decision), :class:`BoundLoss` (with its
  parameter values), :data:`LOSSES`, :func:`get_loss`, :func:`bound_loss`,
  :func:`loss_function`; :func:`loss_parameters`, the one binding of a
  loss's parameters (by name or in order) for every method, and
  :func:`loss_slot_file`, a loss's Stan file with a file's signature checked;
- :mod:`~stanflow.losses.functions`: the NumPy functions;
- :mod:`~stanflow.losses.decisions`: Bayes decisions in closed form, from draws
  and from normal mixtures.

A loss given only as a Stan file is evaluated in process by
:mod:`stanflow.losses.pointwise`. See ``docs/your-own-loss.md``.
"""

from stanflow.losses.decisions import mixture_quantile
from stanflow.losses.registry import (
    LOSSES,
    BoundLoss,
    Loss,
    bound_loss,
    get_loss,
    loss_function,
    loss_parameters,
    loss_slot_file,
)

__all__ = [
    "LOSSES",
    "BoundLoss",
    "Loss",
    "bound_loss",
    "get_loss",
    "loss_function",
    "loss_parameters",
    "loss_slot_file",
    "mixture_quantile",
]
