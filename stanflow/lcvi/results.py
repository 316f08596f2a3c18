"""What the LCVI loop returns (:class:`Step`, :class:`PlainVI`, :class:`Loop`), as InferenceData.

:func:`stanflow.lcvi.loop.run_lcvi` returns a :class:`Loop`; :func:`to_idata`
turns it into the installed ArviZ's results of LCVI's last fit with the loop's
record as the group ``decisions`` (what :func:`stanflow.lcvi.loop.lcvi`
returns).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import cmdstanpy
import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.advi import AdviState
from stanflow.arviz_compat import Results
from stanflow.idata import to_inference_data
from stanflow.lcvi.program import LcviProgram
from stanflow.lcvi.utility import Utility
from stanflow.losses import BoundLoss


class Step(NamedTuple):
    """One fit of the loop and what it is judged by.

    Attributes
    ----------
    fit : cmdstanpy.CmdStanVB
    state : AdviState
        ADVI's state at the fit (its iteration, the approximation's parameters).
    decisions : ndarray, shape (N,)
        Decisions taken from this fit (the decision step).
    elbo : float
        ``E_q[target] - weight U + entropy(q)``: the model's target (its
        ``log_p__``, up to the constants Stan drops, holding ``weight U``)
        averaged over the fit's draws, ``U`` over the loop's draws of the
        state, the entropy exact. A block that was not the last writes only
        ``elbo_samples`` draws (as many as CmdStan estimates its ELBO from);
        the last writes ``output_samples``.
    utility : float
        ``U`` at the decisions the fit was run with (those of the previous
        step; plain VI's own for plain VI).
    risk : float
        Empirical risk ``mean_n l(y_n, decisions_n)`` on the problem's ``y``.
    seconds : float
        Wall time of the ADVI runs that led to this fit from the previous one.
    """

    fit: cmdstanpy.CmdStanVB
    state: AdviState
    decisions: np.ndarray
    elbo: float
    utility: float
    risk: float
    seconds: float


class PlainVI(NamedTuple):
    """Plain VI's part of the loop, which LCVI branches off.

    Pass it as ``vi`` to :func:`stanflow.lcvi.loop.run_lcvi` to calibrate
    several losses on one plain-VI run (the states are files: the loop's
    ``out_dir`` must outlive the calls).

    Attributes
    ----------
    fit : cmdstanpy.CmdStanVB
        Plain VI after ``iter`` iterations.
    branch, end : AdviState
        Its states at ``branch_iter`` and at ``iter``.
    seconds : float
        Wall time of its ADVI runs.
    """

    fit: cmdstanpy.CmdStanVB
    branch: AdviState
    end: AdviState
    seconds: float


class Loop(NamedTuple):
    """What :func:`stanflow.lcvi.loop.run_lcvi` did.

    Attributes
    ----------
    vi : PlainVI
    steps : list of Step
        ``steps[0]`` is plain VI after ``iter`` iterations (its decisions are
        ``h_0``, its losses set the scale), then one step per LCVI block;
        ``steps[-1]`` is LCVI's result.
    baseline : Step
        Plain VI after as many iterations as LCVI's result: what LCVI is
        compared with (``steps[0]`` unless LCVI went on past ``iter``).
    utility : Utility
        The utility term used, its ``scale`` (``M`` or ``gamma``) set.
    settled : bool
        Whether the last decision step moved no decision by more than ``tol``.
    args : dict
        The ADVI settings of every run, ``eta`` (adapted or given) included.
    eps_y, eps_u : ndarray, shape (S, N)
        The fixed outcome base samples (standard normal, uniform).
    eps_theta : ndarray, shape (T, D)
        The fixed base samples of the draws of every state that the decisions,
        ``U`` and the risks are computed from
        (:meth:`stanflow.advi.AdviState.draws`).
    branch_iter : int
        Iterations shared by plain VI and LCVI.
    loss : BoundLoss
    decision : str
        The decision step used.
    """

    vi: PlainVI
    steps: list[Step]
    baseline: Step
    utility: Utility
    settled: bool
    args: dict[str, Any]
    eps_y: np.ndarray
    eps_u: np.ndarray
    eps_theta: np.ndarray
    branch_iter: int
    loss: BoundLoss
    decision: str


def to_idata(program: LcviProgram, loop: Loop) -> Results:
    """InferenceData of LCVI's last fit with the loop's record as group ``decisions``.

    Parameters
    ----------
    program : LcviProgram
        The program the loop ran on (its ``dims`` name the posterior's
        dimensions).
    loop : Loop

    Returns
    -------
    Results
        The groups of ``loop.steps[-1].fit`` and ``decisions`` over
        ``iteration`` (0: plain VI, then one per LCVI block) and ``decision``:
        ``h``, ``elbo``, ``utility``, ``risk``, ``seconds``,
        ``advi_iteration``, and plain VI at LCVI's budget: ``baseline_h``,
        ``baseline_risk``, ``baseline_advi_iteration``; attributes
        ``problem``, ``loss``, ``loss_params``, ``utility_kind``, ``scale``,
        ``estimator``, ``decision_rule``, ``settled``, ``branch_iter`` and the
        ADVI settings (``advi_eta``, ...).
    """
    steps = loop.steps
    idata = to_inference_data(steps[-1].fit, dims=dict(program.dims))
    decisions = xr.Dataset(
        {
            "h": (("iteration", "decision"), np.stack([s.decisions for s in steps])),
            "elbo": ("iteration", [s.elbo for s in steps]),
            "utility": ("iteration", [s.utility for s in steps]),
            "risk": ("iteration", [s.risk for s in steps]),
            "seconds": ("iteration", [s.seconds for s in steps]),
            "advi_iteration": ("iteration", [s.state.iteration for s in steps]),
            "baseline_h": ("decision", loop.baseline.decisions),
            "baseline_risk": loop.baseline.risk,
            "baseline_advi_iteration": loop.baseline.state.iteration,
        },
        coords={"iteration": np.arange(len(steps))},
        attrs={
            "problem": program.name,
            "loss": loop.loss.name,
            "loss_params": list(loop.loss.params),
            "utility_kind": loop.utility.kind,
            "scale": loop.utility.scale,
            "estimator": loop.utility.estimator,
            "decision_rule": loop.decision,
            "settled": int(loop.settled),
            "branch_iter": loop.branch_iter,
        }
        | {
            f"advi_{k.replace('.', '_')}": int(v) if isinstance(v, bool) else v
            for k, v in loop.args.items()
            if isinstance(v, (int, float, str))
        },
    )
    arviz_compat.add_groups(idata, {"decisions": decisions})
    return idata
