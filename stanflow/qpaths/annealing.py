"""SMC and AIS along q-paths, in NumPy.

The loops over temperatures and runs, built from the kernels of
:mod:`~stanflow.qpaths.kernels`; they return ``InferenceData`` with an ``smc``
group (dims ``run``, ``step``) and the estimate in the attributes ``log_z``
and ``log_z_se``. Thermodynamic integration is :mod:`~stanflow.qpaths.ti`.

Error estimates
---------------
SMC and AIS run ``n_runs`` independent times. Their ``log Z`` is the log of
the mean of the runs' ``Z`` estimates (each unbiased, so their mean is too)
with the delta-method standard error ``sd(Z_r) / (sqrt(R) mean(Z_r))`` from
the spread of the runs. SMC with its self-tuning moves also bridges its final
particles (:func:`stanflow.bridge.bridge_sampling`) and reports the
inverse-variance combination of the two estimates, SMC's variance taken as the
larger of the runs' spread and ``sum_t (1 / ESS_t - 1 / N) / R`` (the steps'
effective sizes; the spread of a few runs is itself too noisy to weigh by).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import xarray as xr
from numpy.typing import ArrayLike

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.bridge import bridge_sampling
from stanflow.qpaths import smc_step
from stanflow.qpaths.kernels import (
    RESAMPLING,
    LogDensity,
    MoveKernel,
    Sampler,
    check_schedule,
    initial_particles,
    next_beta,
)
from stanflow.qpaths.qmath import check_q
from stanflow.qpaths.self_tuning import SelfTuningMoves
from stanflow.validation import check_int

STEP_FIELDS = smc_step.StepInfo._fields
"""The per-step records of both loops (group ``smc``, dims ``run``, ``step``)."""


def smc(
    log_pi0: LogDensity,
    sample_pi0: Sampler,
    log_pi1: LogDensity,
    *,
    q: float = 1.0,
    n_particles: int = 1000,
    n_moves: int | None = None,
    schedule: ArrayLike | None = None,
    target_ess: float = 0.5,
    resampling: str = "systematic",
    n_runs: int = 4,
    seed: int | None = None,
    max_steps: int = 10_000,
    moves: MoveKernel | None = None,
    bridge: bool | None = None,
) -> Results:
    """SMC sampler along the q-path with resampling and MCMC moves; log Z estimate.

    At every step the weights are multiplied by the incremental weights
    ``pi_{beta',q} / pi_{beta,q}``, ``log Z`` gains ``log mean`` of them, and
    the particles are resampled and moved by MCMC targeting ``pi_{beta',q}``.
    By default the moves tune themselves from the particles
    (:class:`~stanflow.qpaths.self_tuning.SelfTuningMoves`): HMC on the
    densities' gradients when both have them (a Stan program in process), an
    independence proposal fitted to the particles with a random walk
    otherwise, each repeated until the particles have forgotten where they
    started. The paper's kernel is ``moves=rwm_moves, n_moves=1``.

    Parameters
    ----------
    log_pi0, sample_pi0, log_pi1 : callable
        The normalised base (log density and sampler) and the unnormalised
        target; see the module docstring.
    q : float, default 1.0
        Path parameter; 1 is the geometric path (tempering).
    n_particles : int, default 1000
    n_moves : int, optional
        Moves per temperature (``M``). Default: as many as the self-tuning
        kernel needs; a kernel of fixed length (``rwm_moves``,
        :class:`~stanflow.qpaths.stan_moves.StanMoves`) needs a number.
    schedule : array_like, optional
        Fixed increasing betas from 0 to 1. Default: adaptive, each next beta
        by bisection so that the ESS of the incremental weights is
        ``target_ess * n_particles``.
    target_ess : float, default 0.5
        In ``(0, 1)``; used by the adaptive schedule.
    resampling : {"systematic", "multinomial"}, default "systematic"
    n_runs : int, default 4
        Independent runs, for the error estimate (at least 2).
    seed : int, optional
    max_steps : int, default 10000
        Adaptive schedule: give up (``RuntimeError``) after this many steps.
    moves : callable, optional
        The MCMC kernel (see :data:`~stanflow.qpaths.kernels.MoveKernel`);
        default a new :class:`~stanflow.qpaths.self_tuning.SelfTuningMoves`
        per run. :func:`~stanflow.qpaths.kernels.rwm_moves` is the paper's
        random walk; :class:`stanflow.qpaths.stan_moves.StanMoves` runs NUTS in
        CmdStan.
    bridge : bool, optional
        Also estimate ``log Z`` by bridge sampling
        (:func:`stanflow.bridge.bridge_sampling`) on the final particles of
        all runs (the first half fit its normal proposal, the second half
        enter the estimator) and report the inverse-variance combination of
        the two estimates. Default: on with the self-tuning moves, whose
        particles have forgotten their ancestors (nearly independent draws of
        the target), off with a kernel of your own (after the paper's single
        random-walk move the particles share ancestors, and the bridge's
        error, which assumes independent draws, would be too small).

    Returns
    -------
    Results
        Group ``smc`` with ``beta``, ``ess`` (of the incremental weights),
        ``acceptance`` (mean over the moves), ``n_moves`` (moves made),
        ``log_z_increment`` (dims ``run``, ``step``; runs with fewer steps
        padded with NaN, see ``n_steps``), ``n_steps`` and ``log_z`` (per
        run). Attributes ``log_z``, ``log_z_se`` (the estimate: SMC's, see the
        module docstring, combined with the bridge's when there is one),
        ``log_z_smc``, ``log_z_smc_se``, with the bridge ``log_z_bridge``,
        ``log_z_bridge_se`` (or ``bridge_failed``, its reason), ``q``,
        ``n_particles``, ``moves`` (the kernel), ``schedule``.
    """
    q = float(check_q(q))
    check_int(n_particles, "n_particles", 2)
    check_int(n_runs, "n_runs", 2)
    _check_moves(n_moves)
    betas = None if schedule is None else check_schedule(schedule)
    if not 0 < target_ess < 1:
        raise ValueError(f"target_ess must lie in (0, 1), got {target_ess}")
    if resampling not in RESAMPLING:
        raise ValueError(f"resampling must be one of {RESAMPLING}, got {resampling!r}")
    if bridge is None:
        bridge = moves is None
    rng = np.random.default_rng(seed)
    records = []
    finals = []
    for _ in range(n_runs):
        kernel = SelfTuningMoves() if moves is None else moves
        state = smc_step.init(
            initial_particles(rng, sample_pi0, n_particles, log_pi0, log_pi1)
        )
        steps: list[smc_step.StepInfo] = []
        while state.beta < 1.0:
            if len(steps) >= max_steps:
                raise RuntimeError(f"smc: beta = {state.beta} after max_steps = {max_steps}")
            new = (
                next_beta(state.particles, state.beta, q, target_ess)
                if betas is None
                else betas[len(steps) + 1]
            )
            state, info = smc_step.step(
                rng, state, new, q, log_pi0, log_pi1,
                moves=kernel, n_moves=n_moves, resampling=resampling,
            )
            steps.append(info)
        records.append(np.array(steps))
        finals.append(state.particles.z)
    log_z, se = _runs_log_z(records)
    estimate: dict[str, object] = {"log_z": log_z, "log_z_se": se, "log_z_smc": log_z,
                                   "log_z_smc_se": se}
    if bridge:
        bridged = _final_bridge(rng, log_pi1, np.concatenate(finals))
        estimate |= bridged
        if "log_z_bridge" in bridged:
            estimate |= _combined(log_z, se, records, n_particles, bridged)
    return _to_idata(
        records,
        **estimate,
        algorithm="smc",
        q=q,
        n_particles=n_particles,
        moves=_kernel_name(kernel),
        schedule="adaptive" if betas is None else "fixed",
    )


def ais(
    log_pi0: LogDensity,
    sample_pi0: Sampler,
    log_pi1: LogDensity,
    schedule: ArrayLike,
    *,
    q: float = 1.0,
    n_particles: int = 1000,
    n_moves: int | None = None,
    n_runs: int = 4,
    seed: int | None = None,
    moves: MoveKernel | None = None,
) -> Results:
    """Annealed importance sampling along the q-path: particles as chains.

    Every particle is one chain through the fixed ``schedule``: its log weight
    accumulates the incremental weights, then it makes MCMC steps targeting
    the new ``pi_{beta,q}`` (the kernels of :func:`smc`, tuned from the
    current particles). No resampling. ``Z`` per run is the mean of
    the particles' weights.

    Parameters
    ----------
    schedule : array_like
        Increasing betas from 0 to 1.
    moves : callable, optional
        As in :func:`smc`.
    Other parameters as in :func:`smc`.

    Returns
    -------
    Results
        Group ``smc`` with ``beta``, ``ess`` (of the accumulated weights),
        ``acceptance``, ``n_moves`` and ``log_z_increment`` (dims ``run``,
        ``step``), ``n_steps`` and ``log_z`` per run; attributes as in
        :func:`smc`.
    """
    q = float(check_q(q))
    check_int(n_particles, "n_particles", 2)
    check_int(n_runs, "n_runs", 2)
    _check_moves(n_moves)
    betas = check_schedule(schedule)
    rng = np.random.default_rng(seed)
    records = []
    for _ in range(n_runs):
        kernel = SelfTuningMoves() if moves is None else moves
        state = smc_step.init(
            initial_particles(rng, sample_pi0, n_particles, log_pi0, log_pi1)
        )
        steps = []
        for new in betas[1:]:
            state, info = smc_step.step(
                rng, state, new, q, log_pi0, log_pi1,
                moves=kernel, n_moves=n_moves, resampling=None,
            )
            steps.append(info)
        records.append(np.array(steps))
    log_z, se = _runs_log_z(records)
    return _to_idata(
        records,
        log_z=log_z,
        log_z_se=se,
        algorithm="ais",
        q=q,
        n_particles=n_particles,
        moves=_kernel_name(kernel),
        schedule="fixed",
    )


def _check_moves(n_moves: int | None) -> None:
    if n_moves is not None:
        check_int(n_moves, "n_moves")


def _kernel_name(kernel: MoveKernel) -> str:
    """What moved the particles (of the last run).

    ``"self-tuning (<move> at <count>, ... temperatures)"``, ``"rwm_moves"``,
    ``"StanMoves"``.
    """
    if isinstance(kernel, SelfTuningMoves):
        used = Counter(str(call["move"]) for call in kernel.history)
        counts = ", ".join(f"{move} at {count}" for move, count in used.items())
        return f"self-tuning ({counts} temperatures)"
    return getattr(kernel, "__name__", type(kernel).__name__)


def _final_bridge(
    rng: np.random.Generator, log_pi1: LogDensity, draws: np.ndarray
) -> dict[str, float | str]:
    """``log Z`` by bridge sampling on the final particles, or why it failed."""
    try:
        found = bridge_sampling(log_pi1, draws, seed=rng)
    except (ValueError, FloatingPointError) as error:
        return {"bridge_failed": str(error)}
    if not (found.converged and np.isfinite(found.relative_error)):
        return {"bridge_failed": "the bridge iteration did not converge"}
    return {"log_z_bridge": found.log_marginal, "log_z_bridge_se": found.relative_error}


def _per_run_log_z(records: Sequence[np.ndarray]) -> np.ndarray:
    return np.array([r[:, STEP_FIELDS.index("log_z_increment")].sum() for r in records])


def _runs_log_z(records: Sequence[np.ndarray]) -> tuple[float, float]:
    """``log`` of the mean of the runs' ``Z`` and its delta-method standard error."""
    per_run = _per_run_log_z(records)
    z = np.exp(per_run - per_run.max())
    log_z = float(np.log(z.mean()) + per_run.max())
    return log_z, float(z.std(ddof=1) / np.sqrt(len(z)) / z.mean())


def _combined(
    log_z: float, se: float, records: Sequence[np.ndarray], n_particles: int,
    bridged: dict[str, float | str],
) -> dict[str, float]:
    """SMC's and the bridge's ``log Z`` combined by inverse variance.

    SMC's error from the spread of a few runs is itself noisy (one degree of
    freedom for two runs): it is weighed by the larger of that and the steps'
    ESS, ``var log Z ~ sum_t (1 / ESS_t - 1 / N)`` per run.
    """
    ess_steps = [r[:, STEP_FIELDS.index("ess")] for r in records]
    floor = float(np.mean([np.sum(1 / e - 1 / n_particles) for e in ess_steps])) / len(records)
    smc_se = max(se, np.sqrt(max(floor, 0.0)))
    precision = np.array([smc_se, float(bridged["log_z_bridge_se"])]) ** -2.0
    values = np.array([log_z, float(bridged["log_z_bridge"])])
    return {"log_z": float(precision @ values / precision.sum()),
            "log_z_se": float(precision.sum() ** -0.5)}


def _to_idata(records: Sequence[np.ndarray], **attrs: object) -> Results:
    """The ``smc`` group of the runs' step records; ``attrs`` (the estimate included) as given."""
    names = STEP_FIELDS
    n_steps = np.array([len(r) for r in records])
    padded = np.full((len(records), n_steps.max(), len(names)), np.nan)
    for i, r in enumerate(records):
        padded[i, : len(r)] = r
    per_run = _per_run_log_z(records)
    group = xr.Dataset(
        {name: (("run", "step"), padded[..., k]) for k, name in enumerate(names)}
        | {"n_steps": ("run", n_steps), "log_z": ("run", per_run)},
        attrs=attrs,
    )
    return arviz_compat.build({"smc": group})
