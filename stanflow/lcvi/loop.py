"""The LCVI loop for eight schools: ADVI on ELBO + U alternated with the decision step.

Iteration 0 is plain VI (weight 0 on U); its Bayes decisions ``h_0`` and the
losses of its posterior-predictive draws at ``h_0`` set the utility's scale
(``M`` at a percentile, :func:`stanflow.lcvi.losses.utility_scale`) unless given.
Iteration ``t >= 1`` runs ADVI on ``ELBO + U(., h_{t-1})`` (same seed every
time, so the map ``h -> h'`` does not chase ADVI's noise; the mean of the
previous fit as the initial point, which is all the warm start CmdStan allows)
and takes ``h_t`` as the Bayes decision of its predictive draws ``y_rep``. The
loop stops when ``max |h_t - h_{t-1}| <= tol`` or after ``max_iter`` iterations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import arviz as az
import cmdstanpy
import numpy as np
import xarray as xr

from stanflow.idata import to_inference_data
from stanflow.lcvi.losses import Loss, get_loss, utility_scale
from stanflow.lcvi.stan import lcvi_model, stan_data
from stanflow.lcvi.utility import normal_outcomes, utility_per_theta


class Step(NamedTuple):
    """One ADVI fit of the loop and what it is judged by.

    Attributes
    ----------
    fit : cmdstanpy.CmdStanVB
    decisions : ndarray, shape (J,)
        Bayes decisions of its predictive draws.
    elbo : float
        ``mean(log_p - weight * U_theta - log_g)`` over its draws.
    utility : float
        ``U`` at the decisions the fit was run with.
    risk : float
        Empirical risk ``mean_j l(y_j, decisions_j)`` on the data.
    """

    fit: cmdstanpy.CmdStanVB
    decisions: np.ndarray
    elbo: float
    utility: float
    risk: float


def empirical_risk(y: np.ndarray, h: np.ndarray, loss: Loss) -> float:
    """``mean_j l(y_j, h_j)``; ``y`` and ``h`` of shape (J,)."""
    y, h = np.asarray(y, dtype=float), np.asarray(h, dtype=float)
    if h.shape != y.shape:
        raise ValueError(f"h (decisions) must have shape {y.shape}, got {h.shape}")
    return float(loss.value(y, h).mean())


def settled(previous: np.ndarray, current: np.ndarray, tol: float) -> bool:
    """Whether ``max |current - previous| <= tol``."""
    return float(np.max(np.abs(np.asarray(current) - previous))) <= tol


def lcvi(
    data: Mapping[str, Any],
    loss: str | Loss,
    *,
    kind: str = "linear",
    scale: float | None = None,
    percentile: float = 90.0,
    estimator: str = "linearised",
    n_outcomes: int = 20,
    max_iter: int = 10,
    tol: float = 0.05,
    algorithm: str = "meanfield",
    seed: int = 1,
    variational_args: Mapping[str, Any] | None = None,
    **loss_params: float,
) -> az.InferenceData:
    """Run plain VI then LCVI on eight schools.

    Parameters
    ----------
    data : mapping
        ``J``, ``y`` (shape (J,)), ``sigma`` (shape (J,)).
    loss : str or Loss
        With ``loss_params`` (e.g. ``q=0.2``) when a name.
    kind : {"linear", "exp"}, default "linear"
    scale : float, optional
        ``M`` or ``gamma``; by default from the plain-VI losses at ``percentile``.
    percentile : float, default 90
    estimator : {"naive", "linearised"}, default "linearised"
    n_outcomes : int, default 20
        Fixed outcome base samples ``S`` per ``theta``, at least 1.
    max_iter : int, default 10
        LCVI iterations after plain VI, at least 1.
    tol : float, default 0.05
        Decisions have settled when no decision moved by more than this (units of ``y``).
    algorithm : {"meanfield", "fullrank"}, default "meanfield"
    seed : int, default 1
        Seeds the base samples and every ADVI run.
    variational_args : mapping, optional
        More keyword arguments for ``CmdStanModel.variational`` (``iter``, ``draws``, ...).

    Returns
    -------
    arviz.InferenceData
        The last LCVI fit's groups (posterior, sample_stats, point_estimate) and
        a ``decisions`` group over ``iteration`` (0: plain VI) and ``school``:
        ``h``, ``elbo``, ``utility``, ``risk``; attributes ``loss``,
        ``loss_params``, ``utility_kind``, ``scale``, ``estimator``, ``settled``.
    """
    loss = get_loss(loss, **loss_params)
    if int(n_outcomes) < 1 or int(max_iter) < 1:
        raise ValueError(
            f"n_outcomes and max_iter must be >= 1, got {n_outcomes!r}, {max_iter!r}"
        )
    if algorithm not in ("meanfield", "fullrank"):
        raise ValueError(
            f"algorithm must be 'meanfield' or 'fullrank', got {algorithm!r}"
        )
    model = lcvi_model(loss)
    J = int(data["J"])
    eps_y = np.random.default_rng(seed).standard_normal((int(n_outcomes), J))
    args = {"algorithm": algorithm, "seed": seed, "require_converged": False}
    args |= dict(variational_args or {})

    def run(h, weight, scale, inits):
        stan = stan_data(data, h, eps_y, loss, kind, scale, estimator, weight)
        fit = model.variational(data=stan, inits=inits, **args)
        return fit, _judge(fit, data, h, eps_y, loss, kind, scale, estimator, weight)

    fit, _ = run(np.zeros(J), 0.0, scale or 1.0, None)
    h = loss.bayes_decision(fit.stan_variable("y_rep", mean=False))
    if scale is None:
        y_rep = fit.stan_variable("y_rep", mean=False)
        scale = utility_scale(loss.value(y_rep, h), kind, percentile)
    steps = [_judge(fit, data, h, eps_y, loss, kind, scale, estimator, 0.0)]
    done = False
    for _ in range(int(max_iter)):
        fit, step = run(h, 1.0, scale, _means(fit))
        steps.append(step)
        done = settled(h, step.decisions, tol)
        h = step.decisions
        if done:
            break
    return _to_idata(fit, steps, loss, kind, scale, estimator, done)


def _judge(fit, data, h, eps_y, loss, kind, scale, estimator, weight) -> Step:
    theta = fit.stan_variable("theta", mean=False)
    u = utility_per_theta(
        normal_outcomes(theta, np.asarray(data["sigma"], dtype=float), eps_y),
        h,
        loss,
        kind,
        scale,
        estimator,
    )
    sample = fit.variational_sample_pd
    elbo = np.mean(
        sample["log_p__"].to_numpy() - weight * u - sample["log_g__"].to_numpy()
    )
    decisions = loss.bayes_decision(fit.stan_variable("y_rep", mean=False))
    risk = empirical_risk(np.asarray(data["y"], dtype=float), decisions, loss)
    return Step(fit, decisions, float(elbo), float(u.mean()), risk)


def _means(fit: cmdstanpy.CmdStanVB) -> dict[str, Any]:
    params = fit.variational_params_dict
    theta = [value for name, value in params.items() if name.startswith("theta[")]
    return {"mu": params["mu"], "tau": params["tau"], "theta": theta}


def _to_idata(fit, steps, loss, kind, scale, estimator, done) -> az.InferenceData:
    idata = to_inference_data(
        fit, dims={"theta": ["school"], "y_rep": ["school"], "log_lik": ["school"]}
    )
    decisions = xr.Dataset(
        {
            "h": (("iteration", "school"), np.stack([s.decisions for s in steps])),
            "elbo": ("iteration", [s.elbo for s in steps]),
            "utility": ("iteration", [s.utility for s in steps]),
            "risk": ("iteration", [s.risk for s in steps]),
        },
        coords={"iteration": np.arange(len(steps))},
        attrs={
            "loss": loss.name,
            "loss_params": list(loss.params),
            "utility_kind": kind,
            "scale": float(scale),
            "estimator": estimator,
            "settled": int(done),
        },
    )
    idata.add_groups({"decisions": decisions})
    return idata
