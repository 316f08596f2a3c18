"""pyproject.toml ships every subpackage and the shipped folders (stan/, workflows/, data/)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from stanflow.resources import PACKAGED, SHIPPED

REPO = Path(__file__).resolve().parent.parent
SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_subpackage_is_listed():
    found = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "stanflow").rglob("__init__.py")
    }
    listed = {p for p in SETUPTOOLS["packages"] if f".{PACKAGED}." not in p}
    assert listed == found


def test_the_shipped_folders_travel_inside_the_package():
    for name in SHIPPED:
        package = f"stanflow.{PACKAGED}.{name}"
        assert package in SETUPTOOLS["packages"]
        assert SETUPTOOLS["package-dir"][package] == name
    data = SETUPTOOLS["package-data"]
    assert set(data[f"stanflow.{PACKAGED}.stan"]) == {"**/*.stan", "**/*.stanfunctions"}
    shipped_data = {p.suffix for p in (REPO / "data").iterdir() if p.is_file()}
    assert {f"*{suffix}" for suffix in shipped_data} <= set(data[f"stanflow.{PACKAGED}.data"])
