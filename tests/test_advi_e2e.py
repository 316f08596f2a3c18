"""Resumable ADVI (stanflow's ``checkpoint`` extension of method=variational).

The truth is CmdStan's own ADVI (stan::services) and one uninterrupted run:
a run that saves its state writes the same draws as the services run, and a
run continued in stretches ends, bit for bit, where one long run ends.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from stanflow.advi import AdviRunError, AdviState, run_advi, supports_checkpoints
from stanflow.models import compile_model, program_path

pytestmark = pytest.mark.e2e

DATA = json.loads((Path(__file__).parent.parent / "data" / "eight_schools.json").read_text())
ARGS = {"grad_samples": 3, "eval_elbo": 20, "tol_rel_obj": 1e-9, "output_samples": 50}


@pytest.fixture(scope="module")
def centred(cmdstan):
    return compile_model(program_path("models/eight_schools_centered"))


def draws(path: Path) -> np.ndarray:
    """The numeric rows of a Stan CSV (the mean row first for ADVI)."""
    rows = [
        line.split(",")
        for line in path.read_text().splitlines()
        if line and not line.startswith("#")
    ]
    return np.array(rows[1:], dtype=float)


def header(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith("#")]


@pytest.mark.parametrize("algorithm", ["meanfield", "fullrank"])
def test_saving_the_state_changes_nothing(centred, tmp_path, algorithm):
    args = ARGS | {"algorithm": algorithm, "iter": 300}
    fit, state = run_advi(centred, DATA, tmp_path, "saved", seed=5, args=args)
    services = centred.variational(
        data=DATA,
        seed=5,
        output_dir=tmp_path / "services",
        require_converged=False,
        **{k: v for k, v in args.items() if k != "output_samples"},
        draws=args["output_samples"],
    )
    assert np.array_equal(draws(tmp_path / "saved.csv"), draws(Path(services.runset.csv_files[0])))
    assert state.iteration == 300 and state.algorithm == algorithm
    assert state.scale.shape == ((10,) if algorithm == "meanfield" else (10, 10))
    # the state's mean is the fit's mean row, on the unconstrained scale (log tau)
    mean = fit.variational_params_dict
    assert state.mu[0] == pytest.approx(mean["mu"], rel=1e-5)
    assert state.mu[1] == pytest.approx(np.log(mean["tau"]), rel=1e-5)


@pytest.mark.parametrize("algorithm", ["meanfield", "fullrank"])
def test_a_run_continued_in_stretches_ends_where_one_long_run_ends(
    centred, tmp_path, algorithm
):
    args = ARGS | {"algorithm": algorithm}
    _, whole = run_advi(centred, DATA, tmp_path, "whole", seed=9, args=args | {"iter": 400})
    state, counters = None, []
    for block in range(20):
        _, state = run_advi(
            centred, DATA, tmp_path, f"part{block}", seed=9, args=args | {"iter": 20}, resume=state
        )
        counters.append(int(json.loads(state.path.read_text())["rng"].split()[1]))
    assert state.iteration == whole.iteration == 400
    assert np.array_equal(state.mu, whole.mu) and np.array_equal(state.scale, whole.scale)
    assert state.elbo == whole.elbo
    assert np.array_equal(draws(tmp_path / "part19.csv"), draws(tmp_path / "whole.csv"))
    # A mixmax state at the end of its vector (counter 17) cannot be read back
    # by Boost and is saved as the next vector (counter 1) instead.
    assert all(1 <= counter < 17 for counter in counters)
    assert 1 in counters, "no stretch ended at a vector's end: choose other lengths"


def test_a_resumed_run_can_change_the_data(centred, tmp_path):
    _, state = run_advi(centred, DATA, tmp_path, "first", seed=3, args=ARGS | {"iter": 200})
    shifted = DATA | {"y": [y + 100 for y in DATA["y"]]}
    runs = {
        name: run_advi(
            centred, data, tmp_path, name, seed=3, args=ARGS | {"iter": 2000}, resume=state
        )
        for name, data in [("same", DATA), ("shifted", shifted)]
    }
    assert runs["shifted"][1].iteration == runs["same"][1].iteration == 2200
    # the same random numbers, so only the data moved the school effects up
    same, moved = (runs[name][0].stan_variable("theta", mean=True) for name in runs)
    assert np.all(moved > same + 5)
    assert "Continuing ADVI from" in (tmp_path / "shifted-console.txt").read_text()


def test_the_config_of_a_plain_run_has_no_checkpoint_group(centred, tmp_path):
    plain = centred.variational(data=DATA, seed=1, output_dir=tmp_path, require_converged=False)
    assert not any("checkpoint" in line for line in header(Path(plain.runset.csv_files[0])))
    run_advi(centred, DATA, tmp_path, "saved", seed=1, args={"iter": 50})
    lines = header(tmp_path / "saved.csv")
    assert any(line.strip("# ").startswith("checkpoint") for line in lines)
    assert any(f"save = {tmp_path / 'saved-state.json'}" in line for line in lines)


def test_supports_checkpoints(centred, tmp_path):
    assert supports_checkpoints(centred.exe_file)
    fake = tmp_path / "cmdstan_model"
    fake.write_text("#!/bin/sh\necho 'method=variational'\necho '  iter=<value>'\n")
    fake.chmod(0o755)
    assert not supports_checkpoints(fake)


def test_a_full_rank_factor_must_be_lower_triangular(centred, tmp_path):
    _, state = run_advi(centred, DATA, tmp_path, "ok", seed=1, args={"iter": 30, "algorithm": "fullrank"})
    saved = json.loads(state.path.read_text())
    saved["scale"][1] = 0.5  # row 0, column 1: above the diagonal
    (tmp_path / "upper.json").write_text(json.dumps(saved))
    with pytest.raises(AdviRunError, match="field scale must be lower triangular"):
        run_advi(
            centred, DATA, tmp_path, "x", seed=1, args={"algorithm": "fullrank"},
            resume=AdviState.read(tmp_path / "upper.json"),
        )


def test_bad_states_are_refused_with_the_field(centred, cmdstan, tmp_path):
    _, state = run_advi(centred, DATA, tmp_path, "ok", seed=1, args={"iter": 30})
    with pytest.raises(ValueError, match=r"algorithm: the state .* 'meanfield', got 'fullrank'"):
        run_advi(centred, DATA, tmp_path, "x", seed=1, args={"algorithm": "fullrank"}, resume=state)
    with pytest.raises(ValueError, match="inits: a resumed run"):
        run_advi(centred, DATA, tmp_path, "x", seed=1, resume=state, inits={"mu": 0})
    broken = json.loads(state.path.read_text())
    broken["mu"] = broken["mu"][:-1]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(AdviRunError, match="field mu must be an array of 10 numbers"):
        run_advi(centred, DATA, tmp_path, "x", seed=1, resume=AdviState.read(tmp_path / "broken.json"))
    for field, value, problem in [
        ("history_mu", [-1.0] * 10, "must be >= 0"),
        ("scale", [True] * 10, "must hold finite numbers only"),
        ("rng", "16 2 0", "is not a state of Stan's RNG"),
    ]:
        (tmp_path / "broken.json").write_text(json.dumps(json.loads(state.path.read_text()) | {field: value}))
        with pytest.raises(AdviRunError, match=f"{field}.* {problem}|{problem}"):
            run_advi(centred, DATA, tmp_path, "x", seed=1, resume=AdviState.read(tmp_path / "broken.json"))
    with pytest.raises(ValueError, match=r"eta: a resumed run uses the state's eta"):
        run_advi(centred, DATA, tmp_path, "x", seed=1, args={"eta": 0.5}, resume=state)
    other = compile_model(Path(__file__).parent / "stan" / "normal_mean.stan")
    normal_data = {"N": 3, "y": [1.0, 2.0, 3.0], "sigma": 1.0, "prior_mean": 0.0, "prior_sd": 10.0}
    with pytest.raises(AdviRunError, match="was written by model eight_schools_centered_model"):
        run_advi(other, normal_data, tmp_path, "x", seed=1, resume=state)
    with pytest.raises(ValueError, match="is not a stanflow-advi-state file"):
        AdviState.read(tmp_path / "ok-data.json")
    assert os.path.exists(tmp_path / "x-console.txt")
