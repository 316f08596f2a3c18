"""Choosing the installation a process uses, and describing it."""

from __future__ import annotations

import functools
import shlex
import subprocess
from pathlib import Path
from typing import Any

import cmdstanpy

from stanflow.toolchain import installer, layout
from stanflow.toolchain.discovery import find_cmdstan, read_cmdstan_version

_THREADED_CHAINS_SINCE = (2, 28)
_COMMAND_TIMEOUT = 60


@functools.cache
def ensure() -> Path:
    """Return a usable CmdStan installation and make cmdstanpy use it.

    The user's own CmdStan (:func:`stanflow.toolchain.find_cmdstan`) wins;
    otherwise stanflow's installation is built if needed
    (:func:`stanflow.toolchain.install`). The choice is passed to
    ``cmdstanpy.set_cmdstan_path`` and cached for the rest of the process
    (``ensure.cache_clear()`` forgets it).

    Returns
    -------
    pathlib.Path
        The installation directory.

    Raises
    ------
    ToolchainError
        If ``$CMDSTAN`` is invalid or the installation cannot be built.
    """
    root = find_cmdstan()
    if root is None:
        root = installer.install()
    cmdstanpy.set_cmdstan_path(str(root))
    return root


def identity() -> dict[str, str]:
    """What a compiled model depends on: the installation in use and its version.

    Cheap (no subprocess) and stable across calls, unlike :func:`info`: it is
    part of every model's cache key. stanflow's own installations are named by
    the hash of their sources, so the path identifies the driver a model links.

    Returns
    -------
    dict
        ``path`` and ``cmdstan_version`` of the installation :func:`ensure` uses.
    """
    return identity_of(ensure())


def identity_of(root: Path) -> dict[str, str]:
    """:func:`identity` of the installation at ``root``."""
    version = read_cmdstan_version(root)
    return {
        "path": str(root),
        "cmdstan_version": ".".join(map(str, version)) if version else "unknown",
    }


def stanflow_installation() -> Path:
    """stanflow's own installation (built if needed), whatever CmdStan is active.

    Its driver has stanflow's extensions (resumable ADVI, batch runs) and its
    sources the model libraries' C API, which a CmdStan of your own lacks.
    """
    return installer.install()


def _first_line(command: list[str], cwd: Path | None = None) -> str | None:
    try:
        result = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True,
            timeout=_COMMAND_TIMEOUT, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = result.stdout.strip().splitlines()
    return lines[0].strip() if result.returncode == 0 and lines else None


def _compiler(root: Path) -> tuple[str | None, str | None]:
    """Ask the makefile for ``CXX`` (``make print-CXX``) and its version."""
    printed = _first_line(["make", "-s", "--no-print-directory", "print-CXX"], root)
    if printed is None or not printed.startswith("CXX = "):
        return None, None
    cxx = printed.removeprefix("CXX = ").strip()
    return cxx, _first_line([*shlex.split(cxx), "--version"])


def info() -> dict[str, Any]:
    """Describe the installation :func:`ensure` would use, without building.

    Returns
    -------
    dict
        ``path``; ``kind`` (``"cmdstan"`` for the user's own CmdStan,
        ``"stanflow"`` for stanflow's); ``installed`` (False when stanflow's
        installation is not built yet, in which case the remaining facts are
        None); ``cmdstan_version``; ``stanc_version``; ``cxx`` and
        ``cxx_version`` (from ``make print-CXX``, None if the makefile cannot
        tell); ``threaded_chains`` (whether cmdstanpy may run several chains
        in one threaded process, CmdStan >= 2.28). For stanflow's kind also
        ``home``, ``key`` and ``marker`` (the install marker's content).
        Always ``extensions_path``, stanflow's own installation (built on
        first use), and ``uses``: which installation serves what.

    Raises
    ------
    InvalidCmdStanError
        If ``$CMDSTAN`` is set but invalid.
    """
    root = find_cmdstan()
    facts: dict[str, Any] = {}
    if root is None:
        key = installer.installation_key()
        root = layout.stanflow_home() / layout.install_name(key)
        installed = layout.is_valid_installation(root, key)
        facts = {
            "home": str(layout.stanflow_home()),
            "key": key,
            "marker": layout.read_marker(root) if installed else None,
        }
        kind = "stanflow"
    else:
        installed, kind = True, "cmdstan"
    result: dict[str, Any] = {
        "path": str(root), "kind": kind, "installed": installed,
        "cmdstan_version": None, "stanc_version": None, "cxx": None,
        "cxx_version": None, "threaded_chains": None, **facts,
    }
    own = layout.stanflow_home() / layout.install_name(installer.installation_key())
    result["extensions_path"] = str(own)
    result["uses"] = {
        "cmdstanpy (sample, optimize, variational, ...)": str(root),
        "resumable ADVI (LCVI), batch run sets (GPC, WBB)": str(own),
        "model libraries (in-process evaluation)": str(own),
    }
    if installed:
        version = read_cmdstan_version(root)
        cxx, cxx_version = _compiler(root)
        result.update(
            cmdstan_version=".".join(map(str, version)) if version else None,
            stanc_version=_first_line([str(root / "bin" / "stanc"), "--version"]),
            cxx=cxx,
            cxx_version=cxx_version,
            threaded_chains=bool(version and version[:2] >= _THREADED_CHAINS_SINCE),
        )
    return result
