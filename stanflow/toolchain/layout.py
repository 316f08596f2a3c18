"""Where stanflow's own installation lives and what makes one valid.

An installation is the directory ``<home>/cmdstan-<CMDSTAN_VERSION>-<key>``,
where ``<home>`` is ``$STANFLOW_HOME`` (default ``~/.cache/stanflow``) and
``<key>`` is a short hash of everything the build depends on: the files under
``stanflow/toolchain/cmdstan/``, the pinned httpstan wheel and the layout
format. A changed driver or makefile therefore gets a new directory instead of
silently reusing an old build.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stanflow import __version__
from stanflow.toolchain.errors import ToolchainError

CMDSTAN_VERSION = "2.35.0"
HTTPSTAN_VERSION = "4.13.0"
HTTPSTAN_WHEEL_NAME = (
    f"httpstan-{HTTPSTAN_VERSION}-cp311-cp311-"
    "manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
)
HTTPSTAN_WHEEL_SHA256 = (
    "7b490d6c0e8b7048d1b58dfb79db561ae1879cb3bde3012d024ef374c0308469"
)
# Bump when the way an installation is assembled changes (unpacking, marker).
INSTALL_FORMAT = 1

MARKER_NAME = ".stanflow-install.json"
LOCK_NAME = ".install.lock"
REQUIRED_EXECUTABLES = ("bin/stanc", "bin/stansummary", "bin/diagnose")

HOME_ENV = "STANFLOW_HOME"
KEY_LENGTH = 12


def stanflow_home() -> Path:
    """Return the directory that holds stanflow's installations.

    Returns
    -------
    pathlib.Path
        ``$STANFLOW_HOME`` made absolute, or ``~/.cache/stanflow`` when the
        variable is unset or empty. The directory may not exist yet.
    """
    value = os.environ.get(HOME_ENV, "")
    if value:
        return Path(value).expanduser().absolute()
    return Path.home() / ".cache" / "stanflow"


def source_dir() -> Path:
    """Return the packaged CmdStan-compatible sources (makefile, ``src/``)."""
    return Path(__file__).resolve().parent / "cmdstan"


def source_key(src: Path, wheel_sha256: str) -> str:
    """Hash the build inputs into a short key.

    Parameters
    ----------
    src : pathlib.Path
        Directory with the makefile and sources; every regular file below it
        counts, by relative path and content.
    wheel_sha256 : str
        The sha256 of the httpstan wheel the build unpacks.

    Returns
    -------
    str
        The first ``KEY_LENGTH`` hex digits of a sha256 over the inputs.

    Raises
    ------
    ToolchainError
        If ``src`` has no makefile (an incomplete stanflow package).
    """
    if not (src / "makefile").is_file():
        raise ToolchainError(
            f"stanflow's CmdStan sources are incomplete: no makefile in {src}"
        )
    digest = hashlib.sha256()
    digest.update(f"format={INSTALL_FORMAT}\0wheel={wheel_sha256}\0".encode())
    files = sorted(p for p in src.rglob("*") if p.is_file())
    for path in files:
        digest.update(path.relative_to(src).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:KEY_LENGTH]


def install_name(key: str) -> str:
    """Return the directory name of the installation with ``key``."""
    return f"cmdstan-{CMDSTAN_VERSION}-{key}"


def is_executable(path: Path) -> bool:
    """Return whether ``path`` is a regular file the user may execute."""
    return path.is_file() and os.access(path, os.X_OK)


def write_marker(root: Path, key: str, wheel_sha256: str) -> None:
    """Write the marker that makes ``root`` a finished installation."""
    marker = {
        "format": INSTALL_FORMAT,
        "cmdstan_version": CMDSTAN_VERSION,
        "key": key,
        "httpstan_version": HTTPSTAN_VERSION,
        "httpstan_wheel_sha256": wheel_sha256,
        "stanflow_version": __version__,
        "built": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (root / MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n")


def read_marker(root: Path) -> dict[str, Any] | None:
    """Return the marker of ``root``, or None if it is absent or unreadable."""
    try:
        marker = json.loads((root / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def is_valid_installation(root: Path, key: str) -> bool:
    """Return whether ``root`` is a finished stanflow installation for ``key``.

    Valid means: a marker naming ``key``, a makefile, and executable
    ``bin/stanc``, ``bin/stansummary`` and ``bin/diagnose``.
    """
    marker = read_marker(root)
    return (
        marker is not None
        and marker.get("key") == key
        and (root / "makefile").is_file()
        and all(is_executable(root / name) for name in REQUIRED_EXECUTABLES)
    )
