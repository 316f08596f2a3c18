"""A loss program's evaluation form, in process: the target, its gradient and the losses.

The evaluation form of a loss program (:mod:`stanflow.gibbs.contract`) is the
program with ``omega`` and ``weights`` moved to its last parameters, compiled
as a library and loaded with the data (bridgestan). At unconstrained points
``u`` (shape ``(S, D)``) and any rate and weights it gives the target
``log prior - omega * sum_i weights[i] * loss_i``, its gradient, and each
observation's loss ``loss_i = -(d target / d weights[i]) / omega``, in batches of
rows ``(u, omega, weights)`` (:func:`stanflow.models.log_density_rows`) of at most
:data:`ROW_BUDGET` doubles.

:class:`EvaluationForm` is that half of
:class:`~stanflow.gibbs.program.LossProgram`, which loads the library and
checks the contract through it; the executable for NUTS is the other half.
"""

from __future__ import annotations

from typing import Any

import bridgestan
import numpy as np

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
    """

    library: bridgestan.StanModel
    n: int
    dim: int
    names: list[str]
    threads: int | None

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
        rows = self._rows(u, omega, weights)
        return self._chunked(lambda r: log_density_rows(
            self.library, r, propto=False, jacobian=jacobian, threads=self.threads,
            reject_as_neg_inf=True), rows)

    def log_density_gradient(
        self,
        u: np.ndarray,
        omega: float | np.ndarray = 1.0,
        weights: np.ndarray | None = None,
        *,
        jacobian: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`log_density` and its gradient in ``u``, shapes ``(S,)`` and ``(S, D)``."""
        lp, grad = self._gradient_rows(self._rows(u, omega, weights), jacobian)
        return lp, grad[:, : self.dim]

    def log_prior(self, u: np.ndarray, *, jacobian: bool = True) -> np.ndarray:
        """The log prior at ``u`` (the target at ``omega = 0``), shape ``(S,)``."""
        return self.log_density(u, 0.0, None, jacobian=jacobian)

    def losses(self, u: np.ndarray) -> np.ndarray:
        """Every observation's loss at every point, shape ``(S, n)``.

        Read off the target: ``loss_i = -d target / d weights[i]`` at
        ``omega = 1``. Rejected points get ``nan``.
        """
        _, grad = self._gradient_rows(self._rows(u, 1.0, None), False)
        return -grad[:, self.dim + 1 :]

    def total_loss(self, u: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """``sum_i weights[i] loss_i`` at every point, shape ``(S,)``; ``inf`` where rejected."""
        return self.prior_and_loss(u, weights, jacobian=False)[1]

    def prior_and_loss(
        self, u: np.ndarray, weights: np.ndarray | None = None, *, jacobian: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """The log prior (with the log Jacobian, by default) and ``sum_i weights[i] loss_i``.

        One batched call: the target at ``omega = 0`` and at ``omega = 1``, whose
        difference is the loss (the Jacobian cancels). Shapes ``(S,)``; a point
        the program rejects has log prior ``-inf`` and loss ``inf``.
        """
        u = self.check_points(u)
        rows = np.concatenate([self._rows(u, 0.0, None), self._rows(u, 1.0, weights)])
        lp = self._chunked(lambda r: log_density_rows(
            self.library, r, propto=False, jacobian=jacobian, threads=self.threads,
            reject_as_neg_inf=True), rows)
        S = len(u)
        prior = lp[:S]
        loss = np.where(np.isfinite(prior), prior - lp[S:], np.inf)
        return prior, loss

    def loss_gradient(
        self, u: np.ndarray, weights: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``sum_i weights[i] loss_i`` and its gradient in ``u``, shapes ``(S,)`` and ``(S, D)``.

        The prior is taken out by difference: the target at ``omega = 1``
        minus the target at ``omega = 0``.
        """
        u = self.check_points(u)
        rows = np.concatenate([self._rows(u, 1.0, weights), self._rows(u, 0.0, None)])
        lp, grad = self._gradient_rows(rows, False)
        S = len(u)
        return lp[S:] - lp[:S], grad[S:, : self.dim] - grad[:S, : self.dim]

    def constrain(self, u: np.ndarray) -> np.ndarray:
        """The parameters as declared at ``u``, shape ``(S, len(names))``."""
        rows = self._rows(self.check_points(u), 1.0, None)
        P = len(self.names)
        return self._chunked(lambda r: constrain_rows(self.library, r)[:, :P], rows, columns=P)

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
        full = np.ones((len(theta), len(self.names) + 1 + self.n))
        full[:, : len(self.names)] = theta
        try:
            return self._chunked(lambda r: unconstrain_rows(self.library, r)[:, : self.dim],
                                 full, columns=self.dim)
        except ValueError as err:
            raise ValueError(f"theta: outside the parameters' support: {err}") from None

    def check_points(self, u: np.ndarray) -> np.ndarray:
        """``u`` as a finite float array of shape ``(S, D)``."""
        u = np.asarray(u, dtype=float)
        if u.ndim != 2 or u.shape[1] != self.dim:
            raise ValueError(f"u must have shape (S, {self.dim}), got {u.shape}")
        if not np.all(np.isfinite(u)):
            raise ValueError("u must be finite")
        return u

    # -- pieces -----------------------------------------------------------------

    def _rows(self, u: np.ndarray, omega: Any, weights: Any) -> np.ndarray:
        u = self.check_points(u)
        S, D = u.shape
        rows = np.empty((S, D + 1 + self.n))
        rows[:, :D] = u
        rows[:, D] = omega
        if weights is None:
            rows[:, D + 1 :] = 1.0
        else:
            w = np.asarray(weights, dtype=float)
            if w.shape not in ((self.n,), (S, self.n)):
                raise ValueError(
                    f"weights must have shape ({self.n},) or ({S}, {self.n}), got {w.shape}")
            if not np.all(np.isfinite(w) & (w >= 0)):
                raise ValueError("weights must be finite and non-negative")
            rows[:, D + 1 :] = w
        return rows

    def _chunked(self, call, rows: np.ndarray, columns: int | None = None) -> np.ndarray:
        size = max(1, ROW_BUDGET // rows.shape[1])
        if not len(rows):
            return np.empty((0, columns) if columns is not None else 0)
        return np.concatenate([call(rows[i : i + size]) for i in range(0, len(rows), size)])

    def _gradient_rows(self, rows: np.ndarray, jacobian: bool) -> tuple[np.ndarray, np.ndarray]:
        size = max(1, ROW_BUDGET // rows.shape[1])
        lp, grad = np.empty(len(rows)), np.empty(rows.shape)
        for i in range(0, len(rows), size):
            lp[i : i + size], grad[i : i + size] = log_density_gradient_rows(
                self.library, rows[i : i + size], propto=False, jacobian=jacobian,
                threads=self.threads, reject_as_neg_inf=True,
            )
        return lp, grad
