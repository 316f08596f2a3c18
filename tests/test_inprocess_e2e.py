"""In-process evaluation: stanflow's model libraries loaded by ``bridgestan``.

Each program is compiled twice, as an executable (cmdstanpy) and as a model
library (cached by content, shared with the method tests): the library's log
density and gradient must equal CmdStan's ``log_prob`` method on the same
program, data and point, and its Hessian the finite differences of its
gradient.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import bridgestan
import numpy as np
import pytest
from bridgestan.__version import __version_info__ as bridgestan_version_info

from stanflow import models
from stanflow.gibbs.templates import template_data
from stanflow.lcvi.problem import normal_mean
from stanflow.models import program_path
from stanflow.workflows import DATA_DIR

pytestmark = pytest.mark.e2e

SCHOOLS = json.loads((DATA_DIR / "eight_schools.json").read_text())
Y = np.array([0.3, -1.2, 2.5, 0.8, 1.9, -0.4, 3.1])


def _gibbs(loss: str, params: dict) -> dict:
    data = template_data(Y, loss=loss, loss_params=params, prior="normal",
                         prior_params={"mean": 0.0, "sd": 3.0}, bounds=(-5.0, 7.0))
    data.update(omega=0.8, weights=np.linspace(0.5, 1.5, len(Y)))
    return {
        "source": program_path("gibbs/location"),
        "slots": {
            "loss.stanfunctions": program_path(f"losses/{loss}.stanfunctions"),
            "prior.stanfunctions": program_path("priors/normal.stanfunctions"),
        },
        "data": data,
        "params": {"theta": 1.1},
    }


def _lcvi() -> dict:
    problem = normal_mean(np.array([0.3, -0.5, 1.1]), 1.5)
    eps_y = np.random.default_rng(2).standard_normal((4, 3))
    from stanflow.losses import bound_loss

    model = problem.bind(bound_loss("check", tau=0.2))
    data = model.stan_data(np.array([-1.0, 0.2, 0.5]), eps_y, np.full((4, 3), 0.5),
                           model.settings(1.0, "exp", 0.3, "naive", 4))
    return {
        "source": problem.source.path,
        "slots": {"loss.stanfunctions": program_path("losses/check.stanfunctions")},
        "data": data,
        "params": {"theta": 0.7},
    }


PROGRAMS = {
    "eight_schools": lambda: {
        "source": program_path("models/eight_schools_noncentered"),
        "slots": None,
        "data": SCHOOLS,
        "params": {"mu": 4.0, "tau": 3.0, "theta_tilde": [0.5, -0.2, 1.0, 0.1,
                                                          -1.3, 0.4, 0.9, -0.6]},
    },
    "gibbs_absolute": lambda: _gibbs("absolute", {}),
    "gibbs_check": lambda: _gibbs("check", {"tau": 0.3}),
    "gibbs_squared": lambda: _gibbs("squared", {}),
    "qpath": lambda: {
        "source": program_path("qpaths/qpath"),
        "slots": {
            "base.stanfunctions": program_path("qpaths/gaussian_base.stanfunctions"),
            "target.stanfunctions": program_path("qpaths/gaussian_target.stanfunctions"),
        },
        "data": {"d": 2, "beta": 0.4, "q": 0.5, "n_base_params": 2,
                 "base_params": [-2.0, 1.0], "n_target_params": 3,
                 "target_params": [2.0, 0.7, 1.5]},
        "params": {"z": [0.4, -0.9]},
    },
    "lcvi_normal_mean": _lcvi,
}


@pytest.fixture(scope="module", params=sorted(PROGRAMS))
def case(request, cmdstan):
    spec = PROGRAMS[request.param]()
    spec["executable"] = models.compile_model(spec["source"], slots=spec["slots"])
    spec["library"] = models.load(spec["source"], spec["data"], slots=spec["slots"])
    return spec


@pytest.mark.parametrize("jacobian", [True, False])
def test_log_density_and_gradient_equal_cmdstan_log_prob(case, jacobian):
    model = case["library"]
    theta_unc = model.param_unconstrain_json(case["params"])
    expected = case["executable"].log_prob(
        case["params"], data=case["data"], jacobian=jacobian, sig_figs=18
    )
    lp, grad = model.log_density_gradient(theta_unc, propto=True, jacobian=jacobian)
    assert lp == pytest.approx(expected["lp__"].iloc[0], rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(grad, expected.iloc[0, 1:].to_numpy(), rtol=1e-10,
                               atol=1e-12)
    assert model.log_density(theta_unc, propto=True, jacobian=jacobian) == lp


def test_hessian_equals_finite_differences_of_the_gradient(case):
    model = case["library"]
    theta = model.param_unconstrain_json(case["params"])
    _, _, hessian = model.log_density_hessian(theta)
    step = 1e-5
    columns = []
    for i in range(len(theta)):
        e = np.zeros_like(theta)
        e[i] = step
        plus = model.log_density_gradient(theta + e)[1]
        minus = model.log_density_gradient(theta - e)[1]
        columns.append((plus - minus) / (2 * step))
    scale = max(1.0, np.abs(hessian).max())
    np.testing.assert_allclose(hessian, np.array(columns).T, atol=1e-6 * scale)
    np.testing.assert_allclose(hessian, hessian.T, atol=1e-9 * scale)
    v = np.linspace(-1, 1, len(theta))
    hvp = model.log_density_hessian_vector_product(theta, v)[1]
    np.testing.assert_allclose(hvp, hessian @ v, atol=1e-6 * scale * np.abs(v).sum())


def test_constrain_unconstrain_round_trip(case):
    model = case["library"]
    theta_unc = model.param_unconstrain_json(case["params"])
    constrained = model.param_constrain(theta_unc)
    flat = np.concatenate([np.ravel(v) for v in case["params"].values()])
    np.testing.assert_allclose(constrained, flat, rtol=1e-12)
    np.testing.assert_allclose(model.param_unconstrain(constrained), theta_unc,
                               rtol=1e-12, atol=1e-14)
    assert len(model.param_names()) == model.param_num()


def test_rows_on_many_threads_equal_one_thread_and_single_calls(case):
    model = case["library"]
    centre = model.param_unconstrain_json(case["params"])
    points = centre + 0.3 * np.random.default_rng(4).standard_normal((500, len(centre)))
    lp1, grad1 = models.log_density_gradient_rows(model, points, threads=1)
    lp4, grad4 = models.log_density_gradient_rows(model, points, threads=4)
    np.testing.assert_array_equal(lp1, lp4)
    np.testing.assert_array_equal(grad1, grad4)
    for row in (0, 137, 499):
        lp, grad = model.log_density_gradient(points[row])
        assert lp1[row] == lp
        np.testing.assert_array_equal(grad1[row], grad)
    plain = models.log_density_rows(model, points, propto=False, jacobian=False,
                                    threads=3)
    expected = [model.log_density(p, propto=False, jacobian=False) for p in points[:5]]
    np.testing.assert_array_equal(plain[:5], expected)


def test_python_threads_calling_one_model_agree(case):
    model = case["library"]
    centre = model.param_unconstrain_json(case["params"])
    points = centre + 0.2 * np.random.default_rng(5).standard_normal((200, len(centre)))
    expected = np.array([model.log_density_gradient(p)[0] for p in points])
    results: dict[int, np.ndarray] = {}

    def work(k: int) -> None:
        results[k] = np.array([model.log_density_gradient(p)[0] for p in points])

    workers = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for k in range(4):
        np.testing.assert_array_equal(results[k], expected)


def test_library_builds_once_per_content(cmdstan, tmp_path):
    program = tmp_path / "once.stan"
    program.write_text("parameters {\n  real x;\n}\nmodel {\n  x ~ normal(0, 1);\n}\n")
    first = models.compile_library(program)
    mtime = first.stat().st_mtime_ns
    assert models.compile_library(program) == first
    assert first.stat().st_mtime_ns == mtime
    assert first.name == "once_model.so"
    model = models.load(first)
    assert isinstance(model, bridgestan.StanModel)
    assert model.model_version() == bridgestan_version_info
    assert model.log_density(np.array([0.5]), propto=False) == pytest.approx(
        -0.125 - 0.5 * np.log(2 * np.pi), rel=1e-14
    )


@pytest.fixture(scope="module")
def schools(cmdstan):
    return models.load(program_path("models/eight_schools_noncentered"), SCHOOLS)


@pytest.mark.parametrize(
    "data, message",
    [
        ({k: v for k, v in SCHOOLS.items() if k != "sigma"}, "sigma"),
        ({**SCHOOLS, "y": SCHOOLS["y"][:5]}, "y"),
        ({**SCHOOLS, "sigma": [-1.0] * 8}, "sigma"),
    ],
)
def test_bad_data_is_a_clear_error(cmdstan, data, message):
    with pytest.raises(ValueError, match=f"rejects its data.*{message}"):
        models.load(program_path("models/eight_schools_noncentered"), data)


def test_bad_points_are_clear_errors(schools):
    with pytest.raises(ValueError, match=r"shape \(n, 10\)"):
        models.log_density_rows(schools, np.zeros((3, 9)))
    bad = np.zeros((4, 10))
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"not finite, first rows \[2\]"):
        models.log_density_gradient_rows(schools, bad)
    with pytest.raises(ValueError, match="threads must be an integer >= 1"):
        models.log_density_rows(schools, np.zeros((3, 10)), threads=0)
    good = np.random.default_rng(0).normal(size=(4, 10))  # rows the caller has checked
    np.testing.assert_array_equal(models.log_density_rows(schools, good, check_finite=False),
                                  models.log_density_rows(schools, good))
    with pytest.raises(ctypes.ArgumentError, match=r"shape \(10,\)"):  # bridgestan's check
        schools.log_density(np.zeros(9))


def test_a_model_that_rejects_is_an_error_or_minus_infinity(cmdstan, tmp_path):
    program = tmp_path / "rejecting.stan"
    program.write_text(
        "parameters {\n  real x;\n}\nmodel {\n  if (x > 1) {\n"
        '    reject("x is too large: ", x);\n  }\n  x ~ normal(0, 1);\n}\n'
    )
    model = models.load(program)
    with pytest.raises(RuntimeError, match="x is too large: 2"):
        model.log_density(np.array([2.0]))
    points = np.array([[0.0], [2.0], [0.5]])
    with pytest.raises(ValueError, match=r"row 1: .*x is too large"):
        models.log_density_rows(model, points)
    lp, grad = models.log_density_gradient_rows(model, points, reject_as_neg_inf=True)
    assert lp[1] == -np.inf and np.isnan(grad[1]).all()
    np.testing.assert_allclose(lp[[0, 2]], [0.0, -0.125])
    np.testing.assert_allclose(grad[[0, 2], 0], [0.0, -0.5])


def test_stan_prints_reach_python(cmdstan, tmp_path, capsys):
    program = tmp_path / "printing.stan"
    program.write_text(
        'parameters {\n  real x;\n}\nmodel {\n  print("x = ", x);\n  x ~ normal(0, 1);\n}\n'
    )
    model = models.load(program)
    model.log_density(np.array([0.25]))
    assert "x = 0.25" in capsys.readouterr().out


def test_a_compile_error_names_the_template_line(cmdstan, tmp_path):
    program = tmp_path / "broken.stan"
    program.write_text("parameters {\n  real x;\n}\nmodel {\n  x ~ normal(0, 1)\n}\n")
    with pytest.raises(models.CompileError, match=r"broken\.stan, line"):
        models.compile_library(program)


def test_libraries_use_stanflows_installation_whatever_cmdstan_is_active(
    cmdstan, tmp_path, monkeypatch
):
    """A user's CmdStan has no bridge sources: libraries never ask for it, so even
    an invalid $CMDSTAN (which cmdstanpy work would reject) does not matter."""
    monkeypatch.setenv("CMDSTAN", str(tmp_path / "not-a-cmdstan"))
    program = tmp_path / "once.stan"
    program.write_text("parameters {\n  real x;\n}\nmodel {\n  x ~ normal(0, 1);\n}\n")
    model = models.load(program)
    assert model.log_density(np.array([0.0]), propto=False) == pytest.approx(
        -0.5 * np.log(2 * np.pi), rel=1e-14
    )


def test_two_processes_build_a_new_library_once(cmdstan, tmp_path):
    program = tmp_path / "fresh.stan"
    program.write_text(
        f"// {uuid.uuid4()}\nparameters {{\n  real x;\n}}\nmodel {{\n  x ~ normal(0, 1);\n}}\n"
    )
    counter = tmp_path / "builds.txt"
    script = textwrap.dedent(
        """
        import subprocess, sys
        from stanflow.models import compile_library, libraries

        real = subprocess.run

        def counting(command, *args, **kwargs):
            if command[0] == "make":
                with open(sys.argv[2], "a") as f:
                    f.write("build\\n")
            return real(command, *args, **kwargs)

        libraries.subprocess.run = counting
        print(compile_library(sys.argv[1]))
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(program), str(counter)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=600) for proc in procs]
    for proc, (_, stderr) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, stderr
    paths = {stdout.strip().splitlines()[-1] for stdout, _ in outputs}
    assert len(paths) == 1
    library = Path(paths.pop())
    try:
        assert counter.read_text() == "build\n"
        assert library.is_file() and library.name == "fresh_model.so"
        assert not list(models.cache_dir().glob(f".tmp-{library.parent.name}-*"))
        assert sorted(p.name for p in library.parent.iterdir()) == [
            "fresh.stan", "fresh_model.so", "stanflow.json"
        ]
    finally:
        shutil.rmtree(library.parent, ignore_errors=True)
