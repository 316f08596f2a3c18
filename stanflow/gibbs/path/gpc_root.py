"""GPC by root finding on the learning-rate path.

Syring and Martin's calibration (:mod:`stanflow.gibbs.gpc`) asks for the
``omega`` at which the bootstrap coverage ``c_B(omega)`` of the full-data
estimate by the ``100(1 - alpha)%`` regions of the resamples' Gibbs posteriors
is ``1 - alpha``. With common resamples (the same ``B`` resamples at every
``omega``, drawn exactly as :func:`stanflow.gibbs.gpc.calibrate_gpc` draws
them) and one path reweighted per resample, ``c_B`` is a deterministic
function of ``omega``, so its crossing of ``1 - alpha`` is found by bracketing
instead of by Robbins-Monro steps:

- a resample is a vector of counts ``c_b``; its Gibbs posterior at ``omega`` is
  read from the path's particles at the schedule point ``k`` nearest
  ``proposal_scale * omega`` in ``log omega`` among those at or below
  ``omega / 2`` (wider than the target, as the reweight design's proposal;
  :func:`proposal_step`) by ``log w_bs = -omega c_b . l(theta_s) - g_k(theta_s)``
  (``+ omega_k L_n(theta_s)`` on the geometric path; the prior cancels). The
  ``(B x n) @ (n x S)`` product ``c_b . l`` is formed once per schedule point;
- its region holds the estimate when the weighted CDF at the estimate lies in
  ``[alpha/2, 1 - alpha/2]`` (scalar, equal-tailed interval) or when the
  weight of draws strictly closer than the estimate in the weighted
  Mahalanobis distance is at most ``1 - alpha`` (vector, ellipsoid);
- the root: :func:`search_root` brackets the count's crossing of ``(1 - alpha)
  B`` and states its standard error (:mod:`stanflow.gibbs.path.root_search`). A
  geometric path is extended when the bracket needs a larger ``omega``.
"""

from __future__ import annotations

import time
import warnings
from typing import NamedTuple

import numpy as np
import xarray as xr

from stanflow.gibbs.gpc.algorithm import bootstrap_indices
from stanflow.gibbs.path.coverage import LOW_ESS, BootstrapProblem, Evaluation, PathCoverage
from stanflow.gibbs.path.resample_means import warn_short_means
from stanflow.gibbs.path.root_search import (
    RootError,
    chi2_root_guess,
    find_root,
    root_error,
    root_variables,
)
from stanflow.gibbs.path.sweep import LearningRatePath
from stanflow.gibbs.path.transport import TransportCoverage
from stanflow.runs.calls import Workers, as_workers
from stanflow.validation import check_int, check_positive

RESAMPLES = ("auto", "reweight", "transport")
AUTO_TRANSPORT_DIMENSION = 5
"""``resamples="auto"`` moves particles to the resamples, without trying the
reweighted path, from this many parameters on (reweighting degenerates like
``exp(-c K)``: at five coefficients already more than :data:`AUTO_LOW_ESS_SHARE`
of the resamples are read from too few draws, ``docs/benchmarks.md``)."""
AUTO_LOW_ESS_SHARE = 0.05
"""``resamples="auto"`` moves particles to the resamples when more than this
share of them would be read from fewer than :data:`~stanflow.gibbs.path.coverage.LOW_ESS` effective draws."""



class RootSearch(NamedTuple):
    """GPC's root on one coverage design (:func:`search_root`).

    Attributes
    ----------
    start : float
        Where the search started.
    root : float
    history : list of Evaluation
        Every evaluation, in order (those for the slope included).
    converged : bool
    error : RootError
    """

    start: float
    root: float
    history: list[Evaluation]
    converged: bool
    error: RootError


def search_root(
    coverage: PathCoverage | TransportCoverage,
    *,
    omega0: float | None = None,
    xtol: float = 1e-3,
    max_evaluations: int = 40,
) -> RootSearch:
    """GPC's root on one coverage design and its error, as :func:`path_gpc` finds them.

    ``omega0`` by default 1 for a reweighted path; for moved particles the
    first-order root, and the search is guided by :func:`chi2_root_guess` (on the
    region's dimension, the coverage's ``B`` and ``alpha``).
    """
    B, alpha = len(coverage.counts), coverage.alpha
    guess = None
    if isinstance(coverage, TransportCoverage):
        guess = chi2_root_guess(len(coverage.estimate), B, alpha)
        if omega0 is None:
            omega0 = coverage.first_order_root()
    start = 1.0 if omega0 is None else float(omega0)
    target = (1 - alpha) * B
    root, history, done = find_root(coverage, start, target, xtol=xtol,
                                    max_evaluations=max_evaluations, guess=guess)
    error = root_error(coverage, root, history, target, max_evaluations, B)
    return RootSearch(start, root, history, done, error)


def path_gpc(
    path: LearningRatePath,
    estimate: np.ndarray,
    *,
    B: int = 200,
    alpha: float = 0.05,
    omega0: float | None = None,
    seed: int = 0,
    proposal_scale: float = 0.25,
    xtol: float = 1e-3,
    max_evaluations: int = 40,
    shape: np.ndarray | None = None,
    resamples: str = "auto",
    workers: Workers | None = None,
    shape_at: float | None = None,
) -> xr.Dataset:
    """GPC's learning rate as the root of the bootstrap coverage on a path.

    Parameters
    ----------
    path : LearningRatePath
        The Gibbs posterior's path (extended as needed when geometric).
    estimate : array_like, shape (K,)
        The full-data estimate (empirical risk minimiser).
    B : int, default 200
        Bootstrap resamples, drawn from ``SeedSequence(seed)`` as
        :func:`stanflow.gibbs.gpc.calibrate_gpc` draws them.
    alpha : float, default 0.05
    omega0 : float, optional
        Where the bracketing starts; default 1 when the path is reweighted,
        and the root of the coverage's first-order model when particles are
        moved (:meth:`~stanflow.gibbs.path.transport.TransportCoverage.first_order_root`),
        whose later steps are guided by :func:`chi2_root_guess`: moving costs more
        the further ``omega`` moves, reweighting the same anywhere.
    seed : int, default 0
    proposal_scale : float, default 0.25
        In ``(0, 1]``; see the module docstring.
    xtol : float, default 1e-3
        Relative width of the final bracket.
    max_evaluations : int, default 40
        Coverage evaluations at most.
    shape : array_like, shape (K, K), optional
        Calibrate the posteriors moved to this shape (the sandwich ``H^-1 J
        H^-1``, :mod:`stanflow.gibbs.shape`); default as they are. Ignored for
        one parameter, where the fix is the identity.
    resamples : {"auto", "reweight", "transport"}, default "auto"
        How each resample's posterior is read: ``"reweight"``, the path's
        particles reweighted (:class:`~stanflow.gibbs.path.coverage.PathCoverage`:
        cheap, healthy for a few parameters); ``"transport"``, particles moved
        to each resample (:class:`~stanflow.gibbs.path.transport.TransportCoverage`:
        healthy at tens of parameters, ``B`` times the in-process evaluations);
        ``"auto"``, moved particles for :data:`AUTO_TRANSPORT_DIMENSION` or more
        parameters, else reweighting unless more than :data:`AUTO_LOW_ESS_SHARE`
        of the resamples have fewer than :data:`~stanflow.gibbs.path.coverage.LOW_ESS`
        effective draws at ``omega0`` (1 by default). Moved particles start a
        path not yet swept near the data, not at the prior
        (:meth:`~stanflow.gibbs.path.transport.TransportCoverage.path_start`).
    workers : stanflow.runs.Workers, optional
        Where particles are moved to the resamples (``"transport"``): this
        process by default, or a Dask cluster; with ``out_dir``, moved blocks
        are kept, and a rerun of the same calibration reads them.
    shape_at : float, optional
        Without ``shape``: calibrate the posteriors moved to the bootstrap's
        shape (``adjust="bootstrap"``), the covariance of the resamples'
        posterior means at this ``omega`` as the coverage reads them
        (:mod:`stanflow.gibbs.path.resample_means`).

    Returns
    -------
    xarray.Dataset
        The ``calibration`` group: ``omega`` (the root), ``omega_se`` (its
        Monte Carlo standard error), ``count_variance`` (of the covering count
        at the root), ``count_slope`` (covering resamples per unit of
        ``omega``), ``converged``, ``evaluations``, ``estimate`` (dim ``param``), per
        evaluation (dim ``evaluation``) ``omega_path``, ``coverage_path``,
        ``ess_min``, ``ess_median``, ``proposal_omega``; ``low_ess_share``
        (the share of resamples read from fewer than :data:`~stanflow.gibbs.path.coverage.LOW_ESS` effective
        particles at the root: with many parameters the one path no longer
        serves the resamples, and the root means nothing); ``wall_time``
        (seconds); with ``"transport"``, ``resample_moves`` (resamples moved,
        counted once per ``omega`` they were moved at), ``acceptance``
        (of the independent Metropolis-Hastings steps), ``hmc_moves`` (of
        those moves, the ones that went on to HMC) and ``hmc_acceptance``.
        Attributes: method,
        ``resamples`` (the design used), B, alpha, omega0, seed, ...
    """
    _check_args(B, alpha, omega0, proposal_scale, xtol, max_evaluations)
    if resamples not in RESAMPLES:
        raise ValueError(f"resamples must be one of {RESAMPLES}, got {resamples!r}")
    workers = as_workers(workers)
    start = time.perf_counter()
    indices = bootstrap_indices(path.target.n, B, np.random.SeedSequence(seed))
    problem = BootstrapProblem(path, indices, estimate, alpha, shape).checked()
    size = len(problem.estimate)
    coverage = choose_coverage(resamples, problem, proposal_scale, seed,
                               1.0 if omega0 is None else omega0, workers)
    if shape_at is not None and problem.shape is None and size > 1:
        coverage.shape, means_ess = coverage.bootstrap_shape(shape_at)
        warn_short_means(means_ess)
    found = search_root(coverage, omega0=omega0, xtol=xtol, max_evaluations=max_evaluations)
    history, at_root = found.history, found.error.at_root
    moved = isinstance(coverage, TransportCoverage)
    # Reweighted, a few short resamples are expected (in omega_se); moved, none.
    if at_root.low_ess > (0 if moved else AUTO_LOW_ESS_SHARE * B):
        hint = "" if moved else "; resamples='transport' moves particles to each resample"
        warnings.warn(
            f"GPC: {at_root.low_ess} of {B} resamples' posteriors at the root were read from "
            f"fewer than {LOW_ESS} effective draws: their regions' verdicts are uncertain "
            f"(counted in omega_se; low_ess_share reports them){hint}",
            RuntimeWarning, stacklevel=2,
        )
    wall = time.perf_counter() - start
    group = xr.Dataset(
        {
            **root_variables(found.root, found.converged, history, found.error, B,
                             problem.estimate),
            **_transport_record(coverage),
            "proposal_omega": (("evaluation",), path.omegas[[e.step for e in history]]),
            "wall_time": ((), wall),
        },
        coords={"param": path.target.names, "evaluation": np.arange(len(history))},
        attrs={
            "method": "gpc_path",
            "reference": "Syring and Martin (2019), Biometrika 106(2) 479-486",
            "rule": "root of the bootstrap coverage by bracketing (Illinois) on one "
            "path reweighted per resample",
            "B": B,
            "alpha": alpha,
            "omega0": found.start,
            "seed": seed,
            "proposal_scale": proposal_scale,
            "xtol": xtol,
            "region": "equal-tailed interval" if size == 1
            else "weighted Mahalanobis ellipsoid",
            "adjust": "none" if coverage.shape is None else (
                "sandwich" if problem.shape is not None else "bootstrap"),
            "resamples": "transport" if isinstance(coverage, TransportCoverage) else "reweight",
        },
    )
    if coverage.shape is not None:
        group["shape"] = (("param", "param2"), coverage.shape)
        group = group.assign_coords(param2=path.target.names)
    return group


def choose_coverage(
    resamples: str, problem: BootstrapProblem, proposal_scale: float, seed: int, omega0: float,
    workers: Workers | None = None,
) -> PathCoverage | TransportCoverage:
    """The coverage function of the ``resamples`` design (:func:`path_gpc`)."""
    if resamples == "auto" and len(problem.estimate) >= AUTO_TRANSPORT_DIMENSION:
        resamples = "transport"
    if resamples != "transport":
        reweighted = PathCoverage(problem, proposal_scale)
        if resamples == "reweight" or reweighted(omega0).low_ess <= AUTO_LOW_ESS_SHARE * len(
                problem.indices):
            return reweighted
    return TransportCoverage(problem, seed=seed, workers=workers)


def _transport_record(coverage: PathCoverage | TransportCoverage) -> dict[str, tuple]:
    if not isinstance(coverage, TransportCoverage):
        return {}
    return {"resample_moves": ((), coverage.moves), "acceptance": ((), coverage.acceptance),
            "hmc_moves": ((), coverage.hmc_moves),
            "hmc_acceptance": ((), coverage.hmc_acceptance)}


def _check_args(B, alpha, omega0, proposal_scale, xtol, max_evaluations) -> None:
    check_int(B, "B")
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if omega0 is not None:
        check_positive(omega0, "omega0")
    if not (isinstance(proposal_scale, (int, float)) and 0 < proposal_scale <= 1):
        raise ValueError(f"proposal_scale must be in (0, 1], got {proposal_scale!r}")
    if not (isinstance(xtol, (int, float)) and 0 < xtol < 1):
        raise ValueError(f"xtol must be in (0, 1), got {xtol!r}")
    check_int(max_evaluations, "max_evaluations", 2)
