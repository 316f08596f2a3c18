"""Benchmark: eight schools (non-centred) through stanflow/cmdstanpy vs PyMC.

Same model on both sides: ``mu ~ N(0, 5)``, ``tau ~ HalfCauchy(5)``,
``theta_tilde ~ N(0, 1)``, ``y ~ N(mu + tau * theta_tilde, sigma)``; 4 chains
x (1000 warm-up + 1000 draws), default NUTS, progress bars off.

Fairness on a 2-core machine: both sides use 2 cores. stanflow runs its
threaded model (``STAN_THREADS``, stanflow's default) with
``chains=4, parallel_chains=2``: cmdstanpy then runs the 4 chains in one
process with 2 threads. PyMC runs ``pm.sample(chains=4, cores=2)``: 2 worker
processes, 2 chains each.

What is timed:

* stanflow: ``model.sample(...)`` after the model is compiled (the compile is
  timed separately, a cache hit after the first run), plus the conversion to
  ``arviz.InferenceData`` (``stanflow.idata.to_inference_data``), since
  ``pm.sample`` returns an InferenceData too. The shipped Stan program also
  computes ``log_lik`` and ``y_rep`` per draw; PyMC's model does not (this
  only costs Stan time).
* PyMC, in a separate venv (PyMC is not a stanflow dependency), as a
  subprocess: in one process a *first* ``pm.sample`` call with a cold
  PyTensor compile cache (a fresh ``base_compiledir``), then ``--warm-calls``
  more calls (graph compiled, C modules cached); then, in a new process, one
  call with the disk cache warm. PyMC's own ``sampling_time`` (the NUTS loop
  alone, no compile or set-up) is reported too.

Runs alternate in one invocation: half the Stan repetitions before PyMC,
half after. ESS is the bulk ESS of ``mu`` and ``tau`` (ArviZ, this venv's
version for both), minimum over the two; ESS/s divides it by the wall time.

Usage::

    .venv/bin/python bench/eight_schools_vs_pymc.py [--stan-reps 6] \
        [--warm-calls 3] [--pymc-venv /work/bench-venv]

The PyMC venv is created with ``pip install pymc`` if it does not exist.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import REPO, machine_info, median, print_table, write_results

from stanflow import arviz_compat
from stanflow import idata as sf_idata
from stanflow.models import compile_model, program_path

DATA = REPO / "data" / "eight_schools.json"
WORKER = REPO / "bench" / "_pymc_eight_schools.py"
CHAINS, PARALLEL_CHAINS, WARMUP, DRAWS = 4, 2, 1000, 1000
_ELAPSED = re.compile(r"#\s+([0-9.eE+-]+) seconds \((Warm-up|Sampling|Total)\)")


def ensure_pymc_venv(venv: Path) -> Path:
    """Create ``venv`` with PyMC from PyPI if it has no PyMC; return its python.

    Parameters
    ----------
    venv : pathlib.Path
        The venv folder, separate from stanflow's.

    Returns
    -------
    pathlib.Path
        The venv's interpreter.
    """
    python = venv / "bin" / "python"
    has_pymc = (
        python.exists()
        and subprocess.run(
            [str(python), "-c", "import pymc"], capture_output=True, check=False
        ).returncode
        == 0
    )
    if not has_pymc:
        print(f"creating {venv} with PyMC (pip install pymc) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "pymc"], check=True)
    return python


def csv_elapsed(csv_files: list[str]) -> list[dict[str, float]]:
    """Read the ``Elapsed Time`` comments of each chain's CSV file.

    Returns
    -------
    list of dict
        Per chain, seconds of ``Warm-up``, ``Sampling`` and ``Total``.
    """
    out = []
    for path in csv_files:
        found = {k: float(v) for v, k in _ELAPSED.findall(Path(path).read_text())}
        out.append(found)
    return out


def min_bulk_ess(mu: np.ndarray, tau: np.ndarray) -> dict[str, float]:
    """Bulk ESS of ``mu`` and ``tau`` (arrays chain x draw) and their minimum."""
    ess = {
        "mu": arviz_compat.ess(np.asarray(mu), method="bulk"),
        "tau": arviz_compat.ess(np.asarray(tau), method="bulk"),
    }
    ess["min"] = min(ess["mu"], ess["tau"])
    return ess


def stan_run(model: Any, seed: int, out_dir: Path) -> dict[str, Any]:
    """Sample once through cmdstanpy and convert to InferenceData; time both."""
    start = time.perf_counter()
    fit = model.sample(
        data=str(DATA),
        chains=CHAINS,
        parallel_chains=PARALLEL_CHAINS,
        iter_warmup=WARMUP,
        iter_sampling=DRAWS,
        seed=seed,
        show_progress=False,
        output_dir=str(out_dir),
    )
    sample_wall = time.perf_counter() - start
    data = sf_idata.to_inference_data(fit)
    wall = time.perf_counter() - start
    post = data.posterior
    ess = min_bulk_ess(post["mu"].values, post["tau"].values)
    elapsed = csv_elapsed(fit.runset.csv_files)
    return {
        "wall": wall,
        "sample_wall": sample_wall,
        "idata_wall": wall - sample_wall,
        "csv_total_max": max(e["Total"] for e in elapsed),
        "csv_total_sum": sum(e["Total"] for e in elapsed),
        "ess_bulk": ess,
        "ess_per_s": ess["min"] / wall,
        "divergences": int(fit.divergences.sum()),
        "processes": len(fit.runset.csv_files)
        if fit.runset.one_process_per_chain
        else 1,
        "command": " ".join(fit.runset.cmd(0)),
        "STAN_NUM_THREADS": os.environ.get("STAN_NUM_THREADS"),
    }


def pymc_process(
    python: Path, compiledir: Path, warm_calls: int, seed: int
) -> dict[str, Any]:
    """Run the PyMC worker once; return its JSON with ESS added per call."""
    env = dict(os.environ, PYTENSOR_FLAGS=f"base_compiledir={compiledir}")
    start = time.perf_counter()
    proc = subprocess.run(
        [
            str(python),
            str(WORKER),
            str(DATA),
            "--warm-calls",
            str(warm_calls),
            "--seed",
            str(seed),
            "--chains",
            str(CHAINS),
            "--cores",
            str(PARALLEL_CHAINS),
            "--tune",
            str(WARMUP),
            "--draws",
            str(DRAWS),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    process_wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"PyMC worker failed:\n{proc.stdout}\n{proc.stderr}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_wall"] = process_wall
    for call in result["calls"]:
        draws = call.pop("draws")
        call["ess_bulk"] = min_bulk_ess(draws["mu"], draws["tau"])
        call["ess_per_s"] = call["ess_bulk"]["min"] / call["wall"]
        call["ess_per_s_sampling_only"] = (
            call["ess_bulk"]["min"] / call["sampling_time"]
        )
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print a table, write ``bench/results/eight_schools_vs_pymc.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stan-reps", type=int, default=6)
    parser.add_argument("--warm-calls", type=int, default=3)
    parser.add_argument("--pymc-venv", type=Path, default=Path("/work/bench-venv"))
    args = parser.parse_args(argv)
    logging.getLogger("cmdstanpy").setLevel(logging.WARNING)

    info = machine_info()
    python = ensure_pymc_venv(args.pymc_venv)

    start = time.perf_counter()
    model = compile_model(program_path("models/eight_schools_noncentered"))
    compile_wall = time.perf_counter() - start
    print(f"compile_model (cache hit after the first run): {compile_wall:.1f} s")

    stan: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="stanflow-bench-8s-") as tmp:
        tmp_path = Path(tmp)
        first_half = args.stan_reps // 2
        for i in range(first_half):
            stan.append(stan_run(model, 1000 + i, tmp_path / f"stan{i}"))
            print(f"stan rep {i}: {stan[-1]['wall']:.2f} s", flush=True)
        cold = pymc_process(python, tmp_path / "pytensor", args.warm_calls, seed=1)
        for k, call in enumerate(cold["calls"]):
            print(
                f"pymc call {k} ({'cold cache' if k == 0 else 'warm'}): "
                f"{call['wall']:.2f} s (sampling {call['sampling_time']:.2f} s)",
                flush=True,
            )
        new_proc = pymc_process(python, tmp_path / "pytensor", 0, seed=101)
        print(
            f"pymc first call, new process, warm disk cache: "
            f"{new_proc['calls'][0]['wall']:.2f} s",
            flush=True,
        )
        for i in range(first_half, args.stan_reps):
            stan.append(stan_run(model, 1000 + i, tmp_path / f"stan{i}"))
            print(f"stan rep {i}: {stan[-1]['wall']:.2f} s", flush=True)

    stan_med = {
        k: median([r[k] for r in stan])
        for k in ("wall", "sample_wall", "idata_wall", "csv_total_max", "ess_per_s")
    }
    stan_med["ess_min"] = median([r["ess_bulk"]["min"] for r in stan])
    warm = cold["calls"][1:]
    pymc_first = cold["calls"][0]
    pymc_warm = {
        "wall": median([c["wall"] for c in warm]),
        "sampling_time": median([c["sampling_time"] for c in warm]),
        "ess_min": median([c["ess_bulk"]["min"] for c in warm]),
        "ess_per_s": median([c["ess_per_s"] for c in warm]),
    }
    pymc_new = new_proc["calls"][0]
    ratios = {
        "pymc_warm_wall_over_stan_wall": pymc_warm["wall"] / stan_med["wall"],
        "pymc_first_cold_wall_over_stan_wall": pymc_first["wall"] / stan_med["wall"],
        "pymc_first_warm_cache_wall_over_stan_wall": pymc_new["wall"]
        / stan_med["wall"],
        "pymc_sampling_time_over_stan_csv_total_max": (
            pymc_warm["sampling_time"] / stan_med["csv_total_max"]
        ),
        "stan_ess_per_s_over_pymc_warm_ess_per_s": (
            stan_med["ess_per_s"] / pymc_warm["ess_per_s"]
        ),
    }
    print()
    print_table(
        ["run", "wall s", "sampling-only s", "min bulk ESS", "ESS/s"],
        [
            [
                "stanflow (median)",
                stan_med["wall"],
                stan_med["csv_total_max"],
                stan_med["ess_min"],
                stan_med["ess_per_s"],
            ],
            [
                "PyMC 1st call, cold cache",
                pymc_first["wall"],
                pymc_first["sampling_time"],
                pymc_first["ess_bulk"]["min"],
                pymc_first["ess_per_s"],
            ],
            [
                "PyMC 1st call, new proc, warm cache",
                pymc_new["wall"],
                pymc_new["sampling_time"],
                pymc_new["ess_bulk"]["min"],
                pymc_new["ess_per_s"],
            ],
            [
                "PyMC later calls (median)",
                pymc_warm["wall"],
                pymc_warm["sampling_time"],
                pymc_warm["ess_min"],
                pymc_warm["ess_per_s"],
            ],
        ],
    )
    print(
        "\n(stanflow sampling-only = slowest chain's CSV 'Elapsed Time (Total)'; "
        "PyMC sampling-only = idata.sample_stats.attrs['sampling_time'])"
    )
    for k, v in ratios.items():
        print(f"{k}: {v:.2f}")
    print(
        f"goal (stanflow >= 10x faster than PyMC after compilation): "
        f"{'met' if ratios['pymc_warm_wall_over_stan_wall'] >= 10 else 'NOT met'}"
    )

    data = {
        "benchmark": "eight_schools_vs_pymc",
        "command": ".venv/bin/python bench/eight_schools_vs_pymc.py "
        f"--stan-reps {args.stan_reps} --warm-calls {args.warm_calls} "
        f"--pymc-venv {args.pymc_venv}",
        "machine": info,
        "settings": {
            "chains": CHAINS,
            "parallel_chains_and_pymc_cores": PARALLEL_CHAINS,
            "warmup": WARMUP,
            "draws": DRAWS,
        },
        "stan_compile_model_wall": compile_wall,
        "stan_runs": stan,
        "stan_medians": stan_med,
        "pymc_cold_process": cold,
        "pymc_new_process_warm_cache": new_proc,
        "pymc_warm_medians": pymc_warm,
        "ratios": ratios,
        "goal": "stanflow wall >= 10x faster than PyMC after compilation",
        "goal_met": ratios["pymc_warm_wall_over_stan_wall"] >= 10,
    }
    print(f"wrote {write_results('eight_schools_vs_pymc', data)}")
    return data


if __name__ == "__main__":
    main()
