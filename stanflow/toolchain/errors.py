"""Exceptions raised by :mod:`stanflow.toolchain`."""


class ToolchainError(RuntimeError):
    """No usable CmdStan installation could be found or built."""


class InvalidCmdStanError(ToolchainError):
    """A CmdStan installation the user pointed at (``$CMDSTAN``) is unusable."""


class ToolchainBuildError(ToolchainError):
    """``make toolchain`` failed while building stanflow's own installation."""
