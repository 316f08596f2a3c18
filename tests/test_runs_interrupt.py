"""Ctrl-C during a run set: the processes stop, the finished runs stay, one line says so.

A child Python process runs a run set of the conjugate normal model
(``tests/stan/runs_normal.stan``, as in ``test_runs_e2e.py``; its ``spin``
input makes each run take a moment) and gets SIGINT once some runs have
finished: to its process group, as a terminal's Ctrl-C sends it, or to the
Python process alone, so that stanflow itself must stop the executables.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import distributed
import numpy as np
import pytest

from stanflow import outdir
from stanflow.models import compile_model
from stanflow.qpaths.stan_ti import thermodynamic_integration_stan
from stanflow.runs import DaskExecutor, RunSet, RunSpec, resume
from stanflow.runs.manifest import MANIFEST_FILE, Manifest, read_manifest

pytestmark = pytest.mark.e2e

SIGMA = 1.5
RUNS = 12
SPIN = 30_000  # about half a second per run

RESUME_IN_CHILD = """
import sys
from stanflow.runs import LocalExecutor, resume
resume(sys.argv[1], LocalExecutor(cores=2), chunk_size=2)  # with its progress bar
"""

WORKFLOW = '''
import sys
from pathlib import Path

from stanflow import workflows
from stanflow.runs import LocalExecutor, RunSet

DESCRIPTION = "a run set inside a workflow"


def run(out: Path, quick: bool) -> dict:
    list(RunSet.open(out / "runs").run(LocalExecutor(cores=2), chunk_size=2))
    return {}


if __name__ == "__main__":
    sys.exit(workflows.main(run, DESCRIPTION))
'''


@pytest.fixture(scope="module")
def model(cmdstan):
    return compile_model(Path(__file__).parent / "stan" / "runs_normal.stan")


def specs(count: int, spin: int = SPIN) -> list[RunSpec]:
    rng = np.random.default_rng(11)
    return [
        RunSpec(
            data={"N": 8, "y": rng.normal(2.0, SIGMA, 8), "sigma": SIGMA, "spin": spin},
            args={"num_samples": 300},
        )
        for _ in range(count)
    ]


def interrupt_after_some_runs(
    command: list[str], folder: Path, whole_group: bool
) -> tuple[subprocess.CompletedProcess, float]:
    """Start ``command``, SIGINT it once 3 runs are recorded; its result and the seconds it took."""
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while len(read_manifest(folder)) < 3 and child.poll() is None:
        assert time.monotonic() < deadline, "no progress in the child"
        time.sleep(0.02)
    sent = time.monotonic()
    if whole_group:
        os.killpg(child.pid, signal.SIGINT)  # as Ctrl-C in a shell
    else:
        os.kill(child.pid, signal.SIGINT)  # the executables are not told
    out, err = child.communicate(timeout=60)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err), (
        time.monotonic() - sent
    )


def processes_using(folder: Path) -> list[str]:
    """Command lines of the live processes that name ``folder`` (executables of its runs)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(folder).encode() in word for word in words):
            found.append(" ".join(w.decode(errors="replace") for w in words))
    return found


def run_files(folder: Path, kind: str) -> set[str]:
    return {p.name for p in (folder / kind).iterdir()}


def ctrl_c_once_running(folder: Path) -> None:
    """SIGINT to this process's main thread once an executable has run in ``folder`` a while."""

    def send() -> None:
        while not processes_using(folder):
            time.sleep(0.02)
        time.sleep(0.3)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=send, daemon=True).start()


@pytest.mark.parametrize("whole_group", [True, False], ids=["process-group", "python-only"])
def test_ctrl_c_keeps_the_finished_runs_and_resume_completes_the_rest(
    model, tmp_path, whole_group
):
    plan = specs(RUNS)
    runset = RunSet(model, plan, out_dir=tmp_path / "set", root_seed=5)
    folder = runset.out_dir
    done, seconds = interrupt_after_some_runs(
        [sys.executable, "-c", RESUME_IN_CHILD, str(folder)], folder, whole_group
    )

    # 1: Python ends by SIGINT only for KeyboardInterrupt itself, not for its subclasses
    assert done.returncode == 1, done.stderr
    assert seconds < 15
    records = read_manifest(folder)
    kept = sorted(records)
    assert 0 < len(kept) < RUNS, "the interrupt should land mid-way"
    assert {r.status for r in records.values()} == {"ok"}
    message = (
        f"stanflow.outdir.Interrupted: interrupted; kept {len(kept)} finished "
        f"run{'' if len(kept) == 1 else 's'} of {RUNS} "
        f"in {folder}; resume with: stanflow.runs.resume('{folder}'), or the same call again "
        "with the same seed and out_dir"
    )
    err = done.stderr
    assert err.splitlines()[-1] == message
    assert err.count("Traceback") == 1  # one exception, not a chain
    assert err[: err.index("Traceback")].endswith("\n")  # the progress bar ended its line
    assert processes_using(folder) == []
    # The kept runs' files, complete, and nothing of the runs cut short.
    assert run_files(folder, "output") == {f"run-{i:05d}.csv" for i in kept}
    assert run_files(folder, "logs") == {f"run-{i:05d}.1.log" for i in kept}
    assert not any((folder / "staging").iterdir())
    stamps = {i: (folder / "output" / f"run-{i:05d}.csv").stat().st_mtime_ns for i in kept}

    resumed = resume(folder, progress=False)
    assert resumed.missing() == []
    assert len((folder / MANIFEST_FILE).read_text().splitlines()) == RUNS  # none run twice
    for i, stamp in stamps.items():
        assert (folder / "output" / f"run-{i:05d}.csv").stat().st_mtime_ns == stamp
    later = max(set(range(RUNS)) - set(kept))
    alone = RunSet(
        model,
        [RunSpec(data=plan[later].data, args=plan[later].args, seed=runset.plan.runs[later].seed)],
        out_dir=tmp_path / "alone",
    )
    (reference,) = list(alone.run(progress=False))
    by_index = {result.index: result for result in resumed.results()}
    assert np.array_equal(by_index[later].draws().values, reference.draws().values)


@pytest.mark.parametrize("where", ["local", "dask"])
def test_a_run_ending_as_ctrl_c_lands_is_recorded_not_lost(model, tmp_path, monkeypatch, where):
    # the Ctrl-C lands after a run's files are in place, before its manifest line
    append = Manifest.append
    calls = []

    def ctrl_c_at_the_first_record(manifest, outcome):
        calls.append(outcome.index)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return append(manifest, outcome)

    monkeypatch.setattr(Manifest, "append", ctrl_c_at_the_first_record)
    runset = RunSet(model, specs(6, spin=3_000), out_dir=tmp_path / "set", root_seed=4)
    folder = runset.out_dir
    with contextlib.ExitStack() as stack:
        executor = None
        if where == "dask":
            cluster = stack.enter_context(distributed.LocalCluster(
                n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None))
            executor = DaskExecutor(stack.enter_context(distributed.Client(cluster)))
        with pytest.raises(outdir.Interrupted):
            list(runset.run(executor, chunk_size=2, progress=False))

    records = read_manifest(folder)
    assert calls[0] in records  # the run whose record the Ctrl-C cut off
    assert {r.status for r in records.values()} == {"ok"}
    assert run_files(folder, "output") == {f"run-{i:05d}.csv" for i in records}
    assert run_files(folder, "logs") == {f"run-{i:05d}.1.log" for i in records}
    monkeypatch.setattr(Manifest, "append", append)
    assert resume(folder, progress=False).missing() == []
    assert len((folder / MANIFEST_FILE).read_text().splitlines()) == 6  # none run twice


def test_leaving_the_loop_early_stops_the_runs_and_keeps_the_finished(model, tmp_path):
    runset = RunSet(model, specs(8), out_dir=tmp_path / "set", root_seed=8)
    folder = runset.out_dir
    runs = runset.run(chunk_size=2, progress=False)
    result = next(runs)
    del runs  # as a Ctrl-C in a loop's body does: the run set is closed where it waits
    assert result.ok
    assert processes_using(folder) == []
    records = read_manifest(folder)
    assert result.index in records and len(records) < 8
    assert run_files(folder, "logs") == {f"run-{i:05d}.1.log" for i in records}
    assert run_files(folder, "output") == {f"run-{i:05d}.csv" for i in records}


def test_ctrl_c_in_a_workflow_running_a_run_set_is_the_workflow_s_one_line(model, tmp_path):
    out = tmp_path / "out"
    RunSet(model, specs(RUNS), out_dir=out / "runs", root_seed=6)
    script = tmp_path / "runs_workflow.py"
    script.write_text(WORKFLOW)
    done, _ = interrupt_after_some_runs(
        [sys.executable, str(script), "--out", str(out)], out / "runs", whole_group=True
    )

    assert done.returncode == outdir.EXIT_INTERRUPTED, done.stderr
    files = len(outdir.complete_files(out))
    line = (
        f"runs_workflow.py: interrupted; kept {files} complete files in {out}; "
        f"run again with: stanflow run runs-workflow --out {out}"
    )
    err = done.stderr
    assert err.splitlines()[-1] == line
    assert err[: err.rindex(line)].endswith("\n")  # the progress bar ended its line
    assert "Traceback" not in err and "stanflow.runs.resume" not in err
    assert processes_using(out) == []


def test_ctrl_c_stops_the_runs_of_a_dask_cluster_at_once(model, tmp_path):
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        runset = RunSet(model, specs(8, spin=45_000), out_dir=tmp_path / "set", root_seed=7)
        folder = runset.out_dir
        # chunks of 4 runs of about a second each: a task left alone runs for seconds
        runs = runset.run(DaskExecutor(client), chunk_size=4, progress=False)
        ctrl_c_once_running(folder)
        with pytest.raises(outdir.Interrupted) as stopped:
            list(runs)
        stopped_at = time.monotonic()
        assert str(stopped.value).startswith("interrupted; kept 0 finished runs of 8 in ")
        while processes_using(folder) and time.monotonic() < stopped_at + 10:
            time.sleep(0.05)
        assert time.monotonic() - stopped_at < 3, "the workers' runs went on"


TI_DATA = {
    "d": 1,
    "n_base_params": 2,
    "base_params": [0.0, 1.0],
    "n_target_params": 3,
    "target_params": [2.0, 0.7, 1.5],
}


@pytest.mark.parametrize("kept", [True, False], ids=["its-out-dir", "a-temporary-folder"])
def test_a_method_s_run_set_says_kept_only_where_its_folder_stays(
    qpath_gaussian_model, tmp_path, monkeypatch, kept
):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where a temporary folder goes
    out_dir = tmp_path / "ti" if kept else None
    ctrl_c_once_running(tmp_path)
    with pytest.raises(KeyboardInterrupt) as stopped:
        thermodynamic_integration_stan(
            qpath_gaussian_model, TI_DATA, np.linspace(0, 1, 21), chains=1, draws=50_000,
            warmup=200, seed=1, out_dir=out_dir,
        )
    if kept:
        assert isinstance(stopped.value, outdir.Interrupted)
        assert re.fullmatch(
            rf"interrupted; kept \d+ finished runs? of 21 in {re.escape(str(out_dir))}; "
            r"resume with: .*",
            str(stopped.value),
        )
    else:  # the folder is gone: nothing to resume, a plain KeyboardInterrupt
        assert type(stopped.value) is KeyboardInterrupt
        assert list(scratch.iterdir()) == []
    assert processes_using(tmp_path) == []
