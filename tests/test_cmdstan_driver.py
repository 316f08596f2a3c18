"""The CmdStan-compatible driver end to end, through cmdstanpy's public API.

Every numerical check compares with an independent truth: closed-form
conjugate posteriors, closed-form modes and log densities, or the draws of a
second run that must be identical.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import cmdstanpy
import numpy as np
import pytest
import xarray as xr

from stanflow import arviz_compat
from stanflow.models import CompileError, compile_model, program_path

pytestmark = pytest.mark.e2e

HERE = Path(__file__).parent / "stan"

BERNOULLI_DATA = {"N": 10, "y": [0, 1, 0, 0, 0, 0, 0, 0, 0, 1]}
# Beta(1, 1) prior, 2 successes in 10: posterior Beta(3, 9).
BETA_A, BETA_B = 3.0, 9.0

RNG = np.random.default_rng(20261129)
NORMAL_DATA = {
    "N": 20,
    "y": RNG.normal(1.5, 2.0, size=20).round(4).tolist(),
    "sigma": 2.0,
    "prior_mean": 0.0,
    "prior_sd": 3.0,
}


def normal_posterior(data: dict) -> tuple[float, float]:
    """Closed-form posterior mean and sd of mu in ``normal_mean.stan``."""
    precision = 1 / data["prior_sd"] ** 2 + data["N"] / data["sigma"] ** 2
    mean = (
        data["prior_mean"] / data["prior_sd"] ** 2 + sum(data["y"]) / data["sigma"] ** 2
    ) / precision
    return mean, precision**-0.5


@pytest.fixture(scope="module")
def bernoulli(cmdstan: Path) -> cmdstanpy.CmdStanModel:
    return compile_model(HERE / "bernoulli.stan")


@pytest.fixture(scope="module")
def normal(cmdstan: Path) -> cmdstanpy.CmdStanModel:
    return compile_model(HERE / "normal_mean.stan")


@pytest.fixture(scope="module")
def bernoulli_fit(bernoulli: cmdstanpy.CmdStanModel) -> cmdstanpy.CmdStanMCMC:
    return bernoulli.sample(
        data=BERNOULLI_DATA, chains=4, seed=11, show_progress=False
    )


def run_exe(model: cmdstanpy.CmdStanModel, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(model.exe_file), *args], cwd=cwd, capture_output=True, text=True, check=False
    )


# --- posteriors against closed forms -----------------------------------------


def test_conjugate_normal_posterior_within_mcse(normal: cmdstanpy.CmdStanModel) -> None:
    fit = normal.sample(data=NORMAL_DATA, chains=4, seed=3, show_progress=False)
    mean, sd = normal_posterior(NORMAL_DATA)
    draws = fit.stan_variable("mu")
    ess = arviz_compat.ess(draws.reshape(4, -1))
    assert ess > 1000
    assert abs(draws.mean() - mean) < 4 * sd / math.sqrt(ess)
    # sd of a normal sample: standard error ~ sd / sqrt(2 ess)
    assert abs(draws.std() - sd) < 4 * sd / math.sqrt(2 * ess)


def test_conjugate_beta_posterior_and_summary(bernoulli_fit: cmdstanpy.CmdStanMCMC) -> None:
    theta = bernoulli_fit.stan_variable("theta")
    mean = BETA_A / (BETA_A + BETA_B)
    sd = math.sqrt(BETA_A * BETA_B / ((BETA_A + BETA_B) ** 2 * (BETA_A + BETA_B + 1)))
    summary = bernoulli_fit.summary()
    row = summary.loc["theta"]
    assert row["Mean"] == pytest.approx(theta.mean(), rel=1e-5)
    assert row["StdDev"] == pytest.approx(theta.std(ddof=1), rel=1e-4)
    assert abs(row["Mean"] - mean) < 4 * row["MCSE"]
    assert abs(row["StdDev"] - sd) < 0.1 * sd
    assert row["R_hat"] == pytest.approx(1.0, abs=0.02)
    assert row["5%"] < row["50%"] < row["95%"]


def test_diagnose_report_and_inference_data(bernoulli_fit: cmdstanpy.CmdStanMCMC) -> None:
    report = bernoulli_fit.diagnose()
    assert "No divergent transitions found." in report
    assert "Treedepth satisfactory for all transitions." in report
    groups = arviz_compat.from_cmdstanpy(bernoulli_fit)
    assert groups["posterior"]["theta"].shape == (4, 1000)
    assert int(groups["sample_stats"]["diverging"].sum()) == 0


def test_csv_header_carries_what_cmdstanpy_reads(bernoulli_fit: cmdstanpy.CmdStanMCMC) -> None:
    config = bernoulli_fit.metadata.cmdstan_config
    for key, value in {
        "model": "bernoulli_model",
        "method": "sample",
        "num_samples": 1000,
        "num_warmup": 1000,
        "save_warmup": 0,
        "thin": 1,
        "algorithm": "hmc",
        "engine": "nuts",
        "max_depth": 10,
        "metric": "diag_e",
        "stan_version_major": 2,
        "stan_version_minor": 35,
        "seed": 11,
    }.items():
        assert config[key] == value, key
    lines = Path(bernoulli_fit.runset.csv_files[0]).read_text().splitlines()
    assert lines[:3] == [
        "# stan_version_major = 2",
        "# stan_version_minor = 35",
        "# stan_version_patch = 0",
    ]
    assert "# stanc_version = stanc3 v2.35.0" in lines
    assert "#   sample" in lines and "#     num_samples = 1000 (Default)" in lines


# --- determinism and chains in one process ------------------------------------


def test_same_seed_same_draws(normal: cmdstanpy.CmdStanModel) -> None:
    a = normal.sample(data=NORMAL_DATA, chains=2, seed=5, show_progress=False)
    b = normal.sample(data=NORMAL_DATA, chains=2, seed=5, show_progress=False)
    c = normal.sample(data=NORMAL_DATA, chains=2, seed=6, show_progress=False)
    np.testing.assert_array_equal(a.draws(), b.draws())
    assert not np.array_equal(a.draws(), c.draws())


def test_chains_in_one_process_equal_separate_processes(
    bernoulli: cmdstanpy.CmdStanModel,
) -> None:
    together = bernoulli.sample(
        data=BERNOULLI_DATA, chains=3, chain_ids=4, seed=9, show_progress=False
    )
    assert len(together.runset.csv_files) == 3
    assert together.runset.num_procs == 1
    for offset in range(3):
        alone = bernoulli.sample(
            data=BERNOULLI_DATA, chains=1, chain_ids=4 + offset, seed=9,
            show_progress=False,
        )
        np.testing.assert_array_equal(
            together.draws()[:, offset, :], alone.draws()[:, 0, :]
        )


# --- every method ---------------------------------------------------------------


def test_optimize_algorithms_find_the_mode(
    normal: cmdstanpy.CmdStanModel, bernoulli: cmdstanpy.CmdStanModel
) -> None:
    mean, _ = normal_posterior(NORMAL_DATA)
    # The library's Newton method stops on a small improvement of the objective,
    # so it lands less precisely than the quasi-Newton methods.
    for algorithm, tolerance in (("lbfgs", 1e-4), ("bfgs", 1e-4), ("newton", 1e-3)):
        mle = normal.optimize(data=NORMAL_DATA, algorithm=algorithm, seed=1)
        assert mle.optimized_params_dict["mu"] == pytest.approx(mean, abs=tolerance)
    # Beta(3, 9): mode (a-1)/(a+b-2) = 0.2 on the constrained scale; with the
    # Jacobian of the logit transform the density is theta^3 (1-theta)^9: 0.25.
    plain = bernoulli.optimize(data=BERNOULLI_DATA, seed=1)
    with_jacobian = bernoulli.optimize(data=BERNOULLI_DATA, seed=1, jacobian=True)
    assert plain.optimized_params_dict["theta"] == pytest.approx(0.2, abs=1e-4)
    assert with_jacobian.optimized_params_dict["theta"] == pytest.approx(0.25, abs=1e-4)
    iterations = bernoulli.optimize(data=BERNOULLI_DATA, seed=1, save_iterations=True)
    assert iterations.optimized_iterations_np.shape[0] > 1


@pytest.mark.parametrize("algorithm", ["meanfield", "fullrank"])
def test_variational_approximates_the_posterior(
    normal: cmdstanpy.CmdStanModel, algorithm: str
) -> None:
    mean, sd = normal_posterior(NORMAL_DATA)
    vb = normal.variational(
        data=NORMAL_DATA, algorithm=algorithm, seed=2, output_samples=2000
    )
    draws = vb.stan_variable("mu", mean=False)
    assert draws.shape == (2000,)
    assert draws.mean() == pytest.approx(mean, abs=0.5 * sd)
    assert draws.std() == pytest.approx(sd, rel=0.5)


def test_laplace_is_exact_for_a_gaussian_posterior(normal: cmdstanpy.CmdStanModel) -> None:
    mean, sd = normal_posterior(NORMAL_DATA)
    mode = normal.optimize(data=NORMAL_DATA, seed=1, jacobian=True)
    laplace = normal.laplace_sample(data=NORMAL_DATA, mode=mode, draws=4000, seed=4)
    draws = laplace.stan_variable("mu")
    assert draws.shape == (4000,)
    assert abs(draws.mean() - mean) < 4 * sd / math.sqrt(4000)
    assert draws.std() == pytest.approx(sd, rel=0.06)
    assert {"log_p__", "log_q__"} <= set(laplace.column_names)


@pytest.mark.parametrize("num_paths", [1, 4])
def test_pathfinder_draws(normal: cmdstanpy.CmdStanModel, num_paths: int) -> None:
    mean, sd = normal_posterior(NORMAL_DATA)
    pf = normal.pathfinder(data=NORMAL_DATA, seed=8, num_paths=num_paths, draws=1000)
    draws = pf.stan_variable("mu")
    assert draws.shape == (1000,)
    assert draws.mean() == pytest.approx(mean, abs=0.3 * sd)
    assert draws.std() == pytest.approx(sd, rel=0.3)


def test_generate_quantities_per_draw(
    bernoulli: cmdstanpy.CmdStanModel, bernoulli_fit: cmdstanpy.CmdStanMCMC
) -> None:
    gq = bernoulli.generate_quantities(data=BERNOULLI_DATA, previous_fit=bernoulli_fit, seed=3)
    y_rep = gq.stan_variable("y_rep")
    assert y_rep.shape == (4000,)
    assert set(np.unique(y_rep)) <= {0, 1}
    # E[y_rep] = E[theta] = 0.25; sd of the mean of 4000 Bernoulli(~0.25) ~ 0.007
    assert y_rep.mean() == pytest.approx(0.25, abs=0.04)


def test_log_prob_matches_the_closed_form(bernoulli: cmdstanpy.CmdStanModel) -> None:
    for theta in (0.1, 0.25, 0.7):
        for jacobian in (True, False):
            out = bernoulli.log_prob(
                params={"theta": theta}, data=BERNOULLI_DATA, jacobian=jacobian
            )
            # propto: 2 log t + 8 log(1-t), plus log t + log(1-t) with the Jacobian;
            # the gradient is with respect to u = logit(theta).
            a, b = (3, 9) if jacobian else (2, 8)
            lp = a * math.log(theta) + b * math.log(1 - theta)
            grad = a * (1 - theta) - b * theta
            assert out["lp__"].iloc[0] == pytest.approx(lp, rel=1e-5)
            assert out["g_theta"].iloc[0] == pytest.approx(grad, abs=1e-5)


def test_diagnose_method_checks_gradients(normal: cmdstanpy.CmdStanModel) -> None:
    report = normal.diagnose(data=NORMAL_DATA)
    assert list(report.columns) == ["param_idx", "value", "model", "finite_diff", "error"]
    mu = report["value"].iloc[0]
    d = NORMAL_DATA
    exact = -(mu - d["prior_mean"]) / d["prior_sd"] ** 2 + sum(
        y - mu for y in d["y"]
    ) / d["sigma"] ** 2
    # The report has 6 significant digits, so the (random) point mu is rounded
    # by up to 5e-6 |mu|, which moves the exact gradient by |slope| times that.
    slope = 1 / d["prior_sd"] ** 2 + len(d["y"]) / d["sigma"] ** 2
    rounding = 5e-6 * (slope * abs(mu) + abs(exact)) + 1e-12
    assert report["model"].iloc[0] == pytest.approx(exact, abs=rounding)
    assert abs(report["error"].iloc[0]) < 1e-6


# --- sampler variants ---------------------------------------------------------------


@pytest.mark.parametrize("metric", ["unit_e", "diag_e", "dense_e"])
def test_metrics_sample_the_posterior(normal: cmdstanpy.CmdStanModel, metric: str) -> None:
    mean, sd = normal_posterior(NORMAL_DATA)
    fit = normal.sample(
        data=NORMAL_DATA, chains=2, seed=12, metric=metric, show_progress=False
    )
    assert fit.metric_type == metric
    assert abs(fit.stan_variable("mu").mean() - mean) < 0.15 * sd


def test_metric_file_without_adaptation_is_used(
    normal: cmdstanpy.CmdStanModel, tmp_path: Path
) -> None:
    fit = normal.sample(
        data=NORMAL_DATA, chains=2, seed=1, metric={"inv_metric": [0.3]},
        adapt_engaged=False, iter_warmup=0, step_size=0.5, show_progress=False,
    )
    np.testing.assert_allclose(fit.metric, [[0.3], [0.3]])
    np.testing.assert_allclose(fit.step_size, [0.5, 0.5])


def test_static_hmc_thin_and_save_warmup(normal: cmdstanpy.CmdStanModel, tmp_path: Path) -> None:
    out = tmp_path / "static"
    out.mkdir()
    result = run_exe(
        normal, "method=sample", "num_samples=300", "num_warmup=200", "thin=3",
        "save_warmup=1", "algorithm=hmc", "engine=static", "int_time=2",
        "data", f"file={_write_json(tmp_path, NORMAL_DATA)}",
        "random", "seed=4", "output", f"file={out / 'draws.csv'}", cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    # cmdstanpy.from_csv takes a CSV without treedepth__ (static HMC) for
    # fixed_param output, so the file is checked directly: warm-up rows, the
    # adaptation block, then ceil(300 / 3) draws.
    lines = (out / "draws.csv").read_text().splitlines()
    header = lines.index(next(line for line in lines if line.startswith("lp__")))
    adaptation = lines.index("# Adaptation terminated")
    body = [line for line in lines[adaptation:] if not line.startswith("#")]
    assert adaptation - header - 1 == 67 and len(body) == 100
    assert lines[header] == "lp__,accept_stat__,stepsize__,int_time__,energy__,mu"
    assert "#           static" in lines and "#             int_time = 2" in lines


def test_parameter_free_model_switches_to_fixed_param(
    cmdstan: Path, tmp_path: Path
) -> None:
    model = compile_model(HERE / "no_parameters.stan")
    fit = model.sample(data={"scale": 2.0}, chains=2, seed=1, show_progress=False)
    z = fit.stan_variable("z")
    assert z.shape == (2000,)
    assert z.std() == pytest.approx(2.0, rel=0.1)
    result = run_exe(
        model, "method=sample", "data", f"file={_write_json(tmp_path, {'scale': 1.0})}",
        "output", f"file={tmp_path / 'fp.csv'}", cwd=tmp_path,
    )
    assert result.returncode == 0
    assert "running fixed_param sampler" in result.stdout
    assert "#     algorithm = fixed_param" in (tmp_path / "fp.csv").read_text()


# --- bad input ------------------------------------------------------------------------


def _write_json(folder: Path, data: dict, name: str = "data.json") -> Path:
    path = folder / name
    cmdstanpy.write_stan_json(str(path), data)
    return path


def test_syntax_error_is_reported_with_its_line(cmdstan: Path) -> None:
    with pytest.raises(CompileError, match="Syntax error") as info:
        compile_model(HERE / "syntax_error.stan")
    assert "line 2" in str(info.value) or "line 3" in str(info.value)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"N": 2}, "y"),
        ({"N": 1.5, "y": [0]}, "int variable contained non-int values"),
    ],
    ids=["missing-variable", "real-for-int"],
)
def test_bad_data_fails_cleanly(
    bernoulli: cmdstanpy.CmdStanModel, tmp_path: Path, data: dict, message: str
) -> None:
    with pytest.raises(RuntimeError, match="Error during sampling"):
        bernoulli.sample(data=data, chains=1, show_progress=False, output_dir=tmp_path / "cmdstanpy")
    result = run_exe(
        bernoulli, "method=sample", "data", f"file={_write_json(tmp_path, data)}",
        "output", f"file={tmp_path / 'out.csv'}", cwd=tmp_path,
    )
    assert result.returncode == 1
    assert message in result.stderr
    assert not list(tmp_path.glob("out*.csv"))


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["method=sample", "adapt", "delta=1.5"], '1.5 is not a valid value for "delta"'),
        (["method=sample", "num_samples=-1"], '-1 is not a valid value for "num_samples"'),
        (["method=sample", "bogus=3"], "bogus=3 is either mistyped or misplaced."),
        (["method=sample", "id=1", "id=2"], "id=2 is either mistyped or misplaced."),
        (["method=sample", "algorithm=hmc", "engine=turbo"], 'turbo is not a valid value for "engine"'),
        (["method=sample", "data", "file=missing.json"], 'Can\'t open specified file, "missing.json"'),
    ],
    ids=["out-of-range", "negative", "unknown", "repeated", "bad-choice", "missing-file"],
)
def test_bad_arguments_exit_1_with_a_message(
    bernoulli: cmdstanpy.CmdStanModel, tmp_path: Path, arguments: list[str], message: str
) -> None:
    result = run_exe(bernoulli, *arguments, "output", f"file={tmp_path / 'out.csv'}", cwd=tmp_path)
    assert result.returncode == 1
    assert message in result.stderr
    assert not list(tmp_path.glob("out*"))


def test_cmdstanpy_reports_a_failing_run_with_its_console(
    bernoulli: cmdstanpy.CmdStanModel, tmp_path: Path
) -> None:
    data = _write_json(tmp_path, {"N": 2, "y": [0, 3]})
    with pytest.raises(RuntimeError, match=r"y\[2\] is 3, but must be less than or equal to 1"):
        bernoulli.sample(data=str(data), chains=1, show_progress=False)


def test_info_reports_version_and_threads(bernoulli: cmdstanpy.CmdStanModel) -> None:
    info = bernoulli.exe_info()
    assert info["stan_version_major"] == "2"
    assert info["stan_version_minor"] == "35"
    assert info["STAN_THREADS"] == "true"


def test_serial_build_gives_the_same_draws(
    bernoulli: cmdstanpy.CmdStanModel,
) -> None:
    serial = compile_model(HERE / "bernoulli.stan", cpp_options={"STAN_THREADS": False})
    assert serial.exe_info()["STAN_THREADS"] == "false"
    a = serial.sample(data=BERNOULLI_DATA, chains=2, seed=21, show_progress=False)
    b = bernoulli.sample(data=BERNOULLI_DATA, chains=2, seed=21, show_progress=False)
    assert a.runset.num_procs == 2 and b.runset.num_procs == 1
    np.testing.assert_array_equal(a.draws(), b.draws())


def test_eight_schools_matches_a_long_reference_run(cmdstan: Path) -> None:
    """Non-centred eight schools against ``tests/reference/eight_schools.json``."""
    root = Path(__file__).resolve().parents[1]
    reference = json.loads((root / "tests" / "reference" / "eight_schools.json").read_text())
    model = compile_model(program_path("models/eight_schools_noncentered"))
    data = json.loads((root / "data" / "eight_schools.json").read_text())
    fit = model.sample(
        data=data, chains=4, adapt_delta=0.95, seed=77, show_progress=False
    )
    posterior = arviz_compat.from_cmdstanpy(fit)["posterior"][["mu", "tau", "theta"]]
    means = _by_element(posterior.mean(("chain", "draw")))
    mcse = _by_element(arviz_compat.mcse(posterior))
    for name, ref in reference["parameters"].items():
        z = (means[name] - ref["mean"]) / math.hypot(mcse[name], ref["mcse_mean"])
        assert abs(z) < 4, (name, means[name], ref["mean"])


def _by_element(ds: xr.Dataset) -> dict[str, float]:
    """``{"mu": ..., "theta[0]": ...}``: each element of each variable, 0-based labels."""
    out = {}
    for name, values in ds.data_vars.items():
        for index, value in np.ndenumerate(values.values):
            label = f"{name}[{','.join(map(str, index))}]" if index else str(name)
            out[label] = float(value)
    return out


def test_batch_mode_runs_jobs_like_separate_processes(
    bernoulli: cmdstanpy.CmdStanModel, tmp_path: Path
) -> None:
    data = _write_json(tmp_path, BERNOULLI_DATA)
    bad = _write_json(tmp_path, {"N": 2}, name="bad.json")
    jobs = [
        ["random", f"seed={seed}", "data", f"file={data}", "output",
         f"file={tmp_path / f'batch{seed}.csv'}", "method=sample", "num_samples=200"]
        for seed in (1, 2)
    ]
    jobs.append(["data", f"file={bad}", "output", f"file={tmp_path / 'bad.csv'}"])
    jobs.append(["bogus=1"])
    lines = [
        json.dumps({"args": args, "console": str(tmp_path / f"job{i}.log")})
        for i, args in enumerate(jobs)
    ]
    (tmp_path / "jobs.jsonl").write_text("\n".join(lines) + "\n")
    result = run_exe(bernoulli, "batch", str(tmp_path / "jobs.jsonl"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "stanflow-batch: 0 0", "stanflow-batch: 1 0",
        "stanflow-batch: 2 1", "stanflow-batch: 3 1",
    ]
    assert "dims declared=(2)" in (tmp_path / "job2.log").read_text()
    assert "bogus=1 is either mistyped" in (tmp_path / "job3.log").read_text()
    assert not (tmp_path / "bad.csv").exists()
    for seed in (1, 2):
        alone = run_exe(
            bernoulli, "random", f"seed={seed}", "data", f"file={data}", "output",
            f"file={tmp_path / f'alone{seed}.csv'}", "method=sample",
            "num_samples=200", cwd=tmp_path,
        )
        assert alone.returncode == 0
        body = [
            [line for line in (tmp_path / name).read_text().splitlines()
             if not line.startswith("#")]
            for name in (f"batch{seed}.csv", f"alone{seed}.csv")
        ]
        assert body[0] == body[1] and len(body[0]) == 201


def test_user_header_supplies_an_undefined_function(cmdstan: Path, tmp_path: Path) -> None:
    """cmdstanpy's ``user_header`` reaches the makefile as ``USER_HEADER``."""
    (tmp_path / "uh.stan").write_text(
        "functions {\n  real twice(real x);\n}\nparameters {\n  real mu;\n}\n"
        "model {\n  mu ~ normal(twice(1.5), 1);\n}\n"
    )
    (tmp_path / "twice.hpp").write_text(
        "#include <ostream>\nnamespace uh_model_namespace {\n"
        "template <typename T0__>\n"
        "stan::promote_args_t<T0__> twice(const T0__& x, std::ostream* pstream__) {\n"
        "  return 2 * x;\n}\n}  // namespace uh_model_namespace\n"
    )
    model = cmdstanpy.CmdStanModel(
        stan_file=tmp_path / "uh.stan", user_header=tmp_path / "twice.hpp"
    )
    fit = model.sample(chains=1, iter_sampling=4000, seed=2, show_progress=False)
    mu = fit.stan_variable("mu")
    # mu ~ N(twice(1.5) = 3, 1)
    assert abs(mu.mean() - 3.0) < 0.15


def test_per_chain_inits_in_one_process(normal: cmdstanpy.CmdStanModel) -> None:
    """cmdstanpy writes one init file per chain; each chain starts at its own."""
    fit = normal.sample(
        data=NORMAL_DATA, chains=2, inits=[{"mu": 100.0}, {"mu": -100.0}],
        iter_warmup=0, adapt_engaged=False, iter_sampling=1, step_size=1e-3,
        max_treedepth=1, seed=3, show_progress=False,
    )
    assert fit.runset.num_procs == 1
    first = fit.stan_variable("mu")
    assert first[0] == pytest.approx(100.0, abs=0.1)
    assert first[1] == pytest.approx(-100.0, abs=0.1)


def test_a_failed_gradient_test_still_writes_its_report(
    bernoulli: cmdstanpy.CmdStanModel,
) -> None:
    """As CmdStan: exit code 1 and the file, which cmdstanpy reads on request.

    A finite-difference step of 3 on the logit scale is far too coarse for the
    Bernoulli log density, so the gradient test fails."""
    with pytest.raises(RuntimeError, match="exceed the error threshold"):
        bernoulli.diagnose(data=BERNOULLI_DATA, epsilon=3)
    report = bernoulli.diagnose(
        data=BERNOULLI_DATA, epsilon=3, require_gradients_ok=False
    )
    assert list(report.columns) == ["param_idx", "value", "model", "finite_diff", "error"]
    assert len(report) == 1
    assert abs(report["error"].iloc[0]) > 1e-6
