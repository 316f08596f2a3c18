"""InferenceData conversion without a compiler: pure column parsing, and real cmdstanpy
fit objects read from synthetic Stan CSV files (``cmdstanpy.from_csv``)."""

from __future__ import annotations

from pathlib import Path

import cmdstanpy
import numpy as np
import pytest
import xarray as xr
from cmdstanpy.cmdstan_args import CmdStanArgs, GenerateQuantitiesArgs
from cmdstanpy.stanfit import RunSet

from stanflow import arviz_compat, idata
from stanflow.arviz_compat import group_names
from stanflow.idata import columns_to_dataset, data_to_dataset, to_inference_data

NUTS = [
    "lp__",
    "accept_stat__",
    "stepsize__",
    "treedepth__",
    "n_leapfrog__",
    "divergent__",
    "energy__",
]
# Stan writes arrays column-major: m.1.1, m.2.1, m.1.2, ...
PARAMS = [
    "mu",
    "theta.1",
    "theta.2",
    *(f"m.{i}.{j}" for j in (1, 2, 3) for i in (1, 2)),
]
CHAINS, DRAWS = 2, 6


def param_rows(n: int, offset: float) -> np.ndarray:
    """Rows for PARAMS.

    mu = offset + draw, theta = (-mu, -2 mu), m[i, j] = 10 i + j + offset.
    """
    mu = offset + np.arange(n, dtype=float)
    m = [np.full(n, 10 * i + j + offset) for j in (1, 2, 3) for i in (1, 2)]
    return np.column_stack([mu, -mu, -2 * mu, *m])


def check_matrix(ds: xr.Dataset, offset: float) -> None:
    m = ds["m"].values
    for i in range(2):
        for j in range(3):
            assert np.all(m[..., i, j] == 10 * (i + 1) + (j + 1) + offset)


@pytest.fixture(scope="module")
def csv_dir(tmp_path_factory, write_stan_csv) -> Path:
    folder = tmp_path_factory.mktemp("csv")
    for chain in range(1, CHAINS + 1):
        stats = np.column_stack(
            [
                np.full((DRAWS, 1), -3.0),
                np.full((DRAWS, 1), 0.9),
                np.full((DRAWS, 1), 0.5),
                np.full((DRAWS, 1), 2.0),
                np.full((DRAWS, 1), 3.0),
                (np.arange(DRAWS) == chain)[:, None].astype(float),
                np.full((DRAWS, 1), 4.0),
            ]
        )
        rows = np.column_stack([stats, param_rows(DRAWS, 100.0 * chain)])
        write_stan_csv(
            folder / f"sample_{chain}.csv", "sample", NUTS + PARAMS, rows, chain=chain
        )
        gq_header = ["y_rep.1", "y_rep.2", "log_lik.1", "log_lik.2", "mu"]
        gq_rows = np.column_stack(
            [np.full((DRAWS, 4), float(chain)), np.full(DRAWS, -7.0)]
        )
        write_stan_csv(
            folder / f"gq_{chain}.csv",
            "generate_quantities",
            gq_header,
            gq_rows,
            chain=chain,
            fitted_params=folder / f"sample_{chain}.csv",
        )
    write_stan_csv(
        folder / "mle.csv",
        "optimize",
        ["lp__", *PARAMS],
        np.column_stack([[-1.5], param_rows(1, 5.0)]),
    )
    vb_header = [
        "lp__",
        "log_p__",
        "log_g__",
        *PARAMS,
        "z.1.real",
        "z.1.imag",
        "z.2.real",
        "z.2.imag",
    ]
    vb_rows = np.column_stack(
        [
            np.zeros(DRAWS + 1),
            np.full(DRAWS + 1, -2.0),
            np.full(DRAWS + 1, -3.0),
            param_rows(DRAWS + 1, 0.0),
            np.tile([1.0, 2.0, 3.0, 4.0], (DRAWS + 1, 1)),
        ]
    )
    write_stan_csv(folder / "vb.csv", "variational", vb_header, vb_rows, draws=DRAWS)
    write_stan_csv(
        folder / "laplace.csv",
        "laplace",
        ["log_p__", "log_q__", *PARAMS],
        np.column_stack(
            [np.full(DRAWS, -1.0), np.full(DRAWS, -2.0), param_rows(DRAWS, 7.0)]
        ),
        mode=folder / "mle.csv",
    )
    write_stan_csv(
        folder / "pathfinder.csv",
        "pathfinder",
        ["lp_approx__", "lp__", *PARAMS],
        np.column_stack(
            [np.full(DRAWS, -1.0), np.full(DRAWS, -2.0), param_rows(DRAWS, 9.0)]
        ),
    )
    return folder


@pytest.fixture(scope="module")
def mcmc(csv_dir) -> cmdstanpy.CmdStanMCMC:
    return cmdstanpy.from_csv(
        [str(csv_dir / f"sample_{c}.csv") for c in range(1, CHAINS + 1)]
    )


@pytest.fixture(scope="module")
def gq(csv_dir, mcmc) -> cmdstanpy.CmdStanGQ:
    # cmdstanpy cannot read GQ CSV files alone; assemble the RunSet it would build.
    fitted = [str(csv_dir / f"sample_{c}.csv") for c in range(1, CHAINS + 1)]
    args = CmdStanArgs(
        model_name="probe_model",
        model_exe="probe_model",
        chain_ids=list(range(1, CHAINS + 1)),
        method_args=GenerateQuantitiesArgs(csv_files=fitted),
    )
    runset = RunSet(args=args, chains=CHAINS, chain_ids=list(range(1, CHAINS + 1)))
    runset._csv_files = [str(csv_dir / f"gq_{c}.csv") for c in range(1, CHAINS + 1)]
    for chain in range(CHAINS):
        runset._set_retcode(chain, 0)
    return cmdstanpy.CmdStanGQ(runset, mcmc)


@pytest.fixture(scope="module")
def fits(csv_dir, mcmc, gq) -> dict:
    return {
        "sample": mcmc,
        "optimize": cmdstanpy.from_csv(str(csv_dir / "mle.csv")),
        "variational": cmdstanpy.from_csv(str(csv_dir / "vb.csv")),
        "laplace": cmdstanpy.from_csv(str(csv_dir / "laplace.csv")),
        "pathfinder": cmdstanpy.from_csv(str(csv_dir / "pathfinder.csv")),
        "generate_quantities": gq,
    }


# ---------------------------------------------------------------- columns_to_dataset


def test_columns_to_dataset_reshapes_column_major_and_any_order():
    names = ["a", "m[1,1]", "m[2,1]", "m[1,2]", "m[2,2]", "m[1,3]", "m[2,3]"]
    values = np.array([0.0, 11, 21, 12, 22, 13, 23])
    order = np.random.default_rng(1).permutation(len(names))
    for perm in (np.arange(len(names)), order):
        draws = np.broadcast_to(values[perm], (2, 3, len(names)))
        ds = columns_to_dataset([names[k] for k in perm], draws)
        assert ds["m"].dims == ("chain", "draw", "m_dim_0", "m_dim_1")
        np.testing.assert_array_equal(
            ds["m"].values[1, 2], [[11, 12, 13], [21, 22, 23]]
        )
        assert ds["a"].dims == ("chain", "draw")
    np.testing.assert_array_equal(ds["chain"], [0, 1])
    np.testing.assert_array_equal(ds["draw"], [0, 1, 2])


def test_columns_to_dataset_dims_and_coords():
    names = ["theta[1]", "theta[2]", "theta[3]", "b[1,1]", "b[2,1]"]
    ds = columns_to_dataset(
        names,
        np.zeros((1, 2, 5)),
        coords={"school": ["A", "B", "C"]},
        dims={"theta": ["school"], "b": ["row"]},
    )
    assert ds["theta"].dims == ("chain", "draw", "school")
    assert list(ds["school"].values) == ["A", "B", "C"]
    assert ds["b"].dims == ("chain", "draw", "row", "b_dim_1")
    np.testing.assert_array_equal(ds["row"], [0, 1])


def test_columns_to_dataset_complex_and_tuples():
    names = [
        "z[1,real]",
        "z[1,imag]",
        "z[2,real]",
        "z[2,imag]",
        "w[real]",
        "w[imag]",
        "t.1",
        "t.2[1]",
        "t.2[2]",
        "u[1].1",
        "u[2].1",
        "u[1].2[1]",
        "u[2].2[1]",
    ]
    draws = np.arange(len(names), dtype=float)[None, None, :]
    ds = columns_to_dataset(names, draws)
    assert ds["z"].dims == ("chain", "draw", "z_dim_0", "z_dim_1")
    assert list(ds["z_dim_1"].values) == ["real", "imag"]
    np.testing.assert_array_equal(ds["z"].sel(z_dim_1="imag").values[0, 0], [1, 3])
    np.testing.assert_array_equal(ds["w"].values[0, 0], [4, 5])
    assert ds["t.1"].item() == 6
    np.testing.assert_array_equal(ds["t.2"].values[0, 0], [7, 8])
    np.testing.assert_array_equal(ds["u.1"].values[0, 0], [9, 10])
    assert ds["u.2"].shape == (1, 1, 2, 1)


@pytest.mark.parametrize(
    ("names", "shape", "message"),
    [
        (["a", "b"], (1, 1, 3), "draws has 3 columns but names has 2"),
        (["a"], (1, 1), r"draws must have shape \(chain, draw, column\)"),
        (["t[1]", "t[3]"], (1, 1, 2), "the columns of 't' do not fill a 3 array"),
        (["t[1]", "t[1]"], (1, 1, 2), "the columns of 't' do not fill"),
        (["t[0]"], (1, 1, 1), "bad index '0' in column name 't\\[0\\]'"),
        (["t[x]"], (1, 1, 1), "bad index 'x'"),
        (
            ["t[1]", "t"],
            (1, 1, 2),
            "'t' does not have the shape of the other 't' columns",
        ),
        (["[1]"], (1, 1, 1), "has no variable name"),
        (["a]"], (1, 1, 1), "cannot parse column name"),
    ],
)
def test_columns_to_dataset_errors(names, shape, message):
    with pytest.raises(ValueError, match=message):
        columns_to_dataset(names, np.zeros(shape))


@pytest.mark.parametrize(
    ("coords", "dims", "message"),
    [
        (
            {"s": ["A", "B"]},
            {"theta": ["s"]},
            "coords\\['s'\\] has 2 values but dim 's' of 'theta' has size 3",
        ),
        (
            {},
            {"theta": ["s", "extra"]},
            "dims\\['theta'\\] names 2 dims but 'theta' has 1",
        ),
        ({}, {"theta": "s"}, "dims\\['theta'\\] must be a sequence of dim names"),
        (
            {},
            {"theta": ["s"], "b": ["s"]},
            "dim 's' has size 2 in 'b' but 3 in 'theta'",
        ),
    ],
)
def test_columns_to_dataset_coords_dims_errors(coords, dims, message):
    names = ["theta[1]", "theta[2]", "theta[3]", "b[1]", "b[2]"]
    with pytest.raises(ValueError, match=message):
        columns_to_dataset(names, np.zeros((1, 1, 5)), coords=coords, dims=dims)


def test_data_to_dataset():
    ds = data_to_dataset(
        {"J": 3, "y": [1.0, 2.0, 3.0]}, coords={"s": list("abc")}, dims={"y": ["s"]}
    )
    assert ds["J"].dims == ()
    assert ds["y"].dims == ("s",)
    with pytest.raises(ValueError, match="data\\['name'\\] must be numeric"):
        data_to_dataset({"name": ["x"]})
    with pytest.raises(ValueError, match="data must be a mapping"):
        data_to_dataset([1, 2])


# ---------------------------------------------------------------- to_inference_data


def test_mcmc_goes_through_arviz_with_coords_and_data(mcmc):
    data = to_inference_data(
        mcmc,
        coords={"k": ["first", "second"]},
        dims={"theta": ["k"], "y": ["k"]},
        observed_data={"y": [1.0, 2.0]},
        constant_data={"N": 2},
    )
    assert {"posterior", "sample_stats", "observed_data", "constant_data"} <= set(
        group_names(data)
    )
    post = data.posterior
    assert post.sizes == {
        "chain": CHAINS,
        "draw": DRAWS,
        "k": 2,
        "m_dim_0": 2,
        "m_dim_1": 3,
    }
    np.testing.assert_array_equal(post["mu"].values[1], 200 + np.arange(DRAWS))
    np.testing.assert_array_equal(
        post["theta"].sel(k="second").values, -2 * post["mu"].values
    )
    check_matrix(post.isel(chain=0), 100.0)
    assert data.sample_stats["diverging"].dtype == bool
    assert int(data.sample_stats["diverging"].sum()) == CHAINS
    assert data.observed_data["y"].dims == ("k",)
    assert data.attrs["method"] == "sample" and data.attrs["num_samples"] == DRAWS


def test_variational_is_a_one_chain_posterior_with_its_mean(fits):
    fit = fits["variational"]
    data = to_inference_data(fit)
    assert data.posterior.sizes["chain"] == 1 and data.posterior.sizes["draw"] == DRAWS
    np.testing.assert_array_equal(
        data.posterior["mu"].values[0], fit.variational_sample[:, 3]
    )
    check_matrix(data.posterior, 0.0)
    assert float(data.point_estimate["mu"]) == 0.0  # the mean row comes first
    assert "chain" not in data.point_estimate.dims
    assert set(data.sample_stats.data_vars) == {"lp", "log_p", "log_g"}
    assert list(data.posterior["z_dim_1"].values) == ["real", "imag"]
    np.testing.assert_array_equal(data.posterior["z"].values[0, 0], [[1, 2], [3, 4]])
    assert (
        data.attrs["method"] == "variational" and data.attrs["algorithm"] == "meanfield"
    )


def test_optimize_is_a_single_draw_posterior_with_optimizer_attrs(fits):
    data = to_inference_data(fits["optimize"], dims={"theta": ["k"]})
    assert dict(data.posterior.sizes) == {
        "chain": 1,
        "draw": 1,
        "k": 2,
        "m_dim_0": 2,
        "m_dim_1": 3,
    }
    assert data.posterior["mu"].item() == 5.0
    assert data.sample_stats["lp"].item() == -1.5
    check_matrix(data.posterior, 5.0)
    assert data.attrs["method"] == "optimize"
    assert data.attrs["algorithm"] == "lbfgs"
    assert data.attrs["converged"] == 1


def test_laplace_has_log_p_log_q_and_the_mode(fits):
    data = to_inference_data(fits["laplace"])
    assert data.posterior.sizes["draw"] == DRAWS
    assert set(data.sample_stats.data_vars) == {"log_p", "log_q"}
    np.testing.assert_array_equal(data.posterior["mu"].values[0], 7 + np.arange(DRAWS))
    assert float(data.point_estimate["mu"]) == 5.0
    assert "lp__" not in data.point_estimate and "lp" not in data.point_estimate


def test_pathfinder_draws(fits):
    data = to_inference_data(fits["pathfinder"])
    assert data.posterior.sizes["chain"] == 1 and data.posterior.sizes["draw"] == DRAWS
    assert set(data.sample_stats.data_vars) == {"lp_approx", "lp"}
    check_matrix(data.posterior, 9.0)


def test_generated_quantities_merge_into_the_parent(gq):
    data = to_inference_data(
        gq, posterior_predictive="y_rep", dims={"y_rep": ["k"], "theta": ["k"]}
    )
    assert {
        "posterior",
        "posterior_predictive",
        "log_likelihood",
        "sample_stats",
    } <= set(group_names(data))
    np.testing.assert_array_equal(
        data.posterior_predictive["y_rep"].values[1], np.full((DRAWS, 2), 2.0)
    )
    assert data.posterior_predictive["y_rep"].dims == ("chain", "draw", "k")
    assert "log_lik" in data.log_likelihood
    assert np.all(data.posterior["mu"].values == -7.0)  # the generated value wins
    assert "theta" in data.posterior and "y_rep" not in data.posterior
    assert data.attrs["method"] == "sample"  # the parent's configuration


def test_generated_quantities_without_moving_anything(gq):
    data = to_inference_data(gq, log_likelihood=[])
    assert "log_likelihood" not in group_names(data)
    assert {"y_rep", "log_lik", "mu", "theta", "m"} <= set(data.posterior.data_vars)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"dims": {"thetaa": ["k"]}},
            ValueError,
            r"dims names \['thetaa'\], which are neither",
        ),
        (
            {"coords": {"k": [1, 2, 3]}, "dims": {"theta": ["k"]}},
            ValueError,
            r"coords\['k'\] has 3 values",
        ),
        (
            {"dims": {"theta": ["k"], "y": ["k"]}, "observed_data": {"y": [1, 2, 3]}},
            ValueError,
            "dim 'k' has size",
        ),
        (
            {"posterior_predictive": "y_rep"},
            ValueError,
            r"posterior_predictive: no Stan variable \['y_rep'\]",
        ),
        (
            {"log_likelihood": ["nope"]},
            ValueError,
            r"log_likelihood: no Stan variable \['nope'\]",
        ),
    ],
)
def test_argument_errors_name_the_field(mcmc, kwargs, error, message):
    with pytest.raises(error, match=message):
        to_inference_data(mcmc, **kwargs)


def test_rejects_non_fits():
    with pytest.raises(TypeError, match=r"fit must be a cmdstanpy result .* got dict"):
        to_inference_data({"mu": [1.0]})


# ---------------------------------------------------------------- save / load


@pytest.mark.parametrize(
    "method",
    [
        "sample",
        "optimize",
        "variational",
        "laplace",
        "pathfinder",
        "generate_quantities",
    ],
)
def test_netcdf_round_trip_preserves_everything(fits, tmp_path, method):
    original = to_inference_data(
        fits[method],
        coords={"k": ["first", "second"]},
        dims={"theta": ["k"], "y": ["k"]},
        observed_data={"y": [0.5, 1.5]},
    )
    path = idata.save(original, tmp_path / "fit.nc")
    loaded = idata.load(path)

    assert type(loaded) is arviz_compat.Results
    assert group_names(loaded) == group_names(original)
    for name in group_names(original):
        xr.testing.assert_identical(
            arviz_compat.group(loaded, name), arviz_compat.group(original, name)
        )
    assert loaded.attrs == original.attrs
    assert [p.name for p in tmp_path.iterdir()] == ["fit.nc"]


def test_save_replaces_atomically_and_keeps_the_old_file_on_failure(
    fits, tmp_path, monkeypatch
):
    path = tmp_path / "fit.nc"
    idata.save(to_inference_data(fits["optimize"]), path)
    idata.save(to_inference_data(fits["pathfinder"]), path)
    assert idata.load(path).posterior.sizes["draw"] == DRAWS

    def broken(results, filename):
        Path(filename).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(arviz_compat, "write_netcdf", broken)
    with pytest.raises(OSError, match="disk full"):
        idata.save(to_inference_data(fits["optimize"]), path)
    monkeypatch.undo()
    assert idata.load(path).posterior.sizes["draw"] == DRAWS
    assert [p.name for p in tmp_path.iterdir()] == ["fit.nc"]


def test_save_and_load_argument_errors(tmp_path, fits):
    with pytest.raises(TypeError, match=r"idata must be a .*the installed ArviZ's results"):
        idata.save({"posterior": None}, tmp_path / "x.nc")
    with pytest.raises(ValueError, match=r"path: folder .* does not exist"):
        idata.save(to_inference_data(fits["optimize"]), tmp_path / "no" / "x.nc")
    with pytest.raises(ValueError, match="path: file not found"):
        idata.load(tmp_path / "absent.nc")
