"""Building stanflow's own CmdStan-compatible installation.

The build happens in a temporary directory beside the final one, under an
exclusive lock in the stanflow home; only a finished build (marker written)
is renamed into place, so an interrupted or failed build never leaves a
directory that passes as valid. See ``docs/toolchain.md``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import shutil
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path

from stanflow.locks import file_lock
from stanflow.toolchain import layout, wheel
from stanflow.toolchain.discovery import read_cmdstan_version
from stanflow.toolchain.errors import ToolchainBuildError, ToolchainError
from stanflow.toolchain.progress import BuildProgress

MAKE_COMMAND = ("make", "-j2", "toolchain")
BUILD_LOG_NAME = "stanflow-build.log"
FAILED_LOG_NAME = "last-build-failure.log"
_LOG_TAIL_LINES = 40


def installation_key() -> str:
    """Return the key of the installation this stanflow version needs."""
    return source_key_once(layout.source_dir(), layout.HTTPSTAN_WHEEL_SHA256)


@functools.lru_cache(maxsize=8)
def source_key_once(src: Path, wheel_sha256: str) -> str:
    """:func:`layout.source_key`, hashed once per process for each sources and wheel.

    The packaged sources do not change while stanflow runs; every program made
    asks for the key, and hashing them takes about a millisecond.
    """
    return layout.source_key(src, wheel_sha256)


def installation_path() -> Path:
    """Return where the installation for this stanflow version lives.

    The directory may not exist yet; :func:`install` creates it.
    """
    return layout.stanflow_home() / layout.install_name(installation_key())


def build_toolchain(root: Path, progress: BuildProgress) -> None:
    """Run ``make -j2 toolchain`` in ``root``, logging to ``root``.

    Every line of make's merged stdout/stderr goes to
    ``root/stanflow-build.log`` and to ``progress``.

    Raises
    ------
    ToolchainBuildError
        If make exits non-zero; the message holds the log's last lines, and
        the log is copied to ``<home>/last-build-failure.log`` because
        ``root`` is about to be removed.
    """
    if shutil.which(MAKE_COMMAND[0]) is None:
        raise ToolchainError(
            "`make` was not found; install make and a C++17 compiler "
            "(Debian: apt-get install make g++)"
        )
    log_path = root / BUILD_LOG_NAME
    tail: deque[str] = deque(maxlen=_LOG_TAIL_LINES)
    with log_path.open("w") as log, progress.building():
        process = subprocess.Popen(
            MAKE_COMMAND, cwd=root, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
            errors="replace", start_new_session=True,
        )
        try:
            assert process.stdout is not None
            for line in process.stdout:
                log.write(line)
                tail.append(line.rstrip("\n"))
                progress.make_line(line)
            code = process.wait()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            process.wait()
            raise
    if code != 0:
        kept = root.parent / FAILED_LOG_NAME
        shutil.copyfile(log_path, kept)
        lines = "\n".join(tail)
        raise ToolchainBuildError(
            f"`{' '.join(MAKE_COMMAND)}` failed with exit code {code} "
            f"(full log: {kept}). Last lines:\n{lines}"
        )


def _check_platform() -> None:
    if sys.platform != "linux" or platform.machine() != "x86_64":
        raise ToolchainError(
            "stanflow can build its own CmdStan only on Linux x86_64 (the "
            f"httpstan wheel's platform), not {sys.platform}/"
            f"{platform.machine()}; install CmdStan and set $CMDSTAN instead"
        )


def _remove_stale(home: Path) -> None:
    """Remove leftovers of builds that died; call only while holding the lock."""
    for pattern in (".cmdstan-*.tmp-*", ".cmdstan-*.old-*"):
        for path in home.glob(pattern):
            shutil.rmtree(path, ignore_errors=True)


def _assemble(tmp: Path, progress: BuildProgress) -> None:
    """Copy the sources and unpack the wheel into the new directory ``tmp``."""
    shutil.copytree(layout.source_dir(), tmp)
    download_dir = tmp / "_wheel"
    download_dir.mkdir()
    progress.note(f"fetching httpstan {layout.HTTPSTAN_VERSION} wheel")
    path = wheel.obtain_wheel(download_dir)
    wheel.verify_wheel(path, layout.HTTPSTAN_WHEEL_SHA256)
    progress.note("unpacking Stan headers, libraries and stanc")
    wheel.unpack_wheel(path, tmp)
    shutil.rmtree(download_dir)


def _check_built(root: Path) -> None:
    version = read_cmdstan_version(root)
    if version != tuple(int(p) for p in layout.CMDSTAN_VERSION.split(".")):
        raise ToolchainError(
            f"{root / 'makefile'} must declare "
            f"CMDSTAN_VERSION := {layout.CMDSTAN_VERSION}"
        )
    for name in layout.REQUIRED_EXECUTABLES:
        if not layout.is_executable(root / name):
            raise ToolchainError(f"`make toolchain` did not produce {name}")


def _move_into_place(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``, replacing whatever ``final`` was."""
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)


def install(progress: bool = True, force: bool = False) -> Path:
    """Build stanflow's CmdStan-compatible installation unless it exists.

    Parameters
    ----------
    progress : bool, default True
        Report the steps and the build's progress on stderr.
    force : bool, default False
        Rebuild even if a valid installation exists; the old one is replaced
        only once the new one is complete.

    Returns
    -------
    pathlib.Path
        The installation directory ``<home>/cmdstan-2.35.0-<key>``.

    Raises
    ------
    ToolchainError
        On an unsupported platform, a wheel that cannot be fetched or fails
        its checksum, or a failed build (:class:`ToolchainBuildError`).
    """
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool, got {progress!r}")
    if not isinstance(force, bool):
        raise TypeError(f"force must be a bool, got {force!r}")
    _check_platform()
    key = installation_key()
    final = layout.stanflow_home() / layout.install_name(key)
    if not force and layout.is_valid_installation(final, key):
        return final
    display = BuildProgress(enabled=progress)
    final.parent.mkdir(parents=True, exist_ok=True)
    lock = final.parent / layout.LOCK_NAME
    with file_lock(lock, on_busy=_waiting_note(lock, display), holder=_pid_line):
        _remove_stale(final.parent)
        if not force and layout.is_valid_installation(final, key):
            return final
        display.note(
            f"building stanflow's CmdStan {layout.CMDSTAN_VERSION} in {final}"
        )
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        try:
            _assemble(tmp, display)
            build_toolchain(tmp, display)
            _check_built(tmp)
            layout.write_marker(tmp, key, layout.HTTPSTAN_WHEEL_SHA256)
            _move_into_place(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    display.note(f"installed {final}")
    return final


def _waiting_note(lock: Path, display: BuildProgress) -> Callable[[str], None]:
    """What a second builder says before it waits: the pid the busy ``lock`` holds."""

    def note(holder: str) -> None:
        display.note(f"waiting for process {holder.strip() or '?'} to release the lock {lock}")

    return note


def _pid_line() -> str:
    """What the build lock's file holds: this process's pid."""
    return f"{os.getpid()}\n"
