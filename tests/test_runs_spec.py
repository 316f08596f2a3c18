"""Run specifications: seeds, CmdStan arguments and validation against a model.

No compiler needed: the model interface is written out as stanc's ``--info``
prints it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from stanflow.runs.arguments import ArgumentError, check_args, method_tokens
from stanflow.runs.seeds import MAX_SEED, run_seed
from stanflow.runs.spec import (
    InvalidRunSpec,
    ModelInterface,
    RunSpec,
    as_spec,
    check_spec,
)

# stanc --info of: data { int<lower=0> N; vector[N] y; array[N] int k;
# matrix[2, 2] m; complex z; tuple(real, int) t; } parameters { real mu; vector[2] b; }
INPUTS = {
    "N": {"type": "int", "dimensions": 0},
    "y": {"type": "real", "dimensions": 1},
    "k": {"type": "int", "dimensions": 1},
    "m": {"type": "real", "dimensions": 2},
    "z": {"type": "complex", "dimensions": 0},
    "t": {
        "type": [{"type": "real", "dimensions": 0}, {"type": "int", "dimensions": 0}],
        "dimensions": 0,
    },
}
PARAMETERS = {
    "mu": {"type": "real", "dimensions": 0},
    "b": {"type": "real", "dimensions": 1},
}
MODEL = ModelInterface(inputs=INPUTS, parameters=PARAMETERS, threaded=True)
DATA = {
    "N": 3,
    "y": [1.0, 2.0, 3.5],
    "k": [0, 1, 1],
    "m": [[1, 0], [0, 1]],
    "z": 1 + 2j,
    "t": (0.5, 2),
}


def invalid(spec: RunSpec, index: int = 4, model: ModelInterface = MODEL):
    with pytest.raises(InvalidRunSpec) as caught:
        check_spec(spec, index, model)
    assert caught.value.index == index
    assert str(caught.value).startswith(f"run {index}, {caught.value.field}: ")
    return caught.value


# --- seeds ------------------------------------------------------------------


def test_run_seeds_are_the_children_numpy_spawns():
    children = np.random.SeedSequence(2024).spawn(50)
    expected = [int(c.generate_state(1, dtype=np.uint32)[0]) for c in children]
    assert [run_seed(2024, i) for i in range(50)] == expected
    assert len(set(expected)) == 50
    assert all(0 <= seed <= MAX_SEED for seed in expected)


def test_run_seed_depends_on_root_and_index_only():
    assert (
        run_seed(7, 30)
        == np.random.SeedSequence(7).spawn(31)[30].generate_state(1, dtype=np.uint32)[0]
    )
    assert run_seed(7, 3) != run_seed(8, 3)


@pytest.mark.parametrize("root", [-1, 1.5, True, "1"])
def test_run_seed_rejects_bad_roots(root):
    with pytest.raises((TypeError, ValueError)):
        run_seed(root, 0)


# --- CmdStan arguments ------------------------------------------------------


def test_sample_tokens_name_only_what_was_given_in_cmdstan_order():
    args = check_args(
        "sample",
        {
            "metric": "dense_e",
            "max_depth": np.int64(7),
            "adapt.delta": 0.95,
            "num_samples": 200,
            "stepsize": np.float32(0.5),
        },
    )
    assert args == {
        "metric": "dense_e",
        "max_depth": 7,
        "adapt.delta": 0.95,
        "num_samples": 200,
        "stepsize": 0.5,
    }
    assert method_tokens("sample", args) == [
        "method=sample",
        "num_samples=200",
        "adapt",
        "delta=0.95",
        "algorithm=hmc",
        "stepsize=0.5",
        "engine=nuts",
        "max_depth=7",
        "metric=dense_e",
    ]
    assert method_tokens("sample", {}) == ["method=sample"]


def test_own_values_come_before_subgroups_so_iter_is_not_taken_by_adapt():
    args = check_args(
        "variational", {"adapt.iter": 20, "iter": 500, "adapt.engaged": 0}
    )
    assert args["adapt.engaged"] is False
    assert method_tokens("variational", args) == [
        "method=variational",
        "iter=500",
        "adapt",
        "engaged=0",
        "iter=20",
    ]


def test_sig_figs_is_an_output_argument_of_every_method():
    from stanflow.runs.arguments import output_tokens

    for method in ("sample", "optimize", "variational", "pathfinder"):
        args = check_args(method, {"sig_figs": 18})
        assert method_tokens(method, args) == [f"method={method}"]
        assert output_tokens(args) == ["sig_figs=18"]
    with pytest.raises(ArgumentError, match=r"in \[-1, 18\]"):
        check_args("sample", {"sig_figs": 19})


def test_optimize_and_laplace_tokens(tmp_path):
    mode = tmp_path / "mode.csv"
    mode.write_text("lp__,mu\n0,1\n")
    args = check_args(
        "optimize", {"algorithm": "bfgs", "tol_grad": 1e-10, "jacobian": True}
    )
    assert method_tokens("optimize", args) == [
        "method=optimize",
        "jacobian=1",
        "algorithm=bfgs",
        "tol_grad=1e-10",
    ]
    laplace = check_args("laplace", {"mode": mode, "draws": 50})
    assert method_tokens("laplace", laplace) == [
        "method=laplace",
        f"mode={mode}",
        "draws=50",
    ]


@pytest.mark.parametrize(
    ("method", "args", "field", "phrase"),
    [
        ("sample", {"maxdepth": 3}, "maxdepth", "is not a sample argument"),
        ("sample", {"adapt.delta": 1.0}, "adapt.delta", "in (0, 1)"),
        ("sample", {"thin": 0}, "thin", ">= 1"),
        ("sample", {"thin": 2.0}, "thin", "must be an int"),
        ("sample", {"num_samples": True}, "num_samples", "must be an int"),
        ("sample", {"stepsize": float("nan")}, "stepsize", "finite"),
        ("sample", {"metric": "diag"}, "metric", "one of"),
        ("sample", {"engine": "static", "max_depth": 3}, "max_depth", "engine='nuts'"),
        ("sample", {"algorithm": "fixed_param", "engine": "nuts"}, "engine", "'hmc'"),
        ("sample", {"num_warmup": 0}, "num_warmup", "adapt.engaged"),
        ("sample", {"num_chains": 4}, "num_chains", "chains"),
        ("sample", {"save_warmup": True}, "save_warmup", "not supported"),
        (
            "sample",
            {"metric_file": "/no/such/file.json"},
            "metric_file",
            "existing file",
        ),
        (
            "optimize",
            {"algorithm": "newton", "init_alpha": 0.1},
            "init_alpha",
            "'lbfgs'",
        ),
        ("variational", {"eta": -1}, "eta", "> 0"),
        ("laplace", {}, "mode", "needs"),
        (
            "pathfinder",
            {"adapt.delta": 0.9},
            "adapt.delta",
            "not a pathfinder argument",
        ),
    ],
)
def test_bad_arguments_name_the_field(method, args, field, phrase):
    with pytest.raises(ArgumentError) as caught:
        check_args(method, args)
    assert caught.value.field == field
    assert phrase in str(caught.value)


def test_warmup_zero_is_fine_without_adaptation():
    assert check_args("sample", {"num_warmup": 0, "adapt.engaged": False}) == {
        "num_warmup": 0,
        "adapt.engaged": False,
    }


# --- run specifications -----------------------------------------------------


def test_valid_spec_is_canonical():
    run = check_spec(
        RunSpec(data=DATA, inits={"mu": 0.5}, args={"num_samples": 10}, chains=2),
        3,
        MODEL,
    )
    assert run.index == 3 and run.chains == 2 and run.threads == 2
    assert run.data["N"].dtype == np.int64 and run.data["N"].ndim == 0
    assert run.data["y"].dtype == float and run.data["m"].shape == (2, 2)
    assert run.data["z"].dtype == complex
    assert run.data["t"] == (0.5, 2)
    assert run.inits == {"mu": 0.5}
    assert run.seed is None


def test_integral_floats_are_accepted_for_int_data():
    run = check_spec(RunSpec(data={**DATA, "k": np.array([0.0, 1.0, 2.0])}), 0, MODEL)
    assert run.data["k"].dtype == np.int64
    assert run.data["k"].tolist() == [0, 1, 2]


def test_empty_arrays_may_have_fewer_dims():
    run = check_spec(
        RunSpec(data={**DATA, "N": 0, "y": [], "k": [], "m": []}), 0, MODEL
    )
    assert run.data["m"].size == 0


@pytest.mark.parametrize(
    ("data", "field", "phrase"),
    [
        ({k: v for k, v in DATA.items() if k != "y"}, "data['y']", "missing"),
        ({**DATA, "y": [[1.0], [2.0]]}, "data['y']", "has 2 dims"),
        ({**DATA, "N": 3.5}, "data['N']", "non-integer"),
        ({**DATA, "k": [0, 1, 1.5]}, "data['k']", "non-integer"),
        ({**DATA, "k": [0, 1, np.inf]}, "data['k']", "non-integer"),
        ({**DATA, "y": [1.0, 2.0j]}, "data['y']", "real values"),
        ({**DATA, "y": ["a", "b"]}, "data['y']", "real values"),
        ({**DATA, "m": [[1, 0], [0]]}, "data['m']", "rectangular"),
        ({**DATA, "t": (1.0,)}, "data['t']", "tuple of 2"),
        ({**DATA, "t": (1.0, 2.5)}, "data['t'].2", "non-integer"),
    ],
)
def test_bad_data_names_the_run_and_the_field(data, field, phrase):
    error = invalid(RunSpec(data=data))
    assert error.field == field
    assert phrase in str(error)


def test_data_from_a_stan_json_file(tmp_path):
    path = tmp_path / "data.json"
    path.write_text(
        json.dumps(
            {
                **DATA,
                "y": [1.0, "NaN", "-Infinity"],
                "z": [1, 2],
                "t": {"1": 0.5, "2": 2},
            }
        )
    )
    run = check_spec(RunSpec(data=path), 0, MODEL)
    assert np.isnan(run.data["y"][1]) and run.data["y"][2] == -np.inf
    error = invalid(RunSpec(data=tmp_path / "missing.json"))
    assert error.field == "data" and "not found" in str(error)


@pytest.mark.parametrize(
    ("inits", "field", "phrase"),
    [
        ({"nu": 1.0}, "inits['nu']", "not a parameter"),
        ({"b": 1.0}, "inits['b']", "0 dims"),
        (-1.0, "inits", ">= 0"),
        (object(), "inits", "mapping or a JSON file"),
    ],
)
def test_bad_inits_name_the_field(inits, field, phrase):
    error = invalid(RunSpec(data=DATA, inits=inits))
    assert error.field == field
    assert phrase in str(error)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (RunSpec(data=DATA, method="nuts"), "method"),
        (RunSpec(data=DATA, args={"delta": 0.9}), "args['delta']"),
        (RunSpec(data=DATA, seed=-3), "seed"),
        (RunSpec(data=DATA, seed=2**32), "seed"),
        (RunSpec(data=DATA, chains=0), "chains"),
        (RunSpec(data=DATA, chains=2, method="optimize"), "chains"),
        (RunSpec(data=DATA, chains=2, args={"engine": "static"}), "chains"),
        (RunSpec(data=DATA, threads_per_chain=1.0), "threads_per_chain"),
    ],
)
def test_bad_run_fields_are_named(spec, field):
    assert invalid(spec).field == field


def test_threads_need_a_threaded_model():
    serial = ModelInterface(inputs=INPUTS, parameters=PARAMETERS, threaded=False)
    assert check_spec(RunSpec(data=DATA, chains=2), 0, serial).threads == 0
    assert invalid(RunSpec(data=DATA, threads_per_chain=2), model=serial).field == (
        "threads_per_chain"
    )


def test_unknown_model_source_skips_data_checks():
    unknown = ModelInterface(inputs=None, parameters=None, threaded=True)
    run = check_spec(RunSpec(data={"anything": [1, 2]}, inits={"x": 1}), 0, unknown)
    assert run.data == {"anything": [1, 2]} and run.inits == {"x": 1}


def test_specs_may_be_mappings():
    assert as_spec({"method": "optimize", "seed": 3}, 0) == RunSpec(
        method="optimize", seed=3
    )
    with pytest.raises(InvalidRunSpec) as caught:
        as_spec({"dta": {}}, 5)
    assert caught.value.index == 5 and caught.value.field == "dta"
    with pytest.raises(InvalidRunSpec):
        as_spec([1, 2], 0)
