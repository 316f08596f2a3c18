"""Chunk running and local scheduling, with stand-in executables.

The stand-ins are small scripts that speak the driver's batch protocol (or just
sleep), so that crashes, hangs and the core accounting can be provoked at will;
``test_runs_e2e.py`` runs the same code against real compiled models.
"""

from __future__ import annotations

import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from stanflow.runs.batch import run_chunk
from stanflow.runs.executors import LocalExecutor
from stanflow.runs.jobs import Chunk, Job

# Speaks `<exe> batch JOBS`: each job's first argument says what to do.
FAKE_BATCH = """\
#!{python}
import json, os, sys, time
jobs_path = sys.argv[2]
with open(os.environ["FAKE_LAUNCHES"], "a") as log:
    log.write(jobs_path + "\\n")
print("some text that is not a report line", flush=True)
for index, line in enumerate(open(jobs_path)):
    job = json.loads(line)
    action = job["args"][0]
    with open(job["console"], "w") as console:
        console.write("console of " + action + "\\n")
    if action == "crash":
        sys.exit(3)
    if action == "hang":
        time.sleep(60)
    code = 1 if action == "fail" else 0
    for path in job["args"][1:]:
        open(path, "w").write("draws\\n")
    print(f"stanflow-batch: {{index}} {{code}}", flush=True)
"""

# One process per job: records when it starts and ends.
FAKE_SINGLE = """\
#!/bin/sh
echo "start $(date +%s.%N) $2" >> "$1"
sleep 0.4
echo "end $(date +%s.%N) $2" >> "$1"
"""


def script(path: Path, text: str) -> str:
    path.write_text(text.format(python=sys.executable) if "{python}" in text else text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def make_job(tmp_path: Path, index: int, action: str, writes: bool = False) -> Job:
    staged = (str(tmp_path / f"staged-{index}.csv"),) if writes else ()
    outputs = (str(tmp_path / f"out-{index}.csv"),) if writes else ()
    return Job(
        index=index,
        attempt=1,
        args=(action, *staged),
        console=str(tmp_path / f"{index}.log"),
        staged=staged,
        outputs=outputs,
    )


def test_batch_process_crash_and_hang_are_reported_and_the_rest_run(
    tmp_path, monkeypatch
):
    launches = tmp_path / "launches"
    monkeypatch.setenv("FAKE_LAUNCHES", str(launches))
    exe = script(tmp_path / "fake", FAKE_BATCH)
    actions = ["ok", "crash", "ok", "hang", "ok", "fail"]
    jobs = tuple(
        make_job(tmp_path, i, a, writes=a == "ok") for i, a in enumerate(actions)
    )
    chunk = Chunk(exe, True, 1, 1.5, jobs, str(tmp_path))
    outcomes = []
    run_chunk(chunk, outcomes.append)
    by_index = {o.index: o for o in outcomes}
    assert [o.index for o in outcomes] == list(range(6))
    assert [by_index[i].status for i in range(6)] == [
        "ok",
        "failed",
        "ok",
        "timeout",
        "ok",
        "failed",
    ]
    assert by_index[1].exit_code == 3
    assert "exit code 3" in by_index[1].message
    assert "console of crash" in by_index[1].message
    assert "some text that is not a report line" in by_index[1].message
    assert by_index[3].exit_code is None and "console of hang" in by_index[3].message
    assert by_index[5].exit_code == 1 and "console of fail" in by_index[5].message
    # After the crash and after the hang, the remaining jobs went to a new process.
    assert len(launches.read_text().splitlines()) == 3
    for i in (0, 2, 4):
        assert Path(jobs[i].outputs[0]).read_text() == "draws\n"
        assert not Path(jobs[i].staged[0]).exists()
    assert not list(tmp_path.glob("batch-*.jsonl"))


def test_success_without_its_output_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LAUNCHES", str(tmp_path / "launches"))
    exe = script(tmp_path / "fake", FAKE_BATCH)
    job = make_job(tmp_path, 0, "ok")
    job = Job(0, 1, ("ok",), job.console, (str(tmp_path / "never.csv"),), ("x.csv",))
    outcomes = []
    run_chunk(Chunk(exe, True, 1, None, (job,), str(tmp_path)), outcomes.append)
    assert outcomes[0].status == "error" and "never.csv" in outcomes[0].message


def test_an_executable_that_cannot_start_fails_every_job(tmp_path):
    jobs = tuple(make_job(tmp_path, i, "ok") for i in range(3))
    for batch in (True, False):
        outcomes = []
        chunk = Chunk(str(tmp_path / "missing"), batch, 1, None, jobs, str(tmp_path))
        run_chunk(chunk, outcomes.append)
        assert [(o.index, o.status) for o in outcomes] == [
            (i, "error") for i in range(3)
        ]
        assert "missing" in outcomes[0].message


def test_stop_kills_a_running_chunk_without_reports(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LAUNCHES", str(tmp_path / "launches"))
    exe = script(tmp_path / "fake", FAKE_BATCH)
    jobs = (make_job(tmp_path, 0, "hang"), make_job(tmp_path, 1, "ok"))
    outcomes, stop = [], threading.Event()
    worker = threading.Thread(
        target=run_chunk,
        args=(Chunk(exe, True, 1, None, jobs, str(tmp_path)), outcomes.append, stop),
    )
    worker.start()
    time.sleep(0.5)
    stop.set()
    worker.join(timeout=5)
    assert not worker.is_alive()
    assert outcomes == []


def max_cores_in_use(log: Path, cores_of: dict[str, int]) -> int:
    """Most cores busy at once, from the stand-in's start/end lines."""
    events = []
    for line in log.read_text().splitlines():
        kind, when, name = line.split()
        events.append((float(when), 0 if kind == "end" else 1, cores_of[name]))
    busy = most = 0
    for _, starts, cores in sorted(events):
        busy += cores if starts else -cores
        most = max(most, busy)
    return most


@pytest.mark.parametrize(
    ("chunk_cores", "expected"),
    [
        ([1, 1, 1, 1], 2),  # single-threaded runs fill both cores
        ([2, 2, 2], 2),  # two-thread runs one at a time
        ([1, 2, 1, 1], 2),  # mixed: never more than two cores
        ([4, 1], 4),  # a run needing more than there are runs alone
    ],
)
def test_local_executor_keeps_cores_busy_without_oversubscribing(
    tmp_path, chunk_cores, expected
):
    exe = script(tmp_path / "fake.sh", FAKE_SINGLE)
    log = tmp_path / "log"
    executor = LocalExecutor(cores=2)
    executor.start([])
    cores_of = {}
    for i, cores in enumerate(chunk_cores):
        job = Job(i, 1, (str(log), f"job{i}"), str(tmp_path / f"{i}.log"), (), ())
        cores_of[f"job{i}"] = cores
        executor.submit(Chunk(exe, False, cores, None, (job,), str(tmp_path)))
    try:
        statuses = sorted((o.index, o.status) for o in executor.outcomes())
    finally:
        executor.stop()
    assert statuses == [(i, "ok") for i in range(len(chunk_cores))]
    assert max_cores_in_use(log, cores_of) == expected


def test_local_executor_validates_cores():
    with pytest.raises(ValueError, match="cores"):
        LocalExecutor(cores=0)
    assert LocalExecutor().cores >= 1
