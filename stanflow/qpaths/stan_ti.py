"""Thermodynamic integration with NUTS per beta, through the run layer.

``log Z = int_0^1 E_beta[d/dbeta log pi_{beta,q}(z)] dbeta``: for every beta of
the schedule the q-path template (``stan/qpaths/qpath.stan``, beta and q as
data) is sampled by NUTS, and its generated quantity ``ti_integrand`` is
averaged. All betas form one :class:`~stanflow.runs.RunSet`, so the run layer
packs them into a few processes (or spreads them over a Dask cluster) and a
run set interrupted half-way resumes where it stopped. The integrand means'
Monte Carlo errors use ArviZ's effective sample sizes; the trapezoid sum and
its errors are :func:`stanflow.qpaths.ti.ti_result`'s.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.outdir import Interrupted
from stanflow.qpaths.kernels import check_schedule
from stanflow.qpaths.qmath import check_q
from stanflow.qpaths.stan_moves import DATA_KEYS
from stanflow.qpaths.ti import ti_result
from stanflow.runs import RunSet, RunSpec


def thermodynamic_integration_stan(
    model: Any,
    data: Mapping[str, Any],
    schedule: ArrayLike,
    *,
    q: float = 1.0,
    chains: int = 2,
    draws: int = 1000,
    warmup: int = 500,
    seed: int | None = None,
    out_dir: str | Path | None = None,
    executor: Any = None,
    progress: bool = False,
) -> Results:
    """Thermodynamic integration along ``schedule`` with NUTS at every beta.

    Parameters
    ----------
    model : cmdstanpy.CmdStanModel
        The compiled q-path template with its base and target slots.
    data : mapping
        Its data without ``beta`` and ``q`` (``d``, ``n_base_params``,
        ``base_params``, ``n_target_params``, ``target_params``).
    schedule : array_like
        Increasing betas from 0 to 1, an odd number of them (at least 3).
    q : float, default 1.0
        The path (1: geometric).
    chains, draws, warmup : int, default 2, 1000, 500
        NUTS chains per beta, draws and warm-up iterations per chain.
    seed : int, optional
        Root seed of the run set (run ``k`` is beta ``k``).
    out_dir : path, optional
        Where the run set goes (kept, resumable); default a temporary folder,
        removed afterwards.
    executor : stanflow.runs executor, optional
        Default ``LocalExecutor()``.
    progress : bool, default False
        The run layer's progress bar.

    Returns
    -------
    Results
        Group ``smc`` with ``beta``, ``integrand``, ``integrand_mcse``,
        ``ess`` and ``divergences`` (dim ``step``) and the attributes of
        :func:`stanflow.qpaths.ti.thermodynamic_integration` (``log_z``,
        ``log_z_se``, ...).
    """
    q = float(check_q(q))
    betas = check_schedule(schedule)
    if len(betas) % 2 == 0 or len(betas) < 3:
        raise ValueError(f"schedule must have an odd number (>= 3) of betas, got {len(betas)}")
    missing = [key for key in DATA_KEYS if key not in data]
    if missing:
        raise ValueError(f"data is missing {missing} (needs {list(DATA_KEYS)})")
    if {"beta", "q"} & set(data):
        raise ValueError("data must not hold 'beta' or 'q': they are set per beta")
    specs = [
        RunSpec(
            data={**data, "beta": float(beta), "q": q},
            chains=chains,
            args={"num_samples": draws, "num_warmup": warmup},
        )
        for beta in betas
    ]
    own = out_dir is None
    folder = Path(tempfile.mkdtemp(prefix="ti-")) if out_dir is None else Path(out_dir)
    try:
        runset = RunSet(model, specs, out_dir=folder, root_seed=seed)
        failed = [r.index for r in runset.run(executor, progress=progress) if not r.ok]
        if failed:
            raise RuntimeError(
                f"thermodynamic integration: the runs of betas {betas[failed].tolist()} "
                f"failed (see {runset.out_dir})"
            )
        idata = runset.to_inference_data()
    except Interrupted:
        if own:  # the folder is removed below: nothing is kept to resume
            raise KeyboardInterrupt from None
        raise
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)
    integrand = arviz_compat.group(idata, "posterior")["ti_integrand"]
    if not np.all(np.isfinite(integrand.values)):
        raise ValueError("the TI integrand is not finite at some draws: check the slots")
    means = integrand.mean(("chain", "draw")).values
    per_beta = [integrand.isel(run=k).transpose("chain", "draw").values for k in range(len(betas))]
    mcse = np.array([arviz_compat.mcse(values) for values in per_beta])
    ess = np.array([arviz_compat.ess(values) for values in per_beta])
    diverging = arviz_compat.group(idata, "sample_stats")["diverging"]
    divergences = diverging.sum(("chain", "draw")).values
    return ti_result(
        betas, means, mcse,
        {"ess": ("step", ess), "divergences": ("step", divergences.astype(int))},
        q=q, n_chains=chains, n_draws=draws, moves="NUTS (Stan, run layer)",
    )
