"""The compiled-model cache verifies what it serves and rebuilds what is damaged.

The first tests drive :func:`stanflow.models.cache.ensure_entry` with a plain
Python build (milliseconds), and the lock that readers of a library's entry
share with its builders. The end-to-end tests compile one tiny program
once per module, as an executable and as a model library, in a scratch
``$STANFLOW_HOME`` whose toolchain is a symlink to the real one; every test
starts from a copy of those two entries, damages it as a crash, a full disk or
a killed compile would, and checks that the next call rebuilds it (one
compile) and that the result samples or evaluates the closed form; entries of
an older cache format and intact libraries that the loader refuses are left
alone. Libraries are loaded in child processes: a damaged library must not
kill the process, and a fresh process maps what is on disk now, not what was
loaded before.
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
import time
from pathlib import Path

import pytest

from stanflow.models import cache, cache_key, compile_model, libraries
from stanflow.models.cache import (
    CACHE_FORMAT,
    FILES,
    FORMAT,
    MANIFEST,
    CompileError,
    ensure_entry,
    key_lock,
)
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
    assert manifest[FORMAT] == CACHE_FORMAT
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


def test_entry_of_this_format_without_a_record_is_rebuilt(scratch_cache, caplog):
    build = Builds()
    entry = ensure_entry("c" * 32, {"name": "x"}, build)
    manifest = json.loads((entry / MANIFEST).read_text())
    del manifest[FILES]  # at a key of this format: an incomplete entry, not an old one
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


KEY_ARGS = {"name": "m", "toolchain": {"path": "/t"}, "cpp_options": {}, "stanc_options": {}}


def _key_before_formats(code: str, **fields) -> str:
    """The key stanflow gave a program before keys covered the cache format."""
    payload = json.dumps({"code": code, **fields}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def test_keys_cover_the_cache_format(monkeypatch):
    key = cache_key("model {\n}\n", **KEY_ARGS)
    # Entries of this format never land on those an older stanflow wrote and uses ...
    assert key != _key_before_formats("model {\n}\n", **KEY_ARGS)
    # ... and those of the next format will not land on these.
    monkeypatch.setattr(cache, "CACHE_FORMAT", CACHE_FORMAT + 1)
    assert cache_key("model {\n}\n", **KEY_ARGS) != key


@pytest.mark.parametrize("sound", [True, False], ids=["sound", "truncated"])
def test_entry_written_meanwhile_without_the_lock_is_checked_not_discarded(
    scratch_cache, caplog, sound
):
    """Something ignoring the lock (a copy of a cache) puts the entry in place while
    it is being built: a sound one is served, an unsound one replaced; neither is
    reported as just built and unusable."""
    key = "9" * 32
    theirs = ensure_entry(key, {"name": "theirs"}, Builds())
    aside = scratch_cache / "aside"
    shutil.copytree(theirs, aside)
    shutil.rmtree(theirs)
    if not sound:
        os.truncate(aside / "artefact", 10)
    build = Builds()

    def build_while_another_writes(folder: Path) -> None:
        build(folder)
        shutil.copytree(aside, scratch_cache / key)

    with caplog.at_level(logging.WARNING, logger="stanflow.models.cache"):
        entry = ensure_entry(key, {"name": "ours"}, build_while_another_writes)

    assert build.count == 1
    assert json.loads((entry / MANIFEST).read_text())["name"] == ("theirs" if sound else "ours")
    _assert_sound(entry)
    if sound:
        assert not caplog.records
    else:
        (notice,) = [r.getMessage() for r in caplog.records]
        assert "written meanwhile without its lock: artefact has 10 bytes" in notice
    assert not list(scratch_cache.glob(".tmp-*"))


def test_entry_not_matching_the_record_just_made_is_refused(scratch_cache, monkeypatch):
    build = Builds()
    recorded = cache._record_files

    def wrong_record(folder: Path) -> dict:
        record = recorded(folder)
        record["artefact"]["size"] += 1  # as if the build changed it after the record
        return record

    monkeypatch.setattr(cache, "_record_files", wrong_record)
    with pytest.raises(CompileError, match="just built is unusable: artefact has 4096 bytes"):
        ensure_entry("1" * 32, {}, build)
    assert build.count == 1  # built once, not in a loop
    assert not (scratch_cache / ("1" * 32)).exists()
    assert not list(scratch_cache.glob(".tmp-*"))


HOLDS_THE_LOCK = """
    import os, sys, time
    from stanflow.models.cache import key_lock
    entry, rebuilt, seconds, state = sys.argv[1:]
    with key_lock(os.path.basename(entry)):
        if state == "missing":
            os.rename(entry, entry + ".damaged")  # moved away to be rebuilt
        print("locked", flush=True)
        time.sleep(float(seconds))  # rebuilding
        if state == "damaged":
            os.rename(entry, entry + ".damaged")
        os.rename(rebuilt, entry)
"""


@pytest.mark.parametrize("state", ["missing", "damaged"])
def test_library_loaded_by_path_waits_for_a_rebuild_of_its_entry(
    scratch_cache, monkeypatch, state
):
    """Another process holds the entry's lock to rebuild it (the entry moved away,
    or still damaged in place): the library's path waits for the lock and serves
    the rebuilt entry, without rebuilding it too or calling it missing or damaged."""
    key = "2" * 32

    def build(folder: Path) -> None:
        (folder / "m.stan").write_text("the program\n")
        (folder / "m_model.so").write_bytes(b"\x7fELF" * 1000)

    entry = ensure_entry(key, {"name": "m"}, build)
    rebuilt = scratch_cache / "rebuilt"
    shutil.copytree(entry, rebuilt)
    if state == "damaged":
        os.truncate(entry / "m_model.so", 0)
    monkeypatch.setattr(libraries, "_rebuild", lambda *a: pytest.fail("the reader rebuilt it too"))
    seconds = 1.0
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLDS_THE_LOCK), str(entry), str(rebuilt),
         str(seconds), state],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline() == "locked\n", holder.stderr.read()
        started = time.monotonic()
        served = libraries._served(entry / "m_model.so")
        waited = time.monotonic() - started
    finally:
        holder.communicate(timeout=60)
    assert holder.returncode == 0
    assert served == entry / "m_model.so"
    assert waited > seconds / 2
    _assert_sound(entry)


def test_the_lock_readers_take_is_the_one_builders_hold(scratch_cache):
    """ensure_entry in another process waits while this one holds ``key_lock``."""
    key = "3" * 32
    script = f"""
        from stanflow.models.cache import ensure_entry
        ensure_entry({key!r}, {{}}, lambda folder: (folder / "f").write_text("x"))
        print("built", flush=True)
    """
    with key_lock(key):
        builder = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        time.sleep(1.5)
        assert builder.poll() is None and not (scratch_cache / key).exists()
    out, err = builder.communicate(timeout=60)
    assert builder.returncode == 0, err
    assert out == "built\n"
    _assert_sound(scratch_cache / key)


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


def _start(script: str, *args: str) -> subprocess.Popen:
    """Start ``script`` in a fresh Python with this ``$STANFLOW_HOME``."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
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


def _snapshot(entry: Path) -> dict[str, tuple[int, int, bytes]]:
    """Each file's inode, modification time and content, and the folder's inode."""
    files = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
             for p in entry.iterdir()}
    return {**files, ".": (entry.stat().st_ino, 0, b"")}


@pytest.mark.e2e
def test_intact_library_that_does_not_load_is_an_error_and_is_kept(entries, program):
    """Files matching their record but refused by the loader: the fault is the
    process's or the system's, so no rebuild, and the entry stays as it is."""
    entry = entries["library"]
    library = entry / "tiny_model.so"
    library.write_bytes(b"not a shared object\n" * 100)
    manifest = json.loads((entry / MANIFEST).read_text())
    manifest[FILES]["tiny_model.so"] = {"size": 2000, "sha256": _sha256(library)}
    (entry / MANIFEST).write_text(json.dumps(manifest))
    before = _snapshot(entry)

    for source in (program, library):
        done = _child(LOG_DENSITY, str(source), str(Y))

        assert done.returncode == 1
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith(f"ValueError: source: the model library {library} does not load: ")
        assert "invalid ELF header" in last  # the loader's own message
        assert "the entry is left as it is" in last
        assert NOTICE not in done.stderr
        assert _snapshot(entry) == before


@pytest.mark.e2e
def test_entries_of_an_older_format_are_left_alone(entries, program):
    """An entry as stanflow wrote it before the cache format was versioned (no
    record, its key without the format) beside the current one: compiling serves
    the current entry, loading the old library by its path serves it as it is,
    and neither touches it."""
    old = {}
    for kind in ("exe", "library"):
        current = entries[kind]
        manifest = json.loads((current / MANIFEST).read_text())
        fields = {"name": manifest["name"], "toolchain": manifest["toolchain"],
                  "cpp_options": manifest.get("cpp_options", {}),
                  "stanc_options": manifest["stanc_options"]}
        key = _key_before_formats((current / "tiny.stan").read_text(), **fields)
        old[kind] = current.parent / key
        shutil.rmtree(old[kind], ignore_errors=True)
        shutil.copytree(current, old[kind])
        for field in (FILES, FORMAT, "created"):
            del manifest[field]
        (old[kind] / MANIFEST).write_text(json.dumps({**manifest, "key": key}, indent=2))
    before = {kind: _snapshot(entry) for kind, entry in old.items()}

    model = compile_model(program)
    done = _child(LOG_DENSITY, str(old["library"] / "tiny_model.so"), str(Y))

    assert Path(model.exe_file) == entries["exe"] / "tiny"
    assert done.returncode == 0, done.stderr
    assert NOTICE not in done.stderr
    assert json.loads(done.stdout) == pytest.approx(_closed_form_log_density(0.3, 1.7),
                                                    rel=1e-12)
    assert {kind: _snapshot(entry) for kind, entry in old.items()} == before


@pytest.mark.e2e
def test_library_loaded_by_path_while_another_process_rebuilds_it(entries, program):
    """One process rebuilds a damaged library entry (from its program) while another
    loads the library by its path: the second waits for the rebuild, and both
    evaluate the closed form."""
    entry = entries["library"]
    library = entry / "tiny_model.so"
    os.truncate(library, 0)

    rebuilding = _start(LOG_DENSITY, str(program), str(Y))
    while entry.exists() and rebuilding.poll() is None:  # until it moves the entry away
        time.sleep(0.02)
    assert rebuilding.poll() is None, rebuilding.communicate()[1]
    loading = _start(LOG_DENSITY, str(library), str(Y))
    results = [proc.communicate(timeout=900) for proc in (rebuilding, loading)]

    for proc, (stdout, stderr) in zip((rebuilding, loading), results, strict=True):
        assert proc.returncode == 0, stderr
        assert json.loads(stdout) == pytest.approx(_closed_form_log_density(0.3, 1.7),
                                                   rel=1e-12)
    assert NOTICE in results[0][1] and NOTICE not in results[1][1]  # rebuilt once
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
