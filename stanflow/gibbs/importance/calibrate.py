"""GPC's root and every rule's posterior from importance samples
(:func:`calibrate_importance`; the method: :mod:`stanflow.gibbs.importance`)."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs.estimate import Estimate
from stanflow.gibbs.gpc.algorithm import bootstrap_indices
from stanflow.gibbs.importance.sample import DF, ImportanceProblem, ImportanceSample
from stanflow.gibbs.information import omega_from_traces
from stanflow.gibbs.path.calibration import (
    RULES,
    check_rules,
    program_shape,
    rule_posteriors,
)
from stanflow.gibbs.path.coverage import LOW_ESS, Evaluation, inside_and_flip, region_statistic
from stanflow.gibbs.path.gpc_root import AUTO_LOW_ESS_SHARE
from stanflow.gibbs.path.resample_means import bootstrap_shape, warn_short_means
from stanflow.gibbs.path.root_search import (
    chi2_root_guess,
    find_root,
    root_error,
    root_variables,
)
from stanflow.gibbs.plugin import calibrate_plugin
from stanflow.gibbs.program import LossProgram
from stanflow.gibbs.shape import check_shape
from stanflow.validation import check_int

REDRAW_FACTOR = 2.0
"""A root further than this factor from the proposal's ``omega_ref`` draws it again there."""
ROUNDS = 3
"""Proposals at most (for the root, and for each rule read from a proposal of its own)."""
ROWS = 64
"""Resamples per block of the weight kernel (a few thousand draws per row)."""


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
    adjust : {"none", "sandwich", "bootstrap"}, default "none"
        The shape fix, as in ``calibrate_path``: every posterior moved to the
        sandwich's shape before GPC counts its regions and before the
        intervals are read; ``"sandwich"`` takes the shape from ``H`` and
        ``J``, ``"bootstrap"`` from the resamples' posterior means at the
        proposal's ``omega`` (:func:`~stanflow.gibbs.path.resample_means.bootstrap_shape`,
        read again from each proposal drawn).
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
        (with ``adjust`` other than ``"none"`` also ``shape``). ``importance``: the draws
        GPC's root was read from (``theta``, dims ``draw``, ``param``),
        ``log_base`` (``log prior - log q``) and ``total_loss``, so that the
        posterior at any ``omega`` is ``w ∝ exp(-omega total_loss + log_base)``.
        Then the program's data groups.

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
    check_rules(rules, adjust, B, program)
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
    fixed_shape = program_shape(plugin) if adjust == "sandwich" else None
    if fixed_shape is not None and len(found.theta) > 1:
        fixed_shape = check_shape(fixed_shape, len(found.theta))
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
    means_ess = None  # adjust="bootstrap": the effective draws behind each resample's mean
    while True:
        rounds += 1
        sample = problem.sample(rng, omega_ref, draws, widen, scatter)
        shape = fixed_shape
        if adjust == "bootstrap" and len(found.theta) > 1:
            shape, means_ess = bootstrap_shape(sample.theta, sample.resample_loss,
                                               sample.log_base, omega_ref)
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
    if means_ess is not None:
        warn_short_means(means_ess)
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
    posteriors = rule_posteriors(_rule_reader(problem, sample, rng, draws, widen),
                                 omegas, names, shape=shape)
    short = [f"{rule} (omega {omegas[rule]:.3g}, {ess:.0f})" for rule, ess
             in zip(omegas, posteriors["rule_ess"].values, strict=True) if ess < LOW_ESS]
    if short:
        warnings.warn(
            f"calibrate_importance: the posteriors of {', '.join(short)} were read from fewer "
            f"than {LOW_ESS} effective draws (rule_ess), even with {ROUNDS} proposals of "
            "their own: their means and intervals are unreliable (NaN "
            "where the draws were too few to move to the sandwich's shape); calibrate_path "
            "reads every rule from its own particles", RuntimeWarning, stacklevel=2,
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


def _rule_reader(problem: ImportanceProblem, sample: ImportanceSample,
                 rng: np.random.Generator, draws: int, widen: float
                 ) -> Callable[[float], tuple[np.ndarray, np.ndarray, float]]:
    """``omega -> (theta, weights, ess)`` for :func:`rule_posteriors`: a rule's posterior
    from the root's sample, or, where that leaves fewer than ``LOW_ESS`` effective
    draws, from proposals of its own at its ``omega``: the plug-in's formula first,
    then ``widen^2`` times the second moment about the estimate that the last one
    measured (heavy weights on a too narrow proposal's far draws widen the next);
    the sample with the most effective draws is read."""

    def read(omega: float) -> tuple[np.ndarray, np.ndarray, float]:
        best, (weights, ess) = sample, sample.weights(omega)
        scatter = None
        for _ in range(ROUNDS):
            if ess >= LOW_ESS:
                break
            own = problem.sample(rng, omega, draws, widen, scatter)
            own_weights, own_ess = own.weights(omega)
            if own_ess > ess:
                best, weights, ess = own, own_weights, own_ess
            measured = own.scatter(omega, problem.centre)
            scatter = measured if np.linalg.eigvalsh(measured)[0] > 0 else None
        return best.theta, weights, ess

    return read


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
