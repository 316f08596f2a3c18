"""PyMC half of ``bench/eight_schools_vs_pymc.py``; runs in the PyMC venv.

Not imported by stanflow: ``eight_schools_vs_pymc.py`` runs it as a
subprocess with the separate venv's interpreter (PyMC is not a stanflow
dependency). It builds the non-centred eight-schools model with the same
priors as ``stan/models/eight_schools_noncentered.stan``, calls ``pm.sample``
``1 + --warm-calls`` times in this one process and prints one JSON object:
per call the wall time, PyMC's own ``sampling_time`` (the NUTS loop only,
without graph compilation or process start-up), the divergences, and the
draws of ``mu`` and ``tau`` (so the caller computes ESS with its own ArviZ).

Usage::

    /work/bench-venv/bin/python bench/_pymc_eight_schools.py DATA_JSON \
        [--warm-calls 3] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
import pymc as pm
import pytensor


def build_model(data: dict[str, Any]) -> pm.Model:
    """The non-centred eight-schools model.

    Parameters
    ----------
    data : dict
        ``J``, ``y`` and ``sigma`` as in ``data/eight_schools.json``.

    Returns
    -------
    pymc.Model
        ``mu ~ N(0, 5)``, ``tau ~ HalfCauchy(5)``, ``theta_tilde ~ N(0, 1)``,
        ``y ~ N(mu + tau * theta_tilde, sigma)``; ``theta`` is kept as a
        deterministic, like Stan's transformed parameter.
    """
    y = np.asarray(data["y"], dtype=float)
    sigma = np.asarray(data["sigma"], dtype=float)
    with pm.Model() as model:
        mu = pm.Normal("mu", mu=0.0, sigma=5.0)
        tau = pm.HalfCauchy("tau", beta=5.0)
        theta_tilde = pm.Normal("theta_tilde", mu=0.0, sigma=1.0, shape=int(data["J"]))
        theta = pm.Deterministic("theta", mu + tau * theta_tilde)
        pm.Normal("y", mu=theta, sigma=sigma, observed=y)
    return model


def one_call(
    model: pm.Model, seed: int, chains: int, cores: int, tune: int, draws: int
) -> dict[str, Any]:
    """Time one default ``pm.sample`` call and collect what the caller needs."""
    start = time.perf_counter()
    with model:
        idata = pm.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            cores=cores,
            random_seed=seed,
            progressbar=False,
        )
    wall = time.perf_counter() - start
    post = idata.posterior
    return {
        "wall": wall,
        "sampling_time": float(
            idata.sample_stats.attrs.get("sampling_time", float("nan"))
        ),
        "divergences": int(idata.sample_stats["diverging"].sum()),
        "draws": {name: post[name].values.tolist() for name in ("mu", "tau")},
    }


def main(argv: list[str] | None = None) -> None:
    """Run the calls and print the JSON result on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="eight-schools data JSON")
    parser.add_argument("--warm-calls", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    args = parser.parse_args(argv)

    with open(args.data) as f:
        data = json.load(f)
    start = time.perf_counter()
    model = build_model(data)
    build = time.perf_counter() - start
    calls = [
        one_call(model, args.seed + i, args.chains, args.cores, args.tune, args.draws)
        for i in range(1 + args.warm_calls)
    ]
    result = {
        "pymc": pm.__version__,
        "pytensor": pytensor.__version__,
        "pytensor_linker": str(pytensor.config.linker),
        "pytensor_mode": str(pytensor.config.mode),
        "pytensor_cxx": str(pytensor.config.cxx),
        "pytensor_compiledir": str(pytensor.config.compiledir),
        "python": sys.version.split()[0],
        "model_build_wall": build,
        "calls": calls,
    }
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
