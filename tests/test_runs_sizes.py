"""Declared data sizes read from a program and checked before anything runs."""

from __future__ import annotations

import pytest

from stanflow.runs import RunSpec
from stanflow.runs.sizes import SizeMismatch, check_shapes, declared_shapes
from stanflow.runs.spec import InvalidRunSpec, ModelInterface, check_spec

PROGRAM = """
functions {
  real f(vector x) { return sum(x); }  // data { vector[3] nope; }
}
transformed data {
  int Q = 3;
}
data {
  int<lower=0> N;  // sizes below: [N]
  int<lower=1> K;
  /* matrix[7, 7] commented_out; */
  array[N, 2] int<lower=0, upper=1> flags;
  array[N] vector<lower=0>[3] z;
  cov_matrix[K] S;
  cholesky_factor_cov[K, 2] L;
  matrix<lower=-1, upper=fmax(1, 2)>[N - 1, K] A;
  vector<lower=lower_bound>[K] upper_bound;
  vector[N > 0 ? N : 1] ternary;
  tuple(real, int) t;
  real<lower=0> sigma;
}
parameters {
  real mu;
}
"""


def test_declared_shapes_follow_the_data_block_only():
    assert declared_shapes(PROGRAM) == {
        "N": (),
        "K": (),
        "flags": ("N", 2),
        "z": ("N", 3),
        "S": ("K", "K"),
        "L": ("K", 2),
        "A": (None, "K"),
        "upper_bound": ("K",),
        "ternary": (None,),
        "sigma": (),
    }
    assert declared_shapes("parameters { real mu; }") == {}


def test_matching_sizes_pass_and_unknown_sizes_are_left_to_the_model():
    shapes = declared_shapes(PROGRAM)
    check_shapes(
        {"N": 2, "K": 3, "flags": [[0, 1], [1, 1]], "z": [[1, 2, 3]] * 2,
         "S": [[1, 0, 0]] * 3, "L": [[1, 0]] * 3, "A": [[0] * 3] * 7,
         "upper_bound": [1, 2, 3], "ternary": [1.0] * 9, "sigma": 1.0},
        shapes,
    )
    check_shapes({"N": 0, "z": []}, shapes)  # empty arrays of size 0


@pytest.mark.parametrize(
    ("data", "field", "phrase"),
    [
        (
            {"N": 3, "z": [[1, 2, 3]] * 2},
            "data['z']",
            "has shape (2, 3) but the model declares shape (3, 3) (N = 3)",
        ),
        ({"N": 2, "z": [[1, 2]] * 2}, "data['z']", "declares shape (2, 3)"),
        ({"K": 2, "S": [[1, 0, 0]] * 3}, "data['S']", "(K = 2, K = 2)"),
        ({"N": 3, "z": []}, "data['z']", "has shape (0,)"),
        ({"K": 3, "A": [[0, 0]] * 4}, "data['A']", "declares shape ('?', 3)"),
    ],
)
def test_mismatched_sizes_name_the_field_and_the_size(data, field, phrase):
    with pytest.raises(SizeMismatch) as caught:
        check_shapes(data, declared_shapes(PROGRAM))
    assert caught.value.field == field
    assert phrase in str(caught.value)


def test_check_spec_reports_sizes_with_the_run_index():
    model = ModelInterface(
        inputs={"N": {"type": "int", "dimensions": 0}, "y": {"type": "real", "dimensions": 1}},
        parameters={},
        threaded=False,
        shapes={"N": (), "y": ("N",)},
    )
    check_spec(RunSpec(data={"N": 2, "y": [1.0, 2.0]}), 0, model)
    with pytest.raises(InvalidRunSpec) as caught:
        check_spec(RunSpec(data={"N": 3, "y": [1.0, 2.0]}), 7, model)
    assert str(caught.value).startswith("run 7, data['y']: has shape (2,)")
