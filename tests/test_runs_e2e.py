"""Run sets with a real model: closed-form posteriors, executors, faults, resume.

The model (``tests/stan/runs_normal.stan``) is a conjugate normal model, so each
run's posterior of ``mu`` is known exactly; its ``spin`` input makes a run hang.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import cmdstanpy
import distributed
import numpy as np
import pytest

from stanflow import arviz_compat
from stanflow.idata import load, save
from stanflow.models import compile_model
from stanflow.runs import (
    DaskExecutor,
    InvalidRunSpec,
    LocalExecutor,
    RunSet,
    RunSpec,
    resume,
)
from stanflow.runs import runset as runset_module
from stanflow.runs.manifest import MANIFEST_FILE, read_manifest

pytestmark = pytest.mark.e2e

PRIOR_SD = 10.0
SIGMA = 1.5


@pytest.fixture(scope="module")
def model(cmdstan):
    return compile_model(Path(__file__).parent / "stan" / "runs_normal.stan")


@pytest.fixture(scope="module")
def dask_client():
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def replicate(rng: np.random.Generator, n: int, spin: int = 0) -> dict:
    return {"N": n, "y": rng.normal(2.0, SIGMA, n), "sigma": SIGMA, "spin": spin}


def exact_posterior(data: dict) -> tuple[float, float]:
    """Mean and sd of mu given the data: prior N(0, 10^2), known sigma."""
    precision = 1 / PRIOR_SD**2 + data["N"] / data["sigma"] ** 2
    return float(np.sum(data["y"]) / data["sigma"] ** 2 / precision), precision**-0.5


def test_each_run_matches_its_closed_form_posterior(model, tmp_path):
    rng = np.random.default_rng(1)
    data = [replicate(rng, n) for n in (3, 5, 8, 13, 21, 34)]
    runset = RunSet(
        model, [RunSpec(data=d) for d in data], out_dir=tmp_path, root_seed=7
    )
    assert runset.plan.batch  # stanflow's driver: several runs per process
    results = list(runset.run())  # with the progress bar
    assert sorted(r.index for r in results) == list(range(6))
    assert all(r.ok and r.attempts == 1 for r in results)
    idata = runset.to_inference_data()
    mu = idata.posterior["mu"]
    assert mu.dims == ("chain", "draw", "run") and mu.shape == (1, 1000, 6)
    ess = arviz_compat.ess(idata)["mu"].values
    for index, d in enumerate(data):
        mean, sd = exact_posterior(d)
        draws = mu.values[0, :, index]
        assert abs(draws.mean() - mean) < 5 * sd / np.sqrt(ess[index])
        assert abs(draws.std() / sd - 1) < 0.15
    stats = idata.run_stats
    assert list(stats["status"].values) == ["ok"] * 6
    assert stats["seed"].values.tolist() == [r.seed for r in runset.plan.runs]
    assert idata.attrs["n_ok"] == 6 and idata.attrs["root_seed"] == "7"
    # cmdstanpy, reading the same files on its own, sees the same run.
    fit = cmdstanpy.from_csv([str(p) for p in results[0].outputs])
    index = results[0].index
    np.testing.assert_allclose(
        mu.values[0, :, index], fit.stan_variable("mu"), rtol=1e-12
    )
    assert stats["divergences"].values[index, 0] == fit.divergences[0]
    assert stats["total_time"].values[index, 0] == fit.time[0]["total"]
    draws = results[0].draws()
    assert draws.names[-1] == "mu"
    assert np.array_equal(draws.values[0, :, -1], mu.values[0, :, index])
    loaded = load(save(idata, tmp_path / "runset.nc"))
    assert loaded.posterior.equals(idata.posterior)
    assert loaded.run_stats.equals(idata.run_stats)


def test_local_dask_and_one_process_per_run_agree(
    model, tmp_path, dask_client, monkeypatch
):
    rng = np.random.default_rng(2)
    specs = [
        RunSpec(data=replicate(rng, 10), args={"num_samples": 200}) for _ in range(9)
    ]
    specs[4] = RunSpec(data=specs[4].data, args={"num_samples": 200}, seed=12345)
    local = RunSet(model, specs, out_dir=tmp_path / "local", root_seed=3)
    list(local.run(LocalExecutor(cores=2), progress=False))
    on_dask = RunSet(model, specs, out_dir=tmp_path / "dask", root_seed=3)
    list(on_dask.run(DaskExecutor(dask_client), chunk_size=2, progress=False))
    monkeypatch.setattr(runset_module, "supports_batch", lambda exe: False)
    single = RunSet(model, specs, out_dir=tmp_path / "single", root_seed=3)
    assert not single.plan.batch
    list(single.run(LocalExecutor(cores=1), progress=False))
    reference = local.to_inference_data()
    assert reference.run_stats["seed"].values[4] == 12345
    for other in (on_dask, single):
        idata = other.to_inference_data()
        for group in ("posterior", "sample_stats"):
            assert reference[group].equals(idata[group]), group
    different = RunSet(model, specs, out_dir=tmp_path / "other-seed", root_seed=4)
    list(different.run(progress=False))
    mu = different.to_inference_data().posterior["mu"].values
    assert not np.array_equal(mu[..., 0], reference.posterior["mu"].values[..., 0])
    assert np.array_equal(mu[..., 4], reference.posterior["mu"].values[..., 4])


def test_dask_executor_checks_that_workers_see_the_files(dask_client, tmp_path):
    executor = DaskExecutor(dask_client)
    assert executor.cores == 2
    with pytest.raises(RuntimeError, match="shared with the workers"):
        executor.start([str(tmp_path), "/no/such/stanflow/folder"])
    with pytest.raises(TypeError, match=r"distributed\.Client"):
        DaskExecutor("tcp://127.0.0.1:8786")


def test_data_sizes_are_checked_against_the_program_before_anything_runs(model, tmp_path):
    rng = np.random.default_rng(3)
    bad = replicate(rng, 6)
    bad["y"] = bad["y"][:4]
    specs = [RunSpec(data=replicate(rng, 6)), RunSpec(data=bad)]
    with pytest.raises(InvalidRunSpec) as caught:
        RunSet(model, specs, out_dir=tmp_path / "set", root_seed=1)
    assert str(caught.value) == (
        "run 1, data['y']: has shape (4,) but the model declares shape (6,) (N = 6)"
    )
    assert not (tmp_path / "set").exists()


def test_failing_and_hanging_runs_are_reported_and_the_rest_complete(model, tmp_path):
    rng = np.random.default_rng(3)
    specs = [
        RunSpec(data=replicate(rng, 6), args={"num_samples": 200}) for _ in range(6)
    ]
    bad = replicate(rng, 6)
    bad["sigma"] = -1.0  # passes the checks (constraints are the model's), fails in it
    specs[2] = RunSpec(data=bad, args={"num_samples": 200})
    specs[4] = RunSpec(data=replicate(rng, 6, spin=10**6), args={"num_samples": 200})
    runset = RunSet(model, specs, out_dir=tmp_path, root_seed=1)
    started = time.monotonic()
    results = {r.index: r for r in runset.run(timeout=2, retries=1, progress=False)}
    assert time.monotonic() - started < 30
    assert sorted(results) == list(range(6))
    failed, hung = results[2], results[4]
    assert (failed.status, failed.attempts, failed.exit_code) == ("failed", 2, 1)
    assert "sigma is -1, but must be greater than or equal to 0" in failed.message
    assert (hung.status, hung.attempts, hung.exit_code) == ("timeout", 2, None)
    assert "timeout" in hung.message
    for index in (2, 4):
        for attempt in (1, 2):
            assert (tmp_path / "logs" / f"run-{index:05d}.{attempt}.log").is_file()
    assert all(results[i].ok for i in (0, 1, 3, 5))
    idata = runset.to_inference_data()
    assert list(idata.run_stats["status"].values) == [
        "ok",
        "ok",
        "failed",
        "ok",
        "timeout",
        "ok",
    ]
    mu = idata.posterior["mu"].values
    assert np.isnan(mu[..., [2, 4]]).all() and np.isfinite(mu[..., [0, 1, 3, 5]]).all()
    assert runset.missing() == [2, 4]
    # Running again retries exactly the failures; attempt numbers go on.
    again = {r.index: r for r in runset.run(timeout=2, retries=0, progress=False)}
    assert sorted(again) == [2, 4]
    assert [again[i].attempts for i in (2, 4)] == [3, 3]


RUN_IN_CHILD = """
import sys
from stanflow.runs import RunSet
for _ in RunSet.open(sys.argv[1]).run(chunk_size=2, progress=False):
    pass
"""


def wait_until_released(lock_file: Path) -> None:
    """Wait (a minute at most) until no process holds ``lock_file``: the killed child's own
    children (a process forked to start CmdStan holds its descriptors until it execs) may
    outlive it by a moment on a loaded machine, and until the last is gone the folder is
    rightly refused as being run."""
    deadline = time.monotonic() + 60
    with open(lock_file) as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                assert time.monotonic() < deadline, "the killed processes still hold the folder"
                time.sleep(0.05)
                continue
            fcntl.flock(lock, fcntl.LOCK_UN)
            return


def test_kill_then_resume_equals_an_uninterrupted_run(model, tmp_path):
    rng = np.random.default_rng(4)
    # spin makes each run take a moment, so the kill lands in the middle.
    specs = [
        RunSpec(data=replicate(rng, 8, spin=9000), args={"num_samples": 300})
        for _ in range(16)
    ]
    killed = RunSet(model, specs, out_dir=tmp_path / "killed", root_seed=5)
    child = subprocess.Popen(
        [sys.executable, "-c", RUN_IN_CHILD, str(killed.out_dir)],
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while len(read_manifest(killed.out_dir)) < 4 and child.poll() is None:
        assert time.monotonic() < deadline, "no progress in the child"
        time.sleep(0.02)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    wait_until_released(killed.out_dir / ".lock")
    done_before = dict(read_manifest(killed.out_dir))
    assert 0 < len(done_before) < 16, "the kill should land mid-way"
    stamps = {
        i: os.stat(killed.out_dir / "output" / f"run-{i:05d}.csv").st_mtime_ns
        for i in done_before
    }
    resumed = resume(killed.out_dir, progress=False)
    assert resumed.missing() == []
    for i, stamp in stamps.items():
        assert (
            os.stat(killed.out_dir / "output" / f"run-{i:05d}.csv").st_mtime_ns == stamp
        )
    lines = (killed.out_dir / MANIFEST_FILE).read_text().splitlines()
    assert len(lines) == 16  # one attempt per run: nothing done twice
    uninterrupted = RunSet(model, specs, out_dir=tmp_path / "whole", root_seed=5)
    list(uninterrupted.run(progress=False))
    a, b = resumed.to_inference_data(), uninterrupted.to_inference_data()
    assert a.posterior.equals(b.posterior) and a.sample_stats.equals(b.sample_stats)
    assert list(a.run_stats["status"].values) == ["ok"] * 16


def test_every_method_with_its_arguments(model, tmp_path):
    rng = np.random.default_rng(5)
    data = [replicate(rng, n) for n in (4, 9)]
    exact = [exact_posterior(d) for d in data]

    def run(name: str, method: str, args: dict, **fields) -> RunSet:
        specs = [RunSpec(method=method, data=d, args=args, **fields) for d in data]
        runset = RunSet(model, specs, out_dir=tmp_path / name, root_seed=9)
        assert all(r.ok for r in runset.run(progress=False)), name
        return runset

    optimize = run("optimize", "optimize", {"algorithm": "bfgs", "iter": 500})
    mode = optimize.to_inference_data().posterior["mu"].values[0, 0]
    np.testing.assert_allclose(mode, [m for m, _ in exact], rtol=1e-4)
    assert "algorithm = bfgs" in optimize.results()[0].outputs[0].read_text()

    laplace_specs = [
        {"method": "laplace", "data": d, "args": {"mode": r.outputs[0], "draws": 400}}
        for d, r in zip(data, optimize.results(), strict=True)
    ]
    laplace = RunSet(model, laplace_specs, out_dir=tmp_path / "laplace", root_seed=9)
    list(laplace.run(progress=False))
    draws = laplace.to_inference_data().posterior["mu"].values[0]
    for index, (mean, sd) in enumerate(exact):
        assert abs(draws[:, index].mean() - mean) < 5 * sd / np.sqrt(400)
        assert abs(draws[:, index].std() / sd - 1) < 0.2

    variational = run(
        "variational", "variational", {"output_samples": 300, "adapt.iter": 30}
    )
    assert variational.to_inference_data().posterior["mu"].shape == (1, 300, 2)
    pathfinder = run(
        "pathfinder",
        "pathfinder",
        {"num_draws": 250, "num_psis_draws": 250, "num_paths": 2},
    )
    header = pathfinder.results()[0].outputs[0].read_text()
    assert "num_paths = 2" in header
    assert pathfinder.to_inference_data().posterior["mu"].shape == (1, 250, 2)

    sample = run(
        "sample",
        "sample",
        {"num_samples": 300, "num_warmup": 300, "adapt.delta": 0.95, "max_depth": 5},
        chains=2,
    )
    first = sample.results()[0].outputs
    assert [p.name for p in first] == ["run-00000_1.csv", "run-00000_2.csv"]
    header = first[1].read_text()
    for line in ("delta = 0.95", "max_depth = 5", "num_threads = 2", "id = 2"):
        assert line in header
    idata = sample.to_inference_data()
    mu = idata.posterior["mu"]
    assert mu.shape == (2, 300, 2)
    assert not np.array_equal(mu.values[0], mu.values[1])
    assert idata.run_stats["divergences"].shape == (2, 2)


def test_bad_input_fails_before_anything_is_launched(model, tmp_path):
    rng = np.random.default_rng(6)
    good = [{"data": replicate(rng, 5)} for _ in range(6)]
    out = tmp_path / "never"

    def rejected(specs, index, field):
        with pytest.raises(InvalidRunSpec) as caught:
            RunSet(model, specs, out_dir=out)
        assert (caught.value.index, caught.value.field) == (index, field)
        assert not out.exists()

    missing = {k: v for k, v in good[3]["data"].items() if k != "sigma"}
    rejected([*good[:3], {"data": missing}, *good[4:]], 3, "data['sigma']")
    rejected([*good[:1], {"data": {**good[1]["data"], "N": 5.5}}], 1, "data['N']")
    matrix = {**good[2]["data"], "y": np.ones((5, 1))}
    rejected([*good[:2], {"data": matrix}], 2, "data['y']")
    rejected(
        [*good[:5], {**good[5], "args": {"adapt.delta": 2}}], 5, "args['adapt.delta']"
    )
    rejected([good[0], {**good[1], "method": "optimize"}], 1, "method")
    rejected([good[0], {**good[1], "inits": {"sigma": 1.0}}], 1, "inits['sigma']")

    gone = tmp_path / "gone"
    shutil.copy(model.exe_file, gone)
    vanished = cmdstanpy.CmdStanModel(exe_file=str(gone))
    planned = RunSet(vanished, good, out_dir=tmp_path / "planned", root_seed=1)
    assert len(planned) == 6
    gone.unlink()
    with pytest.raises(ValueError, match="does not exist"):
        RunSet(vanished, good, out_dir=out)
    with pytest.raises(ValueError, match="no longer exists"):
        planned.run()
    with pytest.raises(TypeError, match="CmdStanModel"):
        RunSet(model.exe_file, good, out_dir=out)
    with pytest.raises(ValueError, match="empty"):
        RunSet(model, [], out_dir=out)
    assert not out.exists()
    runset = RunSet(model, good, out_dir=out, root_seed=1)
    with pytest.raises(ValueError, match="different run set"):
        RunSet(model, good, out_dir=out, root_seed=2)
    for bad in ({"retries": -1}, {"timeout": 0}, {"chunk_size": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            runset.run(**bad)
    with open(out / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as another process running this set would
        with pytest.raises(RuntimeError, match="another process"):
            list(runset.run(progress=False))
    assert not (out / MANIFEST_FILE).exists()


def test_sig_figs_reaches_the_csv(model, tmp_path):
    rng = np.random.default_rng(5)
    data = replicate(rng, 5)
    for figures, folder in ((None, "default"), (18, "precise")):
        args = {"num_samples": 20} | ({} if figures is None else {"sig_figs": figures})
        runset = RunSet(model, [RunSpec(data=data, args=args)], out_dir=tmp_path / folder,
                        root_seed=3)
        assert all(result.ok for result in runset.run(progress=False))
        text = (tmp_path / folder / "output" / "run-00000.csv").read_text()
        values = [line.split(",")[7] for line in text.splitlines()
                  if line and not line.startswith(("#", "lp__"))]
        digits = max(len(v.replace("-", "").replace(".", "").lstrip("0")) for v in values)
        assert digits <= 6 if figures is None else digits >= 12
