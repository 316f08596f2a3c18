"""stanflow.wbb's public API: names importable from the package and from their modules
(also those the package imports on demand), solvers named for what they do, and no
exported name that hides a module of the package."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import stanflow.wbb as wbb_package

PUBLIC = {
    "bayes_lasso": ["LassoMarginal", "gibbs_lasso", "lasso_log_density", "lasso_log_marginal"],
    "bootstrap": ["Draws", "wbb", "wbb_lasso", "wbb_ridge", "wbb_trend_filter"],
    "lasso": ["LassoResult", "kkt_violation", "lambda_max", "lasso_path", "solve_lasso"],
    "normal_means": [
        "laplace_posterior_mean", "soft_threshold", "wbb_mean", "wbb_normal_means", "wbb_prob_zero",
    ],
    "modes": ["count_modes", "shape_summary", "silverman_bandwidth"],
    "ridge": ["RidgeResult", "solve_ridge"],
    "trend_filter_cv": ["TrendFilterCV", "cv_trend_filter"],
    "trend_filtering": ["TrendFilterResult", "trend_filter"],
    "weights": ["bootstrap_weights", "draw_weights"],
    # imported on demand through the package's __getattr__
    "glm": ["GlmProblem"],
    "stan_optimize": ["wbb_glm"],
    "inprocess": ["WeightedGlm", "lbfgs_draws", "wbb_glm_inprocess"],
    "program": ["wbb_program"],
}
ON_DEMAND = {"glm", "stan_optimize", "inprocess", "program"}
SHARED = {"stanflow.bridge": ["BridgeResult", "bridge_sampling"]}
"""Names WBB exports from modules the package shares with the other methods."""


@pytest.mark.parametrize(
    "module, names",
    sorted(({f"stanflow.wbb.{m}": names for m, names in PUBLIC.items()} | SHARED).items()),
)
def test_public_names_are_the_same_objects_in_the_package_and_their_module(
    module, names
):
    where = importlib.import_module(module)
    for name in names:
        assert name in wbb_package.__all__
        assert getattr(wbb_package, name) is getattr(where, name)


def test_every_exported_name_exists_and_belongs_to_one_module():
    for name in wbb_package.__all__:
        assert hasattr(wbb_package, name), name
    listed = [name for names in (PUBLIC | SHARED).values() for name in names]
    assert sorted(listed) == sorted(wbb_package.__all__)


def test_no_exported_name_is_a_module_name():
    modules = {info.name for info in pkgutil.iter_modules(wbb_package.__path__)}
    assert set(PUBLIC) <= modules
    assert not modules & set(wbb_package.__all__)
    # the modules, not functions of the same name; and no alias left behind
    for name in ("lasso", "ridge", "weights"):
        module = importlib.import_module(f"stanflow.wbb.{name}")
        assert getattr(wbb_package, name) is module
        assert not hasattr(module, name)


def test_unknown_names_raise_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'solve_glm'"):
        wbb_package.solve_glm  # noqa: B018


def test_importing_the_package_does_not_import_the_stan_backed_modules():
    # wbb_glm and the in-process solver need cmdstanpy / bridgestan and the toolchain;
    # the package imports them on first use only.
    backed = [f"stanflow.wbb.{module}" for module in sorted(ON_DEMAND)] + ["cmdstanpy", "bridgestan"]
    code = (
        "import sys, stanflow.wbb\n"
        f"print(','.join(m for m in {backed!r} if m in sys.modules))\n"
        "stanflow.wbb.wbb_glm_inprocess\n"
        f"print(','.join(m for m in {backed!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = out.stdout.splitlines()
    assert before == ""
    assert "stanflow.wbb.inprocess" in after.split(",")
