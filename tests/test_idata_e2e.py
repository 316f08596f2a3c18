"""to_inference_data on real runs of every cmdstanpy method; netCDF round trips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from stanflow import arviz_compat, idata
from stanflow.models import compile_model

pytestmark = pytest.mark.e2e

PROBE = Path(__file__).parent / "stan" / "idata_probe.stan"
DATA = {"N": 5, "y": [1.2, -0.3, 2.5, 0.8, 1.9]}
OBS = ["a", "b", "c", "d", "e"]
STATS = {
    "sample": {
        "lp",
        "acceptance_rate",
        "step_size",
        "tree_depth",
        "n_steps",
        "diverging",
        "energy",
    },
    "optimize": {"lp"},
    "variational": {"lp", "log_p", "log_g"},
    "laplace": {"log_p", "log_q"},
    "pathfinder": {"lp_approx", "lp"},
}
STATS["generate_quantities"] = STATS["sample"]


@pytest.fixture(scope="module")
def fits(cmdstan, tmp_path_factory) -> dict:
    model = compile_model(PROBE)

    def out(method: str) -> str:
        # One folder per run: cmdstanpy names files by model and second, so runs
        # sharing a folder within one second overwrite each other's CSV files.
        return str(tmp_path_factory.mktemp(method))

    common = {"data": DATA, "seed": 3}
    mcmc = model.sample(
        chains=2,
        iter_warmup=200,
        iter_sampling=100,
        show_progress=False,
        output_dir=out("sample"),
        **common,
    )
    # laplace_sample needs a mode found with the same jacobian setting
    mle = model.optimize(jacobian=True, output_dir=out("optimize"), **common)
    return {
        "sample": mcmc,
        "optimize": mle,
        "variational": model.variational(
            draws=100, require_converged=False, output_dir=out("vb"), **common
        ),
        "laplace": model.laplace_sample(
            mode=mle, draws=100, output_dir=out("laplace"), **common
        ),
        "pathfinder": model.pathfinder(
            draws=100, output_dir=out("pathfinder"), **common
        ),
        "generate_quantities": model.generate_quantities(
            previous_fit=mcmc, gq_output_dir=out("gq"), **common
        ),
    }


@pytest.mark.parametrize("method", list(STATS))
def test_every_method_converts_and_round_trips(fits, method, tmp_path):
    fit = fits[method]
    data = idata.to_inference_data(
        fit,
        coords={"obs": OBS},
        dims={"y": ["obs"], "log_lik": ["obs"], "y_rep": ["obs"]},
        observed_data={"y": DATA["y"]},
        constant_data={"N": DATA["N"]},
        posterior_predictive="y_rep",
    )

    post = data.posterior
    expected_draws = {
        "sample": (2, 100),
        "generate_quantities": (2, 100),
        "optimize": (1, 1),
    }
    assert (post.sizes["chain"], post.sizes["draw"]) == expected_draws.get(
        method, (1, 100)
    )
    assert {"mu", "sigma", "m", "z"} <= set(post.data_vars)
    assert set(data.sample_stats.data_vars) == STATS[method]
    assert data.log_likelihood["log_lik"].dims == ("chain", "draw", "obs")
    assert data.posterior_predictive["y_rep"].dims == ("chain", "draw", "obs")
    assert list(data.observed_data["obs"].values) == OBS
    assert data.attrs["method"] == (
        "sample" if method == "generate_quantities" else method
    )

    # Known generated values: m[i, j] = 10 i + j (column-major in the CSV),
    # z[1] = mu + i sigma.
    m = post["m"].values
    np.testing.assert_array_equal(m[0, 0], [[11, 12, 13], [21, 22, 23]])
    assert list(post["z"].dims) == ["chain", "draw", "z_dim_0", "z_dim_1"]
    np.testing.assert_allclose(
        post["z"].sel(z_dim_1="real").values[..., 0], post["mu"].values, rtol=1e-5
    )
    np.testing.assert_allclose(
        post["z"].sel(z_dim_1="imag").values[..., 0], post["sigma"].values, rtol=1e-5
    )
    np.testing.assert_array_equal(
        post["z"].values[..., 1, :],
        np.broadcast_to([1.0, 2.0], (*post["mu"].shape, 2)),
    )

    path = idata.save(data, tmp_path / f"{method}.nc")
    loaded = idata.load(path)
    assert type(loaded) is arviz_compat.Results
    assert arviz_compat.group_names(loaded) == arviz_compat.group_names(data)
    for name in arviz_compat.group_names(data):
        xr.testing.assert_identical(
            arviz_compat.group(loaded, name), arviz_compat.group(data, name)
        )
    assert loaded.attrs == data.attrs


def test_mcmc_values_match_cmdstanpy(fits):
    fit = fits["sample"]
    post = idata.to_inference_data(fit).posterior
    np.testing.assert_array_equal(
        post["mu"].values, fit.stan_variable("mu").reshape(2, 100)
    )


def test_variational_mean_and_laplace_mode_are_kept(fits):
    vb = fits["variational"]
    mean = idata.to_inference_data(vb).point_estimate
    assert mean["mu"].item() == pytest.approx(vb.stan_variable("mu", mean=True))
    laplace = fits["laplace"]
    mode = idata.to_inference_data(laplace).point_estimate
    assert mode["mu"].item() == pytest.approx(laplace.mode.stan_variable("mu"))
