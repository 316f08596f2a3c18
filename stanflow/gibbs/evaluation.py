"""A loss program's evaluation form, in process: the target, its gradient and the losses.

The evaluation form of a loss program (:mod:`stanflow.gibbs.contract`) is the
program with ``omega`` and ``weights`` moved to its last parameters, compiled
as a library and loaded with the data (bridgestan). At unconstrained points
``u`` (shape ``(S, D)``) and any rate and weights it gives the target
``log prior - omega * sum_i weights[i] * loss_i``, its gradient, and each
observation's loss ``loss_i = -(d target / d weights[i]) / omega``, in batches of
rows ``(u, omega, weights)`` (:func:`stanflow.models.log_density_rows`) of at most
:data:`ROW_BUDGET` doubles. Where the program's data can be cut by
observation (:mod:`stanflow.gibbs.slices`), the prior comes from the form loaded
with one observation and, for large data, the target from chunks of them; and
weights that leave observations out (a bootstrap resample's) are evaluated on
the form loaded with the others (:mod:`stanflow.gibbs.drawn`).

:class:`EvaluationForm` is that half of
:class:`~stanflow.gibbs.program.LossProgram`, which loads the library and
checks the contract through it; the executable for NUTS is the other half.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import bridgestan
import numpy as np

from stanflow.gibbs.drawn import DrawnForms
from stanflow.gibbs.slices import ObservationSlices
from stanflow.models import (
    constrain_rows,
    log_density_gradient_rows,
    log_density_rows,
    unconstrain_rows,
)

ROW_BUDGET = 2**21
"""Doubles per in-process call (rows of ``D + 1 + n``): bounds the memory of a batch."""


class EvaluationForm:
    """The in-process calls of a loss program at unconstrained points.

    A base of :class:`~stanflow.gibbs.program.LossProgram`, which sets the
    attributes below when it loads the evaluation form.

    Attributes
    ----------
    library : bridgestan.StanModel
        The evaluation form, loaded with the data.
    n : int
        Number of observations (the size of ``weights``).
    dim : int
        Number of unconstrained parameters ``D``.
    names : list of str
        The constrained parameters, flattened and named as cmdstanpy names them.
    threads : int or None
        Threads of the in-process calls (None: the cores this process may use).
    slices : ObservationSlices or None
        The form loaded on slices of the observations, where the program
        allows it (checked when it loads); None: evaluated whole.
    drawn : DrawnForms or None
        The form loaded on the observations that weights use, where the
        program allows it (checked when it loads,
        :mod:`stanflow.gibbs.drawn`); None: weights are evaluated on all.
    """

    library: bridgestan.StanModel
    n: int
    dim: int
    names: list[str]
    threads: int | None
    slices: ObservationSlices | None = None
    drawn: DrawnForms | None = None

    def log_density(
        self,
        u: np.ndarray,
        omega: float | np.ndarray = 1.0,
        weights: np.ndarray | None = None,
        *,
        jacobian: bool = True,
    ) -> np.ndarray:
        """``log prior(theta) - omega * sum_i weights[i] loss_i(theta)`` at ``u``, shape ``(S,)``.

        Every constant kept (``propto=False``), plus the log Jacobian of the
        constraining transforms with ``jacobian`` (a density of ``u``). Points
        the program rejects get ``-inf``. ``omega`` is a number or one per
        point, ``weights`` shape ``(n,)`` or ``(S, n)``.
        """
        return self._evaluate(u, omega, weights, jacobian, None)[0]

    def log_density_gradient(
        self,
        u: np.ndarray,
        omega: float | np.ndarray = 1.0,
        weights: np.ndarray | None = None,
        *,
        jacobian: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`log_density` and its gradient in ``u``, shapes ``(S,)`` and ``(S, D)``."""
        lp, grad = self._evaluate(u, omega, weights, jacobian, "u")
        assert grad is not None
        return lp, grad

    def log_prior(self, u: np.ndarray, *, jacobian: bool = True) -> np.ndarray:
        """The log prior at ``u`` (the target at ``omega = 0``), shape ``(S,)``."""
        return self.log_density(u, 0.0, None, jacobian=jacobian)

    def losses(self, u: np.ndarray) -> np.ndarray:
        """Every observation's loss at every point, shape ``(S, n)``.

        Read off the target: ``loss_i = -d target / d weights[i]`` at
        ``omega = 1``. Rejected points get ``nan``.
        """
        _, grad = self._evaluate(u, 1.0, None, False, "weights")
        assert grad is not None
        return -grad

    def total_loss(self, u: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """``sum_i weights[i] loss_i`` at every point, shape ``(S,)``; ``inf`` where rejected."""
        return self.prior_and_loss(u, weights, jacobian=False)[1]

    def prior_and_loss(
        self, u: np.ndarray, weights: np.ndarray | None = None, *, jacobian: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """The log prior (with the log Jacobian, by default) and ``sum_i weights[i] loss_i``.

        The target at ``omega = 0`` and at ``omega = 1``, whose difference is
        the loss (the Jacobian cancels). Shapes ``(S,)``; a point the program
        rejects has log prior ``-inf`` and loss ``inf``.
        """
        prior = self.log_density(u, 0.0, None, jacobian=jacobian)
        at_one = self.log_density(u, 1.0, weights, jacobian=jacobian)
        return prior, np.where(np.isfinite(prior), prior - at_one, np.inf)

    def loss_gradient(
        self, u: np.ndarray, weights: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``sum_i weights[i] loss_i`` and its gradient in ``u``, shapes ``(S,)`` and ``(S, D)``.

        The prior is taken out by difference: the target at ``omega = 1``
        minus the target at ``omega = 0``.
        """
        lp1, grad1 = self.log_density_gradient(u, 1.0, weights, jacobian=False)
        lp0, grad0 = self.log_density_gradient(u, 0.0, None, jacobian=False)
        return lp0 - lp1, grad0 - grad1

    def constrain(self, u: np.ndarray) -> np.ndarray:
        """The parameters as declared at ``u``, shape ``(S, len(names))``."""
        P = len(self.names)
        return self._map_rows(u, 1.0, None, lambda r: constrain_rows(self.library, r)[:, :P],
                              columns=P)

    def unconstrain(self, theta: np.ndarray) -> np.ndarray:
        """Unconstrained points of parameter values ``theta`` (shape ``(S, len(names))``).

        Raises
        ------
        ValueError
            For the wrong shape, or a row outside the parameters' support.
        """
        theta = np.atleast_2d(np.asarray(theta, dtype=float))
        if theta.ndim != 2 or theta.shape[1] != len(self.names):
            raise ValueError(
                f"theta must have shape (S, {len(self.names)}) ({', '.join(self.names)}), "
                f"got {theta.shape}"
            )
        P = len(self.names)
        size = max(1, ROW_BUDGET // (P + 1 + self.n))
        buffer = np.ones((min(size, len(theta)), P + 1 + self.n))
        out = np.empty((len(theta), self.dim))
        for i in range(0, len(theta), size):
            block = buffer[: min(size, len(theta) - i)]
            block[:, :P] = theta[i : i + size]
            try:
                out[i : i + size] = unconstrain_rows(self.library, block)[:, : self.dim]
            except ValueError as err:
                raise ValueError(f"theta: outside the parameters' support: {err}") from None
        return out

    def check_points(self, u: np.ndarray) -> np.ndarray:
        """``u`` as a finite float array of shape ``(S, D)``."""
        u = np.asarray(u, dtype=float)
        if u.ndim != 2 or u.shape[1] != self.dim:
            raise ValueError(f"u must have shape (S, {self.dim}), got {u.shape}")
        if not np.all(np.isfinite(u)):
            raise ValueError("u must be finite")
        return u

    # -- pieces -----------------------------------------------------------------

    def _evaluate(
        self, u: np.ndarray, omega: Any, weights: Any, jacobian: bool, gradient: str | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The target, and its gradient in ``u`` or in the weights (``gradient``).

        Whole, or on the program's :attr:`slices`: the prior from one
        observation where every ``omega`` is 0, and the sum over the chunks
        less the prior counted once per extra chunk; weights shared by every
        point that leave observations out, on the slices of the others
        (:attr:`drawn`).
        """
        u = self.check_points(u)
        S = len(u)
        rates = _check_rates(omega, S)
        w = self._check_weights(weights, S)
        slices = self.slices
        if (w is not None and w.ndim == 1 and gradient != "weights" and self.drawn is not None
                and np.any(rates)):
            cut = self.drawn.cut(w, S)
            if cut is not None:
                slices, w = cut
        if slices is None or (not slices.chunks and (gradient == "weights" or np.any(rates))):
            return _part(self.library, self.dim, self.n, u, rates, w, jacobian, gradient,
                         self.threads)
        zero = np.zeros(S)
        if gradient != "weights" and not np.any(rates):
            return _part(slices.prior, self.dim, 1, u, zero, None, jacobian, gradient,
                         self.threads)
        prior, prior_grad = _part(slices.prior, self.dim, 1, u, zero, None, jacobian,
                                  "u" if gradient == "u" else None, self.threads)
        extra = len(slices.chunks) - 1
        total = -extra * prior
        grad = None
        if gradient == "weights":
            grad = np.empty((S, self.n))
        elif prior_grad is not None:
            grad = -extra * prior_grad
        for rows, library in slices.chunks:
            part = None if w is None else w[..., rows]
            lp, g = _part(library, self.dim, rows.stop - rows.start, u, rates, part, jacobian,
                          gradient, self.threads)
            total += lp
            if grad is not None and g is not None:
                if gradient == "weights":
                    grad[:, rows] = g
                else:
                    grad += g
        return np.where(np.isfinite(prior), total, -np.inf), grad

    def _check_weights(self, weights: Any, S: int) -> np.ndarray | None:
        """``weights`` (None, shape ``(n,)`` or ``(S, n)``) checked finite and non-negative."""
        if weights is None:
            return None
        w = np.asarray(weights, dtype=float)
        if w.shape not in ((self.n,), (S, self.n)):
            raise ValueError(
                f"weights must have shape ({self.n},) or ({S}, {self.n}), got {w.shape}")
        if not np.all(np.isfinite(w) & (w >= 0)):
            raise ValueError("weights must be finite and non-negative")
        return w

    def _map_rows(
        self, u: np.ndarray, omega: Any, weights: Any, call: Callable[[np.ndarray], np.ndarray],
        columns: int | None = None,
    ) -> np.ndarray:
        """``call`` on the rows' blocks, its results stacked, shape ``(S,)`` or ``(S, columns)``."""
        u = self.check_points(u)
        out = np.empty(len(u) if columns is None else (len(u), columns))
        rates = _check_rates(omega, len(u))
        for rows, block in _blocks(u, rates, self._check_weights(weights, len(u)), self.n):
            out[rows] = call(block)
        return out


def _check_rates(omega: Any, S: int) -> np.ndarray:
    """``omega`` (a number or one per point) as ``S`` finite rates."""
    rates = np.broadcast_to(np.asarray(omega, dtype=float), (S,))
    if not np.all(np.isfinite(rates)):
        raise ValueError(f"omega must be finite, got {omega!r}")
    return rates


def _blocks(
    u: np.ndarray, omega: np.ndarray, w: np.ndarray | None, n: int
) -> Iterator[tuple[slice, np.ndarray]]:
    """Rows ``(u, omega, weights)`` in blocks of at most :data:`ROW_BUDGET` doubles.

    One buffer is reused, so each block must be used before the next is asked
    for; weights shared by every row (``None``, meaning all 1, or shape
    ``(n,)``) are written into it once, not once per row.
    """
    S, D = u.shape
    width = D + 1 + n
    size = max(1, ROW_BUDGET // width)
    buffer = np.empty((min(size, S), width))
    shared = w is None or w.ndim == 1
    if shared:
        buffer[:, D + 1 :] = 1.0 if w is None else w
    for i in range(0, S, size):
        rows = slice(i, min(i + size, S))
        block = buffer[: rows.stop - i]
        block[:, :D] = u[rows]
        block[:, D] = omega[rows]
        if not shared:
            assert w is not None
            block[:, D + 1 :] = w[rows]
        yield rows, block


def _part(
    library: bridgestan.StanModel, dim: int, n: int, u: np.ndarray, omega: np.ndarray,
    w: np.ndarray | None, jacobian: bool, gradient: str | None, threads: int | None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """One loaded form's target at rows ``(u, omega, w)`` of its ``n`` observations, and
    its gradient in ``u`` (``"u"``, shape ``(S, D)``) or in the weights (``"weights"``,
    ``(S, n)``) or none. Every value is checked finite already."""
    S = len(u)
    lp = np.empty(S)
    columns = {None: None, "u": slice(0, dim), "weights": slice(dim + 1, None)}[gradient]
    grad = None if columns is None else np.empty((S, dim if gradient == "u" else n))
    for rows, block in _blocks(u, omega, w, n):
        if columns is None:
            lp[rows] = log_density_rows(library, block, propto=False, jacobian=jacobian,
                                        threads=threads, reject_as_neg_inf=True,
                                        check_finite=False)
            continue
        lp[rows], full = log_density_gradient_rows(
            library, block, propto=False, jacobian=jacobian, threads=threads,
            reject_as_neg_inf=True, check_finite=False,
        )
        assert grad is not None
        grad[rows] = full[:, columns]
    return lp, grad
