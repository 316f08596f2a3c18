"""Build hook: copy the repository's shipped folders into the wheel as package data.

``stan/``, ``workflows/`` and ``data/`` stay at the top of the repository, where
users read and edit them; a wheel (or a non-editable install) carries copies
under ``stanflow/_resources/``, found at run time by ``stanflow.resources``.
Everything else is in ``pyproject.toml``.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = ("stan", "workflows", "data")
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc")


class BuildWithResources(build_py):
    """``build_py`` that also copies the shipped folders into the package."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "stanflow" / "_resources"
        for name in SHIPPED:
            shutil.copytree(ROOT / name, target / name, ignore=SKIPPED, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildWithResources})
