"""Faults of a run's output folder: read-only, full, Ctrl-C, two runs into one (stanflow.outdir).

Each test checks the one line on stderr, the exit code and that what the folder
held before is unchanged. A read-only or full disk is a real 1 MB tmpfs where
this process may mount one (root), and an injected ``OSError`` everywhere.
Stand-in workflows (in a temporary workflows folder) make the runs take
milliseconds; one e2e test interrupts the real ``eight-schools --quick``.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stanflow import cli, outdir, workflows
from stanflow.experiment import Cell, CellRun, Experiment

WRITER = '''
"""Writes notes.txt, meets the fault the test asks for, then writes draws.nc if asked."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.idata import save
from stanflow.workflows import main

DESCRIPTION = "Stand-in that writes files"


def run(out: Path, quick: bool) -> dict:
    (out / "notes.txt").write_text("notes\\n")
    fault = os.environ.get("FAKE_FAULT", "")
    if fault == "fill":
        with open(os.environ["FAKE_FILLER"], "wb", buffering=0) as filler:
            try:
                while True:
                    filler.write(b"x" * 4096)
            except OSError as error:
                assert error.errno == 28
    if fault == "readonly":
        subprocess.run(["mount", "-o", "remount,ro", os.environ["FAKE_MOUNT"]], check=True)
    if os.environ.get("FAKE_DRAWS"):
        draws = np.random.default_rng(1).normal(size=(4, int(os.environ["FAKE_DRAWS"])))
        posterior = xr.Dataset({"x": (("chain", "draw"), draws)})
        save(arviz_compat.build({"posterior": posterior}), out / "draws.nc")
    return {"done": True}


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
'''

PIECES = '''
"""Two cells (logged as computed), then waits for FAKE_RELEASE to exist."""
import os
import sys
import time
from pathlib import Path

from stanflow.experiment import Cell, Experiment
from stanflow.workflows import main

DESCRIPTION = "Stand-in with two cells that then waits"


def compute(run) -> dict:
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(f"computed {run.params['i']}\\n")
    return {"value": run.params["i"]}


def summarise(settings, records) -> dict:
    Path(os.environ["FAKE_STARTED"]).touch()
    deadline = time.monotonic() + 60
    while not Path(os.environ["FAKE_RELEASE"]).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return {"values": [record["value"] for record in records.values()]}


EXPERIMENT = Experiment(settings={"quick": {}, "full": {}}, seed=1, compute=compute,
                        cells=lambda settings: [Cell(f"piece-{i}", {"i": i}) for i in (1, 2)],
                        summarise=summarise)


def run(out: Path, quick: bool) -> dict:
    return EXPERIMENT.run(out, quick)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
'''

BOOT = (
    "import sys; from pathlib import Path; from stanflow import cli, workflows; "
    "workflows.WORKFLOWS_DIR = Path(sys.argv[1]); sys.exit(cli.main(sys.argv[2:]))"
)
"""``python -c BOOT WORKFLOWS_DIR run NAME ...``: the real command line, stand-in workflows."""


@pytest.fixture
def scripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in workflows ``writer`` and ``pieces``, as the registry's folder."""
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "writer.py").write_text(WRITER)
    (folder / "pieces.py").write_text(PIECES)
    monkeypatch.setattr(workflows, "WORKFLOWS_DIR", folder)
    return folder


@pytest.fixture
def fake_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Where the ``pieces`` stand-in logs, says it started, and looks for its release."""
    files = {
        "FAKE_LOG": tmp_path / "log.txt",
        "FAKE_STARTED": tmp_path / "started",
        "FAKE_RELEASE": tmp_path / "release",
    }
    for name, path in files.items():
        monkeypatch.setenv(name, str(path))
    return {name: str(path) for name, path in files.items()}


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 1 MiB tmpfs at ``tmp_path/disk``, unmounted afterwards; skipped where mount fails."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


def _remount_read_only(mount_point: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], check=True)


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too, but the lock of a run) and its bytes."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != outdir.LOCK_FILE
    }


def _old_outputs(out: Path) -> dict[str, bytes]:
    """Fill ``out`` as an earlier run left it; return its snapshot."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text('{"old": true}\n')
    (out / "draws.nc").write_bytes(b"an earlier run's draws")
    return _snapshot(out)


def _one_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    return err.rstrip("\n")


def _boot(scripts: Path, *args: str, **options) -> subprocess.Popen:
    """``stanflow`` with the stand-in workflows, in its own process group (as from a shell)."""
    return subprocess.Popen(
        [sys.executable, "-c", BOOT, str(scripts), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, **options,
    )


def _wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


# -- a read-only folder -------------------------------------------------------------------------


def test_a_read_only_folder_is_refused_before_the_workflow_loads(small_disk, monkeypatch, capsys):
    out = small_disk / "out"
    before = _old_outputs(out)
    _remount_read_only(small_disk)
    monkeypatch.setattr(workflows, "run_workflow", lambda *a, **k: pytest.fail("it ran"))

    assert cli.main(["run", "eight-schools", "--quick", "--out", str(out)]) == 1
    assert _one_line(capsys) == (
        f"stanflow run: --out {out}: cannot write in it (Read-only file system)"
    )
    assert cli.main(["run", "eight-schools", "--out", str(small_disk / "new")]) == 1
    assert _one_line(capsys) == (
        f"stanflow run: --out {small_disk / 'new'}: "
        "cannot create the output folder (Read-only file system)"
    )
    assert _snapshot(out) == before


def test_an_unwritable_folder_is_refused_by_injection(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    before = _old_outputs(out)

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(outdir.tempfile, "TemporaryFile", read_only)
    monkeypatch.setattr(workflows, "run_workflow", lambda *a, **k: pytest.fail("it ran"))
    assert cli.main(["run", "eight-schools", "--out", str(out)]) == 1
    assert _one_line(capsys) == (
        f"stanflow run: --out {out}: cannot write in it (Read-only file system)"
    )
    assert _snapshot(out) == before


def test_a_folder_turned_read_only_during_the_run_keeps_its_files(
    small_disk, scripts, monkeypatch, capsys
):
    out = small_disk / "out"
    before = _old_outputs(out)
    monkeypatch.setattr(outdir, "MIN_FREE_BYTES", 1000)
    monkeypatch.setenv("FAKE_FAULT", "readonly")
    monkeypatch.setenv("FAKE_MOUNT", str(small_disk))

    assert cli.main(["run", "writer", "--out", str(out)]) == 1
    assert _one_line(capsys) == (
        f"stanflow run: cannot write {out / 'summary.json'}: Read-only file system; "
        f"kept 3 complete files in {out}"
    )
    assert _snapshot(out) == before | {"notes.txt": b"notes\n"}
    assert (out / outdir.LOCK_FILE).exists()  # the run's own, which a read-only disk keeps


# -- a full disk --------------------------------------------------------------------------------


def test_a_nearly_full_disk_is_refused_up_front(small_disk, monkeypatch, capsys):
    monkeypatch.setattr(workflows, "run_workflow", lambda *a, **k: pytest.fail("it ran"))
    assert cli.main(["run", "eight-schools", "--out", str(small_disk)]) == 1
    free = shutil.disk_usage(small_disk).free
    assert _one_line(capsys) == (
        f"stanflow run: --out {small_disk}: only 1.0 MB ({free} bytes) free; "
        "a run needs at least 64.0 MB"
    )
    assert list(small_disk.iterdir()) == []


def test_a_full_disk_when_the_summary_is_written_is_one_line(
    small_disk, scripts, monkeypatch, capsys
):
    out = small_disk / "out"
    before = _old_outputs(out)
    monkeypatch.setattr(outdir, "MIN_FREE_BYTES", 1000)
    monkeypatch.setenv("FAKE_FAULT", "fill")
    monkeypatch.setenv("FAKE_FILLER", str(small_disk / "filler"))  # beside the folder

    assert cli.main(["run", "writer", "--out", str(out)]) == 1
    assert _one_line(capsys) == (
        f"stanflow run: cannot write {out / 'summary.json'}: No space left on device; "
        f"kept 3 complete files in {out}"
    )
    assert _snapshot(out) == before | {"notes.txt": b"notes\n"}


def test_a_netcdf_file_larger_than_the_free_space_is_refused_before_writing(
    small_disk, scripts, monkeypatch, capsys
):
    out = small_disk / "out"
    before = _old_outputs(out)
    monkeypatch.setattr(outdir, "MIN_FREE_BYTES", 1000)
    monkeypatch.setenv("FAKE_DRAWS", "50000")  # 1.6 MB of random doubles: zlib cannot shrink them

    assert cli.main(["run", "writer", "--out", str(out)]) == 1
    line = _one_line(capsys)
    pattern = (
        rf"stanflow run: cannot write {re.escape(str(out / 'draws.nc'))}: No space left on "
        rf"device \(needs 1\.\d MB, 1\.0 MB free\); kept 3 complete files in {re.escape(str(out))}"
    )
    assert re.fullmatch(pattern, line), line
    assert _snapshot(out) == before | {"notes.txt": b"notes\n"}
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


NETCDF_ON_A_FULL_DISK = """
import sys
import numpy as np
import xarray as xr
from stanflow import arviz_compat
from stanflow.arviz_compat import container
from stanflow.atomic import WriteError
from stanflow.idata import save

container.require_space = lambda path, size: None  # skip the check: meet the disk itself
draws = np.random.default_rng(1).normal(size=(4, 50000))
results = arviz_compat.build({"posterior": xr.Dataset({"x": (("chain", "draw"), draws)})})
try:
    save(results, sys.argv[1])
except WriteError as error:
    print(error)
"""


def test_the_netcdf_writer_meets_a_full_disk_without_crashing(small_disk):
    # Written by the HDF5 library to the disk, this crashed the process (exit 139).
    (small_disk / "draws.nc").write_bytes(b"an earlier run's draws")
    done = subprocess.run(
        [sys.executable, "-c", NETCDF_ON_A_FULL_DISK, str(small_disk / "draws.nc")],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"cannot write {small_disk / 'draws.nc'}: No space left on device\n"
    assert _snapshot(small_disk) == {"draws.nc": b"an earlier run's draws"}


@pytest.mark.parametrize(
    ("draws", "failing"), [("", "summary.json"), ("100", "draws.nc")], ids=["summary", "netcdf"]
)
def test_an_injected_full_disk_is_one_line(
    scripts, tmp_path, monkeypatch, capsys, draws, failing
):
    out = tmp_path / "out"
    before = _old_outputs(out)
    monkeypatch.setenv("FAKE_DRAWS", draws)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)  # every atomic write flushes its file
    assert cli.main(["run", "writer", "--out", str(out)]) == 1
    assert _one_line(capsys) == (
        f"stanflow run: cannot write {out / failing}: No space left on device; "
        f"kept 3 complete files in {out}"
    )
    assert _snapshot(out) == before | {"notes.txt": b"notes\n"}


# -- Ctrl-C -------------------------------------------------------------------------------------


def test_ctrl_c_keeps_the_finished_pieces_and_the_resume_command_resumes(
    scripts, fake_env, tmp_path, capsys
):
    out = tmp_path / "out"
    run = _boot(scripts, "run", "pieces", "--quick", "--out", str(out))
    _wait_for(Path(fake_env["FAKE_STARTED"]).exists, "the two pieces")
    before = _snapshot(out)
    os.killpg(run.pid, signal.SIGINT)  # as Ctrl-C in a shell: the whole process group
    _, err = run.communicate(timeout=60)

    assert run.returncode == outdir.EXIT_INTERRUPTED == 130
    resume = f"stanflow run pieces --quick --out {out}"
    assert err.splitlines()[-1] == (
        f"stanflow run: interrupted; kept 2 finished pieces in {out}; resume with: {resume}"
    )
    assert "Traceback" not in err
    assert _snapshot(out) == before
    assert sorted(before) == ["runs/piece-1.json", "runs/piece-2.json"]
    assert not (out / outdir.LOCK_FILE).exists()

    Path(fake_env["FAKE_RELEASE"]).touch()
    assert cli.main(resume.split()[1:]) == 0
    assert Path(fake_env["FAKE_LOG"]).read_text() == "computed 1\ncomputed 2\n"  # not again
    assert {k: v for k, v in _snapshot(out).items() if k.startswith("runs/")} == before


def test_an_interrupted_experiment_counts_its_finished_cells(tmp_path):
    out = tmp_path / "out"

    def compute(run: CellRun) -> dict:
        if run.cell.name == "c":
            raise KeyboardInterrupt
        return {"value": 1}

    experiment = Experiment(settings={"quick": {}, "full": {}}, seed=1, compute=compute,
                            cells=lambda settings: [Cell("a"), Cell("b"), Cell("c")],
                            summarise=lambda settings, records: {})

    def run(out: Path, quick: bool) -> dict:
        return experiment.run(out, quick)

    with pytest.raises(outdir.Interrupted) as stopped:
        workflows.execute(run, out, quick=False)
    assert str(stopped.value) == (
        f"interrupted; kept 2 finished pieces in {out}; "
        f"resume with: stanflow run test-run-faults --out {out}"
    )
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["a.json", "b.json"]


@pytest.mark.e2e
def test_ctrl_c_during_eight_schools_is_one_line(cmdstan, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    run = subprocess.Popen(
        [sys.executable, "-m", "stanflow", "run", "eight-schools", "--quick", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    _wait_for(lambda: _sampling(run.pid), "the sampler", timeout=300)  # compiles if not cached
    os.killpg(run.pid, signal.SIGINT)
    _, err = run.communicate(timeout=120)

    assert run.returncode == 130, err
    # The fit is the workflow's one cell: a running cell finishes and is kept unless the signal
    # reached its sampler (then it fails, and nothing is kept).
    kept_fit = (out / "runs" / "nuts.json").is_file()
    assert err.splitlines()[-1] == (
        f"stanflow run: interrupted; kept {'1 finished piece' if kept_fit else '0 finished pieces'} "
        f"in {out}; resume with: stanflow run eight-schools --quick --out {out}"
    )
    kept = [p.name for p in outdir.complete_files(out)]
    assert "Traceback" not in err and "summary.json" not in kept
    assert (out / "notes.txt").read_text() == "mine\n"
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


def _sampling(pid: int) -> bool:
    """Whether a child of ``pid`` runs the eight schools executable."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, fields = text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and name.startswith("eight_schools"):
            return True
    return False


# -- two runs into one folder -------------------------------------------------------------------


def test_a_second_run_into_a_held_folder_is_refused_at_once_and_can_wait(
    scripts, fake_env, tmp_path, capsys
):
    out = tmp_path / "out"
    first = _boot(scripts, "run", "pieces", "--out", str(out))
    _wait_for(Path(fake_env["FAKE_STARTED"]).exists, "the first run's pieces")
    before = _snapshot(out)

    start = time.monotonic()
    assert cli.main(["run", "pieces", "--out", str(out)]) == 1
    assert time.monotonic() - start < 5
    line = _one_line(capsys)
    command = rf".* run pieces --out {re.escape(str(out))}"
    holder = rf"pid {first.pid} on \S+ \(since [0-9T:+-]+\): {command}"
    assert re.fullmatch(
        rf"stanflow run: --out {re.escape(str(out))}: in use by {holder}; "
        r"wait for it to end \(--wait\) or choose another --out",
        line,
    ), line
    assert _snapshot(out) == before

    waiting = _boot(scripts, "run", "pieces", "--out", str(out), "--wait")
    time.sleep(1.0)
    assert waiting.poll() is None  # still waiting for the first run
    Path(fake_env["FAKE_RELEASE"]).touch()
    assert first.wait(timeout=60) == 0
    _, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert f"stanflow: waiting for pid {first.pid} on " in err
    assert Path(fake_env["FAKE_LOG"]).read_text() == "computed 1\ncomputed 2\n"
    assert not (out / outdir.LOCK_FILE).exists()


def test_a_lock_file_left_by_a_killed_run_does_not_hold_the_folder(
    scripts, fake_env, tmp_path, capsys
):
    out = tmp_path / "out"
    out.mkdir()
    (out / outdir.LOCK_FILE).write_text('{"pid": 1, "host": "gone", "command": "x"}\n')
    Path(fake_env["FAKE_RELEASE"]).touch()
    assert cli.main(["run", "pieces", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["runs", "summary.json"]
