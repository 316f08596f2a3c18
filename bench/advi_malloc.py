"""Benchmark: ADVI with the driver's malloc settings against glibc's defaults.

stanflow's driver tells glibc's ``malloc`` to keep freed memory in the
process (``keep_freed_memory`` in ``src/driver/main.cpp``) unless
``GLIBC_TUNABLES`` is set. This script runs one executable, the Last.fm matrix
factorisation of the ``lcvi-mf`` workflow (992 x 100, K = 20: 21 840
parameters), side by side in one run, alternating:

- ``keep``: the driver's settings (``GLIBC_TUNABLES`` unset);
- ``glibc``: glibc's own behaviour, by setting ``GLIBC_TUNABLES`` to a value
  that changes nothing (``glibc.malloc.tcache_count=7``, its default);

each for three runs of mean-field ADVI with one gradient sample: ``plain``, as a
user starts it (``eta`` adapted; Stan's service function); ``checkpoint``, the
same saving its state (the driver's own loop, as the LCVI loop's plain VI
runs); ``resumed``, continuing from a saved state without adaptation (an LCVI
block).
Reported: wall and CPU seconds, minor page faults, and the ratios. The draws
of the two variants are compared too: they must be identical.

Usage::

    STANFLOW_DATA_DIR=../shared/data .venv/bin/python bench/advi_malloc.py [--iter 3000] [--reps 3]
"""

from __future__ import annotations

import argparse
import filecmp
import os
import tempfile
from pathlib import Path

import cmdstanpy
import numpy as np
from _common import machine_info, median, print_table, run_timed, write_results

from stanflow.lcvi.mf import load_lastfm, matrix_factorisation, reference_split
from stanflow.losses import bound_loss

VARIANTS = {"keep": None, "glibc": "glibc.malloc.tcache_count=7"}
PATHS = ("plain", "checkpoint", "resumed")


def environment(tunables: str | None) -> dict[str, str]:
    """This process's environment with ``GLIBC_TUNABLES`` set to ``tunables`` or removed."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if tunables is not None:
        env["GLIBC_TUNABLES"] = tunables
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iter", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    Y = load_lastfm(100)
    problem = matrix_factorisation(
        Y, reference_split(Y.shape), K=20, prior_sd=10.0, noise_sd=1.0
    )
    loss = bound_loss("squared")
    bound = problem.bind(loss)
    model = bound.executable()  # compiled before timing
    data = bound.stan_data(
        np.zeros(problem.n), np.zeros((1, problem.n)), np.full((1, problem.n), 0.5),
        bound.settings(0.0, "exp", 1.0, "linearised", 1),
    )
    records = {(path, v): [] for path in PATHS for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data_file = folder / "data.json"
        cmdstanpy.write_stan_json(str(data_file), data)
        base = [model.exe_file, "variational", "grad_samples=1", "eval_elbo=1000"]
        base += ["tol_rel_obj=1e-9", "output_samples=20"]
        tail = ["data", f"file={data_file}", "random", "seed=1"]
        start = folder / "start-state.json"  # what the resumed runs continue from
        start_run = [*base, "iter=200", "checkpoint", f"save={start}", *tail]
        run_timed([*start_run, "output", f"file={folder / 'start.csv'}"])

        def command(path: str, variant: str) -> list[str]:
            state = folder / f"{path}-{variant}-state.json"
            cmd = [*base, f"iter={args.iter}"]
            if path == "checkpoint":
                cmd += ["checkpoint", f"save={state}"]
            elif path == "resumed":
                cmd += ["checkpoint", f"save={state}", f"load={start}"]
            output = [
                "output",
                f"file={folder / f'{path}-{variant}.csv'}",
                "sig_figs=18",
            ]
            return cmd + tail + output

        for rep in range(args.reps):
            order = list(records) if rep % 2 == 0 else list(reversed(records))
            for path, variant in order:
                timed = run_timed(
                    command(path, variant), env=environment(VARIANTS[variant])
                )
                records[(path, variant)].append(timed)
        same = all(
            _same_draws(folder / f"{path}-keep.csv", folder / f"{path}-glibc.csv")
            for path in PATHS
        ) and all(
            filecmp.cmp(
                folder / f"{path}-keep-state.json",
                folder / f"{path}-glibc-state.json",
                shallow=False,
            )
            for path in PATHS[1:]
        )

    summary, rows = {}, []
    for (path, variant), runs in records.items():
        summary[f"{path}_{variant}"] = {
            "wall": median([r.wall for r in runs]),
            "cpu": median([r.cpu for r in runs]),
            "sys": median([r.sys for r in runs]),
            "minor_faults": median([r.minor_faults for r in runs]),
            "walls": [r.wall for r in runs],
        }
    for path in PATHS:
        keep, glibc = summary[f"{path}_keep"], summary[f"{path}_glibc"]
        summary[f"{path}_ratio_wall"] = glibc["wall"] / keep["wall"]
        rows.append(
            [
                path,
                f"{glibc['wall']:.2f}",
                f"{keep['wall']:.2f}",
                f"{summary[f'{path}_ratio_wall']:.2f}",
                f"{glibc['sys']:.2f} / {keep['sys']:.2f}",
                f"{glibc['minor_faults']:.0f} / {keep['minor_faults']:.0f}",
            ]
        )
    print_table(
        [
            "run",
            "glibc wall s",
            "keep wall s",
            "glibc / keep",
            "sys s (glibc / keep)",
            "minor faults (glibc / keep)",
        ],
        rows,
    )
    print(f"identical draws and states: {same}")
    write_results(
        "advi_malloc",
        {
            "iterations": args.iter,
            "reps": args.reps,
            "identical_results": same,
            "median": summary,
            "machine": machine_info(),
            "command": "STANFLOW_DATA_DIR=../shared/data .venv/bin/python bench/advi_malloc.py "
            f"--iter {args.iter} --reps {args.reps}",
        },
    )


def _same_draws(first: Path, second: Path) -> bool:
    """Whether two CmdStan CSV files hold the same draws (their comments hold timings)."""

    def rows(path: Path) -> list[str]:
        return [
            line for line in path.read_text().splitlines() if not line.startswith("#")
        ]

    return rows(first) == rows(second)


if __name__ == "__main__":
    main()
