"""What the two SMC peer workers share: the thread cap and the problem file they read.

Imported by ``_pymc_smc_worker.py`` and ``_blackjax_smc_worker.py`` (their folder is first
on ``sys.path`` when they run as scripts). NumPy is imported inside, after the worker has
capped its threads.
"""

from __future__ import annotations

import os
from typing import Any

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def limit_threads(threads: int) -> None:
    """Cap BLAS/OpenMP threads; must run before NumPy or the peer is imported."""
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)


def load_problem(path: str) -> dict[str, Any]:
    """Read and check ``X``, ``y`` and ``prior_sd`` from the ``.npz`` file ``path``.

    Raises
    ------
    ValueError
        A field is missing or malformed; the message names the file and the field.
    """
    import numpy as np

    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from exc
    if not hasattr(data, "files"):
        raise ValueError(f"{path}: not an .npz archive")
    with data:
        missing = {"X", "y", "prior_sd"} - set(data.files)
        if missing:
            raise ValueError(f"{path}: missing field(s) {sorted(missing)}")
        X = np.asarray(data["X"], dtype=float)
        y = np.asarray(data["y"], dtype=float)
        prior_sd = np.asarray(data["prior_sd"], dtype=float)
    if prior_sd.ndim != 0:
        raise ValueError(f"{path}: prior_sd must be a scalar, got shape {prior_sd.shape}")
    prior_sd = float(prior_sd)
    if X.ndim != 2 or not np.all(X[:, 0] == 1.0):
        raise ValueError(f"{path}: X must be 2-D with an intercept column of ones first")
    if y.shape != (X.shape[0],) or not np.all(np.isin(y, (-1.0, 1.0))):
        raise ValueError(f"{path}: y must hold {X.shape[0]} labels in {{-1, +1}}")
    if not (np.isfinite(X).all() and prior_sd > 0):
        raise ValueError(f"{path}: X must be finite and prior_sd positive, got {prior_sd}")
    return {"X": X, "y": y, "prior_sd": prior_sd}
