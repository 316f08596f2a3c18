"""CmdStan for stanflow: a user's own CmdStan, or one stanflow builds itself.

stanflow needs a CmdStan installation for cmdstanpy. A user's CmdStan
(``$CMDSTAN`` or ``~/.cmdstan/cmdstan-X.Y.Z``) is used when present; otherwise
stanflow assembles a CmdStan-compatible installation from the PyPI wheel of
httpstan (Stan headers, libraries, stanc) plus its own driver and makefile,
since CmdStan itself cannot be downloaded without internet access.

Public API
----------
ensure
    The call everything else uses: pick or build, then tell cmdstanpy.
find_cmdstan
    The user's own CmdStan, if any.
identity
    The installation in use, as models' cache keys record it.
install
    Build stanflow's installation if it is missing.
info
    Describe the installation in use.
stanflow_installation
    stanflow's own installation, for what needs its extensions.
"""

from stanflow.toolchain.discovery import find_cmdstan
from stanflow.toolchain.errors import (
    InvalidCmdStanError,
    ToolchainBuildError,
    ToolchainError,
)
from stanflow.toolchain.installer import install
from stanflow.toolchain.runtime import (
    ensure,
    identity,
    identity_of,
    info,
    stanflow_installation,
)

__all__ = [
    "InvalidCmdStanError",
    "ToolchainBuildError",
    "ToolchainError",
    "ensure",
    "find_cmdstan",
    "identity",
    "identity_of",
    "info",
    "install",
    "stanflow_installation",
]
