"""The LCVI workflows in quick mode: their outputs, summary keys and the missing-data error."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from stanflow.lcvi.mf import reference_split
from stanflow.workflows import _load, _scripts, run_workflow

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def schools_quick(cmdstan, tmp_path_factory):
    """The quick ``lcvi-eight-schools`` run: its summary and output folder."""
    out = tmp_path_factory.mktemp("lcvi-eight-schools")
    return run_workflow("lcvi-eight-schools", out, quick=True), out


@pytest.fixture(scope="module")
def mf_quick(cmdstan, tmp_path_factory):
    """The quick ``lcvi-mf`` run: its summary and output folder."""
    out = tmp_path_factory.mktemp("lcvi-mf")
    return run_workflow("lcvi-mf", out, quick=True), out


def test_eight_schools_workflow(schools_quick):
    summary, tmp_path = schools_quick
    for key in [
        "risk_hmc",
        "risk_vi",
        "risk_lcvi",
        "risk_reduction_pct_mean",
        "risk_reduction_pct_sd",
        "n_seeds",
    ]:
        assert np.isfinite(summary[key]), key
    assert summary["n_seeds"] == 2 and summary["seeds"] == [1, 2] and summary["seed"] == 1
    assert summary["settings"]["advi_iter"] == 2000 and summary["quick"]
    # LCVI stops at the budget of 2000 once settled, else goes on to at most 4000
    for settled, iterations in zip(summary["settled"], summary["advi_iterations"], strict=True):
        assert iterations in (2000, 3000, 4000) and (settled or iterations == 4000)
    reduction = 100 * (
        1
        - np.array(summary["risk_lcvi_per_seed"])
        / np.array(summary["risk_vi_per_seed"])
    )
    assert summary["risk_reduction_pct_mean"] == pytest.approx(reduction.mean())
    assert summary["seeds_reduced"] == int(np.sum(reduction > 0))
    assert summary["risk_reduction_pct_range"] == pytest.approx(
        {"min": reduction.min(), "max": reduction.max()}
    )
    assert summary["advi_iterations_range"]["max"] == max(summary["advi_iterations"])
    # Calibration lowers the risk of mean-field VI; the exact posterior has less still.
    assert summary["risk_lcvi"] < summary["risk_vi"]
    assert summary["risk_hmc"] < summary["risk_lcvi"]
    for name in ["marginals.png", "risk.png", "lcvi_eight_schools.nc", "hmc.nc"]:
        assert (tmp_path / name).stat().st_size > 0
    assert json.loads((tmp_path / "summary.json").read_text())["n_seeds"] == 2
    # NUTS and each seed are a cell; the first seed's keeps the draws marginals.png shows
    names = sorted(path.name for path in (tmp_path / "runs").iterdir())
    assert names == ["hmc.json", "seed-1.json", "seed-2.json"]
    first = json.loads((tmp_path / "runs" / "seed-1.json").read_text())
    assert np.shape(first["draws"]["lcvi"]["theta"]) == (1000, 8)
    assert "draws" not in json.loads((tmp_path / "runs" / "seed-2.json").read_text())


def test_matrix_factorisation_workflow(mf_quick):
    summary, tmp_path = mf_quick
    for setting in ("code", "text"):
        records = sorted(path.name for path in (tmp_path / "runs" / setting).iterdir())
        assert records == ["seed-1.json", "seed-2.json"]  # one cell per seed: its 4 losses
    assert set(summary["risk_reduction_pct"]) == {
        "tilted_0.2",
        "tilted_0.5",
        "tilted_0.8",
        "squared",
    }
    assert summary["n_seeds"] == 2 and summary["shape"] == [200, 30]
    assert summary["seeds"] == [1, 2] and summary["seed"] == 1
    for name, runs in summary["runs"].items():
        reductions = [r["reduction_pct"] for r in runs]
        assert summary["risk_reduction_pct"][name]["mean"] == pytest.approx(
            np.mean(reductions)
        )
        for r in runs:
            assert r["risk_vi"] > 0 and r["risk_lcvi"] > 0 and r["lcvi_blocks"] == 10
        assert summary["test_risk"][name]["reference"]["n_seeds"] == 10
    # the text's setting: all sd 10 and u = M - l with M the plain-VI losses' 90th percentile
    assert summary["settings"]["text"]["noise_sd"] == 10.0
    assert summary["settings"]["text"]["utility"] == "linear"
    assert summary["settings"]["code"] | {"source": None} == {
        "noise_sd": 1.0, "prior_sd": 10.0, "utility": "exp", "source": None
    }
    text = summary["text"]
    piece = json.loads((tmp_path / "runs" / "text" / "seed-1.json").read_text())
    assert piece["config"]["model"]["noise_sd"] == 10.0
    for name, runs in text["runs"].items():
        assert text["risk_reduction_pct"][name]["mean"] == pytest.approx(
            np.mean([r["reduction_pct"] for r in runs])
        )
        for r in runs:
            assert r["risk_vi"] > 0 and r["risk_lcvi"] > 0
        # M is a loss value (the 90th percentile), gamma its inverse
        assert text["utility_scale_M90"][name]["mean"] > 0
    for name in summary["runs"]:
        gammas = [r["utility_scale"] for r in summary["runs"][name]]
        assert summary["utility_scale_M90"][name]["mean"] == pytest.approx(np.mean(gammas))
    for part in (summary, text):
        runs = [r for records in part["runs"].values() for r in records]
        plain = {r["seed"]: r["seconds_vi"] for r in runs}
        assert part["advi_seconds"] == pytest.approx(
            sum(plain.values()) + sum(r["seconds_lcvi"] for r in runs)
        )
    # each loss judges plain VI by its own loss (a model bound per loss and parameters)
    assert len({runs[0]["train_risk_vi"] for runs in summary["runs"].values()}) == 4
    # the four losses of a seed share one plain-VI run
    for seed in (1, 2):
        shared = {r["seconds_vi"] for runs in summary["runs"].values() for r in runs if r["seed"] == seed}
        assert len(shared) == 1
    figures = ["reductions.png", "risks.png", "decision_shift.png", "intervals.png",
               "user_shifts.png", "lcvi_mf.nc"]
    for name in figures:
        assert (tmp_path / name).stat().st_size > 0
    # Fig. 3: each tau-decision lies inside its own 90 % predictive interval, and
    # the summary's per-user mean shifts are those the first cell kept
    first = json.loads((tmp_path / "runs" / "code" / "seed-1.json").read_text())["first_seed"]
    assert first["interval_cells"] == summary["interval_cells"]
    for name in ["tilted_0.2", "tilted_0.8"]:
        kept = first["losses"][name]
        for method in ("vi", "lcvi"):
            low, high = np.array(kept[f"interval_{method}"])
            decisions = np.array(kept[f"decision_{method}"])
            assert np.all((low <= decisions) & (decisions <= high))
            assert summary["interval_width"][name][method] == pytest.approx(np.mean(high - low))
        shift = summary["user_mean_shift"][name]
        assert shift["mean"] == pytest.approx(np.mean(kept["user_shifts"]))
        assert shift["q50"] == pytest.approx(np.median(kept["user_shifts"]))
    # A rerun into the same folder reads the records instead of running again.
    again = run_workflow("lcvi-mf", tmp_path, quick=True)
    assert again["runs"] == summary["runs"]
    assert again["text"] == summary["text"]
    assert again["user_mean_shift"] == summary["user_mean_shift"]


def test_user_mean_shift_is_a_group_by_over_users():
    rows = reference_split((200, 30)).test_rows
    shift = np.random.default_rng(3).normal(size=rows.size)
    by_user = pd.Series(shift).groupby(rows).mean()
    user_mean_shift = _load("lcvi-mf", _scripts()["lcvi-mf"]).user_mean_shift
    assert user_mean_shift(shift, rows) == pytest.approx(by_user.to_numpy())


def test_matrix_factorisation_without_data_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("STANFLOW_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(
        FileNotFoundError, match=r"lastfm_counts_992x1003\.csv.*Last\.fm-1K"
    ):
        run_workflow("lcvi-mf", tmp_path / "out", quick=True)


def test_joint_workflow(schools_quick, mf_quick, tmp_path):
    summary = run_workflow("lcvi-joint", tmp_path, quick=True)
    assert len(list((tmp_path / "runs" / "eight_schools").glob("seed-*.json"))) == 2 * 4
    assert len(list((tmp_path / "runs" / "lastfm").glob("seed-*.json"))) == 2 * 5
    assert not list((tmp_path / "runs").rglob("*.partial"))  # the Adam runs' states, removed
    # the full run's figure adds the authors' published risks (a quick run has no reference)
    losses = {name: part for name, part in summary["lastfm"].items() if name != "settings"}
    _load("lcvi-joint", _scripts()["lcvi-joint"])._plot(
        summary["eight_schools"], losses, tmp_path / "full.png", with_reference=True)
    assert (tmp_path / "full.png").stat().st_size > 0
    schools = summary["eight_schools"]
    lastfm = summary["lastfm"]
    assert set(schools["methods"]) == {"loop", "fresh", "fixed"}
    assert set(lastfm["tilted_0.2"]["methods"]) == {"loop", "fresh", "fixed"}
    assert set(lastfm["tilted_0.8"]["methods"]) == {"loop", "fresh"}
    # The loop is the LCVI workflows' own run, to the last digit: eight schools'
    # per-seed risks, and lcvi-mf's records of the code setting for both losses.
    reference_schools, _ = schools_quick
    loop = schools["methods"]["loop"]
    assert loop["risk_vi"]["per_seed"] == reference_schools["risk_vi_per_seed"]
    assert loop["risk_lcvi"]["per_seed"] == reference_schools["risk_lcvi_per_seed"]
    reference_mf, _ = mf_quick
    for name in ("tilted_0.2", "tilted_0.8"):
        records = sorted(reference_mf["runs"][name], key=lambda r: r["seed"])
        loop = lastfm[name]["methods"]["loop"]
        for key in ("risk_vi", "risk_lcvi"):
            assert loop[key]["per_seed"] == [r[key] for r in records], (name, key)
        assert [run[name]["scale"] for run in summary["runs"]["lastfm"]] == [
            r["utility_scale"] for r in records
        ]
    # fresh and fixed share one plain VI per seed; the summary is the records'
    for part in (schools, lastfm["tilted_0.2"]):
        methods = part["methods"]
        assert methods["fresh"]["risk_vi"] == methods["fixed"]["risk_vi"]
    runs = summary["runs"]["eight_schools"]
    for method, values in schools["methods"].items():
        risk_vi = np.array([r[method]["risk_vi"] for r in runs])
        risk_lcvi = np.array([r[method]["risk_lcvi"] for r in runs])
        reduction = 100 * (risk_vi - risk_lcvi) / risk_vi
        assert values["reduction_pct"]["mean"] == pytest.approx(reduction.mean())
        assert values["reduction_pct"]["sd"] == pytest.approx(reduction.std(ddof=1))
        assert values["seeds_reduced"] == int(np.sum(reduction > 0))
        assert np.isfinite(values["objective"]["mean"]) and values["seconds"]["mean"] > 0
        assert np.isfinite(values["mu_mean"]["mean"])
    assert schools["paired"]["fixed_minus_fresh"]["risk_lcvi"]["per_seed"] == pytest.approx(
        [r["fixed"]["risk_lcvi"] - r["fresh"]["risk_lcvi"] for r in runs]
    )
    assert lastfm["tilted_0.2"]["reference"]["n_seeds"] == 10
    assert summary["seeds"] == {"eight_schools": [1, 2], "lastfm": [1, 2]} and summary["seed"] == 1
    assert summary["jobs"] >= 1 and summary["compute_seconds"] == pytest.approx(
        sum(r["compute_seconds"] for part in summary["runs"].values() for r in part)
    )
    assert (tmp_path / "risks.png").stat().st_size > 0
    # A rerun reads every piece back; a piece of another configuration is named.
    again = run_workflow("lcvi-joint", tmp_path, quick=True)
    assert again["runs"] == summary["runs"]
    piece = tmp_path / "runs" / "lastfm" / "seed-2-fresh-tilted_0.8.json"
    record = json.loads(piece.read_text())
    piece.write_text(json.dumps(record | {"config": record["config"] | {"K": 7}}))
    with pytest.raises(ValueError, match=r"seed-2-fresh-tilted_0\.8\.json"):
        run_workflow("lcvi-joint", tmp_path, quick=True)


def test_authors_recipe_workflow(tmp_path):
    summary = run_workflow("lcvi-mf-authors", tmp_path, quick=True)
    names = sorted(path.name for path in (tmp_path / "runs").iterdir())  # no partial state left
    ablated = ["tilted_0.8-utility_draws-1", "tilted_0.8-utility_draws-1-batch_rows-200",
               "tilted_0.8-utility_draws-30",
               "tilted_0.8-utility_draws-1-batch_rows-200-elbo_draws-1"]
    pieces = [f"seed-{s}-{p}" for s in (1, 2) for p in ("tilted_0.8", "vi")] + [
        f"seed-1-{a}" for a in ablated]
    assert names == sorted(f"{piece}.json" for piece in pieces)
    assert summary["seeds"] == [1, 2] and summary["seed"] == 1  # the seeds are SEED + r
    assert summary["recipe"]["utility_draws"] == 300
    part = summary["tilted_0.8"]
    vi, lcvi = np.array(part["vi"]["per_seed"]), np.array(part["lcvi"]["per_seed"])
    assert np.all(vi > 0) and np.all(lcvi > 0)
    assert part["reduction_pct"]["per_seed"] == pytest.approx(100 * (vi - lcvi) / vi)
    assert [run["tilted_0.8"]["lcvi"] for run in summary["runs"]] == list(lcvi)
    # plain VI is one run per seed, judged for both losses; LCVI for tilted 0.8 only
    assert set(summary["tilted_0.2"]) == {"vi", "reference"}
    assert [run["tilted_0.2"]["vi"] for run in summary["runs"]] == summary["tilted_0.2"]["vi"][
        "per_seed"]
    assert all(summary[name]["reference"]["n_seeds"] == 10 for name in ("tilted_0.2", "tilted_0.8"))
    assert all(run["seconds_vi"] > 0 for run in summary["runs"])
    _load("lcvi-mf-authors", _scripts()["lcvi-mf-authors"])._plot(
        summary, tmp_path / "full.png", with_reference=True)  # as a full run draws it
    assert (tmp_path / "full.png").stat().st_size > 0
    # the ablation: seed 1's LCVI with the recipe changed, beside the recipe's own
    ablation = summary["ablation"]
    assert ablation["recipe"] == summary["runs"][0]["tilted_0.8"]["lcvi"]
    assert [v["change"] for v in ablation["variants"]] == [
        {"utility_draws": 1}, {"utility_draws": 1, "batch_rows": 200}, {"utility_draws": 30},
        {"utility_draws": 1, "batch_rows": 200, "elbo_draws": 1}]
    assert len({v["lcvi"] for v in ablation["variants"]} | {ablation["recipe"]}) == 5
    assert (tmp_path / "risks.png").stat().st_size > 0
    assert run_workflow("lcvi-mf-authors", tmp_path, quick=True)["runs"] == summary["runs"]
