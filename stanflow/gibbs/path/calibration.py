"""Every calibration rule on one learning-rate path, and each rule's posterior from it.

:func:`calibrate_path` sweeps one path for a data set and reads off it:

- GPC's learning rate by root finding (:func:`stanflow.gibbs.path.gpc_root.path_gpc`);
- the plug-in ``tr(H J^-1 H) / tr(H)`` (:func:`stanflow.gibbs.plugin.calibrate_plugin`)
  and Holmes and Walker's ``tr(H) / tr(J)``
  (:func:`stanflow.gibbs.information.calibrate_holmes_walker`), marked on the path;
- any other learning rates the caller marks (e.g. Robbins-Monro GPC's);
- each rule's Gibbs posterior (mean and equal-tailed interval) from the same
  particles (:func:`rules_on_path`), and the functionals against ``omega``;
- with ``adjust="sandwich"`` or ``"bootstrap"``, all of it for the posteriors
  moved to the sandwich's shape (:mod:`stanflow.gibbs.shape`), GPC's root
  included; ``"bootstrap"`` reads that shape from the resamples' posterior means
  (:mod:`stanflow.gibbs.path.resample_means`) instead of ``H`` and ``J``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs.information import omega_from_traces
from stanflow.gibbs.path.gpc_root import path_gpc
from stanflow.gibbs.path.read import (
    default_omegas,
    functionals,
    reweight,
    weighted_quantile,
)
from stanflow.gibbs.path.sampler import CALIBRATION_SAMPLER, PathSampler
from stanflow.gibbs.path.sweep import LearningRatePath, check_omega_max, to_inference_data
from stanflow.gibbs.plugin import calibrate_plugin
from stanflow.gibbs.program import LossProgram
from stanflow.gibbs.shape import SingularDrawsError, adjust_draws, sandwich_shape
from stanflow.runs.calls import Workers, as_workers
from stanflow.validation import check_positive

RULES = ("plugin", "holmes_walker")
"""Rules computed from the data, besides GPC."""
ADJUSTMENTS = ("none", "sandwich", "bootstrap")
"""``adjust``: the posteriors as they are, or moved to the sandwich's shape, taken
from ``H`` and ``J`` or from the bootstrap's resamples."""


def check_rules(rules: Sequence[str], adjust: str, B: int, program: LossProgram) -> None:
    """A ``ValueError`` naming ``rules`` or ``adjust`` when either is not one offered,
    or ``B`` or the program when they do not suit ``adjust="bootstrap"``."""
    unknown = sorted(set(rules) - set(RULES))
    if unknown:
        raise ValueError(f"rules: unknown {unknown}; choose from {RULES}")
    if adjust not in ADJUSTMENTS:
        raise ValueError(f"adjust must be one of {ADJUSTMENTS}, got {adjust!r}")
    size = len(program.names)
    if adjust != "bootstrap" or size == 1:
        return
    if size >= B:
        raise ValueError(f"B must exceed the {size} parameters for adjust='bootstrap' (the "
                         f"shape is the covariance of the B resamples' means), got {B}")
    if program.dim != size:
        raise ValueError(
            "adjust='bootstrap' moves draws on the parameters' own scale, but this "
            f"program's {size} parameter values have {program.dim} unconstrained "
            "coordinates (constrained shapes such as simplexes); use adjust='none'")


def program_shape(plugin: xr.Dataset) -> np.ndarray:
    """The sandwich ``H^-1 J H^-1`` of a plug-in calibration, on the parameters' scale.

    Parameters
    ----------
    plugin : xarray.Dataset
        The ``calibration`` group of :func:`~stanflow.gibbs.calibrate_plugin`.

    Raises
    ------
    ValueError
        When its ``H`` and ``J`` are on Stan's unconstrained scale (the
        program's parameters have fewer values than unconstrained coordinates,
        or more).
    """
    if plugin.attrs.get("scale") == "unconstrained":
        raise ValueError(
            "adjust='sandwich' moves draws on the parameters' own scale, but this "
            "program's H and J are on Stan's unconstrained scale (its parameters "
            "have constrained shapes such as simplexes); use adjust='none'"
        )
    return sandwich_shape(plugin["sensitivity"].values, plugin["variability"].values)


def rules_on_path(
    path: xr.Dataset,
    omegas: Mapping[str, float],
    probs: Sequence[float] = (0.025, 0.975),
    shape: np.ndarray | None = None,
) -> xr.Dataset:
    """Each rule's Gibbs posterior read from the path's particles.

    Parameters
    ----------
    path : xarray.Dataset
        The ``path`` group, reaching every rule's ``omega``.
    omegas, probs, shape
        As :func:`rule_posteriors`.

    Returns
    -------
    xarray.Dataset
        :func:`rule_posteriors`'s.
    """

    def read(omega: float) -> tuple[np.ndarray, np.ndarray, float]:
        r = reweight(path, omega)
        return r.theta, r.weights, r.ess

    return rule_posteriors(read, omegas, list(path["param"].values), probs, shape)


def rule_posteriors(
    read: Callable[[float], tuple[np.ndarray, np.ndarray, float]],
    omegas: Mapping[str, float],
    names: Sequence[str],
    probs: Sequence[float] = (0.025, 0.975),
    shape: np.ndarray | None = None,
) -> xr.Dataset:
    """Each rule's Gibbs posterior from weighted draws: its mean, interval and ESS.

    Parameters
    ----------
    read : callable
        ``omega -> (theta, weights, ess)``: draws ``(S, K)``, their normalised
        weights ``(S,)`` and Kish effective sample size at ``omega``.
    omegas : mapping of str to float
        Rule name -> learning rate.
    names : sequence of str
        The ``K`` parameters.
    probs : sequence of two floats, default (0.025, 0.975)
        The interval's ends.
    shape : array_like, shape (K, K), optional
        Read the intervals from the draws moved to this shape
        (:func:`stanflow.gibbs.shape.adjust_draws`); the means do not move. A
        rule whose draws cannot be moved (their weighted covariance singular:
        too few effective draws) gets a NaN interval; its ``rule_ess`` says why.

    Returns
    -------
    xarray.Dataset
        Dim ``rule``: ``rule_omega``, ``rule_ess``, ``rule_mean`` (``rule``,
        ``param``) and ``rule_interval`` (``rule``, ``end``, ``param``).
    """
    rules = list(omegas)
    K = len(names)
    mean = np.empty((len(rules), K))
    interval = np.empty((len(rules), 2, K))
    ess = np.empty(len(rules))
    for j, name in enumerate(rules):
        theta, weights, ess[j] = read(float(omegas[name]))
        mean[j] = weights @ theta
        if shape is not None and K > 1:
            try:
                theta = adjust_draws(theta, shape, weights)
            except SingularDrawsError:
                interval[j] = np.nan
                continue
        for p in range(K):
            interval[j, :, p] = weighted_quantile(theta[:, p], weights, np.asarray(probs))
    return xr.Dataset(
        {
            "rule_omega": ("rule", np.array([float(omegas[n]) for n in rules])),
            "rule_ess": ("rule", ess),
            "rule_mean": (("rule", "param"), mean),
            "rule_interval": (("rule", "end", "param"), interval),
        },
        coords={"rule": rules, "end": ["lower", "upper"], "param": list(names)},
    )


def calibrate_path(
    program: LossProgram,
    *,
    estimate: np.ndarray | None = None,
    B: int = 200,
    alpha: float = 0.05,
    omega0: float | None = None,
    seed: int = 0,
    rules: Sequence[str] = RULES,
    marks: Mapping[str, float] | None = None,
    omega_max: float | None = None,
    sampler: PathSampler | None = None,
    proposal_scale: float = 0.25,
    xtol: float = 1e-3,
    adjust: str = "none",
    resamples: str = "auto",
    workers: Workers | None = None,
) -> Results:
    """Calibrate ``omega`` on one path: GPC by root finding, plug-in, Holmes-Walker.

    Parameters
    ----------
    program : LossProgram
        Any loss program (:class:`~stanflow.gibbs.path.sweep.LearningRatePath`).
    estimate : array_like, shape (P,), optional
        The full-data estimate; default :meth:`LossProgram.estimate`.
    B, alpha, omega0, seed, proposal_scale, xtol, resamples, workers
        GPC (:func:`~stanflow.gibbs.path.gpc_root.path_gpc`): the same resamples as
        :func:`stanflow.gibbs.gpc.calibrate_gpc` with this ``seed`` and ``B``;
        ``resamples`` says how each resample's posterior is read (by default
        particles are moved to the resamples from five parameters on, or when
        reweighting the path would leave too few effective; the path then
        starts near the data, its functionals from there), ``workers`` where particles are moved
        (:class:`stanflow.runs.Workers`: this process, or a Dask cluster, with
        retries and a folder keeping the work for a rerun).
    rules : sequence of {"plugin", "holmes_walker"}, default both
        Rules computed from the data and marked on the path.
    marks : mapping of str to float, optional
        More learning rates to mark (name -> omega), e.g. Robbins-Monro GPC's.
    omega_max : float, optional
        Sweep at least this far after the calibration (the functionals'
        range); default the largest marked ``omega`` and GPC's start.
    sampler : PathSampler, optional
        The path's sampler (:class:`~stanflow.gibbs.path.sampler.PathSampler`;
        :class:`~stanflow.gibbs.path.sweep.LearningRatePath`, ``q = 1``); default
        :data:`CALIBRATION_SAMPLER`, ``PathSampler(n_particles=4000, n_moves=3)``.
    adjust : {"none", "sandwich", "bootstrap"}, default "none"
        The shape fix (:mod:`stanflow.gibbs.shape`): every posterior is moved
        to the sandwich's shape before GPC counts its regions and before the
        rules' intervals are read, so that each coefficient's interval, not
        only the joint region, covers at its level. ``"sandwich"``: the shape
        ``H^-1 J H^-1`` of the plug-in's ``H`` and ``J`` at the estimate (as
        :func:`~stanflow.gibbs.calibrate_plugin` finds them; on the
        parameters' own scale). ``"bootstrap"``: the covariance of the ``B``
        resamples' posterior means at the plug-in's ``omega``, read from the
        resamples' own particles as GPC reads them (the path reweighted, or
        the particles moved to each resample;
        :mod:`~stanflow.gibbs.path.resample_means`; no kernel estimate of
        ``H``, ``B`` above the parameters' number).
        The identity for one parameter.

    Returns
    -------
    Results
        ``calibration`` (GPC's root and its evaluations, plus by ``rule``:
        ``rule_omega``, ``rule_ess``, ``rule_mean``, ``rule_interval``; the
        rules are ``gpc_path``, then ``rules``, then ``marks``; with
        ``adjust`` other than ``"none"`` and several parameters also
        ``shape``, dims ``param``, ``param2``),
        ``path``, ``path_functionals`` and the program's data groups.
    """
    check_rules(rules, adjust, B, program)
    if omega_max is not None:
        omega_max = check_omega_max(omega_max)
    workers = as_workers(workers)  # before the long work
    marks = {
        name: check_positive(value, f"marks[{name!r}]") for name, value in (marks or {}).items()
    }
    path = LearningRatePath(
        program, sampler=CALIBRATION_SAMPLER if sampler is None else sampler, seed=seed,
    )
    found = program.estimate() if estimate is None else program.estimate_at(estimate)
    # H and J once, for the shape fix and both rules (Holmes-Walker reads the plug-in's).
    plugin = None if adjust == "none" and not rules else arviz_compat.group(
        calibrate_plugin(program, estimate=found.theta), "calibration")
    sandwich, shape_at = None, None
    if adjust != "none":
        assert plugin is not None  # computed whenever adjust is asked for
        sandwich = program_shape(plugin) if adjust == "sandwich" else None
        shape_at = float(plugin["omega"]) if adjust == "bootstrap" else None
    group = path_gpc(
        path, found.theta, B=B, alpha=alpha, omega0=omega0, seed=seed,
        proposal_scale=proposal_scale, xtol=xtol, shape=sandwich, resamples=resamples,
        workers=workers, shape_at=shape_at,
    )
    shape = group["shape"].values if "shape" in group else None
    omegas = {"gpc_path": float(group["omega"])}
    for name in rules:
        assert plugin is not None  # computed whenever a rule is asked for
        omegas[name] = float(plugin["omega"]) if name == "plugin" else float(
            omega_from_traces(plugin["sensitivity"].values, plugin["variability"].values))
    omegas.update(marks)
    path.extend(max([*omegas.values(), group.attrs["omega0"], omega_max or 0.0]))
    path_group = path.to_dataset()
    group = xr.merge([group, rules_on_path(path_group, omegas, shape=shape)],
                     combine_attrs="override")
    group.attrs["adjust"] = adjust
    table = functionals(path_group, default_omegas(path_group))
    return to_inference_data(path_group, table, program, calibration=group)
