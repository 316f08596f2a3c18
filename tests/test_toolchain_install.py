"""Toolchain discovery and installation, without compiling any C++.

The build step is replaced by a fake (``installer.build_toolchain``) or driven
through a stub makefile generated here, and the httpstan wheel by a small zip
with the same layout, so these tests take seconds. Concurrency and crash
safety are tested with real processes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import cmdstanpy
import pytest

from stanflow.toolchain import (
    InvalidCmdStanError,
    ToolchainBuildError,
    ToolchainError,
    discovery,
    ensure,
    find_cmdstan,
    info,
    install,
    installer,
    layout,
    wheel,
)
from stanflow.toolchain.progress import BuildProgress, format_elapsed, output_of

REPO = Path(__file__).resolve().parents[1]
REAL_BUILD = installer.build_toolchain

STUB_MAKEFILE = """\
CMDSTAN_VERSION := 2.35.0
CXX = g++

print-%: ; @echo $* = $($*)

toolchain:
\t@echo "g++ -c src/driver/main.cpp -o build/driver.o"
\tmkdir -p bin
\tprintf '#!/bin/sh\\n' > bin/stansummary
\tprintf '#!/bin/sh\\n' > bin/diagnose
\tchmod +x bin/stansummary bin/diagnose
"""

FAILING_MAKEFILE = """\
CMDSTAN_VERSION := 2.35.0

toolchain:
\t@echo "g++ -c src/driver/main.cpp -o build/driver.o"
\t@echo "src/driver/main.cpp:1:1: error: something broke"
\t@exit 3
"""

SLOW_MAKEFILE = """\
CMDSTAN_VERSION := 2.35.0

toolchain:
\t@echo $$$$ > ../recipe.pid; echo "g++ -c slow.cpp -o build/slow.o"; sleep 60
"""

STANC = "#!/bin/sh\necho 'stanc3 v2.35.0 (Unix)'\n"

# A child process that installs with a fake build; configured by environment.
CHILD = """
import os, sys, time
from pathlib import Path
from stanflow.toolchain import installer, layout

layout.source_dir = lambda: Path(os.environ["TEST_SOURCE"])
layout.HTTPSTAN_WHEEL_SHA256 = os.environ["TEST_SHA"]

def fake_build(root, progress):
    with open(os.environ["TEST_RECORD"], "a") as record:
        record.write(f"{os.getpid()}\\n")
    time.sleep(float(os.environ["TEST_BUILD_SECONDS"]))
    for name in ("stansummary", "diagnose"):
        path = root / "bin" / name
        path.write_text("#!/bin/sh\\n")
        path.chmod(0o755)

installer.build_toolchain = fake_build
print(installer.install(progress=True))
"""


def make_wheel(path: Path, *, stanc: bool = True, extra: dict | None = None) -> Path:
    """Write a zip with the layout of the httpstan wheel."""
    members = {
        "httpstan/__init__.py": ("", 0o644),
        "httpstan/include/stan/version.hpp": ("#define STAN_MAJOR 2\n", 0o644),
        "httpstan/include/pybind11/pybind11.h": ("// not wanted\n", 0o644),
        "httpstan/lib/libtbb.so.2": ("ELF", 0o755),
        "httpstan/lib/libsundials_cvodes.a": ("ar", 0o644),
        **({"httpstan/stanc": (STANC, 0o755)} if stanc else {}),
        **(extra or {}),
    }
    with zipfile.ZipFile(path, "w") as archive:
        for name, (text, mode) in members.items():
            member = zipfile.ZipInfo(name)
            member.external_attr = (0o100000 | mode) << 16
            archive.writestr(member, text)
    return path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fake_build(root: Path, progress: BuildProgress) -> None:
    """Stand-in for ``make toolchain``: produce the two tools, record the call."""
    with (root.parent / "builds.txt").open("a") as record:
        record.write(f"{root.name}\n")
    for name in ("stansummary", "diagnose"):
        path = root / "bin" / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)


def builds(home: Path) -> list[str]:
    record = home / "builds.txt"
    return record.read_text().splitlines() if record.exists() else []


def leftovers(home: Path) -> list[Path]:
    return sorted(home.glob(".cmdstan-*"))


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "source"
    (src / "src" / "driver").mkdir(parents=True)
    (src / "makefile").write_text(STUB_MAKEFILE)
    (src / "src" / "driver" / "main.cpp").write_text("int main() {}\n")
    return src


@pytest.fixture
def env(tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated stanflow home, fake sources and a fake wheel; returns home."""
    home = tmp_path / "home"
    user_home = tmp_path / "user"
    user_home.mkdir()
    fake = make_wheel(tmp_path / layout.HTTPSTAN_WHEEL_NAME)
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv("STANFLOW_HOME", str(home))
    monkeypatch.setenv(wheel.WHEEL_ENV, str(fake))
    monkeypatch.setenv("CMDSTAN", "")  # so that teardown also undoes ensure()'s
    monkeypatch.delenv("CMDSTAN")
    monkeypatch.setattr(layout, "source_dir", lambda: source)
    monkeypatch.setattr(layout, "HTTPSTAN_WHEEL_SHA256", sha256_of(fake))
    monkeypatch.setattr(installer, "build_toolchain", fake_build)
    ensure.cache_clear()
    yield home
    ensure.cache_clear()


def make_cmdstan(root: Path, version: str = "2.35.0", tools: tuple = ()) -> Path:
    """Lay out a fake built CmdStan; ``tools`` overrides which bin/ files exist."""
    (root / "bin").mkdir(parents=True)
    (root / "makefile").write_text(f"# CmdStan\nCMDSTAN_VERSION := {version}\n")
    for name in tools or layout.REQUIRED_EXECUTABLES:
        path = root / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    return root


def child_env(tmp_path: Path, source: Path, seconds: float) -> dict[str, str]:
    fake = Path(os.environ[wheel.WHEEL_ENV])
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "TEST_SOURCE": str(source),
        "TEST_SHA": sha256_of(fake),
        "TEST_RECORD": str(tmp_path / "child-builds.txt"),
        "TEST_BUILD_SECONDS": str(seconds),
    }


def start_child(environment: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD], env=environment, cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


# --- discovery -------------------------------------------------------------


def test_find_cmdstan_none_without_cmdstan(env: Path) -> None:
    assert find_cmdstan() is None


def test_empty_cmdstan_variable_counts_as_unset(env: Path, monkeypatch) -> None:
    monkeypatch.setenv("CMDSTAN", "")
    assert find_cmdstan() is None


def test_valid_cmdstan_variable_is_used(env: Path, tmp_path, monkeypatch) -> None:
    root = make_cmdstan(tmp_path / "cmdstan-2.36.0")
    monkeypatch.setenv("CMDSTAN", str(root))
    assert find_cmdstan() == root


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("missing", "is not a directory"),
        ("no-makefile", "has no makefile"),
        ("no-version", "CMDSTAN_VERSION := X.Y.Z"),
        ("old", "needs CmdStan >= 2.33"),
        ("no-stanc", "bin/stanc is missing or not executable"),
        ("no-diagnose", "bin/diagnose is missing or not executable"),
    ],
)
def test_invalid_cmdstan_variable_is_a_clear_error(
    env: Path, tmp_path: Path, monkeypatch, setup: str, expected: str
) -> None:
    root = tmp_path / "mine"
    if setup == "no-makefile":
        root.mkdir()
    elif setup == "no-version":
        make_cmdstan(root)
        (root / "makefile").write_text("all:\n")
    elif setup == "old":
        make_cmdstan(root, version="2.30.1")
    elif setup == "no-stanc":
        make_cmdstan(root, tools=("bin/stansummary", "bin/diagnose"))
    elif setup == "no-diagnose":
        make_cmdstan(root, tools=("bin/stanc", "bin/stansummary"))
    monkeypatch.setenv("CMDSTAN", str(root))
    with pytest.raises(InvalidCmdStanError) as caught:
        find_cmdstan()
    message = str(caught.value)
    assert f"$CMDSTAN={str(root)!r}" in message
    assert expected in message
    assert "unset it" in message


def test_non_executable_stanc_is_rejected(env: Path, tmp_path, monkeypatch) -> None:
    root = make_cmdstan(tmp_path / "mine")
    (root / "bin" / "stanc").chmod(0o644)
    monkeypatch.setenv("CMDSTAN", str(root))
    with pytest.raises(InvalidCmdStanError, match="bin/stanc"):
        find_cmdstan()


def test_default_location_picks_highest_valid_version(env: Path) -> None:
    parent = Path(os.environ["HOME"]) / ".cmdstan"
    make_cmdstan(parent / "cmdstan-2.34.1", version="2.34.1")
    make_cmdstan(parent / "cmdstan-2.35.0", version="2.35.0")
    make_cmdstan(parent / "cmdstan-2.36.0-rc1", version="2.36.0")
    (parent / "cmdstan-2.37.0").mkdir()  # half-installed: skipped
    (parent / "not-cmdstan").mkdir()
    assert find_cmdstan() == parent / "cmdstan-2.36.0-rc1"
    make_cmdstan(parent / "cmdstan-2.36.0", version="2.36.0")
    assert find_cmdstan() == parent / "cmdstan-2.36.0"


def test_cmdstan_variable_pointing_at_stanflow_installation_is_fine(
    env: Path, monkeypatch
) -> None:
    root = install(progress=False)
    monkeypatch.setenv("CMDSTAN", str(root))
    assert find_cmdstan() is None
    assert ensure() == root
    assert builds(env) == [f".{root.name}.tmp-{os.getpid()}"]


def test_read_cmdstan_version(tmp_path: Path) -> None:
    assert discovery.read_cmdstan_version(tmp_path) is None
    (tmp_path / "makefile").write_text("X := 1\nCMDSTAN_VERSION := 2.35.0\n")
    assert discovery.read_cmdstan_version(tmp_path) == (2, 35, 0)
    (tmp_path / "makefile").write_text("CMDSTAN_VERSION := 2.35\n")
    assert discovery.read_cmdstan_version(tmp_path) is None


# --- key -------------------------------------------------------------------


def test_source_key_follows_content(source: Path) -> None:
    sha = "0" * 64
    key = layout.source_key(source, sha)
    assert len(key) == layout.KEY_LENGTH
    assert layout.source_key(source, sha) == key
    assert layout.source_key(source, "1" * 64) != key
    driver = source / "src" / "driver" / "main.cpp"
    driver.write_text("int main() { return 0; }\n")
    changed = layout.source_key(source, sha)
    assert changed != key
    (source / "src" / "driver" / "extra.hpp").write_text("")
    assert layout.source_key(source, sha) not in (key, changed)


def test_source_key_requires_makefile(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match="no makefile"):
        layout.source_key(tmp_path, "0" * 64)


# --- wheel -----------------------------------------------------------------


def test_unpack_wheel_layout(tmp_path: Path) -> None:
    root = tmp_path / "root"
    wheel.unpack_wheel(make_wheel(tmp_path / "w.whl"), root)
    assert (root / "stan" / "include" / "stan" / "version.hpp").is_file()
    assert not (root / "stan" / "include" / "pybind11").exists()
    assert os.access(root / "stan" / "lib" / "libtbb.so.2", os.X_OK)
    assert not os.access(root / "stan" / "lib" / "libsundials_cvodes.a", os.X_OK)
    assert os.access(root / "bin" / "stanc", os.X_OK)
    assert not (root / "__init__.py").exists()
    assert not (root / "httpstan").exists()


def test_unpack_wheel_without_stanc_fails(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match="lacks httpstan/stanc"):
        wheel.unpack_wheel(make_wheel(tmp_path / "w.whl", stanc=False), tmp_path / "r")


def test_unpack_wheel_rejects_escaping_member(tmp_path: Path) -> None:
    bad = make_wheel(
        tmp_path / "w.whl", extra={"httpstan/include/../../../evil": ("x", 0o644)}
    )
    with pytest.raises(ToolchainError, match="escapes"):
        wheel.unpack_wheel(bad, tmp_path / "root")
    assert not (tmp_path / "evil").exists()


def test_missing_local_wheel_names_the_variable(env: Path, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(wheel.WHEEL_ENV, str(tmp_path / "nope.whl"))
    with pytest.raises(ToolchainError, match=wheel.WHEEL_ENV):
        install(progress=False)
    assert leftovers(env) == []


def test_checksum_mismatch_is_refused(env: Path, monkeypatch) -> None:
    monkeypatch.setattr(layout, "HTTPSTAN_WHEEL_SHA256", "ab" * 32)
    actual = sha256_of(Path(os.environ[wheel.WHEEL_ENV]))
    with pytest.raises(ToolchainError) as caught:
        install(progress=False)
    message = str(caught.value)
    assert "sha256" in message and actual in message and "ab" * 32 in message
    assert builds(env) == []
    assert leftovers(env) == [] and list(env.glob("cmdstan-*")) == []


def test_pinned_checksum_is_a_sha256() -> None:
    assert len(layout.HTTPSTAN_WHEEL_SHA256) == 64
    int(layout.HTTPSTAN_WHEEL_SHA256, 16)


# --- install ---------------------------------------------------------------


def test_install_builds_valid_installation_once(env: Path) -> None:
    root = install(progress=False)
    key = installer.installation_key()
    assert root == env / f"cmdstan-2.35.0-{key}"
    assert layout.is_valid_installation(root, key)
    marker = json.loads((root / layout.MARKER_NAME).read_text())
    assert marker["key"] == key
    assert marker["cmdstan_version"] == "2.35.0"
    assert marker["httpstan_wheel_sha256"] == layout.HTTPSTAN_WHEEL_SHA256
    assert (root / "src" / "driver" / "main.cpp").is_file()
    assert (root / "stan" / "include" / "stan" / "version.hpp").is_file()
    assert not (root / "_wheel").exists()
    assert install(progress=False) == root
    assert len(builds(env)) == 1
    assert leftovers(env) == []


def test_changed_sources_get_a_new_installation(env: Path, source: Path) -> None:
    first = install(progress=False)
    (source / "src" / "driver" / "main.cpp").write_text("int main() { return 1; }\n")
    installer.source_key_once.cache_clear()  # as in a new process: hashed once per process
    second = install(progress=False)
    assert second != first
    assert layout.is_valid_installation(second, installer.installation_key())
    assert len(builds(env)) == 2


def test_force_rebuilds_and_replaces(env: Path) -> None:
    root = install(progress=False)
    (root / "old-file").write_text("")
    assert install(progress=False, force=True) == root
    assert not (root / "old-file").exists()
    assert layout.is_valid_installation(root, installer.installation_key())
    assert len(builds(env)) == 2
    assert leftovers(env) == []


def test_invalid_final_directory_is_rebuilt(env: Path) -> None:
    root = install(progress=False)
    (root / "bin" / "diagnose").unlink()
    key = installer.installation_key()
    assert not layout.is_valid_installation(root, key)
    assert install(progress=False) == root
    assert layout.is_valid_installation(root, key)


def test_failing_build_leaves_nothing_valid(env: Path, monkeypatch) -> None:
    def broken(root: Path, progress: BuildProgress) -> None:
        fake_build(root, progress)  # the tools exist, but the build fails
        raise ToolchainBuildError("make failed")

    monkeypatch.setattr(installer, "build_toolchain", broken)
    with pytest.raises(ToolchainBuildError, match="make failed"):
        install(progress=False)
    assert leftovers(env) == []
    assert list(env.glob("cmdstan-*")) == []


def test_interrupted_build_leaves_nothing(env: Path, monkeypatch) -> None:
    def interrupted(root: Path, progress: BuildProgress) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(installer, "build_toolchain", interrupted)
    with pytest.raises(KeyboardInterrupt):
        install(progress=False)
    assert leftovers(env) == [] and list(env.glob("cmdstan-*")) == []


def test_build_without_tools_is_not_installed(env: Path, monkeypatch) -> None:
    monkeypatch.setattr(installer, "build_toolchain", lambda root, progress: None)
    with pytest.raises(ToolchainError, match="did not produce bin/stansummary"):
        install(progress=False)
    assert leftovers(env) == [] and list(env.glob("cmdstan-*")) == []


def test_stale_temporary_directories_are_removed(env: Path) -> None:
    key = installer.installation_key()
    env.mkdir(parents=True)
    stale = env / f".cmdstan-2.35.0-{key}.tmp-999999"
    make_cmdstan(stale)
    layout.write_marker(stale, key, layout.HTTPSTAN_WHEEL_SHA256)
    other = env / ".cmdstan-2.35.0-0123456789ab.old-4242"
    other.mkdir()
    root = install(progress=False)
    assert leftovers(env) == []
    assert layout.is_valid_installation(root, key)


def test_real_make_with_stub_makefile(env: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(installer, "build_toolchain", REAL_BUILD)
    root = install(progress=True)
    assert layout.is_valid_installation(root, installer.installation_key())
    log = (root / installer.BUILD_LOG_NAME).read_text()
    assert "-o build/driver.o" in log
    err = capsys.readouterr().err
    assert "building build/driver.o" in err
    assert f"installed {root}" in err


def test_real_make_failure_reports_log_tail(env: Path, source: Path, monkeypatch) -> None:
    monkeypatch.setattr(installer, "build_toolchain", REAL_BUILD)
    (source / "makefile").write_text(FAILING_MAKEFILE)
    with pytest.raises(ToolchainBuildError) as caught:
        install(progress=False)
    message = str(caught.value)
    assert "exit code 2" in message  # make's own code for a failed recipe
    assert "error: something broke" in message
    kept = env / installer.FAILED_LOG_NAME
    assert str(kept) in message and "something broke" in kept.read_text()
    assert leftovers(env) == [] and list(env.glob("cmdstan-*")) == []


def test_interrupt_kills_make_and_its_children(
    env: Path, source: Path, monkeypatch
) -> None:
    class Interrupting(BuildProgress):
        def make_line(self, line: str) -> None:
            if "slow.o" in line:
                raise KeyboardInterrupt

    monkeypatch.setattr(installer, "build_toolchain", REAL_BUILD)
    monkeypatch.setattr(installer, "BuildProgress", Interrupting)
    (source / "makefile").write_text(SLOW_MAKEFILE)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        install(progress=False)
    assert time.monotonic() - start < 30
    recipe = int((env / "recipe.pid").read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{recipe}").exists():
        time.sleep(0.1)
    assert not Path(f"/proc/{recipe}").exists()
    assert leftovers(env) == [] and list(env.glob("cmdstan-*")) == []


def test_concurrent_installs_in_two_processes(env: Path, tmp_path, source) -> None:
    environment = child_env(tmp_path, source, seconds=1.5)
    children = [start_child(environment) for _ in range(2)]
    results = [child.communicate(timeout=120) for child in children]
    assert [child.returncode for child in children] == [0, 0], results
    paths = {stdout.strip() for stdout, _ in results}
    assert len(paths) == 1
    root = Path(paths.pop())
    assert root.parent == env
    record = (tmp_path / "child-builds.txt").read_text().splitlines()
    assert len(record) == 1
    assert layout.is_valid_installation(root, root.name.rsplit("-", 1)[1])
    assert list(env.glob("cmdstan-*")) == [root]
    assert leftovers(env) == []


def test_killed_install_leaves_nothing_valid_and_is_recovered(
    env: Path, tmp_path, source
) -> None:
    record = tmp_path / "child-builds.txt"
    victim = start_child(child_env(tmp_path, source, seconds=600))
    deadline = time.monotonic() + 60
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert record.exists(), victim.communicate(timeout=5)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    assert len(leftovers(env)) == 1
    assert list(env.glob("cmdstan-*")) == []
    survivor = start_child(child_env(tmp_path, source, seconds=0))
    stdout, stderr = survivor.communicate(timeout=120)
    assert survivor.returncode == 0, stderr
    root = Path(stdout.strip())
    assert layout.is_valid_installation(root, root.name.rsplit("-", 1)[1])
    assert leftovers(env) == []
    assert len(record.read_text().splitlines()) == 2


def test_waiting_process_says_so(env: Path, tmp_path, source) -> None:
    first = start_child(child_env(tmp_path, source, seconds=5))
    record = tmp_path / "child-builds.txt"
    deadline = time.monotonic() + 60
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    second = start_child(child_env(tmp_path, source, seconds=0))
    _, waited = second.communicate(timeout=120)
    first.communicate(timeout=120)
    assert second.returncode == 0 and first.returncode == 0
    assert f"waiting for process {first.pid}" in waited
    assert len(record.read_text().splitlines()) == 1


# --- ensure and info -------------------------------------------------------


def test_ensure_prefers_user_cmdstan(env: Path, tmp_path, monkeypatch) -> None:
    root = make_cmdstan(tmp_path / "cmdstan-2.35.0")
    monkeypatch.setenv("CMDSTAN", str(root))
    assert ensure() == root
    assert cmdstanpy.cmdstan_path() == str(root)
    assert builds(env) == []


def test_ensure_installs_and_caches(env: Path, monkeypatch) -> None:
    root = ensure()
    assert os.environ["CMDSTAN"] == str(root)
    assert cmdstanpy.cmdstan_path() == str(root)
    calls = []
    monkeypatch.setattr("stanflow.toolchain.runtime.find_cmdstan", lambda: calls.append(1))
    assert ensure() == root
    assert calls == []
    assert len(builds(env)) == 1


def test_ensure_reports_invalid_cmdstan(env: Path, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CMDSTAN", str(tmp_path / "absent"))
    with pytest.raises(InvalidCmdStanError, match="CMDSTAN"):
        ensure()
    assert builds(env) == []


def test_info_does_not_build(env: Path) -> None:
    facts = info()
    assert facts["kind"] == "stanflow"
    assert facts["installed"] is False
    assert facts["path"] == str(installer.installation_path())
    assert facts["stanc_version"] is None
    assert builds(env) == [] and not env.exists()


def test_info_describes_stanflow_installation(env: Path) -> None:
    root = install(progress=False)
    facts = info()
    assert facts["path"] == str(root)
    assert facts["installed"] is True
    assert facts["cmdstan_version"] == "2.35.0"
    assert facts["stanc_version"] == "stanc3 v2.35.0 (Unix)"
    assert facts["cxx"] == "g++"
    assert facts["threaded_chains"] is True
    assert facts["marker"]["key"] == facts["key"]
    json.dumps(facts)


def test_info_describes_user_cmdstan(env: Path, tmp_path, monkeypatch) -> None:
    root = make_cmdstan(tmp_path / "cmdstan-2.35.0")
    monkeypatch.setenv("CMDSTAN", str(root))
    facts = info()
    assert facts["kind"] == "cmdstan" and facts["path"] == str(root)
    assert facts["cmdstan_version"] == "2.35.0"
    assert facts["cxx"] is None  # this fake makefile cannot print CXX


@pytest.mark.parametrize(("name", "value"), [("progress", 1), ("force", "yes")])
def test_install_validates_arguments(env: Path, name: str, value: object) -> None:
    with pytest.raises(TypeError, match=name):
        install(**{name: value})


# --- progress --------------------------------------------------------------


def test_progress_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    display = BuildProgress(enabled=True, stream=stream)
    with display.building():
        display.make_line("g++ -O3 -c src/a.cpp -o build/a.o\n")
        display.make_line("make: Nothing to be done\n")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("building build/a.o")
    assert lines[1].startswith("[stanflow] make ran for")


def test_progress_disabled_is_silent() -> None:
    stream = io.StringIO()
    display = BuildProgress(enabled=False, stream=stream)
    display.note("hello")
    with display.building():
        display.make_line("g++ -o bin/x x.o\n")
    assert stream.getvalue() == ""


def test_progress_helpers() -> None:
    assert output_of("g++ -c a.cpp -o build/a.o -fPIC") == "build/a.o"
    assert output_of("stanc --o=x") is None
    assert format_elapsed(42.9) == "42s"
    assert format_elapsed(65) == "1m05s"
