"""Matrix factorisation for LCVI: the Last.fm loader, its errors, the train/test split."""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.lcvi.mf import (
    DATA_FILE,
    cell_locations,
    factors,
    load_lastfm,
    matrix_factorisation,
    reference_split,
    split_cells,
)


def test_loader_reads_log_counts(tmp_path):
    (tmp_path / "lastfm").mkdir()
    counts = np.array([[0, 3, 7], [1, 0, 2]])
    np.savetxt(tmp_path / DATA_FILE, counts, delimiter=",", fmt="%d")
    assert np.allclose(load_lastfm(2, tmp_path), np.log1p(counts[:, :2]))


def test_missing_data_names_the_file_and_its_origin(tmp_path, monkeypatch):
    with pytest.raises(
        FileNotFoundError, match=r"lastfm_counts_992x1003\.csv.*Last\.fm-1K"
    ):
        load_lastfm(100, tmp_path)
    monkeypatch.delenv("STANFLOW_DATA_DIR", raising=False)
    with pytest.raises(
        FileNotFoundError, match=r"STANFLOW_DATA_DIR is not set.*Last\.fm"
    ):
        load_lastfm()
    with pytest.raises(ValueError, match=r"n_artists must be in \[1, 1003\]"):
        load_lastfm(0, tmp_path)


def test_split_puts_each_cell_in_one_half():
    split = split_cells((40, 50), np.random.default_rng(0))
    train = set(zip(split.train_rows, split.train_cols, strict=True))
    test = set(zip(split.test_rows, split.test_cols, strict=True))
    assert not train & test and len(train | test) == 2000
    assert abs(len(train) / 2000 - 0.5) < 0.05


def test_problem_data_and_bad_input():
    Y = np.arange(12.0).reshape(3, 4)
    split = split_cells(Y.shape, np.random.default_rng(1))
    problem = matrix_factorisation(Y, split, K=2)
    cells = np.asarray(problem.data["cell"]) - 1  # column-major
    assert np.array_equal(Y.ravel(order="F")[cells], problem.y)
    assert problem.data["N"] == problem.n == split.train_rows.size
    with pytest.raises(ValueError, match="K must be an integer >= 1"):
        matrix_factorisation(Y, split, K=0)
    with pytest.raises(ValueError, match="noise_sd must be finite and > 0"):
        matrix_factorisation(Y, split, noise_sd=-1.0)
    with pytest.raises(ValueError, match="Y must be a finite matrix"):
        matrix_factorisation(np.full((2, 2), np.nan), split)


def test_reference_split_is_the_authors_rule():
    # RandomState(123).choice([0, 1], shape): 1 marks a test cell
    split = reference_split((992, 100))
    test = np.zeros((992, 100), dtype=bool)
    test[split.test_rows, split.test_cols] = True
    assert np.array_equal(test, np.random.RandomState(123).randint(0, 2, (992, 100)) == 1)
    assert split.train_rows.size + split.test_rows.size == 99200
    assert abs(split.test_rows.size / 99200 - 0.5) < 0.01


def test_cell_locations_from_unconstrained_draws_are_column_major():
    rng = np.random.default_rng(2)
    I, J, K, T = 4, 3, 2, 5
    U, V = rng.normal(size=(T, I, K)), rng.normal(size=(T, J, K))
    # Stan stores each matrix column by column: U[:, 0], U[:, 1], then V likewise
    z = np.concatenate(
        [U.transpose(0, 2, 1).reshape(T, -1), V.transpose(0, 2, 1).reshape(T, -1)], axis=1
    )
    got_U, got_V = factors(z, (I, J, K))
    assert np.array_equal(got_U, U) and np.array_equal(got_V, V)
    rows, cols = np.array([0, 3, 2]), np.array([1, 0, 2])
    expected = np.array([[U[t, r] @ V[t, c] for r, c in zip(rows, cols, strict=True)] for t in range(T)])
    assert np.allclose(cell_locations(z, (I, J, K), rows, cols), expected)
    with pytest.raises(ValueError, match=r"z must have shape \(T, 14\)"):
        factors(z[:, :-1], (I, J, K))
