"""GPC and the rules from one importance sample: calibrated intervals in milliseconds.

For a model with a few parameters the Gibbs posteriors that GPC reads (the
full data's and every bootstrap resample's, at every ``omega`` the root
search tries) are all close to Gaussians around the estimate, of spread
between the plug-in's posterior ``(omega n H)^-1`` and the estimate's
sampling covariance ``H^-1 J H^-1 / n``. One sample from a heavy-tailed
proposal covering both serves them all by importance weights, without a
sweep from the prior (:func:`~stanflow.gibbs.path.calibrate_path`) or a
Markov chain:

- the proposal: a multivariate Student-t with :data:`DF` degrees of freedom,
  centred at the estimate, covariance ``widen^2 (H^-1 J H^-1 + H^-1 /
  omega_ref) / n`` (``H``, ``J`` the plug-in's, :func:`calibrate_plugin`),
  ``omega_ref`` the plug-in's ``omega`` at first; on the parameters' own
  scale for a shipped template with a shipped prior, else on Stan's
  unconstrained scale (the program's prior there, Jacobian included);
- resample ``b``'s posterior at ``omega``: ``log w_bs = -omega c_b . l(theta_s)
  + log prior(theta_s) - log q(theta_s)``, ``c_b`` its counts; GPC's regions
  and their Monte Carlo flip probabilities as on the path
  (:func:`~stanflow.gibbs.path.coverage.region_statistic`), the root by the
  same bracketing (:func:`~stanflow.gibbs.path.gpc_root.find_root`, guided by
  :func:`~stanflow.gibbs.path.gpc_root.chi2_root_guess`) and its standard
  error (:func:`~stanflow.gibbs.path.gpc_root.root_error`);
- when the root lies more than a factor :data:`REDRAW_FACTOR` from
  ``omega_ref``, or more than :data:`~stanflow.gibbs.path.gpc_root.AUTO_LOW_ESS_SHARE`
  of the resamples are read from fewer than
  :data:`~stanflow.gibbs.path.coverage.LOW_ESS` effective draws there, the
  proposal is drawn again at ``omega_ref = root`` (at most :data:`ROUNDS`
  proposals), its covariance ``widen^2`` times the pooled resample posteriors'
  second moment about the estimate that the last sample measured at the root
  (:meth:`ImportanceSample.mixture_scatter`; the plug-in's formula again when
  fewer than :data:`~stanflow.gibbs.path.coverage.LOW_ESS` pooled effective
  draws carry it): a plug-in ``H`` misled by one observation costs a round,
  not the root;
- each rule's posterior (GPC's, the plug-in's, Holmes and Walker's) read from
  the last sample.

The per-observation losses of a shipped template come from its loss's NumPy
twin (checked point by point against the Stan file by the tests); any other
program's from Stan in process. With many parameters the weights degenerate
(``low_ess_share`` says so, and a warning when it stays above
:data:`~stanflow.gibbs.path.gpc_root.AUTO_LOW_ESS_SHARE` after the last proposal): use
:func:`~stanflow.gibbs.path.calibrate_path` there.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import xarray as xr
from scipy.special import gammaln

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs.estimate import Estimate
from stanflow.gibbs.gpc.algorithm import bootstrap_indices
from stanflow.gibbs.gpc.reweighting import resample_counts
from stanflow.gibbs.information import omega_from_traces
from stanflow.gibbs.path.calibration import RULES, check_rules, program_shape, rule_posteriors
from stanflow.gibbs.path.coverage import LOW_ESS, Evaluation, inside_and_flip, region_statistic
from stanflow.gibbs.path.gpc_root import (
    AUTO_LOW_ESS_SHARE,
    chi2_root_guess,
    find_root,
    root_error,
    root_variables,
)
from stanflow.gibbs.path.target import PathTarget
from stanflow.gibbs.plugin import calibrate_plugin
from stanflow.gibbs.program import LossProgram
from stanflow.gibbs.shape import check_shape
from stanflow.gibbs.templates import TemplateProgram
from stanflow.validation import check_int

DF = 5.0
"""The proposal's degrees of freedom: tails heavy enough for the resamples far out."""
REDRAW_FACTOR = 2.0
"""A root further than this factor from the proposal's ``omega_ref`` draws it again there."""
ROUNDS = 3
"""Proposals at most."""
ROWS = 64
"""Resamples per block of the weight kernel (a few thousand draws per row)."""
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

        Its scale is ``widen^2`` times ``scatter`` (the pooled posteriors' second
        moment a previous sample measured) or, by default, times the plug-in's
        ``variance + spread / omega_ref``.
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


class ImportanceCoverage:
    """``omega -> Evaluation``: the bootstrap coverage read from one importance sample.

    Parameters
    ----------
    sample : ImportanceSample
    estimate : ndarray, shape (K,)
    alpha : float
    shape : ndarray, shape (K, K), optional
        The shape fix's target (:mod:`stanflow.gibbs.shape`).
    """

    def __init__(self, sample: ImportanceSample, estimate: np.ndarray, alpha: float,
                 shape: np.ndarray | None) -> None:
        self.sample = sample
        self.estimate = estimate
        self.alpha = alpha
        self.shape = shape

    def __call__(self, omega: float) -> Evaluation:
        statistic, ess = region_statistic(
            self.sample.theta, self.sample.resample_loss, self.sample.log_base, omega,
            self.estimate, self.shape, rows=ROWS,
        )
        inside, flip = inside_and_flip(statistic, ess, self.alpha, len(self.estimate) == 1)
        return Evaluation(
            omega=float(omega), count=int(inside.sum()),
            count_variance=float(np.sum(flip * (1 - flip))), ess_min=float(ess.min()),
            ess_median=float(np.median(ess)), low_ess=int(np.sum(ess < LOW_ESS)), step=0,
        )


def calibrate_importance(
    program: LossProgram,
    *,
    estimate: np.ndarray | None = None,
    B: int = 200,
    alpha: float = 0.05,
    seed: int = 0,
    draws: int = 2000,
    widen: float = 2.0,
    rules: Sequence[str] = RULES,
    adjust: str = "none",
    xtol: float = 1e-2,
    max_evaluations: int = 40,
) -> Results:
    """GPC's learning rate, the plug-in's and Holmes-Walker's, and their intervals, from
    importance samples of a Student-t fitted to the sandwich.

    The fast calibration for a few parameters (module docstring): tens of
    milliseconds where :func:`~stanflow.gibbs.path.calibrate_path` takes a
    second, with the same resamples, regions and root search.

    Parameters
    ----------
    program : LossProgram
        Any loss program with a proper prior; ``H`` and ``J`` must be
        invertible at the estimate.
    estimate : array_like, shape (K,), optional
        The full-data estimate; default :meth:`LossProgram.estimate`.
    B : int, default 200
        Bootstrap resamples, drawn from ``SeedSequence(seed)`` as
        :func:`~stanflow.gibbs.calibrate_gpc` and ``calibrate_path`` draw them.
    alpha : float, default 0.05
        Regions of level ``1 - alpha`` (an interval for one parameter, the
        weighted Mahalanobis ellipsoid for several).
    seed : int, default 0
        The resamples and the proposals' draws.
    draws : int, default 2000
        Draws per proposal, at least 100.
    widen : float, default 2
        The proposal's scale over the posteriors' and estimates' spread, at
        least 1.
    rules : sequence of {"plugin", "holmes_walker"}, default both
        Rules besides GPC whose posteriors are read from the sample.
    adjust : {"none", "sandwich"}, default "none"
        ``"sandwich"``: the shape fix, as in ``calibrate_path``: every
        posterior moved to the sandwich's shape before GPC counts its regions
        and before the intervals are read.
    xtol : float, default 0.01
        Relative width of the root's final bracket (its Monte Carlo error,
        ``omega_se``, is a few per cent at ``B = 200``).
    max_evaluations : int, default 40
        Coverage evaluations per proposal.

    Returns
    -------
    Results
        ``calibration``: ``omega`` (GPC's root), ``omega_se``, ``count_variance``,
        ``count_slope``, ``converged``, ``evaluations``, ``coverage``,
        ``estimate``, per evaluation ``omega_path``, ``coverage_path``,
        ``ess_min``, ``ess_median``, ``proposal_omega``; ``low_ess_share``,
        ``rounds`` (proposals drawn), ``wall_time``; by ``rule`` (``gpc``, then
        ``rules``) ``rule_omega``, ``rule_ess``, ``rule_mean``, ``rule_interval``
        (with ``adjust="sandwich"`` also ``shape``). ``importance``: the last
        proposal's draws (``theta``, dims ``draw``, ``param``), ``log_base``
        (``log prior - log q``) and ``total_loss``, so that the posterior at
        any ``omega`` is ``w ∝ exp(-omega total_loss + log_base)``. Then the
        program's data groups.

    Raises
    ------
    ValueError
        Bad arguments, before any work; an improper prior.
    """
    start_time = time.perf_counter()
    B = check_int(B, "B")
    draws = check_int(draws, "draws", 100)
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not (isinstance(widen, (int, float)) and math.isfinite(widen) and widen >= 1):
        raise ValueError(f"widen must be a number >= 1, got {widen!r}")
    if not (isinstance(xtol, (int, float)) and 0 < xtol < 1):
        raise ValueError(f"xtol must be in (0, 1), got {xtol!r}")
    max_evaluations = check_int(max_evaluations, "max_evaluations", 2)
    check_rules(rules, adjust)
    program.check_proper_prior()

    found = program.estimate() if estimate is None else program.estimate_at(estimate)
    try:
        plugin = arviz_compat.group(calibrate_plugin(program, estimate=found.theta),
                                    "calibration")
    except ValueError as err:
        raise ValueError(
            f"calibrate_importance fits its proposal to the plug-in's H and J, which this "
            f"program does not give ({err}); calibrate_path(program, rules=[]) needs neither"
        ) from None
    H, J = plugin["sensitivity"].values, plugin["variability"].values
    shape = None if adjust == "none" else program_shape(plugin)
    if shape is not None and len(found.theta) > 1:
        shape = check_shape(shape, len(found.theta))
    indices = bootstrap_indices(program.n, B, np.random.SeedSequence(seed))
    problem = ImportanceProblem(program, indices, *_proposal_space(program, found, plugin, H, J))
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    target = (1 - alpha) * B
    guess = chi2_root_guess(len(found.theta), B, alpha)
    omega_ref = float(plugin["omega"])
    history: list[Evaluation] = []
    proposal_omegas: list[float] = []
    rounds = 0
    scatter = None
    while True:
        rounds += 1
        sample = problem.sample(rng, omega_ref, draws, widen, scatter)
        coverage = ImportanceCoverage(sample, found.theta, alpha, shape)
        root, tried, converged = find_root(coverage, omega_ref, target, xtol=xtol,
                                           max_evaluations=max_evaluations, guess=guess)
        error = root_error(coverage, root, tried, target, max_evaluations, B)
        history += tried
        proposal_omegas += [omega_ref] * len(tried)
        far = not 1 / REDRAW_FACTOR <= root / omega_ref <= REDRAW_FACTOR
        if rounds == ROUNDS or not (far or error.at_root.low_ess > AUTO_LOW_ESS_SHARE * B):
            break
        omega_ref = root
        scatter = _measured_scatter(sample, root, problem.centre)
    at_root = error.at_root
    if at_root.low_ess > AUTO_LOW_ESS_SHARE * B:
        warnings.warn(
            f"GPC: {at_root.low_ess} of {B} resamples' posteriors at the root were read from "
            f"fewer than {LOW_ESS} effective draws after {rounds} proposals (counted in "
            "omega_se; low_ess_share reports them); more draws, or calibrate_path for many "
            "parameters",
            RuntimeWarning, stacklevel=2,
        )
    omegas = {"gpc": root}
    for name in rules:
        omegas[name] = float(plugin["omega"]) if name == "plugin" else float(
            omega_from_traces(H, J))
    names = list(program.names)
    posteriors = rule_posteriors(lambda omega: (sample.theta, *sample.weights(omega)),
                                 omegas, names, shape=shape)
    short = [f"{rule} (omega {omegas[rule]:.3g}, {ess:.0f})" for rule, ess
             in zip(omegas, posteriors["rule_ess"].values, strict=True) if ess < LOW_ESS]
    if short:
        warnings.warn(
            f"calibrate_importance: the posteriors of {', '.join(short)} were read from fewer "
            f"than {LOW_ESS} effective draws of the sample fitted at GPC's root (rule_ess): "
            "their means and intervals are unreliable; calibrate_path reads every rule from "
            "its own particles", RuntimeWarning, stacklevel=2,
        )
    group = xr.Dataset(
        {
            **root_variables(root, converged, history, error, B, found.theta),
            "proposal_omega": (("evaluation",), np.array(proposal_omegas)),
            "rounds": ((), rounds),
        },
        coords={"param": names, "evaluation": np.arange(len(history))},
    )
    group = xr.merge([group, posteriors], combine_attrs="override")
    if shape is not None:
        group["shape"] = (("param", "param2"), np.atleast_2d(shape))
        group = group.assign_coords(param2=names)
    group["wall_time"] = ((), time.perf_counter() - start_time)
    group.attrs = {
        "method": "gpc_importance",
        "reference": "Syring and Martin (2019), Biometrika 106(2) 479-486",
        "rule": "root of the bootstrap coverage by bracketing (Illinois), every posterior "
        "read by importance weights from a Student-t fitted to the sandwich (a redrawn "
        "one to the resamples' posteriors the last sample measured)",
        "B": B, "alpha": alpha, "seed": seed, "draws": draws, "widen": widen, "df": DF,
        "xtol": xtol, "adjust": adjust,
        "region": "equal-tailed interval" if len(names) == 1 else "weighted Mahalanobis ellipsoid",
        "particle_space": problem.target.space,
    }
    sample_group = xr.Dataset(
        {"theta": (("draw", "param"), sample.theta), "log_base": ("draw", sample.log_base),
         "total_loss": ("draw", sample.total_loss)},
        coords={"draw": np.arange(draws), "param": names},
        attrs={"omega_ref": sample.omega_ref, "df": DF, "widen": widen},
    )
    return arviz_compat.build({"calibration": group, "importance": sample_group,
                               **program.data_groups()})


def _measured_scatter(sample: ImportanceSample, omega: float,
                      centre: np.ndarray) -> np.ndarray | None:
    """The pooled posteriors' scatter at ``omega`` as the next proposal's, or None
    (the plug-in's formula) when too few pooled draws carry it to be trusted."""
    scatter, ess = sample.mixture_scatter(omega, centre)
    if ess < LOW_ESS or np.linalg.eigvalsh(scatter)[0] <= 0:
        return None
    return scatter


def _proposal_space(
    program: LossProgram, found: Estimate, plugin: xr.Dataset, H: np.ndarray, J: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The estimate, ``H^-1 / n`` and ``H^-1 J H^-1 / n`` in the particles' space.

    On a shipped prior's box that is the parameters' own scale; otherwise
    Stan's unconstrained scale, onto which ``H`` and ``J`` given on the
    parameters' scale are carried by the derivative of ``unconstrain`` at the
    estimate (central differences).
    """
    n = program.n
    try:
        H_inverse = np.linalg.inv(H)
    except np.linalg.LinAlgError:
        raise ValueError("the plug-in's H is singular at the estimate: no proposal can be "
                         "fitted; use calibrate_path") from None
    spread = H_inverse / n
    variance = H_inverse @ J @ H_inverse / n
    if getattr(program, "exact_prior", None) is not None:
        return np.asarray(found.theta, float), spread, variance
    if plugin.attrs.get("scale") == "constrained" and program.dim == len(found.theta):
        theta = np.asarray(found.theta, float)
        step = 1e-6 * (1 + np.abs(theta))
        plus = program.unconstrain(theta + np.diag(step))
        minus = program.unconstrain(theta - np.diag(step))
        D = ((plus - minus) / (2 * step[:, None])).T  # du / dtheta, (d, K)
        spread, variance = D @ spread @ D.T, D @ variance @ D.T
    return np.asarray(found.u, float), spread, variance
