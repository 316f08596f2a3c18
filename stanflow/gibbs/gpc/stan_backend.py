"""The Stan backend of GPC (:func:`stanflow.gibbs.gpc.calibrate_gpc` with a :class:`StanBackend`).

Step 2 of Syring and Martin's algorithm, the Gibbs posteriors of the ``B``
bootstrap resamples at the current ``omega``, through the loss program's one
executable and the run layer, a resample being the program's ``weights`` (its
counts), in one of two designs:

- ``"reweight"`` (:func:`reweight_evaluator`): one proposal sample, the
  full-data Gibbs posterior at a fraction of ``omega``, serves every resample
  at every step through importance weights (:mod:`stanflow.gibbs.gpc.reweighting`;
  the proposal draws' pointwise losses read from the program in process);
  resamples it serves poorly are sampled directly, and the proposal is redrawn
  when many are;
- ``"resample"`` (:func:`resample_evaluator`): one
  :class:`stanflow.runs.RunSet` per step whose runs are the ``B`` resamples.

:func:`stan_evaluator` builds either one for the driver; :class:`StanGibbs`
holds what both share (the program, the running specs).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stanflow import arviz_compat
from stanflow.gibbs.estimate import Estimate
from stanflow.gibbs.gpc import reweighting
from stanflow.gibbs.gpc.backend import Evaluator
from stanflow.gibbs.gpc.regions import draws_coverage, draws_inside
from stanflow.gibbs.program import LossProgram
from stanflow.outdir import Interrupted
from stanflow.runs import RunSet, RunSpec
from stanflow.validation import check_int, is_number

DESIGNS = ("reweight", "resample")
REDRAW_SHARE = 0.1
"""``reweight`` design: redraw the proposal when more than this share of the
resamples have too few effective draws."""


@dataclass(frozen=True)
class StanBackend:
    """GPC's posteriors by NUTS on the program's executable, through the run layer.

    Parameters
    ----------
    design : {"reweight", "resample"}, default "reweight"
        ``"reweight"``: one proposal sample (the full-data posterior at
        ``proposal_scale * omega``) serves every resample and every step by
        importance weights; it is drawn again when more than 10% of the
        resamples have fewer than ``min_ess`` effective draws, and resamples it
        serves poorly are sampled directly. ``"resample"``: every step samples
        every resample (``B`` runs of ``draws`` draws).
    draws, warmup : int, default 1000, 300
        Draws per directly sampled resample (one chain each) and warm-up
        iterations of every chain.
    proposal_draws, proposal_chains : int, default 20000, 4
        ``reweight``: draws of the proposal, split over this many one-chain runs.
    proposal_scale : float, default 0.25
        ``reweight``: the proposal's learning rate relative to the current
        ``omega``, in (0, 1] (below 1 the proposal is wider than the targets and
        the weights are bounded).
    min_ess : float, default 1000
        ``reweight``: resamples with a smaller Kish effective sample size are
        sampled directly.
    out_dir : path, optional
        The run sets go to ``out_dir/step-XX``; default a temporary folder,
        removed afterwards.
    executor : stanflow.runs executor, optional
        Default ``LocalExecutor()``.
    progress : bool, default False
        The run layer's progress bar.

    Raises
    ------
    ValueError
        Naming the field, when the object is made.
    """

    design: str = "reweight"
    draws: int = 1000
    warmup: int = 300
    proposal_draws: int = 20000
    proposal_chains: int = 4
    proposal_scale: float = 0.25
    min_ess: float = 1000.0
    out_dir: str | os.PathLike | None = None
    executor: Any = None
    progress: bool = False

    def __post_init__(self) -> None:
        if self.design not in DESIGNS:
            raise ValueError(f"design must be one of {DESIGNS}, got {self.design!r}")
        for name in ("draws", "proposal_draws", "proposal_chains"):
            check_int(getattr(self, name), name)
        check_int(self.warmup, "warmup", 0)
        if not (is_number(self.proposal_scale) and 0 < self.proposal_scale <= 1):
            raise ValueError(f"proposal_scale must be in (0, 1], got {self.proposal_scale!r}")
        if not (is_number(self.min_ess) and self.min_ess >= 0):
            raise ValueError(f"min_ess must be a number >= 0, got {self.min_ess!r}")
        if not isinstance(self.progress, bool):
            raise ValueError(f"progress must be True or False, got {self.progress!r}")


class StanGibbs:
    """The Stan backend's shared pieces: the program, its runs, their folder.

    Parameters
    ----------
    program : LossProgram
    estimate : Estimate
        The full-data estimate: the point whose coverage is counted, and the
        chains' initial values.
    backend : StanBackend
    seed : int
        Root seed of the run sets of resamples.
    """

    def __init__(
        self, program: LossProgram, estimate: Estimate, backend: StanBackend, seed: int
    ) -> None:
        self.program, self.estimate, self.backend, self.seed = program, estimate, backend, seed
        self.model = program.model("stanflow")
        self.own = backend.out_dir is None
        out_dir = backend.out_dir
        self.root = Path(tempfile.mkdtemp(prefix="gpc-")) if out_dir is None else Path(out_dir)
        self.point = estimate.theta[0] if len(program.names) == 1 else estimate.theta
        self.init = program.inits(estimate.theta)

    def run(self, specs: list[RunSpec], name: str, seed: int) -> tuple[np.ndarray, float]:
        """Run ``specs`` as the run set ``out_dir/name``; every run must succeed.

        Returns
        -------
        draws : ndarray, shape (runs, draws, P)
            Each run's draws (chains stacked), in :attr:`LossProgram.names` order.
        seconds : float
            The runs' summed sampling time.
        """
        runset = RunSet(self.model, specs, out_dir=self.root / name, root_seed=seed)
        try:
            with closing(runset.run(self.backend.executor, progress=self.backend.progress)) as runs:
                failed = [r.index for r in runs if not r.ok]
        except Interrupted:
            if self.own:  # the folder is removed at the end: nothing is kept to resume
                raise KeyboardInterrupt from None
            raise
        if failed:
            raise RuntimeError(f"GPC: runs {failed} failed (see {runset.out_dir})")
        idata = runset.to_inference_data()
        posterior = arviz_compat.group(idata, "posterior").stack(sample=("chain", "draw"))
        draws = self.program.draws(posterior, ("run", "sample"))
        return draws, float(arviz_compat.group(idata, "run_stats")["total_time"].sum())

    def sample_resamples(
        self, counts: np.ndarray, omega: float, name: str
    ) -> tuple[np.ndarray, float]:
        """Draws of each resample's posterior, shape ``(R, S[, P])``, and the runs' sampling time."""
        args = {"num_samples": self.backend.draws, "num_warmup": self.backend.warmup,
                "sig_figs": 18}  # full precision: a simplex's values sum to one
        specs = [RunSpec(data=self.program.stan_data(omega, row), inits=self.init, args=args)
                 for row in counts]
        draws, seconds = self.run(specs, name, self.seed)
        return (draws[..., 0] if len(self.program.names) == 1 else draws), seconds

    def cleanup(self) -> None:
        """Remove the temporary folder, if it is this object's own."""
        if self.own:
            shutil.rmtree(self.root, ignore_errors=True)


def stan_evaluator(
    program: LossProgram,
    estimate: Estimate,
    indices: np.ndarray,
    alpha: float,
    backend: StanBackend,
    seed: int,
) -> tuple[Evaluator, Callable[[], None]]:
    """The Stan backend's step evaluator for ``backend.design``, and its cleanup.

    Parameters
    ----------
    program : LossProgram
    estimate : Estimate
        The full-data estimate.
    indices : ndarray of int, shape (B, n)
        The bootstrap resamples (:func:`stanflow.gibbs.gpc.bootstrap_indices`).
    alpha : float
        Regions of level ``1 - alpha``.
    backend : StanBackend
    seed : int
        Root seed of the run sets.

    Returns
    -------
    evaluate : callable ``(omega, t) -> dict``
        One step's coverage and diagnostics.
    cleanup : callable ``() -> None``
        Removes the temporary run folder (call it when the loop ends).
    """
    stan = StanGibbs(program, estimate, backend, seed)
    counts = reweighting.resample_counts(indices, program.n)
    if backend.design == "resample":
        return resample_evaluator(stan, counts, alpha), stan.cleanup
    return reweight_evaluator(stan, counts, alpha), stan.cleanup


def resample_evaluator(stan: StanGibbs, counts: np.ndarray, alpha: float) -> Evaluator:
    """The ``resample`` design's step: one RunSet of the ``B`` resamples at ``omega``.

    Returns
    -------
    callable ``(omega, t) -> dict``
        ``coverage``, ``step_wall_time``, ``step_sampling_time``.
    """

    def evaluate(omega: float, t: int) -> dict[str, float]:
        start = time.perf_counter()
        values, sampling = stan.sample_resamples(counts, omega, f"step-{t:02d}")
        return {
            "coverage": draws_coverage(values, stan.point, alpha),
            "step_wall_time": time.perf_counter() - start,
            "step_sampling_time": sampling,
        }

    return evaluate


def reweight_evaluator(stan: StanGibbs, counts: np.ndarray, alpha: float) -> Evaluator:
    """The ``reweight`` design's step: importance weights on one proposal sample.

    The proposal is the full-data Gibbs posterior at ``proposal_scale * omega``
    (:mod:`stanflow.gibbs.gpc.reweighting`), sampled by ``proposal_chains`` runs of
    one chain; its draws' pointwise losses come from the program in process. A
    resample whose weights have a Kish effective sample size below ``min_ess``
    is sampled directly instead; when more than :data:`REDRAW_SHARE` of the
    resamples are like that, the proposal is drawn again at the current
    ``omega`` first.

    Returns
    -------
    callable ``(omega, t) -> dict``
        ``coverage``, ``step_wall_time``, ``step_sampling_time``, ``ess_min``,
        ``ess_median``, ``n_direct``, ``omega_ref``.
    """
    backend, program = stan.backend, stan.program
    per_chain = -(-backend.proposal_draws // backend.proposal_chains)
    scalar = len(program.names) == 1
    proposal: dict[str, Any] = {}

    def draw_proposal(omega_ref: float) -> float:
        data = program.stan_data(omega_ref)
        args = {"num_samples": per_chain, "num_warmup": backend.warmup, "sig_figs": 18}
        specs = [RunSpec(data=data, inits=stan.init, args=args)
                 for _ in range(backend.proposal_chains)]
        number = proposal.get("number", -1) + 1
        draws, seconds = stan.run(specs, f"proposal-{number:02d}", stan.seed + number)
        draws = draws.reshape(-1, draws.shape[-1])
        proposal.update(
            number=number,
            omega_ref=omega_ref,
            draws=draws[:, 0] if scalar else draws,
            pointwise_loss=program.losses(program.unconstrain(draws)),
        )
        return seconds

    def weights(omega: float) -> np.ndarray:
        log_w = reweighting.log_weights(
            proposal["pointwise_loss"], counts, omega, proposal["omega_ref"]
        )
        return reweighting.normalise(log_w)

    def evaluate(omega: float, t: int) -> dict[str, float]:
        start = time.perf_counter()
        sampling = 0.0
        reference = backend.proposal_scale * omega
        if not proposal:
            sampling += draw_proposal(reference)
        w = weights(omega)
        ess = reweighting.kish_ess(w)
        if np.mean(ess < backend.min_ess) > REDRAW_SHARE and proposal["omega_ref"] != reference:
            sampling += draw_proposal(reference)
            w = weights(omega)
            ess = reweighting.kish_ess(w)
        if scalar:
            inside = reweighting.interval_coverage(proposal["draws"], w, float(stan.point), alpha)
        else:
            inside = reweighting.ellipsoid_coverage(proposal["draws"], w, stan.point, alpha)
        poor = np.flatnonzero(ess < backend.min_ess)
        if poor.size:
            # Sample the poorly served resamples themselves.
            values, seconds = stan.sample_resamples(counts[poor], omega, f"direct-{t:02d}")
            inside[poor] = draws_inside(values, stan.point, alpha)
            sampling += seconds
        return {
            "coverage": float(np.mean(inside)),
            "step_wall_time": time.perf_counter() - start,
            "step_sampling_time": sampling,
            "ess_min": float(ess.min()),
            "ess_median": float(np.median(ess)),
            "n_direct": float(poor.size),
            "omega_ref": float(proposal["omega_ref"]),
        }

    return evaluate
