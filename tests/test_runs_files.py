"""The run folder's pure parts: plan, command lines, chunks, manifest, result CSVs.

No compiler needed: CSV files are synthetic (``write_stan_csv`` in conftest).
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from stanflow.runs.commands import (
    command_tokens,
    console_file,
    output_files,
    staged_files,
)
from stanflow.runs.jobs import MAX_CHUNK, Job, Outcome, chunk_sizes, make_chunks
from stanflow.runs.manifest import MANIFEST_FILE, Manifest, read_manifest
from stanflow.runs.plan import Plan, PlannedRun, make_plan, read_plan, write_plan
from stanflow.runs.results import collect, column_name, read_csv
from stanflow.runs.seeds import run_seed
from stanflow.runs.spec import CheckedRun

SAMPLER = ["lp__", "accept_stat__", "stepsize__", "treedepth__", "n_leapfrog__"]
SAMPLER += ["divergent__", "energy__"]


def checked(index: int, data: dict | None, seed: int | None = None, **fields):
    values = {"method": "sample", "args": {}, "inits": None, "chains": 1, "threads": 1}
    values.update(fields)
    return CheckedRun(index=index, data=data, seed=seed, **values)


def planned(index: int = 12, **fields) -> PlannedRun:
    values = {
        "method": "sample", "seed": 99, "chains": 1, "threads": 1, "args": {}, "data": None, "inits": None
    }
    values.update(fields)
    return PlannedRun(index=index, **values)


# --- plan -------------------------------------------------------------------


def test_plan_shares_equal_data_and_derives_seeds(tmp_path):
    same = {"N": np.int64(2), "y": np.array([1.0, 2.0])}
    runs = [
        checked(0, same),
        checked(1, {"N": 2, "y": [1.0, 2.0]}),
        checked(2, {"N": 1, "y": [3.0]}, seed=5, inits={"mu": 0.25}),
        checked(3, None, inits=1.5),
    ]
    plan = make_plan(runs, exe="/x/model", root_seed=11, batch=True, folder=tmp_path)
    assert plan.runs[0].data == plan.runs[1].data != plan.runs[2].data
    assert plan.runs[3].data is None and plan.runs[3].inits == 1.5
    assert sorted(p.name for p in (tmp_path / "inputs").iterdir()) == sorted(
        {plan.runs[0].data, plan.runs[2].data, plan.runs[2].inits}
    )
    stored = json.loads((tmp_path / "inputs" / plan.runs[2].data).read_text())
    assert stored == {"N": 1, "y": [3.0]}
    assert [run.seed for run in plan.runs] == [
        run_seed(11, 0),
        run_seed(11, 1),
        5,
        run_seed(11, 3),
    ]


def test_plan_round_trips_and_refuses_another_run_set(tmp_path):
    plan = make_plan(
        [checked(0, {"a": 1.0}, args={"adapt.delta": 0.9})],
        exe="/x/model",
        root_seed=3,
        batch=False,
        folder=tmp_path,
    )
    write_plan(tmp_path, plan)
    assert read_plan(tmp_path) == plan
    write_plan(tmp_path, plan)  # the same plan again is fine
    other = Plan(exe=plan.exe, root_seed=4, batch=False, runs=plan.runs)
    with pytest.raises(ValueError, match="different run set"):
        write_plan(tmp_path, other)
    with pytest.raises(ValueError, match="no run set"):
        read_plan(tmp_path / "elsewhere")


# --- command lines ----------------------------------------------------------


def test_command_tokens(tmp_path):
    run = planned(data="data-1.json", inits="inits-2.json", threads=2, chains=2)
    run = PlannedRun(**{**run.__dict__, "args": {"num_samples": 10}})
    staging = tmp_path / "staging" / "s1"
    assert command_tokens(tmp_path, run, staging) == [
        "id=1",
        "data",
        f"file={tmp_path / 'inputs' / 'data-1.json'}",
        f"init={tmp_path / 'inputs' / 'inits-2.json'}",
        "random",
        "seed=99",
        "output",
        f"file={staging / 'run-00012.csv'}",
        "num_threads=2",
        "method=sample",
        "num_samples=10",
        "num_chains=2",
    ]
    assert staged_files(staging, run) == (
        staging / "run-00012_1.csv",
        staging / "run-00012_2.csv",
    )
    assert output_files(tmp_path, run)[0] == tmp_path / "output" / "run-00012_1.csv"
    assert console_file(tmp_path, run, 3) == tmp_path / "logs" / "run-00012.3.log"


def test_command_tokens_without_threads_or_data(tmp_path):
    run = planned(threads=0, inits=0.5, method="optimize")
    tokens = command_tokens(tmp_path, run, tmp_path)
    assert "init=0.5" in tokens and "data" not in tokens
    assert not any(t.startswith("num_threads") for t in tokens)
    assert output_files(tmp_path, run) == (tmp_path / "output" / "run-00012.csv",)


# --- chunks -----------------------------------------------------------------


def job(index: int) -> Job:
    return Job(index, 1, (), f"{index}.log", (), ())


@pytest.mark.parametrize(("jobs", "cores"), [(500, 2), (16, 2), (7, 4), (1, 1)])
def test_chunk_sizes_start_large_and_end_with_single_jobs(jobs, cores):
    sizes = chunk_sizes(jobs, cores)
    assert sum(sizes) == jobs
    assert sizes == sorted(sizes, reverse=True)
    assert max(sizes) <= MAX_CHUNK and sizes[-1] == 1
    assert sizes[0] == min(MAX_CHUNK, -(-jobs // (2 * cores)))


def test_chunk_sizes_for_many_jobs():
    sizes = chunk_sizes(500, 2)
    assert sizes[:4] == [64] * 4 and len(sizes) == 21
    assert chunk_sizes(0, 2) == []


def test_chunks_hold_one_thread_count_each_in_order():
    jobs = [(job(i), 2 if i % 3 == 0 else 1) for i in range(12)]
    chunks = make_chunks(
        jobs, exe="m", batch=True, cores=2, timeout=None, workdir="w", size=3
    )
    layout = [(c.cores, [j.index for j in c.jobs]) for c in chunks]
    assert layout == [
        (2, [0, 3, 6]),
        (2, [9]),
        (1, [1, 2, 4]),
        (1, [5, 7, 8]),
        (1, [10, 11]),
    ]
    serial = make_chunks(
        [(job(0), 0)], exe="m", batch=False, cores=2, timeout=1.0, workdir="w"
    )
    assert serial[0].cores == 1 and serial[0].timeout == 1.0
    guided = make_chunks(
        [(job(i), 2) for i in range(10)],
        exe="m",
        batch=True,
        cores=4,
        timeout=None,
        workdir="w",
    )
    # Two-thread jobs on four cores: two at a time, so sized for two slots.
    assert [len(c.jobs) for c in guided] == chunk_sizes(10, 2)
    assert [j.index for c in guided for j in c.jobs] == list(range(10))


# --- manifest ---------------------------------------------------------------


def test_manifest_keeps_the_latest_attempt(tmp_path):
    with Manifest(tmp_path) as manifest:
        manifest.append(Outcome(0, 1, "failed", 1, 0.1, "boom"))
        manifest.append(Outcome(1, 1, "ok", 0, 0.2))
        manifest.append(Outcome(0, 2, "ok", 0, 0.3))
    latest = read_manifest(tmp_path)
    assert latest[0].attempt == 2 and latest[0].status == "ok"
    assert latest[1].wall_time == 0.2
    assert read_manifest(tmp_path / "none") == {}


def test_manifest_survives_a_torn_last_line(tmp_path):
    with Manifest(tmp_path) as manifest:
        manifest.append(Outcome(0, 1, "ok", 0, 0.1))
    path = tmp_path / MANIFEST_FILE
    with open(path, "ab") as handle:
        handle.write(b'{"index": 1, "attempt": 1, "sta')
    assert list(read_manifest(tmp_path)) == [0]
    with Manifest(tmp_path) as manifest:
        manifest.append(Outcome(1, 1, "ok", 0, 0.1))
    assert sorted(read_manifest(tmp_path)) == [0, 1]
    assert len(path.read_text().splitlines()) == 2


def test_manifest_rejects_damage_before_the_end(tmp_path):
    (tmp_path / MANIFEST_FILE).write_text("garbage\n" + json.dumps({}) + "\n")
    with pytest.raises(ValueError, match="line 1"):
        read_manifest(tmp_path)


# --- result CSVs ------------------------------------------------------------


@pytest.mark.parametrize(
    ("csv", "cmdstanpy"),
    [
        ("mu", "mu"),
        ("theta.3", "theta[3]"),
        ("m.1.2", "m[1,2]"),
        ("z.real", "z[real]"),
        ("zv.2.imag", "zv[2,imag]"),
        ("t:1", "t.1"),
        ("t.2:1.3", "t[2].1[3]"),
        ("lp__", "lp__"),
    ],
)
def test_column_names_as_cmdstanpy_writes_them(csv, cmdstanpy):
    assert column_name(csv) == cmdstanpy


def test_read_csv_sample_and_variational(tmp_path, write_stan_csv):
    rows = np.arange(12.0).reshape(4, 3)
    path = write_stan_csv(tmp_path / "s.csv", "sample", ["lp__", "a.1", "a.2"], rows)
    names, values, total = read_csv(path, "sample")
    assert names == ("lp__", "a[1]", "a[2]")
    assert np.array_equal(values, rows) and total == 0.002
    path = write_stan_csv(tmp_path / "v.csv", "variational", ["lp__", "b"], rows[:, :2])
    names, values, total = read_csv(path, "variational")
    assert np.array_equal(values, rows[1:, :2]) and np.isnan(total)


def write_run(write_stan_csv, path: Path, draws: np.ndarray) -> Path:
    """A sample CSV with the sampler columns, ``mu`` and ``theta[1..2]``."""
    header = [*SAMPLER, "mu", "theta.1", "theta.2"]
    stats = np.zeros((len(draws), len(SAMPLER)))
    stats[::2, SAMPLER.index("divergent__")] = 1
    return write_stan_csv(path, "sample", header, np.hstack([stats, draws]))


def test_collect_stacks_runs_and_leaves_missing_ones_nan(tmp_path, write_stan_csv):
    rng = np.random.default_rng(0)
    draws = [rng.normal(size=(6, 3)) for _ in range(3)]
    files = [
        (write_run(write_stan_csv, tmp_path / f"r{i}.csv", d),)
        for i, d in enumerate(draws)
    ]
    groups = collect(
        [files[0], None, files[2]],
        "sample",
        coords={"school": ["a", "b"]},
        dims={"theta": ["school"]},
    )
    posterior = groups["posterior"]
    assert posterior["theta"].dims == ("chain", "draw", "run", "school")
    assert list(posterior["school"].values) == ["a", "b"]
    assert np.array_equal(posterior["mu"].values[0, :, 0], draws[0][:, 0])
    assert np.array_equal(posterior["theta"].values[0, :, 2], draws[2][:, 1:])
    assert np.isnan(posterior["mu"].values[:, :, 1]).all()
    stats = groups["sample_stats"]
    assert set(stats.data_vars) == {
        "lp",
        "acceptance_rate",
        "step_size",
        "tree_depth",
        "n_steps",
        "diverging",
        "energy",
    }
    chain_stats = groups["chain_stats"]
    assert chain_stats["divergences"].values[:, 0].tolist()[::2] == [3, 3]
    assert chain_stats["total_time"].values[0, 0] == 0.002


def test_collect_names_the_run_that_does_not_fit(tmp_path, write_stan_csv):
    good = write_run(write_stan_csv, tmp_path / "a.csv", np.zeros((6, 3)))
    short = write_run(write_stan_csv, tmp_path / "b.csv", np.zeros((5, 3)))
    with pytest.raises(ValueError, match="run 1: columns or"):
        collect([(good,), (short,)], "sample")
    with pytest.raises(ValueError, match="no run has results"):
        collect([None, None], "sample")


def test_collect_needs_the_final_arrays_plus_one_run(tmp_path, write_stan_csv):
    n_runs, n_draws = 60, 1000
    rows = np.random.default_rng(1).normal(size=(n_draws, 3))
    files = [
        (write_run(write_stan_csv, tmp_path / f"r{i}.csv", rows),)
        for i in range(n_runs)
    ]
    final_bytes = n_runs * n_draws * (len(SAMPLER) + 3) * 8
    collect(files[:1], "sample")  # lazy imports and caches, outside the measurement
    tracemalloc.start()
    try:
        groups = collect(files, "sample")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    held = sum(ds.nbytes for ds in groups.values())
    assert held >= final_bytes
    # Reading every run first and stacking afterwards would need twice the result.
    assert peak < 1.25 * final_bytes + 2_000_000
