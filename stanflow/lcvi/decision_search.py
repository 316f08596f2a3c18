"""The search for the minimisers of ``N`` expected losses at once, with Stan in process.

The expected loss of decision ``n``, ``E(h_n) = (1/S) sum_s loss(Y[s, n], h_n)``,
and its derivative come from ``stan/lcvi/expected_loss.stan`` loaded with the
samples (:class:`ExpectedLoss`); :func:`minimise_expected_losses` runs the search
that :mod:`stanflow.lcvi.numeric_decisions` describes, vectorised over the
decisions: golden sections of each range of samples on the values of ``E``,
then bisection on the sign of Stan's derivative (:func:`bisect_slopes`). A
minimum outside a range of samples, a non-finite expected loss and Stan's errors
are ``ValueError`` naming the loss file or its parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import bridgestan
import numpy as np

from stanflow.golden import golden_section, sections_for
from stanflow.models import load

XTOL = 1e-10
"""Default final bracket width, relative to each decision's range of samples."""

GOLDEN_XTOL = 1e-6
"""Bracket width (relative) at which golden sections hand over to the
derivative: values of a smooth ``E`` stop telling points apart at about
``1e-8`` of its scale, so 1e-6 is safely above round-off."""

CHUNK_ELEMENTS = 2**18
"""Samples (2 MB of doubles, about 6 MB of JSON) per loaded model at most:
more decisions are split over several models, each holding whole columns."""


class ExpectedLoss:
    """The expected losses of ``N`` decisions over their own samples, in process.

    Parameters
    ----------
    library : path
        From :func:`stanflow.lcvi.numeric_decisions.loss_library`.
    samples : ndarray, shape (S, N)
        Finite; column ``n`` holds the samples of decision ``n``.
    loss_params : tuple of float
    loss_file : path
        Named in errors.

    Notes
    -----
    Decisions are split over several loaded models when ``S N`` exceeds
    :data:`CHUNK_ELEMENTS`; each call evaluates all of them.
    """

    def __init__(
        self,
        library: Path,
        samples: np.ndarray,
        loss_params: tuple[float, ...],
        loss_file: Path,
    ) -> None:
        self.loss_file, self.loss_params = loss_file, loss_params
        S, N = samples.shape
        per_model = max(1, CHUNK_ELEMENTS // S)
        self.blocks: list[tuple[slice, bridgestan.StanModel]] = []
        for start in range(0, N, per_model):
            block = slice(start, min(start + per_model, N))
            data = {
                "S": S,
                "N": block.stop - block.start,
                "Y": samples[:, block],
                "n_loss_params": len(loss_params),
                "loss_params": list(loss_params),
            }
            self.blocks.append((block, load(library, data)))

    def values(self, h: np.ndarray) -> np.ndarray:
        """``E(h_n)`` for each decision, shape (N,)."""
        out = np.empty_like(h)
        for block, model in self.blocks:
            n = block.stop - block.start
            theta = np.ascontiguousarray(h[block])
            try:
                out[block] = model.param_constrain(theta, include_tp=True)[n:]
            except RuntimeError as err:
                raise _stan_error(err, self.loss_file, self.loss_params) from None
        return _check_finite(out, h, self.loss_file)

    def slopes(self, h: np.ndarray) -> np.ndarray:
        """``E'(h_n)`` for each decision (Stan's autodiff), shape (N,)."""
        out = np.empty_like(h)
        for block, model in self.blocks:
            theta = np.ascontiguousarray(h[block])
            try:
                _, gradient = model.log_density_gradient(
                    theta, propto=False, jacobian=False
                )
            except RuntimeError as err:
                raise _stan_error(err, self.loss_file, self.loss_params) from None
            out[block] = -np.asarray(gradient)  # the target is -sum_n E(h_n)
        return out


def minimise_expected_losses(
    library: Path,
    path: Path,
    params: tuple[float, ...],
    samples: np.ndarray,
    xtol: float,
) -> np.ndarray:
    """The decisions (N,) minimising the expected losses over checked ``samples`` (S, N).

    Parameters
    ----------
    library : pathlib.Path
        From :func:`stanflow.lcvi.numeric_decisions.loss_library`.
    path : pathlib.Path
        The loss file, named in errors.
    params : tuple of float
        The Stan vector ``loss_params``.
    samples : ndarray, shape (S, N)
        Finite; column ``n`` holds the samples of decision ``n``.
    xtol : float
        Final bracket width relative to each range of samples, in ``(0, 1)``.
    """
    expected = ExpectedLoss(library, samples, params, path)
    low, high = samples.min(axis=0), samples.max(axis=0)
    _check_minimum_inside(expected, low, high, path)
    low, high = golden_section(
        expected.values, low, high, sections_for(max(xtol, GOLDEN_XTOL))
    )
    if xtol < GOLDEN_XTOL:
        low, high = bisect_slopes(
            expected.slopes, low, high, math.ceil(math.log2(GOLDEN_XTOL / xtol))
        )
    return (low + high) / 2


def bisect_slopes(
    slope: Callable[[np.ndarray], np.ndarray],
    low: np.ndarray,
    high: np.ndarray,
    steps: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Bisection on the sign of the derivative, elementwise, where it brackets a minimum.

    Where ``slope(low) < 0 < slope(high)`` the bracket is halved ``steps``
    times towards the sign change (a zero slope at a midpoint ends that
    element's search there); elsewhere it is returned unchanged.

    Parameters
    ----------
    slope : callable
        ``h (N,) -> (N,)``, element ``n`` the derivative in ``h[n]``.
    low, high : ndarray, shape (N,)
    steps : int

    Returns
    -------
    low, high : ndarray
    """
    active = (slope(low) < 0) & (slope(high) > 0)
    for _ in range(steps):
        if not active.any():
            break
        middle = (low + high) / 2
        s = slope(middle)
        low = np.where(active & (s <= 0), middle, low)
        high = np.where(active & (s >= 0), middle, high)
        active &= s != 0
    return low, high


def _check_minimum_inside(
    expected: ExpectedLoss, low: np.ndarray, high: np.ndarray, path: Path
) -> None:
    """Raise unless ``E`` grows just outside each ``[low, high]``."""
    width = high - low
    step = 1e-3 * np.where(width > 0, width, 1.0 + np.abs(low))
    for end, outside, side in (
        (low, low - step, "below"),
        (high, high + step, "above"),
    ):
        at_end, beyond = expected.values(end), expected.values(outside)
        scale = 1e-12 * (np.abs(at_end) + np.abs(beyond))
        bad = np.flatnonzero(beyond < at_end - scale)
        if bad.size:
            raise ValueError(
                f"loss_file: the expected loss of {path.name} decreases {side} the "
                f"range of the samples for {bad.size} decision(s) (first: index "
                f"{bad[0]}): its minimum lies outside [min_s Y, max_s Y], which the "
                "numerical search assumes holds it (each outcome's loss should grow "
                "as h moves away from it)"
            )


def _check_finite(values: np.ndarray, h: np.ndarray, path: Path) -> np.ndarray:
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        n = bad[0]
        raise ValueError(
            f"loss_file: {path.name} gives a non-finite expected loss "
            f"({values[n]!r}) for decision {n} at h = {h[n]!r}"
        )
    return values


def _stan_error(err: RuntimeError, path: Path, params: tuple[float, ...]) -> ValueError:
    """A ``ValueError`` naming the argument to blame for Stan's ``err``."""
    message = str(err)
    # Stan: "index 1 out of range; container is empty and cannot be indexed",
    # "index 2 out of range; expecting index to be between 1 and 1"
    short = "container is empty" if not params else f"between 1 and {len(params)}"
    if "out of range" in message and short in message:
        return ValueError(
            f"loss_params: {path.name} reads more loss parameters than the "
            f"{len(params)} given ({list(params)}); Stan says: {message}"
        )
    return ValueError(f"loss_file: {path.name} failed in Stan: {message}")
