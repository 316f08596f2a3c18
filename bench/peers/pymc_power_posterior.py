"""Peer benchmark: a Gibbs posterior written in PyMC (pm.Potential) against stanflow's template.

The posterior: the median of Gamma(2, 1) data (``--n`` = 100, fixed seed) under
the absolute loss at ``omega = 0.63``, uniform prior on [0, 8]. stanflow:
``gibbs.location_program(y, loss="absolute", bounds=(0, 8))`` and
``gibbs.posterior(program, omega=0.63, chains=4, parallel_chains=2, ...)``.
PyMC (in a venv of its own on Python 3.12/3.13, never a stanflow dependency):
``theta ~ Uniform(0, 8)``, ``pm.Potential("gibbs_loss", -0.63 * sum |y - theta|)``,
``pm.sample(chains=4, cores=2)``. Both: 4 chains x (1000 warm-up + 1000 draws),
default NUTS, progress bars off, 2 cores.

Timed: stanflow's ``posterior`` call (sampling plus the conversion to
InferenceData) with both compiled forms loaded (cache hits, timed apart), and, unless ``--no-cold``,
the first program and first sampling in a scratch ``STANFLOW_HOME`` whose only
content is a link to the built toolchain (both of the template's compiled forms
built from scratch). PyMC in one process: a first ``pm.sample`` with an empty
PyTensor compile cache (compile included), then ``--warm-calls`` more (compiled);
PyMC's own ``sampling_time`` is kept too. Runs alternate: half the stanflow
repetitions, PyMC, the other half.

Reported: draws per second (post-warm-up draws over wall time), the bulk ESS of
``theta`` (this venv's ArviZ for both sides) per second, and the posterior mean
and sd of both against the exact posterior (numerical integration on a grid of
200001 points) and against each other, in Monte Carlo standard errors.

Usage::

    .venv/bin/python bench/peers/pymc_power_posterior.py [--n 100] [--stan-reps 4] \
        [--warm-calls 3] [--pymc-venv /work/peers/pymc-venv] [--no-cold] [--quick]

The PyMC venv is created (``python -m venv`` + ``pip install pymc``) if it does
not exist, from ``--base-python`` (default: the newest Python 3.13 or 3.12 under
``~/.pyenv/versions``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import machine_info, median, print_table, write_results
from _venv import ensure_venv

WORKER = Path(__file__).resolve().parent / "_pymc_power_worker.py"
SEED = 20261204
OMEGA = 0.63
LOWER, UPPER = 0.0, 8.0
CHAINS, CORES, WARMUP, DRAWS = 4, 2, 1000, 1000
AGREEMENT_Z = 4.0


def gamma_data(n: int) -> list[float]:
    """``n`` draws of Gamma(2, 1) from the fixed seed."""
    import numpy as np

    return np.random.default_rng(SEED).gamma(2.0, 1.0, size=n).tolist()


def exact_moments(y: list[float]) -> dict[str, float]:
    """Mean and sd of ``exp(-omega sum |y - theta|)`` on [0, 8], by the trapezoid rule."""
    import numpy as np

    theta = np.linspace(LOWER, UPPER, 200001)
    ys = np.sort(np.asarray(y))
    # sum |y_i - theta| from the sorted data's cumulative sums, O(n + G).
    below = np.searchsorted(ys, theta)
    csum = np.concatenate([[0.0], np.cumsum(ys)])
    total = theta * below - csum[below] + (csum[-1] - csum[below]) - theta * (len(ys) - below)
    log_density = -OMEGA * total
    density = np.exp(log_density - log_density.max())
    density /= np.trapezoid(density, theta)
    mean = float(np.trapezoid(theta * density, theta))
    sd = math.sqrt(float(np.trapezoid((theta - mean) ** 2 * density, theta)))
    return {"mean": mean, "sd": sd}


def draw_summary(theta: Any) -> dict[str, float]:
    """Mean, sd, bulk ESS and the mean's and sd's Monte Carlo errors of draws (chain x draw)."""
    import numpy as np

    from stanflow import arviz_compat

    draws = np.asarray(theta, dtype=float)
    return {
        "mean": float(draws.mean()),
        "sd": float(draws.std(ddof=1)),
        "ess_bulk": float(arviz_compat.ess(draws, method="bulk")),
        "mcse_mean": float(arviz_compat.mcse(draws, method="mean")),
        "mcse_sd": float(arviz_compat.mcse(draws, method="sd")),
    }


def stan_run(program: Any, seed: int) -> tuple[dict[str, Any], Any]:
    """One ``gibbs.posterior`` call, timed; its summary and the draws of ``theta``."""
    from stanflow import gibbs

    start = time.perf_counter()
    fit = gibbs.posterior(program, omega=OMEGA, chains=CHAINS, parallel_chains=CORES,
                          iter_warmup=WARMUP, iter_sampling=DRAWS, seed=seed,
                          show_progress=False)
    wall = time.perf_counter() - start
    theta = fit.posterior["theta"].values
    summary = draw_summary(theta)
    return {"wall": wall, **rates(summary, wall), **summary}, theta


def rates(summary: dict[str, float], wall: float) -> dict[str, float]:
    """Draws per second and bulk ESS per second over ``wall``."""
    return {"draws_per_s": CHAINS * DRAWS / wall, "ess_per_s": summary["ess_bulk"] / wall}


_COLD = """
import json, sys, time
import numpy as np
from stanflow import gibbs
y = np.asarray(json.loads(sys.argv[1]))
start = time.perf_counter()
program = gibbs.location_program(y, loss="absolute", bounds=({lower}, {upper}))
made = time.perf_counter()
gibbs.posterior(program, omega={omega}, chains={chains}, parallel_chains={cores},
                iter_warmup={warmup}, iter_sampling={draws}, seed=1, show_progress=False)
print(json.dumps({{"make_program": made - start, "first_posterior": time.perf_counter() - made}}))
"""


def stan_cold(y: list[float]) -> dict[str, float]:
    """The template's first program and first sampling in a scratch ``STANFLOW_HOME``.

    The scratch home links the built toolchain (``cmdstan-*``) of the real home
    and nothing else, so both compiled forms of the template are built from scratch.
    """
    from stanflow.toolchain.layout import stanflow_home

    toolchains = sorted(stanflow_home().glob("cmdstan-*"))
    if not toolchains:
        raise RuntimeError(f"no built toolchain (cmdstan-*) in {stanflow_home()}")
    code = _COLD.format(lower=LOWER, upper=UPPER, omega=OMEGA, chains=CHAINS, cores=CORES,
                        warmup=WARMUP, draws=DRAWS)
    with tempfile.TemporaryDirectory(prefix="stanflow-peers-home-") as home:
        for toolchain in toolchains:
            (Path(home) / toolchain.name).symlink_to(toolchain)
        env = dict(os.environ, STANFLOW_HOME=home)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", code, json.dumps(y)], env=env,
                              capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"cold stanflow run failed:\n{proc.stdout}\n{proc.stderr}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "process_wall": wall}


def pymc_process(python: Path, data_file: Path, compiledir: Path, warm_calls: int
                 ) -> tuple[dict[str, Any], list[Any]]:
    """Run the PyMC worker once with an empty compile cache; summaries per call and the draws."""
    env = dict(os.environ, PYTENSOR_FLAGS=f"base_compiledir={compiledir}")
    cmd = [str(python), str(WORKER), str(data_file), "--warm-calls", str(warm_calls),
           "--seed", str(SEED), "--chains", str(CHAINS), "--cores", str(CORES),
           "--tune", str(WARMUP), "--draws", str(DRAWS)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    process_wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"PyMC worker failed:\n{proc.stdout}\n{proc.stderr}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_wall"] = process_wall
    draws = []
    for call in result["calls"]:
        draws.append(call.pop("theta"))
        call.update(draw_summary(draws[-1]))
        call.update(rates(call, call["wall"]))
        call["ess_per_s_sampling_only"] = call["ess_bulk"] / call["sampling_time"]
    return result, draws


def agreement(stan_draws: list[Any], pymc_draws: list[Any], exact: dict[str, float]
              ) -> dict[str, Any]:
    """Pooled mean and sd of each side against the exact values and each other, in MCSEs."""
    import numpy as np

    stan = draw_summary(np.concatenate(stan_draws))
    pymc = draw_summary(np.concatenate(pymc_draws))
    z: dict[str, float] = {}
    for moment in ("mean", "sd"):
        for name, side in (("stanflow", stan), ("pymc", pymc)):
            z[f"{name}_{moment}_vs_exact"] = (side[moment] - exact[moment]) / side[f"mcse_{moment}"]
        spread = math.hypot(stan[f"mcse_{moment}"], pymc[f"mcse_{moment}"])
        z[f"stanflow_minus_pymc_{moment}"] = (stan[moment] - pymc[moment]) / spread
    return {"exact": exact, "stanflow_pooled": stan, "pymc_pooled": pymc, "z": z,
            "agree": all(abs(v) < AGREEMENT_Z for v in z.values()),
            "rule": f"every |z| < {AGREEMENT_Z} (z in Monte Carlo standard errors)"}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print a table, write ``bench/results/pymc_power_posterior.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="observations (default 100)")
    parser.add_argument("--stan-reps", type=int, default=4)
    parser.add_argument("--warm-calls", type=int, default=3)
    parser.add_argument("--pymc-venv", type=Path, default=Path("/work/peers/pymc-venv"))
    parser.add_argument("--base-python", type=Path, default=None,
                        help="the Python the PyMC venv is made from, if it is missing")
    parser.add_argument("--no-cold", action="store_true",
                        help="skip stanflow's cold run (compiles in a scratch home, ~1 min)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 2 stanflow reps, 1 warm call, no cold run, not written")
    args = parser.parse_args(argv)
    if args.quick:
        args.stan_reps, args.warm_calls, args.no_cold = 2, 1, True
    if args.n < 2 or args.stan_reps < 1 or args.warm_calls < 1:
        parser.error("--n must be >= 2, --stan-reps and --warm-calls >= 1")

    from stanflow import __version__, gibbs

    logging.getLogger("cmdstanpy").setLevel(logging.WARNING)

    info = machine_info()
    python = ensure_venv(args.pymc_venv, ["pymc"], ["pymc"], args.base_python)
    y = gamma_data(args.n)
    start = time.perf_counter()
    program = gibbs.location_program(y, loss="absolute", bounds=(LOWER, UPPER))
    make_program_wall = time.perf_counter() - start
    start = time.perf_counter()
    program.model()
    executable_wall = time.perf_counter() - start
    cold = None if args.no_cold else stan_cold(y)

    stan: list[dict[str, Any]] = []
    stan_draws: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="stanflow-peers-pymc-") as tmp:
        data_file = Path(tmp) / "data.json"
        data_file.write_text(json.dumps({"y": y, "omega": OMEGA, "lower": LOWER, "upper": UPPER}))
        half = args.stan_reps // 2
        for i in range(args.stan_reps):
            if i == half:
                pymc, pymc_draws = pymc_process(python, data_file, Path(tmp) / "pytensor",
                                                args.warm_calls)
            run, draws = stan_run(program, SEED + i)
            stan.append(run)
            stan_draws.append(draws)
            print(f"stanflow rep {i}: {run['wall']:.2f} s", flush=True)
        if half == 0:
            pymc, pymc_draws = pymc_process(python, data_file, Path(tmp) / "pytensor",
                                            args.warm_calls)
    first, warm = pymc["calls"][0], pymc["calls"][1:]
    keys = ("wall", "draws_per_s", "ess_bulk", "ess_per_s")
    stan_med = {k: median([r[k] for r in stan]) for k in keys}
    pymc_warm = {k: median([c[k] for c in warm]) for k in (*keys, "sampling_time",
                                                          "ess_per_s_sampling_only")}
    check = agreement(stan_draws, pymc_draws, exact_moments(y))
    rows = [
        ["stanflow, compiled (median)", stan_med["wall"], stan_med["draws_per_s"],
         stan_med["ess_bulk"], stan_med["ess_per_s"]],
        ["PyMC 1st call (compile incl.)", first["wall"], first["draws_per_s"],
         first["ess_bulk"], first["ess_per_s"]],
        ["PyMC later calls (median)", pymc_warm["wall"], pymc_warm["draws_per_s"],
         pymc_warm["ess_bulk"], pymc_warm["ess_per_s"]],
    ]
    if cold is not None:
        cold_wall = cold["make_program"] + cold["first_posterior"]
        rows.insert(1, ["stanflow, cold (compile incl.)", cold_wall, CHAINS * DRAWS / cold_wall,
                        float("nan"), float("nan")])
    print()
    print_table(["run", "wall s", "draws/s", "bulk ESS", "ESS/s"], rows)
    print("agreement (z in MCSEs):", {k: round(v, 2) for k, v in check["z"].items()})
    data = {
        "benchmark": "pymc_power_posterior",
        "command": f".venv/bin/python bench/peers/pymc_power_posterior.py --n {args.n} "
        f"--stan-reps {args.stan_reps} --warm-calls {args.warm_calls}"
        + (" --no-cold" if args.no_cold else ""),
        "machine": info,
        "versions": {"stanflow": __version__, "pymc": pymc["pymc"],
                     "pytensor": pymc["pytensor"], "pymc_python": pymc["python"]},
        "settings": {"n": args.n, "omega": OMEGA, "prior": f"uniform on [{LOWER}, {UPPER}]",
                     "loss": "absolute", "chains": CHAINS, "cores": CORES, "warmup": WARMUP,
                     "draws": DRAWS, "seed": SEED},
        "stanflow_make_program_wall_cached": make_program_wall,
        "stanflow_executable_wall_cached": executable_wall,
        "stanflow_cold": cold,
        "stanflow_runs": stan,
        "stanflow_medians": stan_med,
        "pymc_model_build_wall": pymc["model_build_wall"],
        "pymc_process_wall": pymc["process_wall"],
        "pymc_first_call": first,
        "pymc_warm_calls": warm,
        "pymc_warm_medians": pymc_warm,
        "ess_per_s_ratio_stanflow_over_pymc_warm": stan_med["ess_per_s"] / pymc_warm["ess_per_s"],
        "draws_per_s_ratio_stanflow_over_pymc_warm": (
            stan_med["draws_per_s"] / pymc_warm["draws_per_s"]
        ),
        "agreement": check,
    }
    if not args.quick:
        print(f"wrote {write_results('pymc_power_posterior', data)}")
    return data


if __name__ == "__main__":
    main()
