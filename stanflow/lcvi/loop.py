"""The LCVI loop: one ADVI optimisation of ELBO + U with decision steps inside it.

Plain VI and LCVI share one ADVI trajectory up to ``branch_iter`` iterations
(same seed, initial point, adapted ``eta`` and random numbers), through
stanflow's resumable ADVI (:mod:`stanflow.advi`):

1. **Plain VI** runs ``iter`` iterations, saving its state at ``branch_iter``.
   Its Bayes decisions ``h_0`` and the losses of its posterior-predictive draws
   at ``h_0`` set the utility's scale (``M`` or ``gamma`` at a percentile,
   :meth:`stanflow.lcvi.utility.Utility.scaled`) unless given.
2. **LCVI** continues from the state at ``branch_iter`` with the utility term
   in the target, in blocks of ``decision_every`` iterations up to ``iter``.
   Between blocks the decision step (:mod:`stanflow.lcvi.decision_step`) sets
   ``h_b`` to the decisions of the block's fit: the Bayes decision of its
   predictive with the likelihood's noise integrated out
   (:meth:`stanflow.losses.BoundLoss.mixture_decision`), or the numerical
   maximiser of the estimated utility term
   (:func:`stanflow.lcvi.utility.utility_decisions`).

The decisions are thus optimised jointly with the variational parameters, as
Kusmierczyk et al. did, but each decision step goes to the exact optimum
instead of taking one gradient step. The decision steps use draws of each
ADVI state from base samples fixed for the whole loop (common random
numbers), so a decision moves only when the approximation does.

3. **Settling.** If the last decision step still moved a decision by more than
   ``tol`` at ``iter``, LCVI goes on block by block until none does or it
   reaches ``max_iter`` (by default ``iter``: then it warns); plain VI is then
   continued as far (the ``baseline``).

Both methods get the same budget and the same random numbers until the
branch, so their risks are paired. The schedule and the ADVI runs are in
:mod:`stanflow.lcvi.advi_runs`; what the loop returns is in
:mod:`stanflow.lcvi.results`.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from stanflow.arviz_compat import Results
from stanflow.lcvi.advi_runs import Runner, Schedule
from stanflow.lcvi.decision_step import DECISIONS, Judge
from stanflow.lcvi.numeric_decisions import resolve_loss
from stanflow.lcvi.predictive import Predictive
from stanflow.lcvi.program import LcviProgram
from stanflow.lcvi.results import Loop, PlainVI, Step, to_idata
from stanflow.lcvi.utility import (
    Utility,
    outcome_base_samples,
    uniform_base_samples,
    utility_argument,
)
from stanflow.losses import BoundLoss
from stanflow.runs.arguments import check_args
from stanflow.validation import check_int, check_positive

ADVI_DEFAULTS: dict[str, Any] = {
    "iter": 10_000,
    "grad_samples": 10,
    "elbo_samples": 100,
    "eval_elbo": 1000,
    "tol_rel_obj": 1e-9,
    "output_samples": 1000,
}
"""ADVI settings (CmdStan's names) unless overridden. ``tol_rel_obj`` is so
small that ADVI never stops early: every run does its ``iter`` iterations."""


def lcvi(program: LcviProgram, loss: str | Path | BoundLoss, **options: Any) -> Results:
    """Run plain VI and LCVI on a problem; the result as InferenceData.

    Parameters
    ----------
    program : LcviProgram
        An LCVI program with its data (:mod:`stanflow.lcvi.program`).
    loss : str, path or BoundLoss
        As for :func:`run_lcvi`.
    **options
        The keyword arguments of :func:`run_lcvi`, loss parameters
        (``q=0.2``) included.

    Returns
    -------
    Results
        LCVI's last fit (posterior, sample_stats, ...) and a ``decisions``
        group over ``iteration`` (0: plain VI, then one per LCVI block) and
        ``decision``: ``h``, ``elbo``, ``utility``, ``risk``, ``seconds``,
        ``advi_iteration``, and plain VI at LCVI's budget: ``baseline_h``,
        ``baseline_risk``, ``baseline_advi_iteration``; attributes ``problem``,
        ``loss``, ``loss_params``, ``utility_kind``, ``scale``, ``estimator``
        (the loop's :class:`~stanflow.lcvi.utility.Utility`), ``decision_rule``,
        ``settled``, ``branch_iter`` and the ADVI settings (``advi_eta``, ...).
        :func:`run_lcvi` returns the fits themselves, plain VI's included.
    """
    return to_idata(program, run_lcvi(program, loss, **options))


def run_lcvi(
    program: LcviProgram,
    loss: str | Path | BoundLoss,
    *,
    utility: Utility | None = None,
    stratified: bool = True,
    decision: str = "bayes",
    n_draws: int = 1000,
    branch_iter: int | None = None,
    decision_every: int = 1000,
    tol: float = 0.05,
    max_iter: int | None = None,
    algorithm: str = "meanfield",
    seed: int = 1,
    advi_args: Mapping[str, Any] | None = None,
    out_dir: str | Path | None = None,
    vi: PlainVI | None = None,
    **loss_params: float,
) -> Loop:
    """Plain VI and LCVI on one ADVI trajectory (see the module docstring).

    Parameters
    ----------
    program : LcviProgram
        An LCVI program with its data (:mod:`stanflow.lcvi.program`): a
        program of your own or a shipped one (:mod:`stanflow.lcvi.problem`).
    loss : str, path or BoundLoss
        A shipped loss's name with ``loss_params`` (e.g. ``q=0.2``); a
        :class:`~stanflow.losses.BoundLoss`; or a Stan file of your own
        (a path, or a string ending in ``.stanfunctions``) with no Python
        rule: its decisions are then numerical
        (:func:`stanflow.lcvi.numeric_decisions.stan_loss`) and its
        ``loss_params`` the keyword values in the order given.
    utility : Utility, optional
        The utility term (default ``Utility()``: ``M - l``, ``M`` the 90th
        percentile of plain VI's losses, the linearised estimator on ``S = 5``
        outcome samples per ``theta``). Its ``n_outcomes`` fixed outcome base
        samples serve the whole loop; its ``scale``, unless given, comes from
        the losses of plain VI's predictive draws at its decisions.
    stratified : bool, default True
        Stratified antithetic fixed outcome base samples, or independent ones
        (:func:`stanflow.lcvi.utility.outcome_base_samples`).
    decision : {"bayes", "utility"}, default "bayes"
        The decision step: the Bayes decision of the fit's predictive, or the
        maximiser of the estimated utility term over the fit's draws and the
        base samples. With the linearised estimator and many outcome samples
        the two coincide.
    n_draws : int, default 1000
        Draws of each ADVI state that the decisions, ``U`` and the recorded
        risks are computed from, from base samples fixed for the whole loop
        (common random numbers: a decision moves only when the approximation
        does).
    branch_iter : int, optional
        ADVI iterations shared by plain VI and LCVI; by default half of
        ``advi_args["iter"]``. In ``[1, iter)``.
    decision_every : int, default 1000
        LCVI iterations between decision steps, at least 1.
    tol : float, default 0.05
        Decisions have settled when the last decision step moved none by more
        than this (units of ``y``).
    max_iter : int, optional
        If the decisions have not settled after ``iter`` iterations, LCVI goes
        on block by block until they do or it reaches ``max_iter``; plain VI is
        then continued as far, so that both get the same budget. By default
        ``iter``: the budget is fixed, and a loop that ends unsettled warns.
    algorithm : {"meanfield", "fullrank"}, default "meanfield"
    seed : int, default 1
        Seeds the base samples and the ADVI trajectory.
    advi_args : mapping, optional
        Overrides of :data:`ADVI_DEFAULTS` and more of CmdStan's
        ``variational`` arguments (``eta``, ``adapt.iter``, ``sig_figs``).
        Without ``eta``, plain VI's run adapts it as CmdStan does.
    out_dir : path, optional
        Folder in which each call makes a subfolder ``lcvi-<loss>-*`` for its
        runs' files (CSV, states, data, consoles); by default a temporary
        folder removed at the end.
    vi : PlainVI, optional
        Plain VI of an earlier loop (``loop.vi``) on the same problem, seed and
        ADVI settings, instead of running it again: its states must still
        exist, and its ``branch_iter``, ``iter`` and algorithm must match.

    Returns
    -------
    Loop
    """
    loss = resolve_loss(loss, **loss_params)
    # every input, checked before any run (the utility checked itself when made)
    utility = utility_argument(utility)
    args = _advi_args(algorithm, advi_args)
    schedule = Schedule.of(args, branch_iter, max_iter, decision_every, tol)
    _check_options(n_draws, decision, schedule)
    if vi is not None:
        _check_vi(vi, algorithm, schedule)
    model = program.bind(loss)  # compiled and checked before any run
    rng = np.random.default_rng(seed)
    S = utility.n_outcomes
    eps_y = outcome_base_samples(S, program.n, rng, stratified)
    # the uniform base samples have a stream of their own: programs that do
    # not use them get the numbers they got before they existed
    eps_u = uniform_base_samples(S, program.n, seed, model.uses_uniform)

    with tempfile.TemporaryDirectory(prefix="stanflow-lcvi-") as tmp:
        folder = _call_folder(Path(tmp), out_dir, loss)
        runner = Runner(model, eps_y, eps_u, utility, seed, args, folder)
        # plain VI to the branch and to iter; its decisions h_0 from the draws
        # of its state that every state is judged by (common random numbers)
        if vi is None:
            vi = runner.plain_vi(schedule)
        eps_theta = rng.standard_normal((int(n_draws), vi.end.mu.size))
        plain = Predictive(model, vi.end.draws(eps_theta))
        h = plain.bayes_decisions()
        # the utility's scale, from plain VI's losses unless given
        if utility.scale is None:
            y_rep = plain.one_outcome(rng)
            utility = utility.scaled(loss.value(y_rep, h))
        judge = Judge(model, utility, decision, eps_y, eps_u, eps_theta)
        steps = [judge.plain_vi(vi.fit, vi.end, h, vi.seconds)]
        # LCVI from the branch in blocks, each followed by a decision step
        blocks, done, last = runner.lcvi_blocks(judge, vi.branch, h, schedule)
        steps += blocks
        # settled before max_iter: the last block again, for all the draws
        steps[-1] = runner.with_all_draws(judge, last, steps[-1])
        if not done:
            _warn_unsettled(steps, schedule)
        # plain VI with LCVI's budget
        baseline = runner.baseline(judge, steps[0], steps[-1].state.iteration)
    return Loop(
        vi,
        steps,
        baseline,
        utility,
        done,
        args | {"eta": vi.end.eta},
        eps_y,
        eps_u,
        eps_theta,
        schedule.branch,
        loss,
        decision,
    )


def _call_folder(tmp: Path, out_dir: str | Path | None, loss: BoundLoss) -> Path:
    """The folder of the call's files: ``tmp``, or a new ``out_dir/lcvi-<loss>-*``."""
    if out_dir is None:
        return tmp
    # a folder of its own per call: loops sharing a plain VI keep their files
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"lcvi-{loss.name}-", dir=out_dir))


def _warn_unsettled(steps: list[Step], schedule: Schedule) -> None:
    """Warn that the last decision step moved a decision by more than ``tol``.

    The warning points at the caller of :func:`run_lcvi`.
    """
    moved = float(np.max(np.abs(steps[-1].decisions - steps[-2].decisions)))
    advice = (
        f"it reached max_iter = {schedule.limit}"
        if schedule.limit > schedule.n_iter
        else "give max_iter > iter to let it go on"
    )
    warnings.warn(
        f"LCVI's decisions still moved by up to {moved:.3g} > tol = {schedule.tol:g} "
        f"in the last block (iteration {steps[-1].state.iteration}): {advice}, or "
        "use a larger tol",
        RuntimeWarning,
        stacklevel=3,
    )


def _advi_args(algorithm: str, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ADVI settings of every run: :data:`ADVI_DEFAULTS` and ``overrides``."""
    if algorithm not in ("meanfield", "fullrank"):
        raise ValueError(
            f"algorithm must be 'meanfield' or 'fullrank', got {algorithm!r}"
        )
    for key in ("algorithm", "tol_rel_obj"):
        if key in (overrides or {}):
            raise ValueError(
                f"advi_args[{key!r}]: set by the loop (its runs have fixed budgets), "
                "not an override"
            )
    # CmdStan's names and ranges, checked before any run
    return check_args(
        "variational", {"algorithm": algorithm} | ADVI_DEFAULTS | dict(overrides or {})
    )


def _check_options(n_draws: int, decision: str, schedule: Schedule) -> None:
    """Check the number of draws, the decision step's name and the schedule."""
    branch, n_iter, limit = schedule.branch, schedule.n_iter, schedule.limit
    decision_every, tol = schedule.every, schedule.tol
    check_int(n_draws, "n_draws")
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {list(DECISIONS)}, got {decision!r}")
    check_int(n_iter, "advi_args['iter']", 2)
    if isinstance(branch, bool) or not 1 <= int(branch) < n_iter:
        raise ValueError(
            f"branch_iter must be in [1, iter) = [1, {n_iter}), got {branch!r}"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < n_iter:
        raise ValueError(
            f"max_iter must be an integer >= iter = {n_iter}, got {limit!r}"
        )
    check_int(decision_every, "decision_every")
    check_positive(tol, "tol")


def _check_vi(vi: PlainVI, algorithm: str, schedule: Schedule) -> None:
    """Check that plain VI of an earlier loop fits this one and its states exist."""
    branch, n_iter = schedule.branch, schedule.n_iter
    if (vi.branch.iteration, vi.end.iteration) != (branch, n_iter):
        raise ValueError(
            f"vi: plain VI ran to {vi.branch.iteration} and {vi.end.iteration} "
            f"iterations, not branch_iter={branch} and iter={n_iter}"
        )
    if vi.end.algorithm != algorithm:
        raise ValueError(f"vi: plain VI is {vi.end.algorithm!r}, not {algorithm!r}")
    for state in (vi.branch, vi.end):
        if not state.path.is_file():
            raise ValueError(f"vi: its state {state.path} no longer exists")
