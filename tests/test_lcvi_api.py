"""stanflow.lcvi's public API: names importable from the package and from their modules,
and no exported name that hides a module of the package."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import stanflow.lcvi as lcvi_package


@pytest.mark.parametrize(
    "module, names",
    [
        ("loop", ["ADVI_DEFAULTS", "lcvi", "run_lcvi"]),
        ("results", ["Loop", "PlainVI", "Step", "to_idata"]),
        ("decision_step", ["empirical_risk", "predictive_decisions", "settled"]),
        ("utility_transform", ["utility_from_losses", "utility_scale"]),
        ("utility", ["Utility", "utility_term"]),
    ],
)
def test_public_names_are_the_same_objects_in_the_package_and_their_module(
    module, names
):
    where = importlib.import_module(f"stanflow.lcvi.{module}")
    for name in names:
        assert name in lcvi_package.__all__
        assert getattr(lcvi_package, name) is getattr(where, name)


def test_no_exported_name_is_a_module_name():
    modules = {info.name for info in pkgutil.iter_modules(lcvi_package.__path__)}
    assert {"loop", "results", "decision_step", "utility"} <= modules
    assert not modules & set(lcvi_package.__all__)
    # the module, not a function of the same name
    assert lcvi_package.utility is importlib.import_module("stanflow.lcvi.utility")
