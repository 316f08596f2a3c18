"""Shared fixtures: stanflow's cache home, the toolchain, synthetic Stan CSV files."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from stanflow.workflows import WORKFLOWS_DIR

# An experiment's own code lives beside its workflow (workflows/_<module>.py), imported by name
# as the workflow scripts do.
if str(WORKFLOWS_DIR) not in sys.path:
    sys.path.append(str(WORKFLOWS_DIR))

# Header comments of a Stan CSV per method, in the flattened form cmdstanpy parses
# (it reads `key = value` pairs; nesting does not matter to it).
_CONFIG = {
    "sample": [
        "method = sample (Default)",
        "num_samples = {draws}",
        "num_warmup = {draws}",
        "save_warmup = false (Default)",
        "thin = 1 (Default)",
        "algorithm = hmc (Default)",
        "engine = nuts (Default)",
        "max_depth = 10 (Default)",
        "metric = diag_e (Default)",
        "id = {chain}",
        "seed = 11",
    ],
    "optimize": [
        "method = optimize",
        "algorithm = lbfgs (Default)",
        "jacobian = false (Default)",
        "iter = 2000 (Default)",
        "save_iterations = false (Default)",
        "seed = 11",
    ],
    "variational": [
        "method = variational",
        "algorithm = meanfield (Default)",
        "iter = 10000 (Default)",
        "grad_samples = 1 (Default)",
        "elbo_samples = 100 (Default)",
        "eta = 1 (Default)",
        "tol_rel_obj = 0.01 (Default)",
        "eval_elbo = 100 (Default)",
        "output_samples = {draws}",
        "seed = 11",
    ],
    "laplace": [
        "method = laplace",
        "mode = {mode}",
        "jacobian = true (Default)",
        "draws = {draws}",
        "seed = 11",
    ],
    "pathfinder": [
        "method = pathfinder",
        "num_draws = {draws}",
        "num_paths = 1",
        "psis_resample = true (Default)",
        "calculate_lp = true (Default)",
        "seed = 11",
    ],
    "generate_quantities": [
        "method = generate_quantities",
        "fitted_params = {fitted_params}",
        "id = {chain}",
        "seed = 11",
    ],
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: needs the built toolchain; compiles and runs Stan models"
    )


@pytest.fixture(scope="session")
def stanflow_home() -> Path:
    """``$STANFLOW_HOME`` for the session: as set, else ``~/.cache/stanflow``.

    Compiled models are content-addressed, so reusing the user's cache across
    test runs is safe and saves compiles.
    """
    home = Path(os.environ.get("STANFLOW_HOME") or Path.home() / ".cache" / "stanflow")
    patch = pytest.MonkeyPatch()
    patch.setenv("STANFLOW_HOME", str(home))
    yield home
    patch.undo()


@pytest.fixture(scope="session")
def cmdstan(stanflow_home: Path) -> Path:
    """The CmdStan installation, built or found by ``stanflow.toolchain.ensure()``."""
    from stanflow import toolchain

    return toolchain.ensure()


@pytest.fixture(scope="session")
def qpath_gaussian_model(cmdstan):
    """The q-path template with the Gaussian base and target slot files."""
    from stanflow.models import compile_model, program_path

    return compile_model(
        program_path("qpaths/qpath"),
        slots={
            "base.stanfunctions": program_path("qpaths/gaussian_base.stanfunctions"),
            "target.stanfunctions": program_path("qpaths/gaussian_target.stanfunctions"),
        },
    )


@pytest.fixture(scope="session")
def write_stan_csv():
    """A function writing synthetic Stan CSV files; see :func:`_write_stan_csv`."""
    return _write_stan_csv


def _write_stan_csv(
    path: Path,
    method: str,
    header: list[str],
    rows: np.ndarray,
    **fields: object,
) -> Path:
    """Write a minimal Stan CSV file of ``method`` that cmdstanpy reads.

    Parameters
    ----------
    path : pathlib.Path
    method : str
        ``sample``, ``optimize``, ``variational``, ``laplace``, ``pathfinder``
        or ``generate_quantities``.
    header : list of str
        Column names in CSV form (``theta.1``), method columns included.
    rows : ndarray, shape (row, column)
        For ``variational`` the first row is the mean.
    **fields
        Values for the header template: ``draws``, ``chain``, ``mode``,
        ``fitted_params``.

    Returns
    -------
    pathlib.Path
    """
    fields = {"draws": len(rows), "chain": 1, **fields}
    lines = [
        "# stan_version_major = 2",
        "# stan_version_minor = 35",
        "# stan_version_patch = 0",
        "# model = probe_model",
        *(f"# {line.format(**fields)}" for line in _CONFIG[method]),
        ",".join(header),
    ]
    if method == "sample":
        lines += [
            "# Adaptation terminated",
            "# Step size = 0.5",
            "# Diagonal elements of inverse mass matrix:",
            "# " + ", ".join("1" for name in header if not name.endswith("__")),
        ]
    if method == "variational":
        lines += ["# Stepsize adaptation complete.", "# eta = 1"]
    lines += [",".join(repr(float(v)) for v in row) for row in rows]
    if method == "sample":
        lines += [
            "# ",
            "#  Elapsed Time: 0.001 seconds (Warm-up)",
            "#                0.001 seconds (Sampling)",
            "#                0.002 seconds (Total)",
            "# ",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path
