"""Fetching, checking and unpacking the httpstan wheel.

The wheel is only a zip archive here: stanflow takes the Stan headers, the
TBB/SUNDIALS libraries and ``stanc`` out of it and never imports httpstan.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

from stanflow.toolchain import layout
from stanflow.toolchain.errors import ToolchainError

WHEEL_ENV = "STANFLOW_HTTPSTAN_WHEEL"
_PIP_TAIL_LINES = 20


def obtain_wheel(download_dir: Path) -> Path:
    """Return a local httpstan wheel, downloading it with pip if needed.

    Parameters
    ----------
    download_dir : pathlib.Path
        Existing directory pip downloads into (unused when
        ``$STANFLOW_HTTPSTAN_WHEEL`` names a local wheel).

    Returns
    -------
    pathlib.Path
        Path of the wheel file; its checksum is not checked yet.

    Raises
    ------
    ToolchainError
        If ``$STANFLOW_HTTPSTAN_WHEEL`` names no file, or pip fails.
    """
    local = os.environ.get(WHEEL_ENV, "")
    if local:
        path = Path(local).expanduser()
        if not path.is_file():
            raise ToolchainError(f"${WHEEL_ENV}={local!r} is not a file")
        return path
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps",
        "--only-binary=:all:", "--python-version", "3.11",
        "--implementation", "cp", "--abi", "cp311",
        "--platform", "manylinux2014_x86_64",
        f"httpstan=={layout.HTTPSTAN_VERSION}", "-d", str(download_dir),
    ]
    result = subprocess.run(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False
    )
    path = download_dir / layout.HTTPSTAN_WHEEL_NAME
    if result.returncode != 0 or not path.is_file():
        tail = "\n".join(result.stdout.splitlines()[-_PIP_TAIL_LINES:])
        raise ToolchainError(
            f"could not download {layout.HTTPSTAN_WHEEL_NAME} with pip "
            f"(exit code {result.returncode}):\n{tail}\n"
            f"Without access to PyPI, set {WHEEL_ENV} to a local copy of it."
        )
    return path


def file_sha256(path: Path) -> str:
    """Return the hex sha256 of a file's content."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_wheel(path: Path, expected_sha256: str) -> None:
    """Raise ToolchainError unless ``path`` has the expected sha256."""
    actual = file_sha256(path)
    if actual != expected_sha256:
        raise ToolchainError(
            f"httpstan wheel {path} has sha256 {actual}, expected "
            f"{expected_sha256} ({layout.HTTPSTAN_WHEEL_NAME}); refusing to "
            "build from it"
        )


def _destination(name: str) -> tuple[str, PurePosixPath, int] | None:
    """Map a wheel member to (section, path in the installation, file mode)."""
    parts = PurePosixPath(name).parts
    if len(parts) < 2 or parts[0] != "httpstan":
        return None
    if parts[1] == "include" and len(parts) > 2 and parts[2] != "pybind11":
        return "include", PurePosixPath("stan", "include", *parts[2:]), 0o644
    if parts[1] == "lib" and len(parts) > 2:
        return "lib", PurePosixPath("stan", "lib", *parts[2:]), 0o644
    if parts[1:] == ("stanc",):
        return "stanc", PurePosixPath("bin", "stanc"), 0o755
    return None


def unpack_wheel(wheel: Path, root: Path) -> None:
    """Unpack headers, libraries and stanc from the wheel into ``root``.

    ``httpstan/include/**`` (without pybind11) goes to ``stan/include/``,
    ``httpstan/lib/*`` to ``stan/lib/`` (keeping executable bits) and
    ``httpstan/stanc`` to ``bin/stanc``.

    Raises
    ------
    ToolchainError
        If a member would escape ``root``, or the wheel lacks headers,
        libraries or stanc.
    """
    found = set()
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            target = _destination(member.filename)
            if target is None or member.is_dir():
                continue
            section, relative, mode = target
            if ".." in relative.parts:
                raise ToolchainError(
                    f"wheel member {member.filename!r} escapes the installation"
                )
            found.add(section)
            mode |= (member.external_attr >> 16) & 0o111
            destination = root.joinpath(*relative.parts)
            destination.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, destination.open("wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
            destination.chmod(mode)
    missing = sorted({"include", "lib", "stanc"} - found)
    if missing:
        names = ", ".join(f"httpstan/{section}" for section in missing)
        raise ToolchainError(f"wheel {wheel} lacks {names}")
