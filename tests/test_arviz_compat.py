"""stanflow.arviz_compat on the installed ArviZ line (CI runs this file on both).

Every method's groups round-trip through netCDF as the installed line's own
object; the diagnostics match theory and ArviZ 0.23's numbers to the last
bits; no ArviZ warning reaches a user; no module but arviz_compat imports ArviZ.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from matplotlib.figure import Figure

from stanflow import arviz_compat, idata
from stanflow.arviz_compat import Results, group, group_names
from stanflow.gibbs import (
    GridBackend,
    PathSampler,
    calibrate_gpc,
    calibrate_holmes_walker,
    calibrate_path,
    calibrate_plugin,
    calibrate_safebayes_conjugate,
    gibbs_path,
    location_program,
)
from stanflow.qpaths.annealing import ais, smc
from stanflow.qpaths.ti import thermodynamic_integration
from stanflow.wbb import wbb_lasso, wbb_program

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(20261201)
Y = RNG.gamma(2.0, 1.0, 40)
X = np.column_stack([np.ones(30), RNG.normal(size=30)])
YX = X @ np.array([1.0, 2.0]) + RNG.normal(size=30)


def assert_round_trip(results: Results, tmp_path: Path) -> Results:
    """Save and load ``results``; everything must come back identical."""
    loaded = idata.load(idata.save(results, tmp_path / "results.nc"))
    assert type(loaded) is Results
    assert group_names(loaded) == group_names(results)
    for name in group_names(results):
        xr.testing.assert_identical(group(loaded, name), group(results, name))
    xr.testing.assert_identical(
        xr.Dataset(attrs=dict(loaded.attrs)), xr.Dataset(attrs=dict(results.attrs))
    )
    return loaded


# --------------------------------------------------------------- the line


def test_the_python_version_picks_the_arviz_line():
    """pyproject.toml: ArviZ 0.x on Python 3.11, 1.x on Python >= 3.12."""
    expected = 0 if sys.version_info < (3, 12) else 1
    assert expected == arviz_compat.LINE
    assert arviz_compat.ARVIZ_VERSION.startswith(f"{expected}.")
    native = {0: "arviz.data.inference_data.InferenceData", 1: "xarray.core.datatree.DataTree"}
    assert f"{Results.__module__}.{Results.__name__}" == native[expected]


def test_no_module_but_arviz_compat_imports_arviz():
    pattern = re.compile(r"^\s*(import arviz|from arviz)", re.M)
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("stanflow", "workflows", "bench", "tests")
        for path in (ROOT / folder).rglob("*.py")
        if "arviz_compat" not in path.parts and pattern.search(path.read_text())
    ]
    assert offenders == []


def test_importing_stanflow_prints_no_arviz_warning(tmp_path):
    """ArviZ 0.23 warns once a day (a stamp in the user's cache): a fresh cache
    makes it warn, and nothing may reach stderr."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONWARNINGS": "default"}
    result = subprocess.run(
        [sys.executable, "-c", "import stanflow.idata, stanflow.gibbs, stanflow.wbb"],
        env=env, capture_output=True, text=True, check=True,
    )
    assert result.stderr == ""


# --------------------------------------------------------------- the container


def test_build_group_and_add_groups():
    posterior = xr.Dataset({"mu": (("chain", "draw"), np.zeros((2, 3)))})
    results = arviz_compat.build(
        {"posterior": posterior, "sample_stats": xr.Dataset()}, attrs={"seed": 3}
    )
    assert isinstance(results, Results) and results.attrs["seed"] == 3
    assert group_names(results) == ["posterior"]  # empty groups are left out
    arviz_compat.add_groups(results, {"calibration": xr.Dataset({"omega": 0.5})})
    assert group_names(results) == ["posterior", "calibration"]
    assert float(results["calibration"]["omega"]) == 0.5
    xr.testing.assert_identical(group(results, "posterior"), posterior)
    copy = group(results, "posterior")
    copy["nu"] = 1.0
    copy.attrs["note"] = "mine"
    assert list(results["posterior"].data_vars) == ["mu"] and not results["posterior"].attrs
    assert isinstance(group(results, "calibration"), xr.Dataset)
    with pytest.raises(KeyError, match=r"no group 'smc'; groups: \['posterior', 'calibration'\]"):
        group(results, "smc")
    with pytest.raises(ValueError, match=r"already have the groups \['posterior'\]"):
        arviz_compat.add_groups(results, {"posterior": posterior})
    with pytest.raises(TypeError, match=r"group 'x' must be an xarray\.Dataset, got dict"):
        arviz_compat.build({"x": {}})
    with pytest.raises(ValueError, match="without '/'"):
        arviz_compat.build({"a/b": posterior})
    with pytest.raises(TypeError, match="results must be a"):
        group_names({"posterior": posterior})


def test_dict_to_dataset_names_axes_as_arviz():
    ds = arviz_compat.dict_to_dataset(
        {"w": np.ones((1, 4, 3)), "v": np.ones((1, 4, 2))},
        coords={"obs": ["a", "b", "c"]},
        dims={"w": ["obs"]},
        attrs={"root_seed": 7},
    )
    assert ds["w"].dims == ("chain", "draw", "obs")
    assert ds["v"].dims == ("chain", "draw", "v_dim_0")
    assert ds.attrs["root_seed"] == 7 and "created_at" in ds.attrs


# --------------------------------------------------------------- every method's groups

GAUSSIANS = (  # log pi0, sample pi0, log pi1: N(0, 1) to N(1, 1)
    lambda z: -0.5 * np.sum(z**2, axis=1),
    lambda rng, n: rng.standard_normal((n, 1)),
    lambda z: -0.5 * np.sum((z - 1) ** 2, axis=1),
)

METHODS = {
    "safebayes": lambda: calibrate_safebayes_conjugate(YX, X),
    "smc": lambda: smc(*GAUSSIANS, n_particles=100, n_runs=2, seed=1),
    "ais": lambda: ais(*GAUSSIANS, np.linspace(0, 1, 10), n_particles=100, n_runs=2, seed=1),
    "ti": lambda: thermodynamic_integration(
        *GAUSSIANS, np.linspace(0, 1, 5), chains=20, warmup=5, draws=10, seed=1
    ),
    "wbb": lambda: wbb_lasso(X, YX, 1.0, 20, seed=1),
}
PROGRAM_METHODS = {  # each takes the location template's loss program of Y on [0, 8]
    "plugin": calibrate_plugin,
    "holmes_walker": calibrate_holmes_walker,
    "gpc": lambda p: calibrate_gpc(p, backend=GridBackend(201), B=50, seed=1),
    "gibbs_path": lambda p: gibbs_path(p, omega_max=1.0, sampler=PathSampler(n_particles=200),
                                       seed=1),
    "calibrate_path": lambda p: calibrate_path(p, B=20, seed=1,
                                               sampler=PathSampler(n_particles=300, n_moves=3)),
    "wbb_program": lambda p: wbb_program(p, 20, seed=1),
}
GROUPS = {
    "plugin": ["calibration"],
    "holmes_walker": ["calibration"],
    "gpc": ["calibration"],
    "safebayes": ["calibration"],
    "gibbs_path": ["path", "path_functionals", "observed_data"],
    "calibrate_path": ["path", "path_functionals", "observed_data", "calibration"],
    "wbb_program": ["posterior", "sample_stats", "weights"],
    "smc": ["smc"],
    "ais": ["smc"],
    "ti": ["smc"],
    "wbb": ["posterior", "sample_stats", "weights"],
}


@pytest.fixture(scope="module")
def location(cmdstan):
    return location_program(Y, bounds=(0, 8))


@pytest.mark.parametrize(
    "method",
    sorted(METHODS) + [pytest.param(name, marks=pytest.mark.e2e) for name in sorted(PROGRAM_METHODS)],
)
def test_every_method_returns_native_results_that_round_trip(method, tmp_path, request):
    if method in PROGRAM_METHODS:
        results = PROGRAM_METHODS[method](request.getfixturevalue("location"))
    else:
        results = METHODS[method]()
    assert type(results) is Results
    assert sorted(group_names(results)) == sorted(GROUPS[method])
    assert_round_trip(results, tmp_path)


@pytest.mark.e2e
def test_calibrate_path_keeps_string_coords_and_attrs(tmp_path, location):
    loaded = assert_round_trip(PROGRAM_METHODS["calibrate_path"](location), tmp_path)
    rules = [str(rule) for rule in loaded["calibration"]["rule"].values]
    assert rules[:3] == ["gpc_path", "plugin", "holmes_walker"]
    assert loaded["path"]["theta"].dims == ("step", "particle", "param")


# --------------------------------------------------------------- diagnostics


def ar1(phi: float, chains: int = 4, draws: int = 500, seed: int = 20261201) -> np.ndarray:
    """Stationary AR(1) chains, unit innovations: ESS ~ n (1 - phi) / (1 + phi)."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((chains, draws))
    x = np.empty_like(noise)
    x[:, 0] = noise[:, 0] / np.sqrt(1 - phi**2)
    for t in range(1, draws):
        x[:, t] = phi * x[:, t - 1] + noise[:, t]
    return x


def test_diagnostics_match_the_ar1_theory():
    x = ar1(0.6)
    theory_ess = x.size * (1 - 0.6) / (1 + 0.6)
    assert abs(arviz_compat.ess(x) / theory_ess - 1) < 0.2
    sd = 1 / np.sqrt(1 - 0.6**2)
    assert abs(arviz_compat.mcse(x) / (sd / np.sqrt(theory_ess)) - 1) < 0.1
    assert abs(arviz_compat.rhat(x) - 1) < 0.02
    # Chains shifted by 0, 1, 2, 3: sqrt(1 + var(shifts) / sd^2) = 1.44 before ranks.
    assert arviz_compat.rhat(x + np.arange(4)[:, None]) > 1.3


def test_diagnostics_are_arviz_023s_numbers_on_both_lines():
    """Values computed by ArviZ 0.23.4 from these draws; ArviZ 1.x must agree."""
    x = ar1(0.6)
    expected = {
        "ess_bulk": (arviz_compat.ess(x), 544.0451569660115),
        "ess_tail": (arviz_compat.ess(x, method="tail"), 961.3688287458294),
        "rhat": (arviz_compat.rhat(x), 1.0127819746799445),
        "mcse_mean": (arviz_compat.mcse(x), 0.05514132893137569),
        "mcse_q90": (arviz_compat.mcse(x, method="quantile", prob=0.9), 0.07785952267663165),
    }
    for name, (value, reference) in expected.items():
        assert value == pytest.approx(reference, rel=1e-12), name


def test_tail_ess_is_the_smaller_of_the_5_and_95_percent_quantile_ess():
    x = ar1(0.3, seed=5)
    quantiles = [arviz_compat.ess(x, method="quantile", prob=p) for p in arviz_compat.TAIL_PROBS]
    assert arviz_compat.ess(x, method="tail") == min(quantiles)


def test_diagnostics_take_results_datasets_arrays():
    x = ar1(0.5)
    posterior = xr.Dataset(
        {
            "a": (("chain", "draw"), x),
            "b": (("chain", "draw", "k"), np.stack([x, -x], axis=-1)),
        },
        coords={"k": ["plus", "minus"]},
    )
    results = arviz_compat.build({"posterior": posterior})
    from_results = arviz_compat.ess(results, var_names=["b"])
    assert list(from_results.data_vars) == ["b"] and from_results["b"].dims == ("k",)
    assert float(from_results["b"].sel(k="plus")) == arviz_compat.ess(x)
    dataarray = arviz_compat.rhat(posterior["a"])
    assert isinstance(dataarray, xr.DataArray) and float(dataarray) == arviz_compat.rhat(x)
    assert arviz_compat.mcse(x[0]) == arviz_compat.mcse(x[:1])  # 1-D: one chain
    with pytest.raises(ValueError, match="shape \\(chain, draw\\) or \\(draw,\\)"):
        arviz_compat.ess(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match="var_names applies to results and Datasets"):
        arviz_compat.ess(x, var_names=["a"])


# --------------------------------------------------------------- figures


def funnel_results() -> Results:
    rng = np.random.default_rng(1)
    posterior = xr.Dataset(
        {
            "theta": (("chain", "draw", "school"), rng.normal(size=(2, 50, 3))),
            "log_tau": (("chain", "draw"), rng.normal(size=(2, 50))),
        },
        coords={"school": ["A", "B", "C"]},
    )
    stats = xr.Dataset({"diverging": (("chain", "draw"), rng.random((2, 50)) < 0.1)})
    return arviz_compat.build({"posterior": posterior, "sample_stats": stats})


def test_figures_are_matplotlib_figures():
    results = funnel_results()
    forest = arviz_compat.plot_forest(results, ["theta"], ci_prob=0.9, figsize=(6, 4))
    assert isinstance(forest, Figure)
    assert tuple(forest.get_size_inches()) == (6, 4)
    pair = arviz_compat.plot_pair(
        results, "theta", "log_tau", coords={"school": ["A"]}, labels=("theta[A]", "log tau")
    )
    assert isinstance(pair, Figure)
    axis = pair.axes[0]
    assert (axis.get_xlabel(), axis.get_ylabel()) == ("theta[A]", "log tau")
    with pytest.raises(ValueError, match=r"no posterior variables \['tau'\]"):
        arviz_compat.plot_forest(results, ["tau"])
    with pytest.raises(ValueError, match="ci_prob must be in"):
        arviz_compat.plot_forest(results, ["theta"], ci_prob=1.5)
    no_stats = arviz_compat.build({"posterior": group(results, "posterior"),
                                   "sample_stats": xr.Dataset()})
    with pytest.raises(ValueError, match="sample_stats\\['diverging'\\]"):
        arviz_compat.plot_pair(no_stats, "theta", "log_tau")
