r"""PyMC half of the SMC log Z peer benchmark; runs in the PyMC venv, not stanflow's.

Bayesian logistic regression the way PyMC users write it,
``z = pm.Normal("z", 0, prior_sd, shape=d)`` and
``pm.Bernoulli("obs", logit_p=X @ z, observed=(y + 1) / 2)``: since
``Bernoulli(y01 | sigmoid(m)) = sigmoid(y m)`` for ``y = 2 y01 - 1``, this is
the density ``N(z | 0, prior_sd^2 I) prod_i sigmoid(y_i x_i' z)`` with every
constant, so ``log Z = log p(y)`` is the same number stanflow estimates (the
worker checks the model's log density against that formula before sampling).

``pm.sample_smc`` runs with PyMC's defaults (the IMH kernel, ``threshold=0.5``,
``correlation_threshold=0.01``), one chain on one core, once per seed, after one
untimed warm-up call with ``--warmup-particles`` particles (it fills
PyTensor's compile cache; each call still builds its kernel, as every user's
call does). Prints one JSON object: the versions, the settings, the warm-up's
wall time (``first_call_seconds``) and per seed the final log marginal
likelihood, the wall and CPU seconds of the call, PyMC's own ``sampling_seconds``
(the SMC loop without building the kernel), the number of tempering stages and
the IMH acceptance rates per stage.

Usage::

    taskset -c 0 <pymc-venv>/bin/python bench/peers/_pymc_smc_worker.py DATA_NPZ \
        --particles 2000 --seeds 0 1 2 [--threads 1] [--warmup-particles 200]

``DATA_NPZ`` holds ``X`` (n x d, intercept column first), ``y`` (labels -1/+1)
and ``prior_sd``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from _smc_problem import limit_threads, load_problem

DENSITY_TOLERANCE = 1e-5
"""Largest accepted gap between the PyMC model's log density and the formula.

PyMC 6.4's Normal log density sits a constant ~3e-8 per coordinate below the
float64 formula (its ``log sqrt(2 pi)`` constant); the gap is reported in the settings.
"""


def build_model(problem: dict[str, Any]) -> Any:
    """The logistic regression as a PyMC user writes it (see the module docstring)."""
    import pymc as pm

    X, y = problem["X"], problem["y"]
    with pm.Model() as model:
        z = pm.Normal("z", 0.0, problem["prior_sd"], shape=X.shape[1])
        pm.Bernoulli("obs", logit_p=X @ z, observed=(y + 1) / 2)
    return model


def check_density(model: Any, problem: dict[str, Any]) -> float:
    """Compare the model's log density with the formula at a few points.

    Returns
    -------
    float
        The largest absolute gap.

    Raises
    ------
    ValueError
        The gap exceeds ``DENSITY_TOLERANCE``: the model is not the benchmark's target.
    """
    import numpy as np
    from scipy import stats
    from scipy.special import log_expit

    X, y, prior_sd = problem["X"], problem["y"], problem["prior_sd"]
    log_p = model.compile_logp()
    rng = np.random.default_rng(0)
    gaps = []
    for z in rng.normal(0.0, 0.3, size=(5, X.shape[1])):
        formula = stats.norm.logpdf(z, 0.0, prior_sd).sum() + log_expit(y * (X @ z)).sum()
        gaps.append(abs(float(log_p({"z": z})) - formula))
    if max(gaps) > DENSITY_TOLERANCE:
        raise ValueError(f"PyMC model log density differs from the target by {max(gaps):.3g}")
    return max(gaps)


def kernel_defaults() -> dict[str, float]:
    """PyMC's default ``threshold`` and ``correlation_threshold`` of the IMH kernel."""
    import inspect

    from pymc.smc.kernels import IMH, SMC_KERNEL

    return {
        "threshold": inspect.signature(SMC_KERNEL.__init__).parameters["threshold"].default,
        "correlation_threshold": inspect.signature(IMH.__init__)
        .parameters["correlation_threshold"].default,
    }


def one_run(model: Any, particles: int, seed: int) -> dict[str, Any]:
    """Time one ``pm.sample_smc`` call; return log Z, the seconds and the stages."""
    import numpy as np
    import pymc as pm

    wall, cpu = time.perf_counter(), time.process_time()
    with model:
        idata = pm.sample_smc(draws=particles, chains=1, cores=1, random_seed=seed,
                              progressbar=False, compute_convergence_checks=False)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    stats = idata["sample_stats"]
    # One chain: PyMC 6.4 stores one value per stage (on a dimension it names
    # "chain"), NaN until beta reaches 1 at the last stage.
    per_stage = np.asarray(stats["log_marginal_likelihood"].values, dtype=float).ravel()
    beta = np.asarray(stats["beta"].values, dtype=float).ravel()
    if beta[-1] != 1.0 or not np.isfinite(per_stage[-1]):
        raise RuntimeError(f"seed {seed}: SMC ended at beta {beta[-1]} with log Z {per_stage[-1]}")
    return {
        "seed": seed,
        "log_z": float(per_stage[-1]),
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "sampling_seconds": float(stats.attrs["_t_sampling"]),
        "n_stages": int(beta.size),
        "final_beta": float(beta[-1]),
        "accept_rate_per_stage": np.asarray(stats["accept_rate"].values, float).ravel().tolist(),
        "imh_steps_last_stage": int(stats.attrs["_n_tune"]),
    }


def main(argv: list[str] | None = None) -> None:
    """Run the warm-up and one SMC per seed; print the JSON result on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help=".npz with X, y (+-1) and prior_sd")
    parser.add_argument("--particles", type=int, required=True, help="SMC draws N")
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads")
    parser.add_argument("--warmup-particles", type=int, default=200)
    args = parser.parse_args(argv)
    if args.particles < 2 or args.warmup_particles < 2 or args.threads < 1:
        parser.error("--particles and --warmup-particles must be >= 2, --threads >= 1")
    limit_threads(args.threads)

    try:
        problem = load_problem(args.data)
    except ValueError as exc:
        parser.error(str(exc))

    import numpy as np
    import pymc as pm
    import pytensor

    model = build_model(problem)
    density_gap = check_density(model, problem)
    start = time.perf_counter()
    one_run(model, args.warmup_particles, seed=2**31 - 1)
    first_call = time.perf_counter() - start
    runs = [one_run(model, args.particles, seed) for seed in args.seeds]
    json.dump({
        "peer": "pymc",
        "versions": {"pymc": pm.__version__, "pytensor": pytensor.__version__,
                     "numpy": np.__version__, "python": sys.version.split()[0]},
        "settings": {
            "data": os.path.abspath(args.data), "n": problem["X"].shape[0],
            "d": problem["X"].shape[1], "prior_sd": problem["prior_sd"],
            "particles": args.particles, "threads": args.threads,
            "kernel": "IMH (PyMC default)", **kernel_defaults(),
            "warmup_particles": args.warmup_particles, "density_check_gap": density_gap,
        },
        "first_call_seconds": first_call,
        "runs": runs,
    }, sys.stdout)
    print()


if __name__ == "__main__":
    main()
