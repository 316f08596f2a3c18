"""Finding and validating a user's own CmdStan installation.

Mirrors cmdstanpy's discovery: ``$CMDSTAN`` if set, else the highest
``~/.cmdstan/cmdstan-X.Y.Z``. Unlike cmdstanpy, a ``$CMDSTAN`` that is set but
unusable is an error rather than a failure deep inside a later compile.
Directories carrying stanflow's install marker are stanflow's own
installations, never a "user CmdStan": they are skipped here so that the
installation matching this version of stanflow is used instead.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from stanflow.toolchain import layout
from stanflow.toolchain.errors import InvalidCmdStanError

MIN_CMDSTAN_VERSION = (2, 33)
CMDSTAN_ENV = "CMDSTAN"
_VERSION_PREFIX = "CMDSTAN_VERSION := "
_DIR_PATTERN = re.compile(r"cmdstan-(\d+)\.(\d+)\.(\d+)(?:-rc(\d+))?")

logger = logging.getLogger(__name__)


def read_cmdstan_version(root: Path) -> tuple[int, int, int] | None:
    """Read ``CMDSTAN_VERSION := X.Y.Z`` from ``root/makefile``.

    Parameters
    ----------
    root : pathlib.Path
        Candidate installation directory.

    Returns
    -------
    tuple of int or None
        ``(major, minor, patch)``, or None when the makefile is missing or
        has no parseable version line (the same line cmdstanpy reads).
    """
    try:
        text = (root / "makefile").read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        start = line.find(_VERSION_PREFIX)
        if start >= 0:
            match = re.fullmatch(
                r"(\d+)\.(\d+)\.(\d+)", line[start + len(_VERSION_PREFIX):].strip()
            )
            if match is None:
                return None
            major, minor, patch = (int(g) for g in match.groups())
            return major, minor, patch
    return None


def validate_cmdstan(root: Path) -> tuple[int, int, int]:
    """Check that ``root`` is a built CmdStan that stanflow can use.

    Parameters
    ----------
    root : pathlib.Path
        Candidate installation directory.

    Returns
    -------
    tuple of int
        The installation's version ``(major, minor, patch)``.

    Raises
    ------
    InvalidCmdStanError
        With the first problem found: missing directory, missing makefile or
        version line, a version below ``MIN_CMDSTAN_VERSION``, or a missing
        or non-executable ``bin/stanc``, ``bin/stansummary``, ``bin/diagnose``.
    """
    if not root.is_dir():
        raise InvalidCmdStanError(f"{root} is not a directory")
    if not (root / "makefile").is_file():
        raise InvalidCmdStanError(f"{root} has no makefile")
    version = read_cmdstan_version(root)
    if version is None:
        raise InvalidCmdStanError(
            f"{root / 'makefile'} has no '{_VERSION_PREFIX}X.Y.Z' line"
        )
    if version[:2] < MIN_CMDSTAN_VERSION:
        found = ".".join(map(str, version))
        minimum = ".".join(map(str, MIN_CMDSTAN_VERSION))
        raise InvalidCmdStanError(
            f"{root} is CmdStan {found}; stanflow needs CmdStan >= {minimum}"
        )
    for name in layout.REQUIRED_EXECUTABLES:
        if not layout.is_executable(root / name):
            raise InvalidCmdStanError(
                f"{root / name} is missing or not executable "
                "(run `make build` in the CmdStan directory)"
            )
    return version


def is_stanflow_installation(root: Path) -> bool:
    """Return whether ``root`` carries stanflow's install marker."""
    return (root / layout.MARKER_NAME).is_file()


def _from_environment() -> Path | None:
    value = os.environ.get(CMDSTAN_ENV, "")
    if not value:
        return None
    root = Path(value).expanduser().absolute()
    if is_stanflow_installation(root):
        return None
    try:
        validate_cmdstan(root)
    except InvalidCmdStanError as error:
        raise InvalidCmdStanError(
            f"${CMDSTAN_ENV}={value!r} is not a usable CmdStan installation: "
            f"{error}. Point {CMDSTAN_ENV} at a built CmdStan, or unset it to "
            "let stanflow use its own installation."
        ) from None
    return root


def _version_order(name: str) -> tuple[int, int, int, int] | None:
    match = _DIR_PATTERN.fullmatch(name)
    if match is None:
        return None
    major, minor, patch, rc = match.groups()
    # A release sorts after its release candidates.
    return int(major), int(minor), int(patch), int(rc) if rc else 10**6


def _from_default_location() -> Path | None:
    parent = Path.home() / ".cmdstan"
    if not parent.is_dir():
        return None
    candidates = []
    for child in parent.iterdir():
        order = _version_order(child.name)
        if order is not None and child.is_dir():
            candidates.append((order, child))
    for _, root in sorted(candidates, reverse=True):
        try:
            validate_cmdstan(root)
        except InvalidCmdStanError as error:
            logger.warning("skipping CmdStan at %s: %s", root, error)
            continue
        return root
    return None


def find_cmdstan() -> Path | None:
    """Find the user's own CmdStan installation.

    Returns
    -------
    pathlib.Path or None
        ``$CMDSTAN`` if set (and not one of stanflow's own installations),
        else the highest valid ``~/.cmdstan/cmdstan-X.Y.Z``, else None.

    Raises
    ------
    InvalidCmdStanError
        If ``$CMDSTAN`` is set, non-empty, not a stanflow installation, and
        fails :func:`validate_cmdstan`.
    """
    root = _from_environment()
    if root is not None:
        return root
    return _from_default_location()
