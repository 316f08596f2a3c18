"""PyMC half of ``pymc_power_posterior.py``; runs in the PyMC venv, not stanflow's.

The power (Gibbs) posterior of a median the way PyMC users write it: a uniform
prior and ``pm.Potential("gibbs_loss", -omega * sum |y - theta|)``. Calls
``pm.sample`` ``1 + --warm-calls`` times in this one process (the first with
whatever PyTensor compile cache ``PYTENSOR_FLAGS`` points at) and prints one
JSON object: the versions, the model's build time and per call the wall time,
PyMC's own ``sampling_time`` (the NUTS loop only), the divergences and the
draws of ``theta`` (chain x draw), so that the caller computes ESS with its own
ArviZ.

Usage::

    <pymc-venv>/bin/python bench/peers/_pymc_power_worker.py DATA_JSON \
        [--warm-calls 3] [--seed 1] [--chains 4] [--cores 2] [--tune 1000] [--draws 1000]

``DATA_JSON`` holds ``y``, ``omega``, ``lower`` and ``upper``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def build_model(data: dict[str, Any]) -> Any:
    """``theta ~ Uniform(lower, upper)`` and the potential ``-omega * sum |y - theta|``."""
    import numpy as np
    import pymc as pm
    import pytensor.tensor as pt

    y = np.asarray(data["y"], dtype=float)
    with pm.Model() as model:
        theta = pm.Uniform("theta", lower=data["lower"], upper=data["upper"])
        pm.Potential("gibbs_loss", -data["omega"] * pt.sum(pt.abs(y - theta)))
    return model


def one_call(model: Any, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Time one ``pm.sample`` call; return its times, divergences and draws."""
    import pymc as pm

    start = time.perf_counter()
    with model:
        idata = pm.sample(draws=args.draws, tune=args.tune, chains=args.chains,
                          cores=args.cores, random_seed=seed, progressbar=False)
    wall = time.perf_counter() - start
    return {
        "wall": wall,
        "sampling_time": float(idata.sample_stats.attrs.get("sampling_time", float("nan"))),
        "divergences": int(idata.sample_stats["diverging"].sum()),
        "theta": idata.posterior["theta"].values.tolist(),
    }


def main(argv: list[str] | None = None) -> None:
    """Run the calls and print the JSON result on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="JSON with y, omega, lower, upper")
    parser.add_argument("--warm-calls", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    args = parser.parse_args(argv)

    import pymc as pm
    import pytensor

    with open(args.data) as f:
        data = json.load(f)
    start = time.perf_counter()
    model = build_model(data)
    build = time.perf_counter() - start
    calls = [one_call(model, args.seed + i, args) for i in range(1 + args.warm_calls)]
    json.dump({
        "pymc": pm.__version__,
        "pytensor": pytensor.__version__,
        "python": sys.version.split()[0],
        "model_build_wall": build,
        "calls": calls,
    }, sys.stdout)


if __name__ == "__main__":
    main()
