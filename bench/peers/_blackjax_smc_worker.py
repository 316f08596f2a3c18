r"""BlackJAX half of the SMC log Z peer benchmark; runs in the peer venv, not stanflow's.

Bayesian logistic regression, ``z ~ N(0, prior_sd^2 I)`` (normalised) and the
log-likelihood ``sum_i log sigmoid(y_i x_i' z)`` in float64, sampled by
``blackjax.adaptive_tempered_smc`` (``target_ess=0.5``, systematic resampling)
with a NUTS (default) or HMC inner kernel tuned between stages by BlackJAX's
own SMC tuning tools, the way a user without hand tuning would set it up:

- ``blackjax.inner_kernel_tuning`` sets the inverse mass matrix from the
  particles after every stage (``blackjax.smc.tuning.from_particles.
  inverse_mass_matrix_from_particles``, the particles' variances, Buchholz,
  Chopin and Jacob 2021, section 3.1);
- the step size, shared by all particles, is rescaled after every stage from
  the stage's mean acceptance rate by ``blackjax.smc.tuning.from_kernel_info.
  update_scale_from_acceptance_rate``, aiming at 0.8, the target of BlackJAX's
  own HMC/NUTS step-size adaptation (``window_adaptation``);
- ``--mcmc-steps`` (default 10, the ``num_mcmc_steps`` default of
  ``adaptive_tempered_smc`` and ``inner_kernel_tuning``), ``--initial-step-size``
  (default 0.1) and, for ``--kernel hmc``, ``--leapfrog`` (default 50) are the
  values of BlackJAX's HMC ``inner_kernel_tuning`` example (its test
  ``tests/smc/test_inner_kernel_tuning.py``); BlackJAX has no automatic rule
  for them. NUTS (at most 10 doublings) chooses its trajectory per move.

log Z is the sum over stages of ``info.log_likelihood_increment`` (the log mean
incremental weight of each stage), as in BlackJAX's sampling book. The whole
run (prior draws and the tempering ``while_loop``) is one jitted function; it
is compiled ahead of time for ``--particles`` particles (XLA specialises on the
shape, so a smaller warm-up would not spare the timed calls the compilation)
and the compile time is reported as ``first_call_seconds``. Prints one JSON
object: the versions, the settings and per seed log Z, the wall and CPU
seconds, the number of stages, the final step size, the mean acceptance rate,
the number of divergent transitions and of leapfrog steps (all moves).

Usage::

    taskset -c 0 <peer-venv>/bin/python bench/peers/_blackjax_smc_worker.py DATA_NPZ \
        --particles 2000 --seeds 0 1 2 [--threads 1] [--mcmc-steps 10] \
        [--kernel nuts|hmc] [--leapfrog 50] [--initial-step-size 0.1]

``DATA_NPZ`` holds ``X`` (n x d, intercept column first), ``y`` (labels -1/+1)
and ``prior_sd``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from _smc_problem import limit_threads as limit_blas_threads
from _smc_problem import load_problem

TARGET_ACCEPTANCE = 0.8
"""Mean acceptance rate the step size aims at (``window_adaptation``'s default)."""


def limit_threads(threads: int) -> None:
    """Cap BLAS/OpenMP/XLA threads; must run before NumPy or JAX is imported."""
    limit_blas_threads(threads)
    flags = ["--xla_force_host_platform_device_count=1"]
    if threads == 1:
        flags.append("--xla_cpu_multi_thread_eigen=false")
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *flags]).strip()


def densities(problem: dict[str, Any]) -> tuple[Callable, Callable]:
    """The normalised log prior and the log-likelihood of one coefficient vector."""
    import jax
    import jax.numpy as jnp

    X, y = jnp.asarray(problem["X"]), jnp.asarray(problem["y"])
    prior_sd = problem["prior_sd"]

    def log_prior(z: jax.Array) -> jax.Array:
        return jnp.sum(jax.scipy.stats.norm.logpdf(z, 0.0, prior_sd))

    def log_likelihood(z: jax.Array) -> jax.Array:
        return jnp.sum(jax.nn.log_sigmoid(y * (X @ z)))

    return log_prior, log_likelihood


def build_step(problem: dict[str, Any], args: argparse.Namespace) -> Callable:
    """One stage of ``adaptive_tempered_smc`` with HMC or NUTS moves under ``inner_kernel_tuning``.

    The returned ``step(key, state)`` takes and returns a
    ``StateWithParameterOverride`` whose parameters are the inverse mass matrix
    (set from the particles after the stage) and the step size.
    """
    from functools import partial

    import blackjax
    from blackjax.smc import extend_params, inner_kernel_tuning, resampling
    from blackjax.smc.tuning.from_particles import inverse_mass_matrix_from_particles

    log_prior, log_likelihood = densities(problem)

    def mass_matrix_from_particles(key: Any, state: Any, info: Any) -> dict[str, Any]:
        return {"inverse_mass_matrix":
                extend_params(inverse_mass_matrix_from_particles(state.particles))}

    if args.kernel == "hmc":
        move = partial(blackjax.hmc.build_kernel(), num_integration_steps=args.leapfrog)
    else:
        move = blackjax.nuts.build_kernel()
    return inner_kernel_tuning.build_kernel(
        blackjax.adaptive_tempered_smc,
        log_prior,
        log_likelihood,
        move,
        blackjax.hmc.init,
        resampling.systematic,
        mass_matrix_from_particles,
        num_mcmc_steps=args.mcmc_steps,
        target_ess=0.5,
    )


def smc_run(problem: dict[str, Any], args: argparse.Namespace) -> Callable:
    """The whole SMC run as a function of a PRNG key, ready for ``jax.jit``.

    Returns a function ``key -> (log_z, n_stages, step_size, mean_acceptance,
    n_divergent, n_leapfrog)``: prior draws, then stages until the tempering
    parameter reaches 1, the step size rescaled after each stage from its
    acceptance rate; ``n_leapfrog`` counts the leapfrog steps of all moves.
    """
    import jax
    import jax.numpy as jnp
    from blackjax import adaptive_tempered_smc
    from blackjax.smc import extend_params, inner_kernel_tuning
    from blackjax.smc.tuning.from_kernel_info import update_scale_from_acceptance_rate
    from blackjax.smc.tuning.from_particles import inverse_mass_matrix_from_particles

    step = build_step(problem, args)
    shape = (args.particles, problem["X"].shape[1])

    def stage(carry: tuple) -> tuple:
        key, state, log_z, n_stages, acceptance_sum, n_divergent, n_leapfrog = carry
        new_state, info = step(jax.random.fold_in(key, n_stages), state)
        acceptance = jnp.mean(info.update_info.acceptance_rate)
        step_size = update_scale_from_acceptance_rate(
            state.parameter_override["step_size"], acceptance[None], TARGET_ACCEPTANCE
        )
        parameters = {**new_state.parameter_override, "step_size": step_size}
        return (key, new_state._replace(parameter_override=parameters),
                log_z + info.log_likelihood_increment, n_stages + 1,
                acceptance_sum + acceptance,
                n_divergent + jnp.sum(info.update_info.is_divergent),
                n_leapfrog + jnp.sum(info.update_info.num_integration_steps))

    def unfinished(carry: tuple) -> jax.Array:
        return carry[1].sampler_state.tempering_param < 1.0

    def run(key: jax.Array) -> tuple:
        init_key, loop_key = jax.random.split(key)
        particles = problem["prior_sd"] * jax.random.normal(init_key, shape)
        parameters = extend_params({
            "inverse_mass_matrix": inverse_mass_matrix_from_particles(particles),
            "step_size": jnp.asarray(args.initial_step_size),
        })
        state = inner_kernel_tuning.init(adaptive_tempered_smc.init, particles, parameters)
        zero = jnp.zeros((), jnp.int64)
        _, final, log_z, n_stages, acceptance_sum, n_divergent, n_leapfrog = (
            jax.lax.while_loop(unfinished, stage, (loop_key, state, jnp.zeros(()), zero,
                                                   jnp.zeros(()), zero, zero))
        )
        return (log_z, n_stages, final.parameter_override["step_size"][0],
                acceptance_sum / n_stages, n_divergent, n_leapfrog)

    return run


def one_run(compiled: Callable, seed: int) -> dict[str, Any]:
    """Time one compiled SMC run (until its result is ready); return log Z and stats."""
    import jax

    key = jax.random.key(seed)
    wall, cpu = time.perf_counter(), time.process_time()
    result = jax.block_until_ready(compiled(key))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    log_z, n_stages, step_size, mean_acceptance, n_divergent, n_leapfrog = (
        x.item() for x in result
    )
    return {
        "seed": seed, "log_z": log_z, "wall_seconds": wall, "cpu_seconds": cpu,
        "n_stages": n_stages, "final_step_size": step_size,
        "mean_acceptance": mean_acceptance, "n_divergent": n_divergent,
        "n_leapfrog": n_leapfrog,
    }


def main(argv: list[str] | None = None) -> None:
    """Compile, run one SMC per seed and print the JSON result on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help=".npz with X, y (+-1) and prior_sd")
    parser.add_argument("--particles", type=int, required=True, help="SMC particles N")
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP/XLA threads")
    parser.add_argument("--mcmc-steps", type=int, default=10, help="MCMC moves per stage")
    parser.add_argument("--kernel", choices=("nuts", "hmc"), default="nuts")
    parser.add_argument("--leapfrog", type=int, default=50,
                        help="leapfrog steps per HMC move (--kernel hmc)")
    parser.add_argument("--initial-step-size", type=float, default=0.1)
    args = parser.parse_args(argv)
    if min(args.particles - 1, args.threads, args.mcmc_steps, args.leapfrog) < 1 or not (
        args.initial_step_size > 0
    ):
        parser.error("need --particles >= 2, --threads, --mcmc-steps, --leapfrog >= 1 "
                     "and --initial-step-size > 0")
    limit_threads(args.threads)

    try:
        problem = load_problem(args.data)
    except ValueError as exc:
        parser.error(str(exc))

    import blackjax
    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    start = time.perf_counter()
    compiled = jax.jit(smc_run(problem, args)).lower(jax.random.key(0)).compile()
    first_call = time.perf_counter() - start
    runs = [one_run(compiled, seed) for seed in args.seeds]
    json.dump({
        "peer": "blackjax",
        "versions": {"blackjax": blackjax.__version__, "jax": jax.__version__,
                     "numpy": np.__version__, "python": sys.version.split()[0]},
        "settings": {
            "data": os.path.abspath(args.data), "n": problem["X"].shape[0],
            "d": problem["X"].shape[1], "prior_sd": problem["prior_sd"],
            "particles": args.particles, "threads": args.threads,
            "algorithm": "adaptive_tempered_smc under inner_kernel_tuning",
            "kernel": args.kernel, "target_ess": 0.5, "resampling": "systematic",
            "mcmc_steps": args.mcmc_steps,
            "leapfrog": args.leapfrog if args.kernel == "hmc" else "NUTS, max 10 doublings",
            "initial_step_size": args.initial_step_size,
            "inverse_mass_matrix": "inverse_mass_matrix_from_particles, every stage",
            "step_size_tuning": "update_scale_from_acceptance_rate, target "
                                f"{TARGET_ACCEPTANCE}, every stage",
            "dtype": "float64", "warm_up": "ahead-of-time compile for --particles",
        },
        "first_call_seconds": first_call,
        "runs": runs,
    }, sys.stdout)
    print()


if __name__ == "__main__":
    main()
