"""The experiment runner and its piece store (stand-in cells, no compiler)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from stanflow.experiment import Cell, CellRun, Experiment
from stanflow.pieces import ConfigurationError, Pieces, Stopped, opened_stores


def test_pieces_are_computed_once_and_another_configuration_names_the_fields(tmp_path):
    pieces, calls = Pieces(tmp_path), []

    def compute():
        calls.append(1)
        return {"value": 3.5}

    first = pieces.get("part/seed-1", {"K": 2, "prior": {"sd": 10}}, compute)
    again = Pieces(tmp_path).get("part/seed-1", {"K": 2, "prior": {"sd": 10}}, compute)
    assert first == again and first["value"] == 3.5 and first["config"]["K"] == 2
    assert first["seconds"] >= 0 and len(calls) == 1
    with pytest.raises(ConfigurationError) as error:
        Pieces(tmp_path).get("part/seed-1", {"K": 3, "prior": {"sd": 10}, "B": 5}, compute)
    message = str(error.value)
    assert "seed-1.json was computed with another configuration" in message
    assert "B: absent stored, 5 now; K: 2 stored, 3 now" in message and "prior" not in message
    assert Pieces(tmp_path).finished() == 1


def test_a_pieces_scratch_folder_is_removed_once_the_piece_is_written_or_read(tmp_path):
    pieces = Pieces(tmp_path)
    scratch = pieces.scratch("part/seed-1")

    def compute():
        scratch.mkdir(parents=True)
        (scratch / "state.npz").write_bytes(b"partial state")
        return {"risk": 0.5}

    pieces.get("part/seed-2", {"K": 2}, lambda: {"risk": 0.4})
    (pieces.scratch("part/seed-2") / "state").mkdir(parents=True)
    (pieces.scratch("part/seed-2") / "state" / "record.json").write_text("{}")
    assert pieces.finished() == 1  # a running piece's state is not a finished piece
    pieces.get("part/seed-1", {"K": 2}, compute)
    assert not scratch.exists() and (tmp_path / "part" / "seed-1.json").is_file()
    scratch.mkdir()  # left by a crash after the piece was written
    assert pieces.get("part/seed-1", {"K": 2}, compute)["risk"] == 0.5
    assert not scratch.exists()


def draws_experiment(calls: list[str], fail_at: str | None = None, jobs: int = 2) -> Experiment:
    """Seeds of normal draws, then a cell that pools them (it needs every seed)."""

    def cells(settings):
        seeds = [Cell(f"seed-{s}", {"n": settings["n"], "s": s}) for s in range(settings["seeds"])]
        return [*seeds, Cell("pooled", {"n": settings["n"]}, needs=tuple(c.name for c in seeds))]

    def compute(run: CellRun) -> dict:
        calls.append(run.cell.name)
        if run.cell.name == fail_at:
            raise RuntimeError(f"crash in {fail_at}")
        if run.cell.name == "pooled":
            return {"mean": float(np.mean([r["mean"] for r in run.needed.values()]))}
        return {"mean": float(run.rng(run.params["s"]).normal(size=run.params["n"]).mean())}

    def summarise(settings, records):
        return {"means": [r["mean"] for r in records.values()], "names": list(records)}

    return Experiment(settings={"quick": {"n": 10, "seeds": 3}, "full": {"n": 100, "seeds": 3}},
                      cells=cells, compute=compute, summarise=summarise, seed=7, jobs=jobs)


def test_an_experiment_computes_every_cell_once_and_a_rerun_reads_them_back(tmp_path):
    calls: list[str] = []
    summary = draws_experiment(calls).run(tmp_path, quick=True)
    truth = [float(np.random.default_rng([7, s]).normal(size=10).mean()) for s in range(3)]
    assert summary["means"] == pytest.approx([*truth, np.mean(truth)], rel=0, abs=1e-15)
    assert summary["names"] == ["seed-0", "seed-1", "seed-2", "pooled"]
    assert summary["settings"] == {"n": 10, "seeds": 3} and summary["seed"] == 7
    assert summary["compute_seconds"] >= 0 and sorted(calls) == sorted(summary["names"])
    stored = json.loads((tmp_path / "runs" / "seed-1.json").read_text())
    assert stored["config"] == {"n": 10, "s": 1, "seed": 7}
    again: list[str] = []
    assert draws_experiment(again).run(tmp_path, quick=True) == summary and again == []
    with pytest.raises(ConfigurationError, match=r"seed-\d\.json .*n: 10 stored, 100 now"):
        draws_experiment(again).run(tmp_path, quick=False)


def test_a_crash_inside_a_cell_then_a_rerun_gives_the_uninterrupted_runs_numbers(tmp_path):
    uninterrupted = draws_experiment([], jobs=1).run(tmp_path / "whole", quick=True)
    calls: list[str] = []
    with pytest.raises(RuntimeError, match="crash in seed-2"):
        draws_experiment(calls, fail_at="seed-2", jobs=1).run(tmp_path / "resumed", quick=True)
    assert calls == ["seed-0", "seed-1", "seed-2"]  # pooled never started
    rerun: list[str] = []
    resumed = draws_experiment(rerun, jobs=1).run(tmp_path / "resumed", quick=True)
    assert rerun == ["seed-2", "pooled"]
    strip = ("compute_seconds",)
    assert {k: v for k, v in resumed.items() if k not in strip} == {
        k: v for k, v in uninterrupted.items() if k not in strip}


def test_a_failure_starts_no_new_cell_and_the_running_one_is_kept(tmp_path):
    started, b_running = [], threading.Event()

    def compute(run: CellRun) -> dict:
        started.append(run.cell.name)
        if run.cell.name == "b":
            b_running.set()
            time.sleep(0.5)  # running when the failure comes: finishes and is kept
        if run.cell.name == "a":
            b_running.wait(5)
            raise RuntimeError("cell failed")
        return {}

    experiment = Experiment(
        settings={"quick": {}, "full": {}}, seed=1, jobs=2, summarise=lambda s, r: {},
        cells=lambda s: [Cell("b"), Cell("a"), Cell("c")], compute=compute)
    with pytest.raises(RuntimeError, match="cell failed"):
        experiment.run(tmp_path, quick=True)
    assert sorted(started) == ["a", "b"]
    assert (tmp_path / "runs" / "b.json").is_file() and not (tmp_path / "runs" / "c.json").exists()
    stopped = Pieces(tmp_path / "runs")
    stopped.stop.set()
    with pytest.raises(Stopped, match="not started: c"):
        stopped.get("c", {}, dict)


def test_a_cell_waits_for_the_cells_it_needs(tmp_path):
    finished: list[str] = []

    def compute(run: CellRun) -> dict:
        if run.cell.name == "slow":
            time.sleep(0.3)
        finished.append(run.cell.name)
        return {"saw": sorted(run.needed)}

    cells = [Cell("slow"), Cell("after", needs=("slow",)), Cell("free")]
    summary = Experiment(settings={"quick": {}, "full": {}}, seed=1, jobs=2, cells=lambda s: cells,
                         compute=compute, summarise=lambda s, r: {"saw": r["after"]["saw"]}
                         ).run(tmp_path, quick=True)
    assert finished == ["free", "slow", "after"] and summary["saw"] == ["slow"]


@pytest.mark.parametrize(
    ("cells", "error", "match"),
    [
        ([Cell("a"), Cell("a")], ValueError, "cell 'a' is declared twice"),
        ([Cell("b", needs=("a",)), Cell("a")], ValueError, r"cell 'b' needs \['a'\], not declared"),
        (["a"], TypeError, "cells must be Cell objects, got str"),
    ],
)
def test_badly_declared_cells_are_refused_before_any_work(tmp_path, cells, error, match):
    calls: list[str] = []
    experiment = Experiment(settings={"quick": {}, "full": {}}, seed=1, cells=lambda s: cells,
                            compute=lambda run: calls.append(run.cell.name) or {},
                            summarise=lambda s, r: {})
    with pytest.raises(error, match=match):
        experiment.run(tmp_path, quick=True)
    assert calls == [] and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Cell("../x"), "non-empty parts separated by '/'"),
        (lambda: Cell("a//b"), "non-empty parts"),
        (lambda: Cell("a.partial"), "scratch folder"),
        (lambda: Cell("a", {"seed": 1}), "params key 'seed' is the runner's"),
        (lambda: Cell("a", {"x": object()}), "params must be JSON-like"),
        (lambda: Experiment(settings={"quick": {}}, cells=list, compute=dict,
                            summarise=dict, seed=1), "exactly the keys 'quick' and 'full'"),
        (lambda: Experiment(settings={"quick": {}, "full": {}}, cells=list, compute=dict,
                            summarise=dict, seed=-1), "seed must be an integer >= 0"),
        (lambda: Experiment(settings={"quick": {}, "full": {}}, cells=list, compute=dict,
                            summarise=dict, seed=1, jobs=0), "jobs must be an integer >= 1"),
    ],
)
def test_bad_declarations_name_the_field(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_the_runners_summary_keys_are_not_the_workflows(tmp_path):
    experiment = Experiment(settings={"quick": {}, "full": {}}, seed=1, cells=lambda s: [],
                            compute=dict, summarise=lambda s, r: {"seed": 3})
    with pytest.raises(ValueError, match=r"summary keys \['seed'\] are the runner's"):
        experiment.run(Path(tmp_path), quick=True)


def test_the_cause_is_raised_not_the_cells_it_stopped(tmp_path):
    def compute(run: CellRun) -> dict:
        if run.cell.name == "a":
            raise RuntimeError("the cause")
        return {}

    for attempt in range(20):  # whichever cell's end is collected first
        experiment = Experiment(settings={"quick": {}, "full": {}}, seed=1, jobs=2,
                                cells=lambda s: [Cell("a"), Cell("b"), Cell("c")],
                                compute=compute, summarise=lambda s, r: {})
        with pytest.raises(RuntimeError, match="the cause"):
            experiment.run(tmp_path / str(attempt), quick=True)


def test_a_cell_is_computed_again_when_a_cell_it_needs_changed(tmp_path):
    def experiment(x: int) -> Experiment:
        return Experiment(
            settings={"quick": {"x": x}, "full": {}}, seed=1, summarise=lambda s, r: {},
            cells=lambda s: [Cell("a", {"x": s["x"]}), Cell("b", needs=("a",))],
            compute=lambda run: ({"value": run.params["x"]} if run.cell.name == "a"
                                 else {"value": 10 * run.needed["a"]["value"]}))

    experiment(1).run(tmp_path, quick=True)
    with pytest.raises(ConfigurationError, match=r"a\.json .*x: 1 stored, 2 now"):
        experiment(2).run(tmp_path, quick=True)
    (tmp_path / "runs" / "a.json").unlink()  # as the message says
    with pytest.raises(ConfigurationError, match=r"b\.json .*needs\.a: '[0-9a-f]{16}' stored"):
        experiment(2).run(tmp_path, quick=True)  # b was made from the old a: never mixed in
    assert json.loads((tmp_path / "runs" / "a.json").read_text())["value"] == 2


def test_a_stale_cell_is_found_before_any_work(tmp_path):
    calls: list[str] = []

    def experiment(n: int) -> Experiment:
        return Experiment(
            settings={"quick": {"n": n}, "full": {}}, seed=1, summarise=lambda s, r: {},
            cells=lambda s: [Cell("first"), Cell("last", {"n": s["n"]})],
            compute=lambda run: calls.append(run.cell.name) or {})

    experiment(1).run(tmp_path, quick=True)
    (tmp_path / "runs" / "first.json").unlink()
    calls.clear()
    with pytest.raises(ConfigurationError, match=r"last\.json .*n: 1 stored, 2 now"):
        experiment(2).run(tmp_path, quick=True)
    assert calls == []


def test_a_kept_cell_whose_files_are_gone_is_computed_again(tmp_path):
    calls: list[str] = []

    def compute(run: CellRun) -> dict:
        calls.append(run.cell.name)
        (run.out / "fit.txt").write_text("draws")
        return {"files": ["fit.txt"]}

    experiment = Experiment(settings={"quick": {}, "full": {}}, seed=1, compute=compute,
                            cells=lambda s: [Cell("fit")], summarise=lambda s, r: {})
    experiment.run(tmp_path, quick=True)
    experiment.run(tmp_path, quick=True)
    assert calls == ["fit"]  # read back with its file
    (tmp_path / "fit.txt").unlink()
    experiment.run(tmp_path, quick=True)
    assert calls == ["fit", "fit"] and (tmp_path / "fit.txt").is_file()


def test_a_piece_may_not_return_the_stores_keys_and_an_abandoned_one_is_not_kept(tmp_path):
    pieces = Pieces(tmp_path)
    with pytest.raises(ValueError, match=r"piece 'x': the keys \['seconds'\] are the store's"):
        pieces.get("x", {}, lambda: {"seconds": 3})

    def abandoned() -> dict:
        pieces.abandon()  # a second Ctrl-C while the piece runs
        return {"value": 1}

    with pytest.raises(Stopped, match="abandoned: y"):
        pieces.get("y", {}, abandoned)
    assert not (tmp_path / "y.json").exists()


def test_open_stores_are_seen_by_every_enclosing_block(tmp_path):
    with opened_stores() as outer, opened_stores() as inner:
        store = Pieces(tmp_path / "runs")
    assert outer == inner == {tmp_path / "runs": store}
