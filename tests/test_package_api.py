"""Every subpackage's public names: they exist, and none is also the name of one of its modules."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import stanflow

PACKAGES = sorted(
    info.name for info in pkgutil.iter_modules(stanflow.__path__) if info.ispkg
    and not info.name.startswith("_")
)


def test_the_packages_are_found():
    assert {"gibbs", "lcvi", "losses", "models", "qpaths", "runs", "wbb"} <= set(PACKAGES)


@pytest.mark.parametrize("name", PACKAGES)
def test_exported_names_exist_and_shadow_no_module(name):
    package = importlib.import_module(f"stanflow.{name}")
    exported = getattr(package, "__all__", [])
    modules = {info.name for info in pkgutil.iter_modules(package.__path__)}
    for symbol in exported:
        assert hasattr(package, symbol), f"stanflow.{name}.{symbol}"
    assert not set(exported) & modules, f"stanflow.{name} exports module names"
