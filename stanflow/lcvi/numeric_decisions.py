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

The search (:mod:`stanflow.lcvi.decision_search`), vectorised over the ``N``
decisions (one call per step for all of them):

1. **Golden sections** of ``[min_s Y[s, n], max_s Y[s, n]]`` on the values of
   ``E`` until the bracket is
   :data:`~stanflow.lcvi.decision_search.GOLDEN_XTOL` of its first width. This
   needs no derivative, so it holds for kinked losses (absolute, check:
   ``E`` is piecewise linear) as for smooth ones.
2. **Bisection on the sign of Stan's derivative** ``E'(h_n)`` inside that
   bracket, where the derivative is negative at its lower end and positive at
   its upper end, down to ``xtol`` times the first width. Values alone cannot
   locate a smooth minimum much below ``sqrt(machine epsilon)`` of the scale;
   the derivative's sign can, and for a kinked loss it changes exactly at the
   kink that is the minimiser.

**Tolerance.** The decision returned is within ``xtol * (max_s Y - min_s Y)``
of the minimiser of ``E`` (default ``XTOL = 1e-10``; within
``GOLDEN_XTOL = 1e-6`` of that width where the derivative gives no
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
strata (:mod:`stanflow.lcvi.mixture_nodes`). The decisions are then exact for
these samples (as above); against the exact mixture decision of a shipped loss, with
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

import os
from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import cast

import numpy as np

from stanflow.lcvi.decision_search import (
    CHUNK_ELEMENTS,
    XTOL,
    ExpectedLoss,
    minimise_expected_losses,
)
from stanflow.lcvi.mixture_nodes import NOISE_NODES, mixture_samples
from stanflow.losses import BoundLoss, Loss, bound_loss, get_loss, loss_parameters
from stanflow.models import compile_library, program_path
from stanflow.signatures import LOSS, check_signature
from stanflow.slots import is_slot_file
from stanflow.validation import check_int

PROGRAM = "lcvi/expected_loss"
"""The program under ``stan/`` whose slot ``loss.stanfunctions`` takes the loss."""


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
    decisions = minimise_expected_losses(loss_library(path), path, params, samples, xtol)
    return decisions.reshape(shape)


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
    nodes = check_int(nodes, "nodes")
    samples, shape = mixture_samples(loc, sd, nodes)
    decisions = minimise_expected_losses(loss_library(path), path, params, samples, xtol)
    return decisions.reshape(shape)


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
    nodes = check_int(nodes, "nodes")
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
    decisions = minimise_expected_losses(library, path, params, samples, xtol)
    return decisions.reshape(draws.shape[1:])


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
    samples, shape = mixture_samples(loc, sd, nodes)
    decisions = minimise_expected_losses(library, path, params, samples, xtol)
    return decisions.reshape(shape)


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


def _check_xtol(xtol: float) -> float:
    try:
        value = float(xtol)
    except (TypeError, ValueError):
        raise ValueError(f"xtol must be a number in (0, 1), got {xtol!r}") from None
    if not 0 < value < 1:
        raise ValueError(f"xtol must be in (0, 1), got {xtol!r}")
    return value
