"""Syring and Martin's bootstrap calibration of the learning rate (GPC), for any loss program.

Syring, N. and Martin, R. (2019), "Calibrating general posterior credible
regions", *Biometrika* 106(2), 479-486. The learning rate ``omega`` is chosen so
that the ``100(1 - alpha)%`` credible regions of the Gibbs posterior cover at the
nominal rate, with the bootstrap standing in for the unknown data distribution:

1. draw ``B`` bootstrap resamples of the data (once: the same resamples at every
   step, common random numbers, so the coverage is a smooth-ish function of
   ``omega`` and the iteration does not chase resampling noise). A resample is
   a weight vector of counts, ``weights[i]`` the times observation ``i`` was
   drawn, so every resample runs the program's one executable;
2. at step ``t`` compute the Gibbs posterior with learning rate ``omega_t`` on
   every resample and the fraction ``c_t`` of resamples whose credible region
   (:mod:`stanflow.gibbs.gpc.regions`) contains the full-data estimate
   ``theta_hat`` (the empirical risk minimiser);
3. stop if ``|c_t - (1 - alpha)| <= eps``; otherwise the stochastic-approximation
   step ``omega_{t+1} = omega_t + (1 + t)^-0.51 (c_t - (1 - alpha))`` (regions
   that cover too often are too wide: raise ``omega``), at most ``max_steps``
   times.

Two backends evaluate step 2, each an argument object that checks itself:

- :class:`StanBackend` (default; :mod:`stanflow.gibbs.gpc.stan_backend`): the
  program's executable through the run layer, in one of two designs.
  ``"reweight"``: one proposal sample, the full-data Gibbs posterior at a
  quarter of the current ``omega``, serves all ``B`` resamples at every step
  through importance weights (:mod:`stanflow.gibbs.gpc.reweighting`: a resample's
  loss is its counts times the pointwise losses, read from the program in
  process). A step costs a matrix product instead of ``B`` posterior runs;
  resamples the proposal serves poorly (small effective sample size) are
  sampled directly, and the proposal is redrawn when many are. ``"resample"``:
  one :class:`stanflow.runs.RunSet` per step whose runs are the ``B``
  resamples at that step's ``omega`` (batch mode packs them into a few
  processes); exact MCMC for every resample, about ``B`` times the cost. All
  run sets use one root seed.
- :class:`GridBackend` (:mod:`stanflow.gibbs.gpc.grid_backend`): exact grid
  posteriors of a template's scalar location on a finite box; the ``B``
  total-loss curves are computed once, each step costs one vectorised
  normalisation.

The pieces are pure functions (:func:`bootstrap_indices`, :func:`update`,
:func:`converged`, and the grid backend's
:func:`~stanflow.gibbs.gpc.grid_backend.grid_coverage`); :func:`calibrate_gpc`
runs the loop and returns the ``calibration`` group.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs.gpc.grid_backend import GridBackend, check_grid_program, grid_evaluator
from stanflow.gibbs.gpc.regions import check_alpha
from stanflow.gibbs.gpc.stan_backend import StanBackend, stan_evaluator
from stanflow.gibbs.program import LossProgram
from stanflow.gibbs.templates import TemplateProgram
from stanflow.validation import check_int, check_number, check_positive

STEP_EXPONENT = 0.51


def bootstrap_indices(n: int, B: int, seed: int | np.random.SeedSequence) -> np.ndarray:
    """Indices of ``B`` bootstrap resamples of ``n`` observations.

    Parameters
    ----------
    n : int
        Number of observations, at least 1.
    B : int
        Number of resamples, at least 1.
    seed : int or numpy.random.SeedSequence
        The resamples depend on it alone.

    Returns
    -------
    ndarray of int, shape (B, n)
    """
    n, B = check_int(n, "n"), check_int(B, "B")
    return np.random.default_rng(seed).integers(0, n, size=(B, n))


def update(omega: float, coverage: float, t: int, alpha: float) -> float:
    """One stochastic-approximation step ``omega + (1 + t)^-0.51 (coverage - (1 - alpha))``.

    Parameters
    ----------
    omega : float
        Current learning rate, positive.
    coverage : float
        Bootstrap coverage at ``omega``, in [0, 1].
    t : int
        Step number, from 0.
    alpha : float
        Nominal non-coverage, in (0, 1).

    Returns
    -------
    float
        The next learning rate. A step that would make it non-positive is cut to
        halve ``omega`` instead (the rate must stay positive; the paper's
        examples never get there).
    """
    if not (math.isfinite(omega) and omega > 0):
        raise ValueError(f"omega must be positive and finite, got {omega!r}")
    if not 0 <= coverage <= 1:
        raise ValueError(f"coverage must be in [0, 1], got {coverage!r}")
    if t < 0:
        raise ValueError(f"t must be >= 0, got {t!r}")
    check_alpha(alpha)
    proposed = omega + (1 + t) ** -STEP_EXPONENT * (coverage - (1 - alpha))
    return proposed if proposed > 0 else omega / 2


def converged(coverage: float, alpha: float, eps: float) -> bool:
    """Whether ``|coverage - (1 - alpha)| <= eps``."""
    return abs(coverage - (1 - alpha)) <= eps + 1e-12


def calibrate_gpc(
    program: LossProgram,
    *,
    backend: StanBackend | GridBackend | None = None,
    estimate: Any = None,
    B: int = 200,
    alpha: float = 0.05,
    eps: float = 0.01,
    max_steps: int = 16,
    omega0: float = 1.0,
    seed: int = 0,
) -> Results:
    """Calibrate ``omega`` of a loss program by Syring and Martin's bootstrap algorithm.

    Parameters
    ----------
    program : LossProgram
        Any loss program (a template's or a user's).
    backend : StanBackend or GridBackend, optional
        How the resamples' posteriors are computed; default ``StanBackend()``
        (reweight design). ``GridBackend`` needs a template's location with
        finite bounds.
    estimate : array_like, shape (P,), optional
        The full-data estimate ``theta_hat``; default :meth:`LossProgram.estimate`.
    B : int, default 200
        Bootstrap resamples.
    alpha : float, default 0.05
        Target coverage ``1 - alpha``.
    eps : float, default 0.01
        Stop when ``|coverage - (1 - alpha)| <= eps``.
    max_steps : int, default 16
        At most this many coverage evaluations.
    omega0 : float, default 1.0
        Starting learning rate.
    seed : int, default 0
        Root seed: the resamples (``SeedSequence(seed)``) and the run sets'
        ``root_seed``.

    Returns
    -------
    Results
        Group ``calibration``: ``omega`` (the calibrated rate: the last
        updated value, or the rate that met the tolerance), ``estimate`` (dim
        ``param``), per step (dim ``step``) ``omega_path`` and ``coverage_path``
        and, for Stan, ``step_wall_time`` and ``step_sampling_time`` (sum of the
        runs' CSV times; for ``reweight`` also ``ess_min``, ``ess_median``,
        ``n_direct`` (resamples sampled directly) and ``omega_ref``, the
        proposal's rate); ``converged`` and ``steps``. Attributes: method,
        backend, design, B, alpha, eps, seed, region and the program's record.

    Raises
    ------
    ValueError, TypeError
        Naming the argument, before anything runs.
    """
    if not isinstance(program, LossProgram):
        raise TypeError(f"program must be a LossProgram, got {type(program).__name__}")
    backend = StanBackend() if backend is None else backend
    if not isinstance(backend, (StanBackend, GridBackend)):
        raise TypeError(
            f"backend must be a StanBackend or a GridBackend, got {type(backend).__name__}"
        )
    check_alpha(alpha)
    B = check_int(B, "B")
    max_steps = check_int(max_steps, "max_steps")
    eps = check_number(eps, "eps", low=0)
    omega0 = check_positive(omega0, "omega0")
    if isinstance(backend, GridBackend):
        check_grid_program(program)
    found = program.estimate() if estimate is None else program.estimate_at(estimate)
    indices = bootstrap_indices(program.n, B, np.random.SeedSequence(seed))

    cleanup: Callable[[], None] | None = None
    if isinstance(backend, GridBackend):
        location = cast(TemplateProgram, program)  # checked by check_grid_program
        evaluate = grid_evaluator(location, indices, float(found.theta[0]), alpha, backend.points)
    else:
        evaluate, cleanup = stan_evaluator(program, found, indices, alpha, backend, seed)

    omegas: list[float] = []
    records: list[dict[str, float]] = []
    omega, done = float(omega0), False
    try:
        for t in range(max_steps):
            record = evaluate(omega, t)
            omegas.append(omega)
            records.append(record)
            if converged(record["coverage"], alpha, eps):
                done = True
                break
            omega = update(omega, record["coverage"], t, alpha)
    finally:
        if cleanup is not None:
            cleanup()

    variables: dict[str, Any] = {
        "omega": ((), omega),
        "estimate": (("param",), found.theta),
        "omega_path": (("step",), np.array(omegas)),
        "converged": ((), done),
        "steps": ((), len(omegas)),
    }
    for key in records[0]:
        name = "coverage_path" if key == "coverage" else key
        variables[name] = (("step",), np.array([r[key] for r in records]))
    stan = isinstance(backend, StanBackend)
    group = xr.Dataset(
        variables,
        coords={"param": program.names, "step": np.arange(len(omegas))},
        attrs={
            "method": "gpc",
            "reference": "Syring and Martin (2019), Biometrika 106(2) 479-486",
            "backend": "stan" if stan else "grid",
            "design": backend.design if isinstance(backend, StanBackend) else "exact grid",
            "B": B,
            "alpha": alpha,
            "eps": eps,
            "max_steps": max_steps,
            "omega0": float(omega0),
            "seed": seed,
            **program.describe(),
            "region": "equal-tailed interval" if len(program.names) == 1
            else "Mahalanobis ellipsoid of the draws",
            "update": "omega + (1 + t)^-0.51 (coverage - (1 - alpha))",
        },
    )
    return arviz_compat.build({"calibration": group})
