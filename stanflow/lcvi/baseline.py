"""The HMC baseline of LCVI: NUTS on the same program with the utility term off.

The program's executable samples its posterior (weight 0: the target is the
model's own), and the decisions are the Bayes decisions of the predictive of
those draws (:class:`stanflow.lcvi.predictive.Predictive`): what exact
inference would decide, which LCVI and plain VI are measured against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import cmdstanpy
import numpy as np

from stanflow.lcvi.decision_step import empirical_risk
from stanflow.lcvi.numeric_decisions import resolve_loss
from stanflow.lcvi.predictive import Predictive
from stanflow.lcvi.program import LcviProgram
from stanflow.lcvi.utility import uniform_base_samples
from stanflow.losses import BoundLoss
from stanflow.models import unconstrain_rows
from stanflow.validation import check_int


class NutsBaseline(NamedTuple):
    """NUTS on an LCVI program with the utility term off, and its Bayes decisions.

    Attributes
    ----------
    fit : cmdstanpy.CmdStanMCMC
    theta : ndarray, shape (draws, D)
        The draws on the unconstrained scale, all chains.
    decisions : ndarray, shape (N,)
    risk : float
        Empirical risk on the program's ``y`` (NaN without it).
    """

    fit: cmdstanpy.CmdStanMCMC
    theta: np.ndarray
    decisions: np.ndarray
    risk: float


def nuts_baseline(
    program: LcviProgram,
    loss: str | Path | BoundLoss,
    *,
    chains: int = 4,
    warmup: int = 1000,
    draws: int = 1000,
    seed: int = 1,
    sampler_args: dict[str, Any] | None = None,
    **loss_params: float,
) -> NutsBaseline:
    """NUTS on ``program`` at weight 0, and the Bayes decisions of its predictive.

    Parameters
    ----------
    program : LcviProgram
    loss : str, path or BoundLoss
        As for :func:`stanflow.lcvi.run_lcvi`, with ``loss_params``.
    chains, warmup, draws : int
        Chains, warmup and kept draws per chain, at least 1.
    seed : int
    sampler_args : dict, optional
        More of cmdstanpy's ``sample`` arguments (``adapt_delta``, ...).

    Returns
    -------
    NutsBaseline
    """
    loss = resolve_loss(loss, **loss_params)
    for name, value in (("chains", chains), ("warmup", warmup), ("draws", draws)):
        check_int(value, name)
    model = program.bind(loss)
    N = program.n
    settings = model.settings(0.0, "linear", 1.0, "linearised", 1)
    data = model.stan_data(np.zeros(N), np.zeros((1, N)), uniform_base_samples(1, N, 0, False),
                           settings)
    fit = model.executable().sample(
        data=data, chains=chains, iter_warmup=warmup, iter_sampling=draws, seed=seed,
        show_progress=False, **(sampler_args or {}),
    )
    values = fit.draws_pd()[model.names].to_numpy()
    library = model.evaluator(1, 0)
    rows = np.zeros((values.shape[0], library.param_num()))
    rows[:, : len(model.names)] = values
    theta = unconstrain_rows(library, rows)[:, : model.dim]
    decisions = Predictive(model, theta).bayes_decisions()
    return NutsBaseline(fit, theta, decisions, empirical_risk(program.y, decisions, loss))
