"""The peers' Python environment: a venv of its own, never a stanflow dependency.

Imported by the scripts of this folder (run as ``python bench/peers/<name>.py``, so the
folder is on ``sys.path``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path


def base_python() -> Path:
    """The newest Python 3.13 or 3.12 under ``~/.pyenv/versions``."""
    versions = Path.home() / ".pyenv" / "versions"
    found = sorted(versions.glob("3.13*/bin/python")) + sorted(versions.glob("3.12*/bin/python"))
    if not found:
        raise RuntimeError(f"no Python 3.13 or 3.12 under {versions}; pass --base-python")
    return found[0]


def ensure_venv(
    venv: Path, modules: Sequence[str], packages: Sequence[str], base: Path | None = None
) -> Path:
    """``venv``'s python, able to import ``modules``: made and ``pip install``-ed if not."""
    python = venv / "bin" / "python"
    check = [str(python), "-c", f"import {', '.join(modules)}"]
    if python.exists() and subprocess.run(check, capture_output=True, check=False).returncode == 0:
        return python
    if not python.exists():
        interpreter = base or base_python()
        print(f"creating {venv} from {interpreter} ...", flush=True)
        subprocess.run([str(interpreter), "-m", "venv", str(venv)], check=True)
    print(f"installing {' '.join(packages)} into {venv} (pip) ...", flush=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    return python
