"""stanflow.gibbs's public API: names importable from the package and from their modules,
calibrations named ``calibrate_<method>``, no exported name that hides a module of the
package or of its subpackages; and for the whole of ``stanflow``: no import cycle among its
modules (imports inside functions included) and no module over 500 lines."""

from __future__ import annotations

import ast
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
    "importance": ["calibrate_importance"],
    "gpc.algorithm": ["calibrate_gpc"],
    "gpc.grid_backend": ["GridBackend"],
    "gpc.stan_backend": ["StanBackend"],
    "safebayes": ["calibrate_safebayes", "calibrate_safebayes_conjugate"],
    "safebayes_averaging": ["calibrate_safebayes_averaged"],
    "path.calibration": ["calibrate_path"],
    "path.resample_means": ["bootstrap_shape"],
    "path.sampler": ["PathSampler"],
    "path.sweep": ["LearningRatePath", "gibbs_path"],
    "priors": ["PRIORS", "Prior", "get_prior", "log_prior_on_grid"],
    "sampling": ["posterior"],
    "shape": ["adjust_draws", "sandwich_shape"],
}
SUBPACKAGES = ("gpc", "path")
GIBBS = Path(gibbs_package.__file__).parent
PACKAGE = GIBBS.parent


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
        "calibrate_importance",
    }


def test_no_exported_name_is_a_module_name():
    modules = {info.name for info in pkgutil.iter_modules(gibbs_package.__path__)}
    assert {"gpc", "path", "safebayes", "plugin", "information"} <= modules
    assert not modules & set(gibbs_package.__all__)
    # the modules and subpackages, not functions of the same name
    for name in ("gpc", "path", "safebayes"):
        assert importlib.import_module(f"stanflow.gibbs.{name}") is getattr(
            gibbs_package, name
        )


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_a_subpackage_exports_its_modules_objects_and_hides_no_module(name):
    package = importlib.import_module(f"stanflow.gibbs.{name}")
    modules = {info.name for info in pkgutil.iter_modules(package.__path__)}
    assert package.__all__
    assert not modules & set(package.__all__)
    for symbol in package.__all__:
        value = getattr(package, symbol)
        home = importlib.import_module(value.__module__)
        assert home.__name__.startswith(f"stanflow.gibbs.{name}."), symbol
        assert getattr(home, symbol) is value, symbol


def test_the_stan_backend_of_gpc_is_its_own_module():
    algorithm = importlib.import_module("stanflow.gibbs.gpc.algorithm")
    stan = importlib.import_module("stanflow.gibbs.gpc.stan_backend")
    for name in ("StanGibbs", "StanBackend", "stan_evaluator", "reweight_evaluator",
                 "resample_evaluator"):
        assert getattr(stan, name).__module__ == "stanflow.gibbs.gpc.stan_backend", name
    for name in ("reweight_evaluator", "resample_evaluator", "StanGibbs"):
        assert not hasattr(algorithm, name)


def _module_name(file: Path) -> str:
    parts = file.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(file: Path, name: str, known: set[str]) -> set[str]:
    """The stanflow modules ``file`` imports, at module level or inside functions.

    Importing ``a.b.c`` also runs ``a.b/__init__.py`` unless ``a.b`` is being
    imported already, as a package that holds the importer.
    """
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    holders = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}
    with_parents = set(found)
    for module in found:
        parts = module.split(".")
        with_parents.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return {m for m in with_parents if m in known and m not in holders}


def test_no_import_cycle_among_the_modules_even_inside_functions():
    files = {_module_name(f): f for f in PACKAGE.rglob("*.py")}
    assert {"stanflow.gibbs.gpc.algorithm", "stanflow.qpaths.smc_step"} <= set(files)
    graph = {name: _imports(file, name, set(files)) for name, file in files.items()}
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            cycle = [*trail[trail.index(module):], module]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, [*trail, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


def test_no_module_of_the_package_is_over_500_lines():
    long = {str(f.relative_to(PACKAGE)): n for f in PACKAGE.rglob("*.py")
            if (n := len(f.read_text().splitlines())) > 500}
    assert not long
