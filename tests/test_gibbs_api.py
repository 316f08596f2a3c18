"""stanflow.gibbs's public API: names importable from the package and from their modules,
calibrations named ``calibrate_<method>``, and no exported name that hides a module of the
package."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import stanflow.gibbs as gibbs_package

PUBLIC = {
    "program": ["LossProgram"],
    "contract": ["ContractError"],
    "templates": ["TemplateProgram", "location_program", "linear_program"],
    "plugin": ["calibrate_plugin"],
    "information": ["calibrate_holmes_walker"],
    "gpc": ["calibrate_gpc", "GridBackend"],
    "gpc_stan": ["StanBackend"],
    "safebayes": ["calibrate_safebayes", "calibrate_safebayes_conjugate"],
    "safebayes_averaging": ["calibrate_safebayes_averaged"],
    "path_calibration": ["calibrate_path"],
    "path": ["LearningRatePath", "gibbs_path"],
    "priors": ["PRIORS", "Prior", "get_prior", "log_prior_on_grid"],
    "sampling": ["posterior"],
}


@pytest.mark.parametrize("module, names", list(PUBLIC.items()))
def test_public_names_are_the_same_objects_in_the_package_and_their_module(
    module, names
):
    where = importlib.import_module(f"stanflow.gibbs.{module}")
    for name in names:
        assert name in gibbs_package.__all__
        assert getattr(gibbs_package, name) is getattr(where, name)


def test_every_exported_name_exists_and_calibrations_share_one_family():
    for name in gibbs_package.__all__:
        assert hasattr(gibbs_package, name), name
    listed = [name for names in PUBLIC.values() for name in names]
    assert sorted(listed) == sorted(gibbs_package.__all__)
    calibrations = {n for n in gibbs_package.__all__ if "calibrat" in n}
    assert calibrations == {
        "calibrate_plugin",
        "calibrate_holmes_walker",
        "calibrate_gpc",
        "calibrate_safebayes",
        "calibrate_safebayes_averaged",
        "calibrate_safebayes_conjugate",
        "calibrate_path",
    }


def test_no_exported_name_is_a_module_name():
    modules = {info.name for info in pkgutil.iter_modules(gibbs_package.__path__)}
    assert {"gpc", "gpc_stan", "safebayes", "plugin", "information"} <= modules
    assert not modules & set(gibbs_package.__all__)
    # the modules, not functions of the same name
    for name in ("gpc", "safebayes"):
        assert importlib.import_module(f"stanflow.gibbs.{name}") is getattr(
            gibbs_package, name
        )


def test_the_stan_backend_of_gpc_is_its_own_module_without_an_import_cycle():
    gpc = importlib.import_module("stanflow.gibbs.gpc")
    stan = importlib.import_module("stanflow.gibbs.gpc_stan")
    for name in ("StanGibbs", "StanBackend", "stan_evaluator", "reweight_evaluator",
                 "resample_evaluator"):
        assert getattr(stan, name).__module__ == "stanflow.gibbs.gpc_stan", name
    for name in ("reweight_evaluator", "resample_evaluator", "StanGibbs"):
        assert not hasattr(gpc, name)
    assert "stanflow.gibbs.gpc " not in Path(stan.__file__).read_text()  # gpc_stan never imports gpc
