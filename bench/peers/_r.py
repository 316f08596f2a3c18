"""R for the peer benchmarks: Debian's R and one CRAN package, installed by apt-get when missing.

Imported by the scripts of this folder (run as ``python bench/peers/<name>.py``, so the
folder is first on ``sys.path``).
"""

from __future__ import annotations

import shutil
import subprocess


def ensure_r(package: str) -> str:
    """``Rscript`` with ``library(package)`` loadable; ``apt-get install`` them if not. Its path."""
    debian = ("r-base-core", f"r-cran-{package.lower()}")
    found = shutil.which("Rscript")
    check = [found or "Rscript", "-e", f"suppressPackageStartupMessages(library({package}))"]
    if found and subprocess.run(check, capture_output=True, check=False).returncode == 0:
        return found
    print(f"installing {' '.join(debian)} (apt-get) ...", flush=True)
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *debian],
                   check=True)
    rscript = shutil.which("Rscript")
    if rscript is None:
        raise RuntimeError(f"Rscript not found after apt-get install {' '.join(debian)}")
    return rscript
