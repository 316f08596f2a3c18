"""Bayes decisions of a loss given only as a Stan file, by numerical optimisation in process.

Most shipped losses (:mod:`stanflow.losses`) know their Bayes decision in
closed form (a mean, a quantile, LinEx's formula). A loss of your own needs
only its Stan file, ``real loss(real y, real f, vector loss_params)`` (the
signature of every method; so does a shipped loss without a closed form,
such as ``huber``): its Bayes decision for each of ``N`` decisions minimises the
expected loss ``E(h_n) = (1/S) sum_s loss(Y[s, n], h_n)`` over that
decision's ``S`` outcome samples. The program ``stan/lcvi/expected_loss.stan``
(the file in its slot ``loss.stanfunctions``) computes all ``N`` expected
losses in one ``param_constrain`` call (they are its transformed parameters)
and their derivatives in one gradient call (its target is ``-sum_n E(h_n)``),
in process through :func:`stanflow.models.load`.

The search, vectorised over the ``N`` decisions (one call per step for all of
them):

1. **Golden sections** of ``[min_s Y[s, n], max_s Y[s, n]]`` on the values of
   ``E`` until the bracket is :data:`GOLDEN_XTOL` of its first width. This
   needs no derivative, so it holds for kinked losses (absolute, check:
   ``E`` is piecewise linear) as for smooth ones.
2. **Bisection on the sign of Stan's derivative** ``E'(h_n)`` inside that
   bracket, where the derivative is negative at its lower end and positive at
   its upper end, down to ``xtol`` times the first width. Values alone cannot
   locate a smooth minimum much below ``sqrt(machine epsilon)`` of the scale;
   the derivative's sign can, and for a kinked loss it changes exactly at the
   kink that is the minimiser.

**Tolerance.** The decision returned is within ``xtol * (max_s Y - min_s Y)``
of the minimiser of ``E`` (default :data:`XTOL` ``= 1e-10``; within
:data:`GOLDEN_XTOL` ``= 1e-6`` of that width where the derivative gives no
bracket, e.g. a piecewise-constant loss), up to floating-point round-off in
``E``. The search assumes what holds for every shipped loss: ``E`` is
unimodal and its minimum lies within the samples' range (each outcome's loss
grows as ``h`` moves away from it). A minimum outside the range is detected
and reported; a multimodal ``E`` may give a local minimum.

**Normal mixtures** (the LCVI loop's decision step): the predictive
``(1/T) sum_t N(loc[t], sd^2)`` is represented by ``K`` noise nodes per draw,
``Y[t, k] = loc[t] + sd z[t, k]`` with ``z[t, k] = Phi^-1((k + u_t) / K)``:
one node in each of ``K`` equal-probability strata of ``N(0, 1)``, offset by a
golden-ratio sequence ``u_t`` so that the ``T K`` nodes together fill ``T K``
strata (:func:`noise_nodes`). The decisions are then exact for these samples
(as above); against the exact mixture decision of a shipped loss, with
``T = 1000`` draws and the default ``K = 32``, they differ by at most about
``5e-3`` of the predictive sd ``sqrt(var_t loc[t] + sd^2)`` (measured on 360
decisions: quantiles from 0.1 to 0.9, the median, LinEx with ``|c| sd <= 1``;
the mean is exact to ``2e-5``). The error falls slowly with ``K``: it comes
from the spread of ``loc[t]`` across the strata, as in stratified sampling.

Cost: each step evaluates the loss ``S N`` times in double precision (the
derivative steps with autodiff); the samples are passed to the model as JSON,
once per set of samples. With ``T = 1000``, ``K = 32`` and ``N = 6`` a mixture
decision takes about 0.4 s, most of it loading the 192000 samples; the LCVI
loop's decision steps on the normal mean cost about 1.2 s more per run than
with the shipped rule. It suits problems with up to thousands of decisions
(eight schools, the normal mean), not Last.fm's 50000 with ``T = 1000`` draws
each: give the loss a closed-form rule there (a :class:`~stanflow.losses.Loss`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import cast

import bridgestan
import numpy as np
from scipy.special import ndtri

from stanflow.golden import RATIO, golden_section, sections_for
from stanflow.losses import BoundLoss, Loss, bound_loss, get_loss, loss_parameters
from stanflow.models import compile_library, load, program_path
from stanflow.signatures import LOSS, check_signature
from stanflow.slots import is_slot_file

PROGRAM = "lcvi/expected_loss"
"""The program under ``stan/`` whose slot ``loss.stanfunctions`` takes the loss."""

XTOL = 1e-10
"""Default final bracket width, relative to each decision's range of samples."""

GOLDEN_XTOL = 1e-6
"""Bracket width (relative) at which golden sections hand over to the
derivative: values of a smooth ``E`` stop telling points apart at about
``1e-8`` of its scale, so 1e-6 is safely above round-off."""

NOISE_NODES = 32
"""Default noise nodes ``K`` per draw for normal mixtures (:func:`noise_nodes`)."""

CHUNK_ELEMENTS = 2**18
"""Samples (2 MB of doubles, about 6 MB of JSON) per loaded model at most:
more decisions are split over several models, each holding whole columns."""


def loss_library(loss_file: str | os.PathLike) -> Path:
    """Compile (once per content) :data:`PROGRAM` with ``loss_file`` in its slot.

    The file's signature is checked by stanc first
    (:func:`stanflow.signatures.check_signature`), before anything compiles.

    Parameters
    ----------
    loss_file : str or os.PathLike
        A Stan file defining ``real loss(real y, real f, vector loss_params)``.

    Returns
    -------
    pathlib.Path
        The model library (:func:`stanflow.models.compile_library`).

    Raises
    ------
    stanflow.models.CompileError
        If the file does not define the loss slot's signature; the message
        names the file and the signature.
    """
    path = check_loss_file(loss_file)
    check_signature(path, LOSS)
    return compile_library(
        program_path(PROGRAM),
        slots={"loss.stanfunctions": path},
        name="expected_loss",
    )


class ExpectedLoss:
    """The expected losses of ``N`` decisions over their own samples, in process.

    Parameters
    ----------
    library : path
        From :func:`loss_library`.
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


def bayes_decisions(
    loss_file: str | os.PathLike,
    samples: np.ndarray,
    loss_params: Iterable[float] = (),
    *,
    xtol: float = XTOL,
) -> np.ndarray:
    """Bayes decisions of the loss in ``loss_file`` from outcome samples, numerically.

    Each decision minimises ``(1/S) sum_s loss(samples[s, n], h_n)`` (see the
    module docstring for the method and its tolerance).

    Parameters
    ----------
    loss_file : str or os.PathLike
        A Stan file defining ``real loss(real y, real f, vector loss_params)``.
    samples : array_like, shape (S, *shape)
        Finite outcome samples, ``S >= 1`` along axis 0, one decision per
        element of ``shape`` (as :meth:`stanflow.losses.BoundLoss.bayes_decision`).
    loss_params : sequence of float, default ()
        The Stan vector ``loss_params``, finite.
    xtol : float, default :data:`XTOL`
        Final bracket width relative to each decision's range of samples, in
        ``(0, 1)``.

    Returns
    -------
    ndarray, shape ``shape``

    Raises
    ------
    ValueError
        Naming the argument: a missing loss file, samples of the wrong shape
        or not finite, loss parameters that are not finite or fewer than the
        file reads (Stan's message included), a non-finite expected loss, an
        expected loss whose minimum lies outside the samples' range.

    Examples
    --------
    >>> bayes_decisions("stan/losses/check.stanfunctions", y, [0.2])  # doctest: +SKIP
    """
    path = check_loss_file(loss_file)
    samples, shape = _check_samples(samples)
    params = check_loss_params(path, loss_params)
    xtol = _check_xtol(xtol)
    return _decisions(loss_library(path), path, params, samples, xtol).reshape(shape)


def mixture_decisions(
    loss_file: str | os.PathLike,
    loc: np.ndarray,
    sd: np.ndarray,
    loss_params: Iterable[float] = (),
    *,
    nodes: int = NOISE_NODES,
    xtol: float = XTOL,
) -> np.ndarray:
    """Bayes decisions for ``(1/T) sum_t N(loc[t], sd^2)``, numerically.

    :func:`bayes_decisions` on the samples ``loc[t] + sd z[t, k]``
    (:func:`noise_nodes`), which stand for the mixture with its noise
    stratified; see the module docstring for their accuracy.

    Parameters
    ----------
    loss_file, loss_params, xtol
        As for :func:`bayes_decisions`.
    loc : array_like, shape (T, *shape)
        Finite locations, ``T >= 1``.
    sd : array_like, broadcasting against ``shape``
        Positive standard deviations.
    nodes : int, default :data:`NOISE_NODES`
        Noise nodes ``K`` per draw, at least 1.

    Returns
    -------
    ndarray, shape ``shape``
    """
    path = check_loss_file(loss_file)
    params = check_loss_params(path, loss_params)
    xtol = _check_xtol(xtol)
    _check_nodes(nodes)
    samples, shape = _mixture_samples(loc, sd, nodes)
    return _decisions(loss_library(path), path, params, samples, xtol).reshape(shape)


def loss_values(
    loss_file: str | os.PathLike,
    y: np.ndarray,
    h: np.ndarray,
    loss_params: Iterable[float] = (),
) -> np.ndarray:
    """``loss(y, h)`` elementwise, ``y`` broadcast against ``h``, evaluated by Stan.

    Parameters
    ----------
    loss_file, loss_params
        As for :func:`bayes_decisions`.
    y, h : array_like
        Finite, broadcasting against each other.

    Returns
    -------
    ndarray, the broadcast shape
    """
    path = check_loss_file(loss_file)
    params = check_loss_params(path, loss_params)
    return _values(loss_library(path), path, params, y, h)


def noise_nodes(T: int, K: int) -> np.ndarray:
    """Stratified standard normal nodes ``z[t, k] = Phi^-1((k + u_t) / K)``, shape (T, K).

    ``u_t`` is the fractional part of ``1/2 + t (sqrt(5) - 1) / 2`` (a
    golden-ratio sequence): each row has one node in each of the ``K``
    equal-probability strata of ``N(0, 1)``, and the rows together spread
    evenly within them, so that the ``T K`` nodes pooled are close to the
    midpoints of ``T K`` strata.

    Parameters
    ----------
    T, K : int
        At least 1.
    """
    for name, value in (("T", T), ("K", K)):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, np.integer))
            or value < 1
        ):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    u = np.modf(0.5 + np.arange(T) * RATIO)[0]
    return ndtri((np.arange(K)[None, :] + u[:, None]) / K)


def stan_loss(
    loss_file: str | os.PathLike,
    params: Iterable[float] | Mapping[str, float] = (),
    *,
    name: str | None = None,
    nodes: int = NOISE_NODES,
    xtol: float = XTOL,
) -> BoundLoss:
    """A :class:`~stanflow.losses.BoundLoss` from a Stan file alone.

    Its values are Stan's (:func:`loss_values`), its Bayes decisions numerical
    (:func:`bayes_decisions`, :func:`mixture_decisions`), its ``stan_file``
    the file, so the LCVI loop and templates use it as they use a shipped loss.
    The library is compiled (once per content) and the loss evaluated once at
    ``(y, h) = (1, 2)`` here, so that a broken file or missing parameters fail
    before any run.

    Parameters
    ----------
    loss_file : str or os.PathLike
        ``real loss(real y, real f, vector loss_params)``.
    params : sequence of float or mapping, default ()
        The Stan vector ``loss_params``, or its values by the names the file
        declares (:func:`check_loss_params`).
    name : str, optional
        Recorded in results; default the file's stem.
    nodes : int, default :data:`NOISE_NODES`
        Noise nodes per draw of the mixture decisions.
    xtol : float, default :data:`XTOL`
        Tolerance of the decisions (relative to each range of samples).

    Returns
    -------
    BoundLoss
    """
    path = check_loss_file(loss_file)
    params = check_loss_params(path, params)
    xtol = _check_xtol(xtol)
    _check_nodes(nodes)
    library = loss_library(path)
    _values(library, path, params, np.ones(1), np.full(1, 2.0))
    return BoundLoss(
        name=path.stem if name is None else str(name),
        params=params,
        value=partial(_values, library, path, params),
        stan_file=path,
        decision=partial(_sample_rule, library, path, params, xtol),
        mixture=partial(_mixture_rule, library, path, params, xtol, nodes),
    )


def resolve_loss(
    loss: str | os.PathLike | Loss | BoundLoss, **params: float
) -> BoundLoss:
    """The loss of a decision problem, with its parameters bound.

    A :class:`~stanflow.losses.BoundLoss` is returned as is; a shipped loss
    with a Bayes decision in closed form (:data:`stanflow.losses.LOSSES`) is
    bound to ``params``; a Stan file (:func:`stanflow.slots.is_slot_file`),
    or a shipped loss without a closed-form decision (``huber``), becomes
    :func:`stan_loss` of its file. ``params`` are the parameters by the names
    the loss declares (a file's ``// params:`` line); for a file that
    declares none, their values in the order given.
    """
    if isinstance(loss, BoundLoss):
        return bound_loss(loss, **params)
    if is_slot_file(loss):
        return stan_loss(loss, params)
    family = get_loss(cast("str | Loss", loss))
    if family.decision is None or family.mixture is None:
        return stan_loss(family.stan_file, family.bind(params), name=family.name)
    return family.with_params(params)


def check_loss_file(loss_file: str | os.PathLike) -> Path:
    """``loss_file`` as a path to an existing file, or an error naming it."""
    if not isinstance(loss_file, (str, os.PathLike)):
        raise TypeError(
            f"loss_file must be a path to a Stan file, got {type(loss_file).__name__}"
        )
    path = Path(loss_file)
    if not path.is_file():
        raise ValueError(f"loss_file: no such file {path}")
    return path.resolve()


def check_loss_params(
    path: Path, loss_params: Iterable[float] | Mapping[str, float]
) -> tuple[float, ...]:
    """``loss_params`` checked against the file's ``// params:`` declaration
    (:func:`stanflow.losses.loss_parameters`, the binding of every method), or
    an error naming it.

    A sequence is the Stan vector in order; a mapping gives the values by the
    declared names (for a file that declares none, in the order given).
    """
    return loss_parameters(path, loss_params)


def _decisions(
    library: Path,
    path: Path,
    params: tuple[float, ...],
    samples: np.ndarray,
    xtol: float,
) -> np.ndarray:
    """The search of the module docstring on checked ``samples`` (S, N)."""
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


def _values(
    library: Path, path: Path, params: tuple[float, ...], y: np.ndarray, h: np.ndarray
) -> np.ndarray:
    """Stan's ``loss(y, h)``, elementwise over the broadcast of ``y`` and ``h``."""
    y, h = np.asarray(y, dtype=float), np.asarray(h, dtype=float)
    try:
        y, h = np.broadcast_arrays(y, h)
    except ValueError:
        raise ValueError(
            f"y and h must broadcast against each other, got {y.shape} and {h.shape}"
        ) from None
    for name, array in (("y", y), ("h", h)):
        if not np.all(np.isfinite(array)):
            raise ValueError(f"{name} must be finite")
    flat_y, flat_h = y.reshape(-1), h.reshape(-1)
    out = np.empty(flat_y.size)
    for start in range(0, flat_y.size, CHUNK_ELEMENTS):
        part = slice(start, start + CHUNK_ELEMENTS)
        # one sample per decision: E(h_n) is loss(y_n, h_n) itself
        expected = ExpectedLoss(library, flat_y[None, part], params, path)
        out[part] = expected.values(flat_h[part].copy())
    return out.reshape(y.shape)


def _sample_rule(
    library: Path, path: Path, params: tuple[float, ...], xtol: float, draws: np.ndarray
) -> np.ndarray:
    """:attr:`Loss.decision` of :func:`stan_loss` (draws checked by the Loss)."""
    samples = draws.reshape(draws.shape[0], -1)
    return _decisions(library, path, params, samples, xtol).reshape(draws.shape[1:])


def _mixture_rule(
    library: Path,
    path: Path,
    params: tuple[float, ...],
    xtol: float,
    nodes: int,
    loc: np.ndarray,
    sd: np.ndarray,
) -> np.ndarray:
    """:attr:`Loss.mixture` of :func:`stan_loss` (arguments checked by the Loss)."""
    samples, shape = _mixture_samples(loc, sd, nodes)
    return _decisions(library, path, params, samples, xtol).reshape(shape)


def _mixture_samples(
    loc: np.ndarray, sd: np.ndarray, nodes: int
) -> tuple[np.ndarray, tuple[int, ...]]:
    """Samples ``loc[t] + sd z[t, k]`` (T K, N) standing for the mixture, and ``shape``."""
    loc, sd = np.asarray(loc, dtype=float), np.asarray(sd, dtype=float)
    if loc.ndim == 0 or loc.shape[0] == 0:
        raise ValueError(
            f"loc must have at least one draw along axis 0, got shape {loc.shape}"
        )
    if not np.all(np.isfinite(loc)):
        raise ValueError("loc must be finite")
    shape = loc.shape[1:]
    try:
        sd = np.broadcast_to(sd, shape).reshape(-1)
    except ValueError:
        raise ValueError(
            f"sd must broadcast against shape {shape}, got {sd.shape}"
        ) from None
    if not np.all(sd > 0) or not np.all(np.isfinite(sd)):
        raise ValueError("sd must be positive and finite")
    T = loc.shape[0]
    z = noise_nodes(T, nodes)  # (T, K)
    loc = loc.reshape(T, -1)
    samples = loc[:, None, :] + z[:, :, None] * sd  # (T, K, N)
    return samples.reshape(T * z.shape[1], -1), shape


def _check_samples(samples: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """``samples`` (S, *shape) as a finite (S, N) array, and ``shape``."""
    array = np.asarray(samples, dtype=float)
    if array.ndim < 1 or array.shape[0] == 0 or 0 in array.shape[1:]:
        raise ValueError(
            "samples must have shape (S, *shape) with S >= 1 samples along axis 0 "
            f"and at least one decision, got shape {array.shape}"
        )
    if array.ndim == 1:
        raise ValueError(
            f"samples must have shape (S, N) (one column per decision), got shape "
            f"{array.shape}: for one decision pass samples[:, None]"
        )
    bad = ~np.isfinite(array)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"samples must be finite: {int(bad.sum())} value(s) are not, first at "
            f"index {first}"
        )
    return array.reshape(array.shape[0], -1), array.shape[1:]


def _check_nodes(nodes: int) -> None:
    if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)) or nodes < 1:
        raise ValueError(f"nodes must be a positive integer, got {nodes!r}")


def _check_xtol(xtol: float) -> float:
    try:
        value = float(xtol)
    except (TypeError, ValueError):
        raise ValueError(f"xtol must be a number in (0, 1), got {xtol!r}") from None
    if not 0 < value < 1:
        raise ValueError(f"xtol must be in (0, 1), got {xtol!r}")
    return value


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
