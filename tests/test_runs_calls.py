"""In-process calls on the run layer's executors (:mod:`stanflow.runs.calls`).

Truths: the plain loop ``[fn(shared, item) for item in items]``; how many
times the function really ran (kept calls are read, not computed); a Dask
cluster's results against this process's.
"""

from __future__ import annotations

import pickle

import distributed
import numpy as np
import pytest

from stanflow.runs import CallFailed, DaskExecutor, LocalExecutor, Workers, calls
from stanflow.runs.calls import CALLS

RAN: list[int] = []
FAIL_ONCE: set[int] = set()


def scaled(shared: np.ndarray, item: int) -> np.ndarray:
    RAN.append(item)
    if item in FAIL_ONCE:
        FAIL_ONCE.discard(item)
        raise FloatingPointError(f"item {item} failed")
    return shared * item


def always_fails(shared: object, item: int) -> None:
    raise ValueError(f"bad item {item}")


@pytest.fixture(autouse=True)
def clean_state():
    RAN.clear()
    FAIL_ONCE.clear()


def test_results_are_the_loop_in_order():
    shared = np.arange(3.0)
    out = Workers().map(scaled, shared, [4, 1, 3])
    for got, item in zip(out, [4, 1, 3], strict=True):
        np.testing.assert_array_equal(got, shared * item)


def test_kept_calls_are_read_not_computed_and_a_damaged_one_is_recomputed(tmp_path):
    shared = np.arange(3.0)
    workers = Workers(out_dir=tmp_path)
    first = workers.map(scaled, shared, [1, 2, 3], context="a")
    assert sorted(RAN) == [1, 2, 3] and len(list((tmp_path / CALLS).iterdir())) == 3
    RAN.clear()
    again = workers.map(scaled, shared, [1, 2, 3, 4], context="a")
    assert RAN == [4]
    for a, b in zip(first, again, strict=False):
        np.testing.assert_array_equal(a, b)
    victim = sorted((tmp_path / CALLS).iterdir())[0]
    # another context is another computation
    RAN.clear()
    workers.map(scaled, shared, [1], context="b")
    assert RAN == [1]
    # a damaged file is computed again, never trusted
    victim.write_bytes(b"not a pickle")
    RAN.clear()
    repaired = workers.map(scaled, shared, [1, 2, 3, 4], context="a")
    assert len(RAN) == 1
    for a, b in zip(again, repaired, strict=True):
        np.testing.assert_array_equal(a, b)
    with open(victim, "rb") as handle:
        pickle.load(handle)


def test_a_failed_call_is_retried_and_then_named():
    FAIL_ONCE.add(2)
    out = Workers(retries=1).map(scaled, np.ones(1), [1, 2, 3])
    assert [float(v[0]) for v in out] == [1.0, 2.0, 3.0] and RAN.count(2) == 2
    FAIL_ONCE.add(2)
    with pytest.raises(CallFailed, match=r"scaled: call 2 of 3 failed on 1 attempts(.|\n)*item 2 failed"):
        Workers(retries=0).map(scaled, np.ones(1), [1, 2, 3])
    with pytest.raises(CallFailed, match=r"call 1 of 2 failed on 3 attempts(.|\n)*bad item 0"):
        Workers(retries=2).map(always_fails, None, [0, 1])


def test_bad_fields_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"Workers\.retries must be an integer >= 0"):
        Workers(retries=-1).validate()
    with pytest.raises(TypeError, match=r"Workers\.executor must be"):
        Workers(executor="dask").validate()  # type: ignore[arg-type]
    file = tmp_path / "f"
    file.write_text("")
    with pytest.raises(ValueError, match=r"Workers\.out_dir .* is not a folder"):
        Workers(out_dir=file).validate()
    assert Workers(executor=LocalExecutor(1)).validate().retries == 1
    with pytest.raises(TypeError, match=r"Workers\.progress must be True or False, got 'yes'"):
        Workers(progress="yes").validate()  # type: ignore[arg-type]


def test_a_long_map_shows_its_progress_and_counts_kept_calls_done(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(calls, "PROGRESS_DELAY", 0.0)  # every map counts as long
    workers = Workers(out_dir=tmp_path)
    workers.map(scaled, np.ones(1), [1, 2], desc="moving resamples")
    first = capsys.readouterr().err
    assert "moving resamples" in first and "2/2" in first and "0/2" in first
    workers.map(scaled, np.ones(1), [1, 2, 3], desc="again")
    again = capsys.readouterr().err
    assert "2/3" in again and "3/3" in again and "0/3" not in again  # two were kept
    Workers(progress=False).map(scaled, np.ones(1), [1, 2])
    assert capsys.readouterr().err == ""


def test_dask_gives_the_local_results():
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                 dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        shared = np.linspace(0, 1, 5)
        remote = Workers(DaskExecutor(client)).map(scaled, shared, list(range(7)))
        with pytest.raises(CallFailed, match="bad item"):
            Workers(DaskExecutor(client), retries=0).map(always_fails, None, [0])
    local = Workers().map(scaled, shared, list(range(7)))
    for a, b in zip(remote, local, strict=True):
        np.testing.assert_array_equal(a, b)
