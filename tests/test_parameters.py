"""One parameter check for every slot file: the ``// params:`` declarations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stanflow.gibbs.priors import PRIORS
from stanflow.losses import LOSSES
from stanflow.models import STAN_DIR
from stanflow.parameters import Parameter, check_vector, declared_parameters, values_in_order

SLOT_FOLDERS = ("losses", "priors", "wbb/penalties", "qpaths")


def test_every_shipped_slot_file_declares_its_parameters():
    files = [p for folder in SLOT_FOLDERS for p in (STAN_DIR / folder).glob("*.stanfunctions")]
    assert len(files) >= 15
    for path in files:
        if path.name == "qpath.stanfunctions":  # the template's own functions, no slot
            continue
        assert declared_parameters(path) is not None, path


@pytest.mark.parametrize("registry", [LOSSES, PRIORS], ids=["losses", "priors"])
def test_the_python_twins_declare_what_the_files_declare(registry):
    for name, item in registry.items():
        assert declared_parameters(item.stan_file) == tuple(item.params), name


def test_declarations_are_read_and_values_checked(tmp_path):
    file = tmp_path / "mine.stanfunctions"
    file.write_text(
        "// A loss of mine.\n// params: a, b in (0, inf), c in (-1, 1)\n"
        "real loss(real y, real f, vector loss_params) {\n  return 0;\n}\n"
    )
    assert declared_parameters(file) == (
        Parameter("a"), Parameter("b", 0.0, math.inf), Parameter("c", -1.0, 1.0)
    )
    assert check_vector(file, [5, 2, 0.5], "loss_params") == (5.0, 2.0, 0.5)
    assert check_vector(file, {"a": 1, "b": 2, "c": 0}, "loss_params") == (1.0, 2.0, 0.0)
    with pytest.raises(
        ValueError, match=r"mine.stanfunctions takes 3 parameter\(s\) \['a', 'b', 'c'\], got 2"
    ):
        check_vector(file, [1, 2], "loss_params")
    with pytest.raises(
        ValueError,
        match=r"loss_params\['b'\] of mine.stanfunctions must be finite and in \(0, inf\), got -2",
    ):
        check_vector(file, [1, -2, 0], "loss_params")
    with pytest.raises(ValueError, match=r"missing \['c'\], unknown \['d'\]"):
        check_vector(file, {"a": 1, "b": 2, "d": 0}, "loss_params")
    with pytest.raises(TypeError, match="must be a sequence"):
        check_vector(file, "1, 2, 3", "loss_params")


def test_a_parameter_can_exclude_zero(tmp_path):
    file = tmp_path / "linex_like.stanfunctions"
    file.write_text("// params: c != 0, d\nreal loss(real y, real f, vector p) {\n  return 0;\n}\n")
    assert declared_parameters(file) == (Parameter("c", nonzero=True), Parameter("d"))
    assert check_vector(file, [-0.5, 0.0], "loss_params") == (-0.5, 0.0)
    with pytest.raises(ValueError, match=r"loss_params\['c'\] of linex_like.stanfunctions must be non-zero"):
        check_vector(file, [0.0, 1.0], "loss_params")


def test_undeclared_files_are_checked_for_finiteness_only(tmp_path):
    file = tmp_path / "old.stanfunctions"
    file.write_text("real loss(real y, real f, vector loss_params) {\n  return 0;\n}\n")
    assert declared_parameters(file) is None
    assert check_vector(file, [1, 2], "loss_params") == (1.0, 2.0)
    with pytest.raises(ValueError, match="must be finite"):
        check_vector(file, [math.nan], "loss_params")


def test_a_bad_declaration_names_the_file_and_line(tmp_path):
    file = tmp_path / "bad.stanfunctions"
    file.write_text(
        "// A loss.\n// params: a in [0, 1]\nreal loss(real y, real f, vector p) {\n  return 0;\n}\n"
    )
    with pytest.raises(ValueError, match=r"bad.stanfunctions, line 2: cannot read the parameter 'a in \[0"):
        declared_parameters(file)


@pytest.mark.parametrize(
    "given",
    [{0.5, 1.5}, (v for v in (0.5, 1.5)), np.ones((2, 1))],
    ids=["set", "generator", "2-D array"],
)
def test_values_without_a_safe_order_are_refused(given):
    with pytest.raises(TypeError, match="loss_params must be a sequence of numbers"):
        values_in_order(given, "loss_params")
