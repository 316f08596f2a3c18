"""Probabilistic matrix factorisation of the Last.fm counts for LCVI
(``stan/lcvi/matrix_factorisation.stan``).

``Y = log(1 + C)`` for the listening counts ``C`` of 992 users (rows) and the
first ``n_artists`` artists (columns) of ``$STANFLOW_DATA_DIR/lastfm/
lastfm_counts_992x1003.csv``; ``Y[i, j] ~ N((U V')[i, j], noise_sd^2)`` with
``U`` (users x K) and ``V`` (artists x K) under ``N(0, prior_sd^2)`` priors.
Each cell is a training cell with probability 1/2, otherwise a test cell; the
decisions of the LCVI loop are for the training cells, the risk that counts is
that of the test cells at the Bayes decisions of the fitted ``q``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from stanflow.lcvi.program import LcviProgram
from stanflow.models import program_path
from stanflow.resources import resource_dir
from stanflow.validation import check_int, check_positive

DATA_FILE = Path("lastfm") / "lastfm_counts_992x1003.csv"
"""The counts, relative to ``$STANFLOW_DATA_DIR``."""
DATA_ORIGIN = (
    "Last.fm-1K (Celma 2010) listening counts, users x artists, reduced by the LCVI "
    "authors (Kusmierczyk, Sakaya and Klami, NeurIPS 2019) to the 1003 most played "
    "artists; the project's shared data folder (shared/data/lastfm/) carries it"
)


class Split(NamedTuple):
    """Cells of a matrix split into training and test cells (row-major order).

    Attributes
    ----------
    train_rows, train_cols, test_rows, test_cols : ndarray of int
        Zero-based row and column indices.
    """

    train_rows: np.ndarray
    train_cols: np.ndarray
    test_rows: np.ndarray
    test_cols: np.ndarray


def load_lastfm(
    n_artists: int = 100, data_dir: str | os.PathLike | None = None
) -> np.ndarray:
    """``Y = log(1 + C)`` for all users and the first ``n_artists`` artists.

    Parameters
    ----------
    n_artists : int, default 100
        In [1, 1003].
    data_dir : path, optional
        Defaults to ``$STANFLOW_DATA_DIR``.

    Returns
    -------
    ndarray, shape (992, n_artists)

    Raises
    ------
    FileNotFoundError
        Naming the file that is needed and where it comes from.
    """
    if not 1 <= int(n_artists) <= 1003:
        raise ValueError(f"n_artists must be in [1, 1003], got {n_artists!r}")
    root = data_dir if data_dir is not None else os.environ.get("STANFLOW_DATA_DIR")
    if root is None:
        raise FileNotFoundError(
            f"STANFLOW_DATA_DIR is not set: the matrix factorisation needs "
            f"$STANFLOW_DATA_DIR/{DATA_FILE}, the {DATA_ORIGIN}"
        )
    path = Path(root) / DATA_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: the matrix factorisation needs "
            f"$STANFLOW_DATA_DIR/{DATA_FILE}, the {DATA_ORIGIN}"
        )
    counts = np.loadtxt(path, delimiter=",", usecols=range(int(n_artists)))
    if np.any(counts < 0):
        raise ValueError(f"{path}: counts must be non-negative")
    return np.log1p(counts)


def split_cells(
    shape: tuple[int, int], rng: np.random.Generator, p_train: float = 0.5
) -> Split:
    """Each cell of a ``shape`` matrix in training with probability ``p_train``."""
    return _split(rng.uniform(size=shape) < p_train)


def reference_split(shape: tuple[int, int] = (992, 100)) -> Split:
    """The split of Kusmierczyk et al.'s experiment, for risks comparable with theirs.

    Their code marks the test cells with NumPy's legacy generator seeded with
    123: ``RandomState(123).choice([0, 1], shape)``, 1 for a test cell (each
    cell is a test cell with probability 1/2). For the 992 x 100 matrix this
    is the split of their published test risks (``data/lcvi_mf_reference.json``).
    """
    test = np.random.RandomState(123).choice([0, 1], size=shape).astype(bool)
    return _split(~test)


def _split(train: np.ndarray) -> Split:
    (train_rows, train_cols), (test_rows, test_cols) = (
        np.nonzero(train),
        np.nonzero(~train),
    )
    return Split(train_rows, train_cols, test_rows, test_cols)


def matrix_factorisation(
    Y: np.ndarray,
    split: Split,
    K: int = 20,
    prior_sd: float = 10.0,
    noise_sd: float = 1.0,
) -> LcviProgram:
    """The LCVI program of the training cells of ``Y``, one decision per cell.

    Parameters
    ----------
    Y : ndarray, shape (I, J)
    split : Split
        Its training cells carry the decisions.
    K : int, default 20
    prior_sd, noise_sd : float, default 10 and 1
        Positive.
    """
    Y = np.asarray(Y, dtype=float)
    if Y.ndim != 2 or not np.all(np.isfinite(Y)):
        raise ValueError(f"Y must be a finite matrix, got shape {Y.shape}")
    K = check_int(K, "K")
    prior_sd = check_positive(prior_sd, "prior_sd")
    noise_sd = check_positive(noise_sd, "noise_sd")
    I, J = Y.shape
    rows, cols = split.train_rows, split.train_cols
    y = Y[rows, cols]
    data = {
        "I": I,
        "J": J,
        "K": K,
        "N": y.size,
        "cell": cols * I + rows + 1,
        "y": y,
        "prior_sd": prior_sd,
        "noise_sd": noise_sd,
    }
    return LcviProgram(
        program_path("lcvi/matrix_factorisation"), data, y=y, name="matrix_factorisation"
    )


def factors(
    z: np.ndarray, shape: tuple[int, int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """``U`` (T, I, K) and ``V`` (T, J, K) from draws ``z`` (T, I K + J K).

    Stan orders a matrix's unconstrained parameters column-major.
    """
    I, J, K = shape
    z = np.asarray(z, dtype=float)
    if z.ndim != 2 or z.shape[1] != (I + J) * K:
        raise ValueError(f"z must have shape (T, {(I + J) * K}), got {z.shape}")
    U = z[:, : I * K].reshape(-1, K, I).transpose(0, 2, 1)
    V = z[:, I * K :].reshape(-1, K, J).transpose(0, 2, 1)
    return U, V


def cell_locations(
    z: np.ndarray, shape: tuple[int, int, int], rows: np.ndarray, cols: np.ndarray
) -> np.ndarray:
    """Draws of ``(U V')[rows, cols]``, shape (T, len(rows)), from draws ``z``.

    Parameters
    ----------
    z : ndarray, shape (T, I K + J K)
        Draws of the unconstrained parameters (``U`` then ``V``).
    shape : (I, J, K)
    rows, cols : ndarray of int
        Zero-based cells.
    """
    U, V = factors(z, shape)
    return np.stack([(u @ v.T)[rows, cols] for u, v in zip(U, V, strict=True)])


def reference_test_risks(losses: Iterable[str]) -> dict[str, dict]:
    """The authors' published test risks per loss (``data/lcvi_mf_reference.json``).

    Parameters
    ----------
    losses : iterable of str
        The paper's labels: ``"tilted_0.2"``, ``"tilted_0.5"``, ``"tilted_0.8"``,
        ``"squared"``.

    Returns
    -------
    dict
        Per loss: ``vi``, ``lcvi`` and ``reduction_pct``
        (``100 (vi - lcvi) / vi`` per seed), each ``{"mean", "sd"}`` over
        their initialisation seeds, and ``n_seeds``.
    """
    published = json.loads((resource_dir("data") / "lcvi_mf_reference.json").read_text())
    summary = {}
    for name in losses:
        if name not in published["test_risk_vi"]:
            raise ValueError(
                f"losses: no published risks for {name!r}; "
                f"known: {list(published['test_risk_vi'])}"
            )
        vi = np.array(published["test_risk_vi"][name], dtype=float)
        lcvi = np.array(published["test_risk_lcvi"][name], dtype=float)
        summary[name] = {
            key: {"mean": float(values.mean()), "sd": float(values.std(ddof=1))}
            for key, values in (("vi", vi), ("lcvi", lcvi), ("reduction_pct", 100 * (vi - lcvi) / vi))
        } | {"n_seeds": int(vi.size)}
    return summary
