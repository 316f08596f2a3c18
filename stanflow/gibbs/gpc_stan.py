"""The Stan backend of GPC (:func:`stanflow.gibbs.gpc.calibrate_gpc` with ``backend="stan"``).

Step 2 of Syring and Martin's algorithm, the Gibbs posteriors of the ``B``
bootstrap resamples at the current ``omega``, through the Gibbs template
(compiled once, :func:`stanflow.gibbs.sampling.gibbs_model`) and the run layer,
in one of two designs:

- ``"reweight"`` (:func:`reweight_evaluator`): one proposal sample, the
  full-data Gibbs posterior at a fraction of ``omega``, serves every resample
  at every step through importance weights (:mod:`stanflow.gibbs.reweighting`);
  resamples it serves poorly are sampled directly, and the proposal is redrawn
  when many are;
- ``"resample"`` (:func:`resample_evaluator`): one
  :class:`stanflow.runs.RunSet` per step whose runs are the ``B`` resamples.

:func:`stan_evaluator` builds either one for the driver; :class:`StanGibbs`
holds what both share (the model, the data of a resample, running specs).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.gibbs.gpc import Evaluator, draws_coverage, draws_inside

if TYPE_CHECKING:
    from stanflow.gibbs.sampling import LossSpec, Params, PriorSpec

REDRAW_SHARE = 0.1
"""``reweight`` design: redraw the proposal when more than this share of the
resamples have too few effective draws."""


class StanGibbs:
    """The Stan backend's shared pieces.

    The compiled template, the data of a resample at a rate, and running specs
    through the run layer into ``out_dir`` (a temporary folder, removed by
    :meth:`cleanup`, by default).

    Parameters
    ----------
    y : ndarray, shape (n,)
        The data.
    X : ndarray, shape (n, K), or None
        Predictors (``linear.stan``), or None for a location (``location.stan``).
    estimate : ndarray, shape (1,) or (K,)
        The full-data estimate: the point whose coverage is counted, and the
        chains' initial values.
    loss, loss_params, prior, prior_params
        As in :func:`stanflow.gibbs.sampling.stan_data`.
    bounds : (lower, upper) or None
        Parameter support; None for unbounded.
    draws : int
        Draws of a directly sampled resample (one chain).
    warmup : int
        Warm-up iterations of every chain.
    seed : int
        Root seed of the run sets of resamples.
    out_dir : path or None
        Where the run sets go; None for a temporary folder.
    executor : stanflow.runs executor or None
        Passed to :meth:`stanflow.runs.RunSet.run`.
    progress : bool
        The run layer's progress bar.
    """

    def __init__(
        self,
        y: np.ndarray,
        X: np.ndarray | None,
        estimate: np.ndarray,
        loss: LossSpec,
        loss_params: Params,
        prior: PriorSpec,
        prior_params: Params,
        bounds: tuple[Any, Any] | None,
        draws: int,
        warmup: int,
        seed: int,
        out_dir: str | os.PathLike | None,
        executor: Any,
        progress: bool,
    ) -> None:
        import tempfile

        from stanflow.gibbs.sampling import gibbs_model

        self.y, self.X, self.estimate = y, X, estimate
        self.spec = {
            "loss": loss,
            "loss_params": loss_params,
            "prior": prior,
            "prior_params": prior_params,
            "bounds": (-math.inf, math.inf) if bounds is None else bounds,
        }
        self.draws, self.warmup, self.seed = draws, warmup, seed
        self.executor, self.progress = executor, progress
        self.model = gibbs_model(loss, prior, linear=X is not None, driver="stanflow")
        self.own = out_dir is None
        self.root = Path(tempfile.mkdtemp(prefix="gpc-")) if self.own else Path(out_dir)
        self.variable = "theta" if X is None else "beta"
        self.point = estimate[0] if X is None else estimate
        self.init = {"theta": float(estimate[0])} if X is None else {"beta": list(map(float, estimate))}

    def data(self, rows: np.ndarray | None, omega: float, **extra: Any) -> dict[str, Any]:
        """The template's data for the observations ``rows`` (all if None)."""
        from stanflow.gibbs.sampling import stan_data

        y = self.y if rows is None else self.y[rows]
        X = self.X if self.X is None or rows is None else self.X[rows]
        return stan_data(y, omega=omega, X=X, **self.spec, **extra)

    def run(self, specs: list[Any], name: str, seed: int) -> Results:
        """Run ``specs`` as the run set ``out_dir/name``; every run must succeed."""
        from stanflow.runs import RunSet

        runset = RunSet(self.model, specs, out_dir=self.root / name, root_seed=seed)
        runs = runset.run(self.executor, progress=self.progress)
        failed = [r.index for r in runs if not r.ok]
        if failed:
            raise RuntimeError(f"GPC: runs {failed} failed (see {runset.out_dir})")
        return runset.to_inference_data()

    def sample_resamples(
        self, indices: np.ndarray, omega: float, name: str
    ) -> tuple[np.ndarray, float]:
        """Draws of each resample's posterior, shape ``(R, S[, K])``, and the
        runs' summed sampling time."""
        from stanflow.runs import RunSpec

        specs = [
            RunSpec(data=self.data(rows, omega), inits=self.init,
                    args={"num_samples": self.draws, "num_warmup": self.warmup})
            for rows in indices
        ]
        idata = self.run(specs, name, self.seed)
        values = idata.posterior[self.variable].stack(sample=("chain", "draw"))
        values = values.transpose("run", "sample", ...).values
        return values, float(idata.run_stats["total_time"].sum())

    def cleanup(self) -> None:
        """Remove the temporary folder, if it is this object's own."""
        if self.own:
            import shutil

            shutil.rmtree(self.root, ignore_errors=True)


def stan_evaluator(
    y: np.ndarray,
    X: np.ndarray | None,
    estimate: np.ndarray,
    indices: np.ndarray,
    alpha: float,
    *,
    loss: LossSpec,
    loss_params: Params,
    prior: PriorSpec,
    prior_params: Params,
    bounds: tuple[Any, Any] | None,
    design: str,
    draws: int,
    warmup: int,
    seed: int,
    proposal_draws: int,
    proposal_chains: int,
    proposal_scale: float,
    min_ess: float,
    out_dir: str | os.PathLike | None,
    executor: Any,
    progress: bool,
) -> tuple[Evaluator, Callable[[], None]]:
    """The Stan backend's step evaluator for ``design``, and its cleanup.

    Parameters
    ----------
    y, X, estimate
        The data, predictors (or None) and full-data estimate (:class:`StanGibbs`).
    indices : ndarray of int, shape (B, n)
        The bootstrap resamples (:func:`stanflow.gibbs.gpc.bootstrap_indices`).
    alpha : float
        Regions of level ``1 - alpha``.
    loss, loss_params, prior, prior_params, bounds, draws, warmup, seed, out_dir, executor, progress
        As in :class:`StanGibbs` (already checked).
    design : {"reweight", "resample"}
        :func:`reweight_evaluator` or :func:`resample_evaluator`.
    proposal_draws, proposal_chains, proposal_scale, min_ess
        The ``reweight`` design's settings (:func:`reweight_evaluator`).

    Returns
    -------
    evaluate : callable ``(omega, t) -> dict``
        One step's coverage and diagnostics.
    cleanup : callable ``() -> None``
        Removes the temporary run folder (call it when the loop ends).
    """
    stan = StanGibbs(
        y, X, estimate, loss, loss_params, prior, prior_params, bounds,
        draws, warmup, seed, out_dir, executor, progress,
    )
    if design == "resample":
        evaluate = resample_evaluator(stan, indices, alpha)
    else:
        evaluate = reweight_evaluator(
            stan, indices, alpha, proposal_draws, proposal_chains,
            proposal_scale, min_ess,
        )
    return evaluate, stan.cleanup


def resample_evaluator(stan: StanGibbs, indices: np.ndarray, alpha: float) -> Evaluator:
    """The ``resample`` design's step: one RunSet of the ``B`` resamples at ``omega``.

    Parameters
    ----------
    stan : StanGibbs
    indices : ndarray of int, shape (B, n)
        The bootstrap resamples.
    alpha : float
        Regions of level ``1 - alpha``.

    Returns
    -------
    callable ``(omega, t) -> dict``
        ``coverage``, ``step_wall_time``, ``step_sampling_time``.
    """

    def evaluate(omega: float, t: int) -> dict[str, float]:
        start = time.perf_counter()
        values, sampling = stan.sample_resamples(indices, omega, f"step-{t:02d}")
        return {
            "coverage": draws_coverage(values, stan.point, alpha),
            "step_wall_time": time.perf_counter() - start,
            "step_sampling_time": sampling,
        }

    return evaluate


def reweight_evaluator(
    stan: StanGibbs, indices: np.ndarray, alpha: float,
    proposal_draws: int, proposal_chains: int, proposal_scale: float, min_ess: float,
) -> Evaluator:
    """The ``reweight`` design's step: importance weights on one proposal sample.

    The proposal is the full-data Gibbs posterior at ``proposal_scale * omega``
    (:mod:`stanflow.gibbs.reweighting`), sampled by ``proposal_chains`` runs of
    one chain. A resample whose weights have a Kish effective sample size below
    ``min_ess`` is sampled directly (``draws`` draws) instead; when more than
    ``REDRAW_SHARE`` of the resamples are like that, the proposal is drawn again
    at the current ``omega`` first.

    Parameters
    ----------
    stan : StanGibbs
    indices : ndarray of int, shape (B, n)
        The bootstrap resamples.
    alpha : float
        Regions of level ``1 - alpha``.
    proposal_draws, proposal_chains : int
        Draws of the proposal, split over this many one-chain runs.
    proposal_scale : float
        The proposal's learning rate relative to ``omega``, in (0, 1].
    min_ess : float
        Resamples with fewer effective draws are sampled directly.

    Returns
    -------
    callable ``(omega, t) -> dict``
        ``coverage``, ``step_wall_time``, ``step_sampling_time``, ``ess_min``,
        ``ess_median``, ``n_direct``, ``omega_ref``.
    """
    from stanflow.gibbs import reweighting
    from stanflow.runs import RunSpec

    counts = reweighting.resample_counts(indices, len(stan.y))
    per_chain = -(-proposal_draws // proposal_chains)
    proposal: dict[str, Any] = {}

    def draw_proposal(omega_ref: float) -> float:
        data = stan.data(None, omega_ref, save_pointwise_loss=True)
        args = {"num_samples": per_chain, "num_warmup": stan.warmup, "sig_figs": 18}
        specs = [RunSpec(data=data, inits=stan.init, args=args) for _ in range(proposal_chains)]
        number = proposal.get("number", -1) + 1
        idata = stan.run(specs, f"proposal-{number:02d}", stan.seed + number)
        stacked = arviz_compat.group(idata, "posterior").stack(sample=("run", "chain", "draw"))
        proposal.update(
            number=number,
            omega_ref=omega_ref,
            draws=stacked[stan.variable].transpose("sample", ...).values,
            pointwise_loss=stacked["pointwise_loss"].transpose("sample", ...).values,
        )
        return float(idata.run_stats["total_time"].sum())

    def weights(omega: float) -> np.ndarray:
        log_w = reweighting.log_weights(
            proposal["pointwise_loss"], counts, omega, proposal["omega_ref"]
        )
        return reweighting.normalise(log_w)

    def evaluate(omega: float, t: int) -> dict[str, float]:
        start = time.perf_counter()
        sampling = 0.0
        if not proposal:
            sampling += draw_proposal(proposal_scale * omega)
        w = weights(omega)
        ess = reweighting.kish_ess(w)
        if np.mean(ess < min_ess) > REDRAW_SHARE and proposal["omega_ref"] != proposal_scale * omega:
            sampling += draw_proposal(proposal_scale * omega)
            w = weights(omega)
            ess = reweighting.kish_ess(w)
        if stan.X is None:
            inside = reweighting.interval_coverage(proposal["draws"], w, stan.point, alpha)
        else:
            inside = reweighting.ellipsoid_coverage(proposal["draws"], w, stan.point, alpha)
        poor = np.flatnonzero(ess < min_ess)
        if poor.size:
            # Sample the poorly served resamples themselves.
            values, seconds = stan.sample_resamples(indices[poor], omega, f"direct-{t:02d}")
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
