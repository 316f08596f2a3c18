"""The proposal's draws and what every Gibbs posterior's importance weights need.

:class:`ImportanceProblem` draws a multivariate Student-t in the particles'
space (:class:`~stanflow.gibbs.path.target.PathTarget`'s) and evaluates the
prior and every observation's loss there once; :class:`ImportanceSample` then
weighs the draws for the full data's or any resample's posterior at any
``omega``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.special import gammaln

from stanflow.gibbs.gpc.reweighting import resample_counts
from stanflow.gibbs.path.target import PathTarget
from stanflow.gibbs.program import LossProgram
from stanflow.gibbs.templates import TemplateProgram

DF = 5.0
"""The proposal's degrees of freedom: tails heavy enough for the resamples far out."""
CHUNK = 4_000_000
"""Loss values evaluated at once (draws per chunk: this over ``n``)."""


class ImportanceSample(NamedTuple):
    """Draws from the proposal with what every Gibbs posterior's weights need.

    Attributes
    ----------
    z : ndarray, shape (S, d)
        The draws in the proposal's space.
    theta : ndarray, shape (S, K)
        The parameters as declared.
    log_base : ndarray, shape (S,)
        ``log prior - log q``: the weights' part common to every posterior.
    total_loss : ndarray, shape (S,)
        ``L_n``, the full data's loss.
    resample_loss : ndarray, shape (B, S)
        ``c_b . l``, each resample's loss.
    omega_ref : float
        The rate the proposal was fitted to.
    """

    z: np.ndarray
    theta: np.ndarray
    log_base: np.ndarray
    total_loss: np.ndarray
    resample_loss: np.ndarray
    omega_ref: float

    def weights(self, omega: float) -> tuple[np.ndarray, float]:
        """The full data's normalised weights at ``omega`` and their Kish ESS."""
        log_w = -omega * (self.total_loss - self.total_loss.min()) + self.log_base
        w = np.exp(log_w - log_w.max())
        w /= w.sum()
        return w, float(1.0 / np.sum(w**2))

    def mixture_scatter(self, omega: float, centre: np.ndarray) -> tuple[np.ndarray, float]:
        """The resamples' posteriors at ``omega``, pooled: their second moment about
        ``centre`` in the proposal's space, and the pooled weights' Kish ESS.

        Each resample's weights are normalised, then averaged over the resamples;
        the pooled posterior's spread about the estimate is what a proposal for all
        of them must cover.
        """
        log_w = -omega * (self.resample_loss - self.resample_loss.min(axis=1, keepdims=True))
        log_w += self.log_base
        log_w -= log_w.max(axis=1, keepdims=True)
        w = np.exp(log_w)
        pooled = (w / w.sum(axis=1, keepdims=True)).mean(axis=0)
        offset = self.z - centre
        return (offset * pooled[:, None]).T @ offset, float(1.0 / np.sum(pooled**2))

    def scatter(self, omega: float, centre: np.ndarray) -> np.ndarray:
        """The full data's posterior at ``omega``: its second moment about ``centre`` in
        the proposal's space."""
        w, _ = self.weights(omega)
        offset = self.z - centre
        return (offset * w[:, None]).T @ offset


def student_t_draws(
    rng: np.random.Generator, centre: np.ndarray, cov: np.ndarray, size: int, df: float
) -> tuple[np.ndarray, np.ndarray]:
    """``size`` draws of a multivariate Student-t and its log density at them.

    Parameters
    ----------
    rng : numpy.random.Generator
    centre : ndarray, shape (d,)
    cov : ndarray, shape (d, d)
        The scale matrix, positive definite.
    size : int
    df : float

    Returns
    -------
    draws : ndarray, shape (size, d)
    log_density : ndarray, shape (size,)
    """
    d = len(centre)
    root = np.linalg.cholesky(cov)
    normal = rng.standard_normal((size, d))
    scale = np.sqrt(rng.chisquare(df, size) / df)
    draws = centre + (normal / scale[:, None]) @ root.T
    mahalanobis = np.sum((normal / scale[:, None]) ** 2, axis=1)
    log_density = (gammaln((df + d) / 2) - gammaln(df / 2) - d / 2 * math.log(df * math.pi)
                   - np.sum(np.log(np.diag(root))) - (df + d) / 2 * np.log1p(mahalanobis / df))
    return draws, log_density


class ImportanceProblem:
    """A program's Gibbs posteriors and GPC's resamples, read by importance weights.

    Parameters
    ----------
    program : LossProgram
    indices : ndarray of int, shape (B, n)
        GPC's bootstrap resamples.
    centre : ndarray, shape (d,)
        The estimate in the particles' space (:class:`PathTarget`'s).
    spread, variance : ndarray, shape (d, d)
        ``H^-1 / n`` and ``H^-1 J H^-1 / n`` in that space: the proposal at
        ``omega_ref`` has scale ``widen^2 (variance + spread / omega_ref)``.
    """

    def __init__(self, program: LossProgram, indices: np.ndarray, centre: np.ndarray,
                 spread: np.ndarray, variance: np.ndarray) -> None:
        self.target = PathTarget(program)
        self.counts = resample_counts(indices, self.target.n)
        self.centre = centre
        self.spread = spread
        self.variance = variance

    def sample(self, rng: np.random.Generator, omega_ref: float, draws: int,
               widen: float, scatter: np.ndarray | None = None) -> ImportanceSample:
        """Draw the proposal at ``omega_ref`` and evaluate everything the weights need.

        Its scale is ``widen^2`` times ``scatter`` (a second moment a previous
        sample measured: the resamples' pooled posteriors', or one rule's
        posterior's) or, by default, times the plug-in's ``variance + spread /
        omega_ref``.
        """
        base = self.variance + self.spread / omega_ref if scatter is None else scatter
        cov = widen**2 * base
        z, log_q = student_t_draws(rng, self.centre, 0.5 * (cov + cov.T), draws, DF)
        log_prior = self.target.log_prior(z)
        theta = self.target.theta(z)
        kept = np.isfinite(log_prior)
        if not kept.any():
            raise ValueError("no draw of the proposal lies where the prior is positive: "
                             "the estimate is at the edge of the prior's support")
        total = np.zeros(draws)
        resample = np.zeros((len(self.counts), draws))
        chunk = max(1, CHUNK // self.target.n)
        for start in range(0, draws, chunk):
            rows = np.flatnonzero(kept[start:start + chunk]) + start
            if rows.size:
                losses = self.losses(z[rows], theta[rows])
                total[rows] = losses.sum(axis=1)
                resample[:, rows] = self.counts @ losses.T
        # Draws outside the prior's support weigh nothing; their losses, never
        # evaluated, are set to the largest so that centring by the smallest holds.
        total[~kept] = total[kept].max()
        resample[:, ~kept] = resample[:, kept].max(axis=1, keepdims=True)
        return ImportanceSample(z, theta, np.where(kept, log_prior - log_q, -np.inf), total,
                                resample, omega_ref)

    def losses(self, z: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """Every observation's loss at every draw, shape ``(S, n)``: a shipped
        template's from its loss's vectorised form, any other program's from Stan."""
        program = self.target.program
        if isinstance(program, TemplateProgram) and self.target.space == "box":
            values = np.asarray(program.loss_values()(program.y[None, :], theta @ program.design.T),
                                dtype=float)
            if not np.all(np.isfinite(values)):
                raise ValueError("loss returned values that are not finite at some draws")
            return values
        return self.target.pointwise_loss(z)
