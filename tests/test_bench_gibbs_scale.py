"""docs/benchmarks.md's "GPC at scale" section quotes ``bench/results/gibbs_scale.json``: every
number of its tables and goals is the committed one. (The benchmark itself runs for about 15
minutes; CI does not run it.)"""

from __future__ import annotations

import json
import math
from pathlib import Path

import benchmark_docs
import numpy as np
import pytest
from benchmark_docs import cells

REPO = Path(__file__).resolve().parent.parent
RESULT = REPO / "bench" / "results" / "gibbs_scale.json"
EARLIER = REPO / "bench" / "results" / "gibbs_scale_2026-12-05.json"
K50 = REPO / "bench" / "results" / "gibbs_scale_k50.json"
GOAL = REPO / "bench" / "results" / "gibbs_scale_goal.json"
GOAL_EARLIER = REPO / "bench" / "results" / "gibbs_scale_goal_2026-12-06.json"
DRAWN = REPO / "bench" / "results" / "gibbs_drawn.json"
DOC = REPO / "docs" / "benchmarks.md"
GIBBS_DOC = REPO / "docs" / "gibbs.md"
HEADING = "## GPC at scale (`bench/gibbs_scale.py`)"


def section() -> str:
    return benchmark_docs.section(HEADING)


@pytest.fixture(scope="module")
def data() -> dict:
    if not RESULT.exists():
        pytest.skip(f"{RESULT.name} is not committed")
    return json.loads(RESULT.read_text())


def test_the_cost_table_is_the_committed_run(data: dict) -> None:
    text = section()
    assert data["command"] in text
    rows = {(int(c[0]), int(c[1])): c for c in map(cells, text.splitlines())
            if len(c) == 9 and c[0].isdigit() and not c[2].isdigit()}
    assert len(rows) == len(data["cost"])
    for record in data["cost"]:
        row, moved = rows[(record["K"], record["n"])], record["transport"]
        assert row[2:8] == [f"{moved['wall_s']:.1f}", f"{moved['omega']:.3f}",
                            f"{moved['omega_se']:.3f}", str(moved["evaluations"]),
                            f"{moved['ess_min_at_root']:.0f}", f"{moved['ess_median_at_root']:.0f}"]
        reweighted = record.get("reweight")
        assert row[8] == ("n/a" if reweighted is None else
                          f"{reweighted['ess_min_at_root']:.0f} / {reweighted['ess_median_at_root']:.0f}")


VERSUS_NUTS = REPO / "bench" / "results" / "gibbs_scale_nuts.json"


@pytest.fixture(scope="module")
def versus() -> list[dict]:
    return json.loads(VERSUS_NUTS.read_text())["rows"]


def nuts_root_cell(record: dict) -> str:
    if math.isfinite(record["nuts_root"]):
        return f"{record['nuts_root']:.3f} ({record['nuts_root_se']:.3f})"
    side = "> " if min(record["counts_nuts"]) > 190 else "< "
    return side + f"{record['omegas'][-1 if side == '> ' else 0]:.3f}"


def test_the_nuts_table_and_the_goals_are_the_committed_runs(data: dict, versus: list[dict]) -> None:
    text = section()
    assert json.loads(VERSUS_NUTS.read_text())["command"] in text
    rows = [c for c in map(cells, text.splitlines()) if len(c) == 8 and c[0].isdigit()]
    assert len(rows) == len(versus)
    for row, record in zip(rows, versus, strict=True):
        gap = record["gap_in_errors_of_both"]
        assert row == [str(record["K"]), str(record["n"]),
                       f"{record['root']:.3f} ({record['root_se']:.3f})", nuts_root_cell(record),
                       f"{gap:.1f}" if math.isfinite(gap) else "n/a",
                       " / ".join(map(str, record["counts_moved"])),
                       " / ".join(map(str, record["counts_nuts"])),
                       f"{np.median([r['seconds_median'] for r in record['nuts']]):.2f}"]
    assert data["machine"]["cpu_model"].startswith("AMD")  # the table's host, as the section says
    assert "on the 2-core AMD EPYC host" in text


SPREAD = REPO / "bench" / "results" / "gibbs_spread.json"
SPREAD_HEADING = "## GPC spread over Dask workers (`bench/gibbs_spread.py`)"


def test_the_spread_section_is_the_committed_run() -> None:
    """docs/benchmarks.md's Dask section quotes bench/results/gibbs_spread.json."""
    data = json.loads(SPREAD.read_text())
    text = DOC.read_text()
    start = text.index(SPREAD_HEADING)
    body = text[start:text.find("\n## ", start + len(SPREAD_HEADING))]
    assert data["command"] in body and data["same_numbers"] is True
    rows = [c for c in map(cells, body.splitlines()) if len(c) == 3 and c[2][:1].isdigit()]
    assert [r[1:] for r in rows] == [
        [" / ".join(f"{v:.1f}" for v in data["wall_s"][kind]), f"{data['wall_median_s'][kind]:.1f}"]
        for kind in ("local", "dask")]
    assert f"**{data['dask_over_local']:.2f}**" in body
    assert f"`omega` {data['numbers']['omega']:.4f}" in body
    assert f"{data['cluster_start_s']:.1f} s" in body
    summary = next(line for line in text.splitlines() if line.startswith("| GPC at scale spread"))
    assert f"{data['dask_over_local']:.2f}x the in-process wall" in summary


def test_the_goals_text_is_the_committed_run(data: dict, versus: list[dict]) -> None:
    """The cost against n and the agreement with NUTS, as the bullets state them."""
    text = " ".join(section().split())
    cost = {(r["K"], r["n"]): r["transport"] for r in data["cost"]}
    walls = [cost[(5, n)]["wall_s"] for n in (1000, 10_000, 100_000)]
    assert (f"took {walls[0]:.1f} s, {walls[1]:.1f} s and {walls[2]:.1f} s at K = 5 for n = 10^3, "
            "10^4 and 10^5") in text
    agree = [max(abs(a - b) for a, b in zip(r["counts_moved"], r["counts_nuts"], strict=True))
             for r in versus]
    gaps = [r["gap_in_errors_of_both"] for r in versus]
    assert [r["K"] for r in versus] == [5, 10, 20]
    assert (f"agree within {agree[0]}, {agree[1]} and {agree[2]} resamples at every `omega` "
            f"compared, and the roots within {gaps[0]:.1f}, {gaps[1]:.1f} and {gaps[2]:.1f} "
            "errors of their difference") in text
    assert max(gaps) < 3
    cost_rows = [cost[(r["K"], r["n"])] for r in versus]  # the roots the comparison starts from
    assert [(c["omega"], c["omega_se"]) for c in cost_rows] == [(r["root"], r["root_se"])
                                                                 for r in versus]
    summary = DOC.read_text().split(HEADING)[0]
    assert f"roots within {gaps[0]:.1f}, {gaps[1]:.1f}, {gaps[2]:.1f} and " in summary
    earlier = json.loads(EARLIER.read_text())  # K = 50: the run of 2026-12-05, kept whole
    old = next(r["transport"] for r in earlier["cost"] if (r["K"], r["n"]) == (50, 500))
    assert old["low_ess_share"] == 0 and old["ess_min_over_evaluations"] >= 100
    assert earlier["machine"]["cpu_model"].startswith("Intel")
    assert (f"`bench/results/{EARLIER.name}`: the table's command on 2026-12-05 at 17:07 UTC, on "
            "the 2-core Intel Xeon host") in text
    assert earlier["command"] == data["command"] and (50, 500) not in cost
    assert (f"found the root {old['omega']:.3f} +- {old['omega_se']:.3f} with {old['bridged']} "
            f"bridges in {old['wall_s']:.1f} s for {old['evaluations']} evaluations, every "
            "evaluation's smallest effective size at least 100") in text
    run = json.loads(K50.read_text())  # K = 50 as it ships
    k50, goal = run["row"]["transport"], json.loads(GOAL.read_text())
    assert run["command"] in text and (run["row"]["K"], run["row"]["n"]) == (50, 500)
    assert run["machine"]["platform"] == goal["machine"]["platform"]  # the goal runs' host
    assert k50["low_ess_share"] == 0 and k50["bridged"] >= run["B"]
    worst = min(k50["ess_min_per_evaluation"])
    assert worst == k50["ess_min_over_evaluations"] >= 100  # healthy at every evaluation
    assert len(k50["ess_min_per_evaluation"]) == k50["evaluations"]
    assert (f"the smallest effective size over the {k50['evaluations']} evaluations {worst:.1f}, "
            f"at the root the smallest {k50['ess_min_at_root']:.0f}, the median "
            f"{k50['ess_median_at_root']:.0f} of 400, `low_ess_share` 0, the root "
            f"{k50['omega']:.3f} +- {k50['omega_se']:.3f}") in text
    assert (f"{k50['wall_s']:.1f} s for {k50['evaluations']} evaluations, {k50['bridged']} bridges"
            in text)
    assert f"HMC acceptance {k50['hmc_acceptance']:.2f}), against {goal['wall_s_median']:.1f} s" in text
    assert f"(the first-order root {k50['omega0']:.3f})" in text
    before_run = json.loads((K50.parent / "gibbs_scale_k50_t_population.json").read_text())
    before = before_run["row"]["transport"]
    assert before_run["command"] == run["command"] and before_run["seed"] == run["seed"]
    per = before["ess_min_per_evaluation"]
    assert min(per) == before["ess_min_over_evaluations"] and len(per) == before["evaluations"]
    assert (per[0] < 100 <= min(per[2:]) and per[1] < 100
            and before["low_ess_per_evaluation"][:2] == [80, 1])
    assert (f"80 of the 200 resamples fell below 100 there, the smallest to {per[0]:.1f}, and the "
            f"second evaluation left one at {per[1]:.1f}") in text
    assert (f"{before['wall_s']:.1f} s for {before['evaluations']} evaluations and "
            f"{before['bridged']} bridges, the root {before['omega']:.3f} +- "
            f"{before['omega_se']:.3f}") in text
    gap = abs(k50["omega"] - before["omega"]) / math.hypot(k50["omega_se"], before["omega_se"])
    assert f"The two roots are {gap:.1f} errors of their difference apart" in text
    assert 2 * k50["evaluations"] == before["evaluations"]  # "half the evaluations"
    assert f"({before['wall_s'] / k50['wall_s']:.1f}x less)" in text
    nuts_run = json.loads((K50.parent / "gibbs_scale_nuts_K50.json").read_text())
    nuts = nuts_run["rows"][0]
    assert nuts_run["command"] in text and (nuts["K"], nuts["n"]) == (50, 500)
    assert nuts_run["machine"]["platform"] == run["machine"]["platform"]
    assert nuts["root"] == k50["omega"] and nuts["root_se"] == k50["omega_se"]
    assert (f"the moved design's root {nuts['root']:.3f} +- {nuts['root_se']:.3f} (the run above's, "
            f"to the last digit) against the NUTS root {nuts['nuts_root']:.3f} +- "
            f"{nuts['nuts_root_se']:.3f}, {nuts['gap_in_errors_of_both']:.1f} errors of both "
            "apart") in text
    assert nuts["gap_in_errors_of_both"] < 2
    gap50 = f"{nuts['gap_in_errors_of_both']:.1f}"
    assert f"roots within 0.6, 1.7, 1.3 and {gap50} errors of both;" in summary
    assert (f"first evaluation), its root {gap50} errors of both from the root of NUTS per "
            "resample") in " ".join(GIBBS_DOC.read_text().split())
    moved, by_nuts = (" / ".join(map(str, nuts[key])) for key in ("counts_moved", "counts_nuts"))
    assert f"moved root {moved} moved and {by_nuts} by NUTS" in text
    guide = " ".join(GIBBS_DOC.read_text().split())
    assert (f"the smallest effective size {worst:.1f} of 400 over the search's "
            f"{k50['evaluations']} evaluations, {k50['ess_min_at_root']:.0f} at the root") in guide
    assert (f"the whole calibration took {k50['wall_s']:.1f} s there, against "
            f"{goal['wall_s_median']:.1f} s at K = 20, n = 2000 on the same host") in guide
    assert (f"{before['wall_s']:.1f} s with the population always resampled from the t, when a "
            f"resample fell to {per[0]:.1f} at the first evaluation") in guide
    assert (f"K = 50 healthy at every evaluation (ESS >= {worst:.1f}, SMC bridges) in "
            f"{k50['wall_s']:.1f} s as it ships ({before['wall_s']:.1f} s and {per[0]:.1f} at the "
            f"worst evaluation with the population resampled from a t, {old['wall_s']:.1f} s with "
            "the calibration of 2026-12-05)") in summary
    goal_size = cost[(20, 2000)]
    assert f"the same calibration took {goal_size['wall_s']:.1f} s in the table" in text
    assert f"the goal's size, K = 20, n = 2000, in {goal_size['wall_s']:.1f} s" in text
    assert (f"{goal_size['wall_s']:.1f} s (the same work) on the slower host of 2026-12-07"
            in summary)

COUNT_SPREAD = REPO / "bench" / "results" / "gibbs_count_spread.json"


def test_the_count_spread_table_is_the_committed_run() -> None:
    """The count over independent seeds, as the section's table states it."""
    data = json.loads(COUNT_SPREAD.read_text())
    text = section()
    assert data["command"] in text
    rows = [c for c in map(cells, text.splitlines()) if len(c) == 6 and c[0].isdigit()]
    assert rows == [[str(r["K"]), str(r["n"]), f"{r['omega']:.3f}",
                     f"{min(r['counts'])}-{max(r['counts'])} (mean {np.mean(r['counts']):.1f})",
                     f"{r['sd_over_seeds']:.2f} / {r['stated_sd_rms']:.2f}", str(r["nuts_count"])]
                    for r in data["rows"]]
    ratio = {r["K"]: r["sd_over_seeds"] / r["stated_sd_rms"] for r in data["rows"]}
    assert (f"{ratio[20]:.2f} times its stated standard deviation at K = 20 and {ratio[10]:.2f} "
            "times at K = 10") in " ".join(text.split())


ROOT_SPREAD = REPO / "bench" / "results" / "gibbs_root_spread.json"


def test_the_root_spread_table_is_the_committed_run(versus: list[dict]) -> None:
    """The root over independent seeds against its stated error, as the section states it."""
    sizes = json.loads(ROOT_SPREAD.read_text())["sizes"]
    text = section()
    flat = " ".join(text.split())
    nuts = {r["K"]: r for r in versus}
    rows = [c for c in map(cells, text.splitlines()) if len(c) == 9 and c[0].isdigit()
            and c[2].isdigit()]
    assert [s["K"] for s in sizes] == [10, 20]
    for row, size in zip(rows, sizes, strict=True):
        roots = [r["root"] for r in size["rows"]]
        assert size["command"] in text
        assert row == [str(size["K"]), str(size["n"]), str(len(roots)),
                       f"{min(roots):.3f}-{max(roots):.3f}", f"{size['root_mean']:.3f}",
                       f"{size['sd_over_seeds']:.3f}", f"{size['stated_se_rms']:.3f}",
                       f"{size['sd_over_stated']:.2f}",
                       f"{size['nuts_root']:.3f} ({size['nuts_root_se']:.3f})"]
        assert size["nuts_root"] == nuts[size["K"]]["nuts_root"]
        assert 0.7 < size["sd_over_stated"] < 1.3  # "the stated error matches the spread"
    by_K = {s["K"]: s for s in sizes}
    assert (f"matches the roots' spread** ({by_K[10]['sd_over_stated']:.2f} and "
            f"{by_K[20]['sd_over_stated']:.2f} of it)") in flat
    assert (f"at K = 20, {by_K[20]['root_mean']:.3f} against {by_K[20]['nuts_root']:.3f}; at "
            f"K = 10, {by_K[10]['root_mean']:.3f} against {by_K[10]['nuts_root']:.3f}") in flat
    gaps = [abs(by_K[K]["nuts_root"] - by_K[K]["root_mean"]) / math.hypot(
        by_K[K]["sd_over_seeds"] / math.sqrt(len(by_K[K]["rows"])), by_K[K]["nuts_root_se"])
        for K in (20, 10)]
    assert f"{gaps[0]:.1f} and {gaps[1]:.1f} standard errors of the difference" in flat
    assert max(abs(by_K[K]["nuts_root"] - by_K[K]["root_mean"]) for K in (10, 20)) <= 0.05
    prior = {s["K"]: s for s in json.loads(ROOT_SPREAD.read_text())["prior_start"]["sizes"]}
    assert (f"means were {prior[20]['root_mean']:.3f} (K = 20) and {prior[10]['root_mean']:.3f} "
            f"(K = 10), the spreads {prior[20]['sd_over_seeds']:.3f} and "
            f"{prior[10]['sd_over_seeds']:.3f} and the stated errors "
            f"{prior[20]['stated_se_rms']:.3f} and {prior[10]['stated_se_rms']:.3f}") in flat
    guide = " ".join(GIBBS_DOC.read_text().split())
    assert (f"as their stated `omega_se` says ({by_K[20]['sd_over_stated']:.2f} and "
            f"{by_K[10]['sd_over_stated']:.2f} of it), and their means are within 0.05") in guide


SIDE_BY_SIDE = REPO / "bench" / "results" / "gibbs_scale_side_by_side_n2000.json"
SIDE_BY_SIDE_N500 = REPO / "bench" / "results" / "gibbs_scale_side_by_side.json"


def test_the_side_by_side_goal_is_the_committed_run() -> None:
    """The moved design against the resample design's calibration at the goal's size (and at
    n = 500, an earlier moved design), as the goal states it."""
    run = json.loads(SIDE_BY_SIDE.read_text())
    text = " ".join(section().split())
    nuts, moved = run["resample_design"], run["moved"]
    assert run["command"] in text and (run["K"], run["n"]) == (20, 2000)
    assert f"met side by side at K = 20, n = 2000, {run['wall_ratio']:.1f}x**" in text
    assert run["wall_ratio"] >= 10
    assert (f"took {moved[0]['wall_s']:.1f} s and {moved[1]['wall_s']:.1f} s (before and after), "
            f"root {moved[0]['omega']:.3f}") in text
    assert f"took {nuts['wall_s']:.1f} s for its {nuts['steps']} steps and **had not converged**" in text
    assert not nuts["converged"] and nuts["steps"] == 16
    assert (f"crept from {nuts['omega_path'][0]:.0f} to {nuts['omega']:.3f} while the coverage "
            f"stayed at {min(nuts['coverage_path']):.3f}-{max(nuts['coverage_path']):.3f}") in text
    assert min(nuts["coverage_path"]) > 0.95
    assert (f"{-run['gap']:.3f} below the moved root ({-run['gap_in_moved_se']:.1f} of its stated "
            "errors)") in text
    median = float(np.median([m["wall_s"] for m in moved]))
    assert (f"above {run['wall_ratio']:.1f}x (its wall over the moved design's median, "
            f"{median:.1f} s)") in text
    before = json.loads(SIDE_BY_SIDE_N500.read_text())
    old = before["resample_design"]
    assert (f"the resample design took {old['wall_s']:.1f} s for its {old['steps']} steps, its rate "
            f"crept to {old['omega']:.3f} with the coverage at {min(old['coverage_path']):.3f}-"
            f"{max(old['coverage_path']):.3f}, and the moved design "
            f"{before['moved'][0]['wall_s']:.1f} s and {before['moved'][1]['wall_s']:.1f} s: "
            f"{before['wall_ratio']:.1f}x") in text
    summary = DOC.read_text().split(HEADING)[0]
    assert (f"{run['wall_ratio']:.1f}x less wall than the resample design side by side (its "
            f"Robbins-Monro GPC, {nuts['wall_s']:.1f} s, not yet converged") in summary


DATA_SIZES = REPO / "bench" / "results" / "gibbs_scale_data.json"


def test_the_cost_against_n_is_the_committed_run() -> None:
    """The data cut by observation against whole, and the growth in n, as the bullets state them
    (the path started near the data; the runs from the prior kept beside it)."""
    sized = json.loads(DATA_SIZES.read_text())
    text = " ".join(section().split())
    assert sized["command"] in text and sized["machine"]["cpu_model"].startswith("AMD")

    def by_size(run: dict) -> dict:
        return {(r["K"], r["n"]): r for r in run["rows"]}

    rows = by_size(sized)
    prior = by_size(sized["prior_start"])
    sweep = [rows[(5, n)] for n in (1000, 10_000, 100_000)]
    for mode, words in (("sliced", "the calibration took"), ("whole", "evaluated whole, as before,")):
        walls = [r[f"{mode}_median"]["wall_s"] for r in sweep]
        growth = f"{walls[1] / walls[0]:.1f}x and {walls[2] / walls[1]:.1f}x"
        assert max(walls[1] / walls[0], walls[2] / walls[1]) <= 10  # linear in n
        assert (f"{words} {walls[0]:.1f} s, {walls[1]:.1f} s and {walls[2]:.1f} s: **{growth} for 10x "
                "the data**" if mode == "sliced" else
                f"{words} {walls[0]:.1f} s, {walls[1]:.1f} s and {walls[2]:.1f} s ({growth})") in text
        assert sized["growth_per_10x_n"][f"{mode}_total_wall"] == pytest.approx(
            [walls[1] / walls[0], walls[2] / walls[1]])
    largest = sweep[2]
    assert largest["chunks"] == 13 and sweep[0]["chunks"] == sweep[1]["chunks"] == 0
    assert f"the chunks take {largest['whole_over_sliced']:.2f}x off at n = 10^5" in text
    runs = [" and ".join(f"{r['wall_s']:.1f}" for r in largest[mode]) for mode in ("sliced", "whole")]
    assert f"the runs: {runs[0]} s cut, {runs[1]} s whole" in text
    assert (f"({sweep[0]['whole_over_sliced']:.2f}, {sweep[1]['whole_over_sliced']:.2f} and "
            f"{rows[(20, 2000)]['whole_over_sliced']:.2f})") in text
    evaluations = [r["sliced"][0]["evaluations"] for r in sweep]
    roots = [r["sliced"][0]["omega"] for r in sweep]
    assert (f"The searches took {evaluations[0]}, {evaluations[1]} and {evaluations[2]} evaluations "
            f"(the roots {roots[0]:.3f}, {roots[1]:.3f} and {roots[2]:.3f})") in text
    per = sized["growth_per_10x_n"]["sliced_wall"]
    assert f"(it grows {per[0]:.1f}x and {per[1]:.1f}x)" in text
    old = [prior[(5, n)]["sliced_median"]["wall_s"] for n in (1000, 10_000, 100_000)]
    assert (f"the cut data took {old[0]:.1f} s, {old[1]:.1f} s and {old[2]:.1f} s "
            f"({old[1] / old[0]:.1f}x and {old[2] / old[1]:.1f}x)") in text
    goal = rows[(20, 2000)]["sliced_median"]["wall_s"], rows[(20, 2000)]["whole_median"]["wall_s"]
    assert (f"in the goal's runs of 2026-12-06 and {goal[0]:.1f} s with the data cut "
            f"({goal[1]:.1f} s whole) in the side-by-side run") in text
    summary = DOC.read_text().split(HEADING)[0]
    walls = [r["sliced_median"]["wall_s"] for r in sweep]
    whole = [r["whole_median"]["wall_s"] for r in sweep]
    top = prior[(5, 100_000)]["sliced_median"]["wall_s"] / prior[(5, 10_000)]["sliced_median"]["wall_s"]
    assert (f"{walls[1] / walls[0]:.1f}x and {walls[2] / walls[1]:.1f}x per calibration for 10x n "
            f"(10^3 to 10^5, the data cut by observation; {whole[1] / whole[0]:.1f}x and "
            f"{whole[2] / whole[1]:.1f}x whole), where a path from the prior took {top:.1f}x at "
            "the top") in summary


def test_the_own_program_row_is_the_committed_run() -> None:
    """A user's own program (its prior in Stan) with the data cut and whole, as the bullet says."""
    own = json.loads((REPO / "bench" / "results" / "gibbs_scale_data_own.json").read_text())
    row = own["row"]
    text = " ".join(section().split())
    assert own["command"] in text
    roots = {r["omega"] for mode in ("sliced", "whole") for r in row[mode]}
    assert len(roots) == 1 and row["chunks"] == 0
    assert (f"calibrated in {row['sliced_median']['wall_s']:.1f} s with the data cut against "
            f"{row['whole_median']['wall_s']:.1f} s whole (**{row['whole_over_sliced']:.2f}x**; "
            f"the same root, {roots.pop():.4f})") in text


def test_the_goal_size_is_the_committed_run() -> None:
    """K = 20, n = 2000 as it ships, as the goal and the summary state it."""
    run = json.loads(GOAL.read_text())
    text = " ".join(section().split())
    walls = [r["wall_s"] for r in run["runs"]]
    first = run["runs"][0]
    assert run["command"] in text and run["machine"]["cpu_model"].startswith("AMD")
    assert all(r["omega"] == first["omega"] for r in run["runs"])  # the same numbers each run
    assert (f"in {run['wall_s_median']:.1f} s (the median of three runs alone, "
            f"{min(walls):.1f}-{max(walls):.1f} s; {first['evaluations']} coverage evaluations, "
            f"{first['resample_moves']} resample moves, the root {first['omega']:.3f} +- "
            f"{first['omega_se']:.3f};") in text
    assert run["met"] == {"time": True, "ess": True} and run["wall_s_median"] <= 60
    assert (f"({first['evaluations']} evaluations, {first['resample_moves']} moves, the root "
            f"{first['omega']:.3f})") in text
    summary = DOC.read_text().split(HEADING)[0]
    assert (f"| {run['wall_s_median']:.1f} s as it ships (median of 3 runs on the 2-core AMD host "
            "of 2026-12-07's goal runs;") in summary
    assert f"goal host ({run['wall_s_median']:.1f} s)" in summary
    drawn = json.loads(DRAWN.read_text())
    assert drawn["machine"]["platform"] == run["machine"]["platform"]
    table = next(r["transport"]["wall_s"] for r in json.loads(RESULT.read_text())["cost"]
                 if (r["K"], r["n"]) == (20, 2000))
    assert (f"the {drawn['rows'][0]['speedup']['all_observations']:.2f}x measured side by side "
            f"would put it near {table / drawn['rows'][0]['speedup']['all_observations']:.0f} s"
            ) in text


def test_the_goal_runs_of_the_day_before_are_the_kept_file() -> None:
    """K = 20, n = 2000 on 2026-12-06, the path started near the data (and from the prior, kept
    beside it), as the goal states them."""
    run = json.loads(GOAL_EARLIER.read_text())
    text = " ".join(section().split())
    walls = [r["wall_s"] for r in run["runs"]]
    first = run["runs"][0]
    assert run["command"] in text and run["machine"]["date"].startswith("2026-12-06")
    assert f"`bench/results/{GOAL_EARLIER.name}`" in text
    assert all(r["omega"] == first["omega"] for r in run["runs"])
    assert (f"{run['wall_s_median']:.1f} s (the median of three runs alone, "
            f"{min(walls):.1f}-{max(walls):.1f} s; {first['evaluations']} coverage evaluations, "
            f"{first['resample_moves']} resample moves, the root {first['omega']:.3f} +- "
            f"{first['omega_se']:.3f};") in text
    assert (f"met at every evaluation** (smallest {run['ess_min_over_runs']:.0f} in the runs of "
            "both days)") in text
    assert round(json.loads(GOAL.read_text())["ess_min_over_runs"]) == round(run["ess_min_over_runs"])
    assert f"at the first-order root {first['omega0']:.3f}, moves all {run['B']} resamples" in text
    path, root = first["omega_path"], first["omega"]
    assert len(path) == 10 and path[0] == first["omega0"]
    assert max(abs(w / root - 1) for w in path[:6]) <= 0.1  # five more, within 10%
    slope = [root / 1.1, root * 1.1, root / 1.25, root * 1.25]
    assert path[6:] == pytest.approx(slope, rel=1e-3)
    assert f"{first['resample_moves']} resample moves in all" in text
    before = run["prior_start"]
    old_walls = [r["wall_s"] for r in before["runs"]]
    old = before["runs"][0]
    assert (f"with the path from the prior the same command took {before['wall_s_median']:.1f} s "
            f"({min(old_walls):.1f}-{max(old_walls):.1f} s; {old['evaluations']} evaluations, "
            f"{old['resample_moves']} moves, root {old['omega']:.3f} +- {old['omega_se']:.3f};") in text
    assert f"K = 20, n = 2000 took {run['wall_s_median']:.1f} s in the goal's runs of 2026-12-06" in text
    summary = DOC.read_text().split(HEADING)[0]
    assert f"before that {run['wall_s_median']:.1f} s on 2026-12-06's host" in summary


def test_the_drawn_observations_side_by_side_is_the_committed_run() -> None:
    """Each resample on its drawn observations against all of them, as the section states it."""
    data = json.loads(DRAWN.read_text())
    text = " ".join(section().split())
    assert data["command"] in text
    rows = {(r["K"], r["n"]): r for r in data["rows"]}
    goal, large = rows[(20, 2000)], rows[(5, 10_000)]
    assert all(r["same_numbers"] for r in data["rows"])
    walls = goal["wall_median_s"]
    assert (f"K = 20, n = 2000 took {walls['shipped']:.1f} s as it ships against "
            f"{walls['all_observations']:.1f} s with every resample evaluated on all observations "
            f"(**{goal['speedup']['all_observations']:.2f}x**) and "
            f"{walls['all_observations_blas']:.1f} s with BLAS's threads") in text
    assert f"left unlimited ({goal['speedup']['all_observations_blas']:.2f}x)" in text
    walls = large["wall_median_s"]
    assert (f"{walls['shipped']:.1f} s against {walls['all_observations']:.1f} s and "
            f"{walls['all_observations_blas']:.1f} s") in text
    assert goal["speedup"]["all_observations"] > 1.1 and large["speedup"]["all_observations"] > 0.95
    assert (f"the roots {goal['numbers']['omega']:.4f} and {large['numbers']['omega']:.4f} after "
            f"{goal['numbers']['evaluations']} and {large['numbers']['evaluations']} evaluations"
            ) in text
