"""The ADVI runs of one LCVI loop: its schedule in blocks, and the runs that follow it.

:class:`Schedule` says when the loop runs what, in ADVI iterations (the branch,
``iter``, ``max_iter``, the blocks between decision steps); :class:`Runner`
makes the loop's ADVI runs through stanflow's resumable ADVI
(:mod:`stanflow.advi`): plain VI to the branch and on to ``iter``, the LCVI
blocks from the branch each followed by a decision step, a block again for all
its draws, and plain VI continued to LCVI's budget. The loop itself is
:mod:`stanflow.lcvi.loop`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import cmdstanpy
import numpy as np

from stanflow.advi import AdviState, run_advi
from stanflow.lcvi.decision_step import Judge, settled
from stanflow.lcvi.predictive import Predictive
from stanflow.lcvi.program import LcviModel
from stanflow.lcvi.results import PlainVI, Step
from stanflow.lcvi.utility import Utility


class Block(NamedTuple):
    """One LCVI block: ``iterations`` from ``start`` with decisions ``h``.

    ``draws`` is the number of draws its fit writes, ``None`` for
    ``output_samples``.
    """

    name: str
    start: AdviState
    h: np.ndarray
    iterations: int
    draws: int | None


class Schedule(NamedTuple):
    """When the loop runs what, in ADVI iterations.

    Attributes
    ----------
    branch : int
        Iterations shared by plain VI and LCVI (``branch_iter``).
    n_iter : int
        Plain VI's iterations (``iter``), the least LCVI runs to.
    limit : int
        The most LCVI runs to while unsettled (``max_iter``).
    every : int
        LCVI iterations between decision steps (``decision_every``).
    tol : float
        Decisions have settled when a decision step moved none by more.
    light : int
        Draws written by a block that may not be the last: those of its ELBO.
    """

    branch: int
    n_iter: int
    limit: int
    every: int
    tol: float
    light: int

    @classmethod
    def of(
        cls,
        args: Mapping[str, Any],
        branch_iter: int | None,
        max_iter: int | None,
        decision_every: int,
        tol: float,
    ) -> Schedule:
        """The schedule for ADVI settings ``args``, unchecked (the loop checks it)."""
        n_iter = args["iter"]
        return cls(
            n_iter // 2 if branch_iter is None else branch_iter,
            n_iter,
            n_iter if max_iter is None else max_iter,
            decision_every,
            tol,
            min(args["output_samples"], args["elbo_samples"]),
        )

    def goes_on(self, iteration: int, done: bool) -> bool:
        """Whether LCVI runs another block after ``iteration`` (``done``: settled)."""
        return iteration < self.n_iter or (not done and iteration < self.limit)

    def block(self, number: int, start: AdviState, h: np.ndarray) -> Block:
        """The ``number``-th block, from ``start`` with decisions ``h``.

        It ends at the next decision step, at ``iter`` or at ``max_iter``; only
        a block that ends at ``max_iter`` is sure to be the last and writes
        all the draws.
        """
        stop = self.n_iter if start.iteration < self.n_iter else self.limit
        iterations = min(self.every, stop - start.iteration)
        draws = None if start.iteration + iterations == self.limit else self.light
        return Block(f"lcvi-{number:03d}", start, h, iterations, draws)


@dataclass(frozen=True, eq=False)
class Runner:
    """The ADVI runs of one loop: one program and loss, one seed, one folder.

    Every run has the fixed outcome base samples ``eps_y`` and ``eps_u`` in its data and
    the ADVI settings ``args``; a resumed run takes ``eta`` and adaptation
    from its state. ``utility`` is the loop's: plain VI's runs take its kind
    and estimator at scale 1 (their weight 0 keeps the term out of the
    target), LCVI's blocks the judge's utility, its scale set.
    """

    model: LcviModel
    eps_y: np.ndarray
    eps_u: np.ndarray
    utility: Utility
    seed: int
    args: dict[str, Any]
    folder: Path

    def plain_vi(self, schedule: Schedule) -> PlainVI:
        """Plain VI to ``branch_iter``, then on to ``iter``."""
        # only the state at the branch is used, not its draws
        _, fork, seconds = self._plain("vi-branch", schedule.branch, draws=1)
        fit, end, more = self._plain("vi", schedule.n_iter - schedule.branch, fork)
        return PlainVI(fit, fork, end, seconds + more)

    def lcvi_blocks(
        self, judge: Judge, fork: AdviState, h: np.ndarray, schedule: Schedule
    ) -> tuple[list[Step], bool, Block]:
        """LCVI from plain VI's state ``fork`` with decisions ``h``, block by block.

        Returns
        -------
        steps : list of Step
            One per block, judged by ``judge`` (its decision step gives the
            next block's decisions).
        settled : bool
            Whether the last decision step moved no decision by more than
            ``tol``.
        last : Block
            The last block run.
        """
        steps: list[Step] = []
        pending: Future[Step] | None = None
        state, done, number = fork, False, 0
        # a block's record (its utility term, ELBO and risk) is computed while
        # the next block's ADVI process runs; only its decisions are waited
        # for. One record at most is outstanding, so a failing record stops the
        # loop one block later, and an interrupt waits for one record at most.
        recorder = ThreadPoolExecutor(max_workers=1)
        try:
            while schedule.goes_on(state.iteration, done):
                number += 1
                block = schedule.block(number, state, h)
                fit, state, seconds = self._lcvi(block, judge.utility)
                if pending is not None:
                    steps.append(pending.result())
                decided = judge.decide(state)
                pending = recorder.submit(judge.lcvi_block, fit, state, block.h, seconds, decided)
                done = settled(block.h, decided[1], schedule.tol)
                h = decided[1]
            if pending is not None:
                steps.append(pending.result())
        finally:
            recorder.shutdown(wait=True, cancel_futures=True)
        return steps, done, block

    def with_all_draws(self, judge: Judge, block: Block, step: Step) -> Step:
        """``step``, the fit of ``block``, with all ``output_samples`` draws.

        ``step`` itself if the block wrote them all, else the block run again
        from its start. Resumed ADVI is deterministic, so the second run must
        end in ``step``'s state (a ``RuntimeError`` otherwise).
        """
        if block.draws is None or block.draws >= self.args["output_samples"]:
            return step
        again = block._replace(name=f"{block.name}-draws", draws=None)
        fit, state, more = self._lcvi(again, judge.utility)
        _check_same_state(step.state, state)
        return judge.lcvi_block(fit, state, block.h, step.seconds + more)

    def baseline(self, judge: Judge, plain: Step, iteration: int) -> Step:
        """Plain VI at ``iteration``: ``plain`` (its step at ``iter``) continued."""
        end = plain.state
        if iteration <= end.iteration:
            return plain
        fit, longer, seconds = self._plain("vi-longer", iteration - end.iteration, end)
        h = Predictive(self.model, longer.draws(judge.eps_theta)).bayes_decisions()
        return judge.plain_vi(fit, longer, h, seconds)

    def _plain(
        self,
        name: str,
        iterations: int,
        resume: AdviState | None = None,
        draws: int | None = None,
    ) -> tuple[cmdstanpy.CmdStanVB, AdviState, float]:
        """A plain-VI run: the utility term's weight 0."""
        h = np.zeros(self.model.program.n)
        return self._run(name, 0.0, h, 1.0, iterations, resume, draws)

    def _lcvi(
        self, block: Block, utility: Utility
    ) -> tuple[cmdstanpy.CmdStanVB, AdviState, float]:
        """An LCVI block's run: the utility term's weight 1, at ``utility``'s scale."""
        return self._run(
            block.name,
            1.0,
            block.h,
            utility.given_scale("an LCVI block"),
            block.iterations,
            block.start,
            block.draws,
        )

    def _run(
        self,
        name: str,
        weight: float,
        h: np.ndarray,
        scale: float,
        iterations: int,
        resume: AdviState | None,
        draws: int | None,
    ) -> tuple[cmdstanpy.CmdStanVB, AdviState, float]:
        """One ADVI run of ``iterations``; its fit, end state and wall time."""
        run_args = self.args | {"iter": iterations}
        if draws is not None:
            run_args["output_samples"] = draws
        if resume is not None:  # eta and adaptation are the state's
            run_args = {
                k: v
                for k, v in run_args.items()
                if k != "eta" and not k.startswith("adapt.")
            }
        # with the utility term off the outcomes never enter the target: plain
        # VI computes one outcome sample, at base samples z = 0 and u = 1/2,
        # as a user's own run of the program would (unused outcomes that
        # overflow would make the gradient NaN)
        if weight:
            z, u = self.eps_y, self.eps_u
        else:
            z, u = np.zeros((1, self.eps_y.shape[1])), np.full((1, self.eps_y.shape[1]), 0.5)
        kind, estimator = self.utility.kind, self.utility.estimator
        settings = self.model.settings(weight, kind, scale, estimator, z.shape[0])
        data = self.model.stan_data(h, z, u, settings)
        start = time.perf_counter()
        fit, state = run_advi(
            self.model.executable(),
            data,
            self.folder,
            name,
            seed=self.seed,
            args=run_args,
            resume=resume,
        )
        return fit, state, time.perf_counter() - start


def _check_same_state(first: AdviState, again: AdviState) -> None:
    """Check that an ADVI run resumed twice from one state ended in one state."""
    same = np.array_equal(first.mu, again.mu) and np.array_equal(
        first.scale, again.scale
    )
    if not same:  # resumed ADVI is deterministic: the driver broke its contract
        raise RuntimeError(
            f"ADVI resumed twice from one state ended in different states "
            f"({first.path}, {again.path})"
        )
