"""stanflow: generalized Bayesian inference on Stan.

The toolchain (:mod:`stanflow.toolchain`) finds a CmdStan installation or
builds stanflow's own CmdStan-compatible one; everything that compiles or runs
Stan programs goes through :func:`stanflow.toolchain.ensure`.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
