"""The compiled-model cache verifies what it serves and rebuilds what is damaged.

The first tests drive :func:`stanflow.models.cache.ensure_entry` with a plain
Python build (milliseconds). The end-to-end tests compile one tiny program
once per module, as an executable and as a model library, in a scratch
``$STANFLOW_HOME`` whose toolchain is a symlink to the real one; every test
starts from a copy of those two entries, damages it as a crash, a full disk or
a killed compile would, and checks that the next call rebuilds it (one
compile) and that the result samples or evaluates the closed form. Libraries
are loaded in child processes: a damaged library must not kill the process,
and a fresh process maps what is on disk now, not what was loaded before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stanflow.models import cache, compile_model
from stanflow.models.cache import FILES, MANIFEST, CompileError, ensure_entry
from stanflow.toolchain import installer

NOTICE = "rebuilding the cache entry"

TINY = """\
data {
  real y;
}
parameters {
  real mu;
  real<lower=0> tau;
}
model {
  mu ~ normal(0, 1);
  y ~ normal(mu, 1);
  tau ~ exponential(1);
}
"""
Y = 1.2


# -- ensure_entry with a plain Python build ---------------------------------------------


@pytest.fixture
def scratch_cache(tmp_path, monkeypatch) -> Path:
    """An empty ``$STANFLOW_HOME``; returns its ``models`` folder."""
    monkeypatch.setenv("STANFLOW_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / "models"


class Builds:
    """A build writing ``artefact`` (4 KiB) and ``program.txt``; counts its calls."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, folder: Path) -> None:
        self.count += 1
        (folder / "artefact").write_bytes(bytes(range(256)) * 16)
        (folder / "program.txt").write_text("the program\n")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _assert_sound(entry: Path) -> None:
    """The manifest records exactly the entry's files with their true sizes and digests."""
    record = json.loads((entry / MANIFEST).read_text())[FILES]
    files = {p.name for p in entry.iterdir()} - {MANIFEST}
    assert set(record) == files
    for name, expected in record.items():
        assert expected == {"size": (entry / name).stat().st_size,
                            "sha256": _sha256(entry / name)}


def test_entry_records_sizes_and_digests_of_its_files(scratch_cache):
    build = Builds()
    entry = ensure_entry("a" * 32, {"name": "x"}, build)

    assert entry == scratch_cache / ("a" * 32)
    _assert_sound(entry)
    manifest = json.loads((entry / MANIFEST).read_text())
    assert manifest["key"] == "a" * 32 and manifest["name"] == "x"
    assert ensure_entry("a" * 32, {"name": "x"}, build) == entry
    assert build.count == 1


@pytest.mark.parametrize(
    ("damage", "fault"),
    [
        (lambda e: os.truncate(e / "artefact", 100), "artefact has 100 bytes"),
        (lambda e: (e / "artefact").write_bytes(b""), "artefact has 0 bytes"),
        (lambda e: (e / "program.txt").unlink(), "program.txt is missing"),
        (lambda e: (e / "program.txt").write_text("the PROGRAM\n"), "sha256"),
        (lambda e: (e / MANIFEST).write_text('{"key": '), "unreadable"),
        (lambda e: (e / MANIFEST).unlink(), f"no {MANIFEST}"),
    ],
    ids=["truncated", "zero-byte", "missing", "same-size-edit", "bad-manifest", "no-manifest"],
)
def test_damaged_entry_is_rebuilt_once_with_a_notice(
    scratch_cache, caplog, monkeypatch, damage, fault
):
    build = Builds()
    entry = ensure_entry("b" * 32, {}, build)
    damage(entry)
    monkeypatch.setattr(cache, "_VERIFIED", set())  # as the next process finds it

    with caplog.at_level(logging.WARNING, logger="stanflow.models.cache"):
        assert ensure_entry("b" * 32, {}, build) == entry
        assert ensure_entry("b" * 32, {}, build) == entry

    assert build.count == 2
    notices = [r.getMessage() for r in caplog.records]
    assert len(notices) == 1
    assert NOTICE in notices[0] and str(entry) in notices[0] and fault in notices[0]
    assert "\n" not in notices[0]
    _assert_sound(entry)
    assert not list(scratch_cache.glob(".tmp-*"))


def test_entry_built_before_records_existed_is_rebuilt(scratch_cache, caplog):
    build = Builds()
    entry = ensure_entry("c" * 32, {"name": "x"}, build)
    manifest = json.loads((entry / MANIFEST).read_text())
    del manifest[FILES]  # as stanflow wrote manifests before it recorded files
    (entry / MANIFEST).write_text(json.dumps(manifest))

    with caplog.at_level(logging.WARNING, logger="stanflow.models.cache"):
        ensure_entry("c" * 32, {"name": "x"}, build)

    assert build.count == 2
    assert "does not record its files' sizes and sha256 digests" in caplog.text
    _assert_sound(entry)


def test_digests_are_hashed_once_per_process_until_a_file_changes(scratch_cache, monkeypatch):
    build = Builds()
    entry = ensure_entry("d" * 32, {}, build)
    hashed: list[str] = []
    real = cache._sha256

    def counting(path: Path) -> str:
        hashed.append(path.name)
        return real(path)

    monkeypatch.setattr(cache, "_sha256", counting)
    monkeypatch.setattr(cache, "_VERIFIED", set())  # as the next process finds it
    for _ in range(5):
        ensure_entry("d" * 32, {}, build)
    assert sorted(hashed) == ["artefact", "program.txt"]

    # A same-size edit changes the modification time: hashed again, caught, rebuilt.
    data = (entry / "artefact").read_bytes()
    (entry / "artefact").write_bytes(data[::-1])
    os.utime(entry / "artefact", ns=(1, 1))
    ensure_entry("d" * 32, {}, build)
    assert build.count == 2
    assert (entry / "artefact").read_bytes() == data


def test_leftovers_of_killed_builds_of_that_key_only_are_removed(scratch_cache):
    build = Builds()
    key, other = "e" * 32, "f" * 32
    killed = scratch_cache / f".tmp-{key}-killed"
    (killed / "sub").mkdir(parents=True)
    (killed / "sub" / "model.o").write_bytes(b"\0" * 10)  # a partial object file
    elsewhere = scratch_cache / f".tmp-{other}-running"
    elsewhere.mkdir()

    ensure_entry(key, {}, build)

    assert not killed.exists()
    assert elsewhere.is_dir()
    assert [p.name for p in scratch_cache.glob(".tmp-*")] == [elsewhere.name]


def test_entry_failing_its_check_is_rebuilt_once_then_refused(scratch_cache, caplog):
    build = Builds()
    entry = ensure_entry("0" * 32, {}, build)
    (entry / "broken").touch()  # not in the record: only the check looks at it

    def loads(folder: Path) -> str | None:
        return "artefact does not load (broken)" if (folder / "broken").exists() else None

    with caplog.at_level(logging.WARNING, logger="stanflow.models.cache"):
        assert ensure_entry("0" * 32, {}, build, check=loads) == entry
    assert build.count == 2
    assert "artefact does not load (broken)" in caplog.text
    assert not (entry / "broken").exists()

    def refuses(folder: Path) -> str:
        return "artefact does not load (still broken)"

    with pytest.raises(CompileError, match="just built is unusable: artefact does not load"):
        ensure_entry("1" * 32, {}, build, check=refuses)
    assert build.count == 3  # built once, not in a loop
    assert not (scratch_cache / ("1" * 32)).exists()
    assert not list(scratch_cache.glob(".tmp-*"))


# -- the real artefacts -----------------------------------------------------------------


@pytest.fixture(scope="module")
def scratch_home(cmdstan, tmp_path_factory) -> Path:
    """A ``$STANFLOW_HOME`` of its own whose toolchain is a symlink to the real one."""
    real = installer.install(progress=False)
    home = tmp_path_factory.mktemp("stanflow-home")
    (home / real.name).symlink_to(real, target_is_directory=True)
    patch = pytest.MonkeyPatch()
    patch.setenv("STANFLOW_HOME", str(home))
    yield home
    patch.undo()


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("program") / "tiny.stan"
    path.write_text(TINY)
    return path


def _child(script: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh Python with this ``$STANFLOW_HOME``."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True, text=True, timeout=600, env=dict(os.environ), check=False,
    )


COMPILE_LIBRARY = """
    import sys
    from stanflow.models import compile_library
    print(compile_library(sys.argv[1]))
"""

LOG_DENSITY = """
    import json, sys
    import numpy as np
    from stanflow.models import load
    model = load(sys.argv[1], {"y": float(sys.argv[2])})
    theta = np.array([0.3, np.log(1.7)])
    print(json.dumps(model.log_density(theta, propto=False, jacobian=True)))
"""


def _closed_form_log_density(mu: float, tau: float) -> float:
    """TINY's log density at (mu, log tau), with all constants and the Jacobian."""
    def normal(x: float, mean: float) -> float:
        return -0.5 * math.log(2 * math.pi) - 0.5 * (x - mean) ** 2

    return normal(mu, 0.0) + normal(Y, mu) - tau + math.log(tau)


@pytest.fixture(scope="module")
def pristine(scratch_home, program, tmp_path_factory) -> dict[str, Path]:
    """The executable and library entries of TINY, compiled once, and their copies."""
    exe_entry = Path(compile_model(program).exe_file).parent
    done = _child(COMPILE_LIBRARY, str(program))  # not loaded in this process
    assert done.returncode == 0, done.stderr
    library_entry = Path(done.stdout.strip().splitlines()[-1]).parent
    copies = tmp_path_factory.mktemp("pristine")
    for entry in (exe_entry, library_entry):
        shutil.copytree(entry, copies / entry.name)
    return {"exe": exe_entry, "library": library_entry, "copies": copies}


@pytest.fixture
def entries(pristine) -> dict[str, Path]:
    """The two entries as compiled (fresh copies, fresh inodes)."""
    for kind in ("exe", "library"):
        entry = pristine[kind]
        shutil.rmtree(entry, ignore_errors=True)
        shutil.copytree(pristine["copies"] / entry.name, entry)
    return pristine


def _entry_notices(caplog: pytest.LogCaptureFixture, entry: Path) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if NOTICE in r.getMessage() and str(entry) in r.getMessage()]


@pytest.mark.e2e
def test_truncated_executable_is_rebuilt_and_samples(entries, program, caplog, tmp_path):
    entry = entries["exe"]
    os.truncate(entry / "tiny", (entry / "tiny").stat().st_size // 2)
    killed = entry.parent / f".tmp-{entry.name}-killed"  # a compile killed earlier
    killed.mkdir()
    (killed / "tiny.o").write_bytes(b"\0" * 100)

    with caplog.at_level(logging.WARNING, logger="stanflow.models.cache"):
        model = compile_model(program)

    (notice,) = _entry_notices(caplog, entry)
    assert "tiny has" in notice and "its record says" in notice
    assert not killed.exists()
    _assert_sound(entry)
    fit = model.sample(data={"y": Y}, chains=1, iter_warmup=300, iter_sampling=1000, seed=3,
                       show_progress=False, output_dir=tmp_path)
    # Posterior: mu ~ normal(Y / 2, sqrt(1/2)), tau ~ exponential(1), independent.
    assert abs(fit.stan_variable("mu").mean() - Y / 2) < 0.15
    assert abs(fit.stan_variable("tau").mean() - 1.0) < 0.25


@pytest.mark.e2e
def test_executable_entry_without_a_record_is_rebuilt(entries, program, caplog):
    entry = entries["exe"]
    manifest = json.loads((entry / MANIFEST).read_text())
    del manifest[FILES]
    (entry / MANIFEST).write_text(json.dumps(manifest, indent=2))

    with caplog.at_level(logging.WARNING, logger="stanflow.models.cache"):
        model = compile_model(program)

    (notice,) = _entry_notices(caplog, entry)
    assert "does not record its files" in notice
    assert Path(model.exe_file) == entry / "tiny"
    _assert_sound(entry)


@pytest.mark.e2e
def test_zero_byte_library_is_rebuilt_and_evaluates(entries, program):
    entry = entries["library"]
    os.truncate(entry / "tiny_model.so", 0)

    done = _child(LOG_DENSITY, str(program), str(Y))

    assert done.returncode == 0, done.stderr
    assert NOTICE in done.stderr and str(entry) in done.stderr
    assert "tiny_model.so has 0 bytes" in done.stderr
    assert json.loads(done.stdout) == pytest.approx(_closed_form_log_density(0.3, 1.7),
                                                    rel=1e-12)
    _assert_sound(entry)


@pytest.mark.e2e
def test_truncated_library_loaded_by_path_is_rebuilt_from_its_entry(entries):
    entry = entries["library"]
    library = entry / "tiny_model.so"
    os.truncate(library, 4096)

    done = _child(LOG_DENSITY, str(library), str(Y))

    assert done.returncode == 0, done.stderr
    assert NOTICE in done.stderr and "tiny_model.so has 4096 bytes" in done.stderr
    assert json.loads(done.stdout) == pytest.approx(_closed_form_log_density(0.3, 1.7),
                                                    rel=1e-12)
    _assert_sound(entry)


@pytest.mark.e2e
def test_library_that_does_not_load_is_rebuilt(entries, program):
    entry = entries["library"]
    library = entry / "tiny_model.so"
    # Garbage whose record matches: the files are "intact" but the loader refuses them.
    library.write_bytes(b"not a shared object\n" * 100)
    manifest = json.loads((entry / MANIFEST).read_text())
    manifest[FILES]["tiny_model.so"] = {"size": 2000, "sha256": _sha256(library)}
    (entry / MANIFEST).write_text(json.dumps(manifest))

    done = _child(LOG_DENSITY, str(program), str(Y))

    assert done.returncode == 0, done.stderr
    assert NOTICE in done.stderr and "tiny_model.so does not load" in done.stderr
    assert json.loads(done.stdout) == pytest.approx(_closed_form_log_density(0.3, 1.7),
                                                    rel=1e-12)
    _assert_sound(entry)


@pytest.mark.e2e
def test_damaged_library_entry_with_a_damaged_program_is_refused(entries):
    entry = entries["library"]
    library = entry / "tiny_model.so"
    os.truncate(library, 0)
    stan = entry / "tiny.stan"
    stan.write_text(stan.read_text().replace("exponential(1)", "exponential(2)"))

    done = _child(LOG_DENSITY, str(library), str(Y))

    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: source: the cache entry")
    assert "its program cannot be recovered" in last
