"""An optimiser's state on disk (stanflow.optimiser_state) and atomic writes (stanflow.atomic).

- A saved state reads back bit for bit, dtypes kept, and its generator
  continues with the numbers the saved one would have drawn.
- No file is no state; a state of another signature is an error naming it.
- A write that fails leaves the old file and no temporary file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stanflow.atomic import write_atomic
from stanflow.optimiser_state import OptimiserState, digest, load_state, save_state

SIGNATURE = {"seed": 3, "recipe": {"lr": 0.01, "dtype": "float32"}}


def test_a_saved_state_reads_back_exactly_and_its_generator_continues(tmp_path):
    rng = np.random.default_rng(7)
    rng.standard_normal(5)  # a generator part way through its stream
    arrays = [rng.standard_normal((3, 2)).astype(np.float32), rng.permutation(6),
              np.array(0.1) * np.arange(4)]
    path = tmp_path / "state.npz"
    save_state(path, SIGNATURE, OptimiserState(12, arrays, [rng, np.random.default_rng(8)], 3.5))
    loaded = load_state(path, SIGNATURE)
    assert (loaded.step, loaded.seconds) == (12, 3.5)
    for saved, read in zip(arrays, loaded.arrays, strict=True):
        assert read.dtype == saved.dtype and np.array_equal(read, saved)
    assert np.array_equal(loaded.rngs[0].standard_normal(100), rng.standard_normal(100))
    assert np.array_equal(loaded.rngs[1].random(3), np.random.default_rng(8).random(3))


def test_no_file_is_no_state_and_another_signature_is_named(tmp_path):
    path = tmp_path / "state.npz"
    assert load_state(path, SIGNATURE) is None
    save_state(path, SIGNATURE, OptimiserState(1, [np.zeros(2)], [np.random.default_rng(0)], 0.0))
    with pytest.raises(ValueError, match=r"state\.npz is the state of another run \(differs in seed"):
        load_state(path, SIGNATURE | {"seed": 4})
    path.write_text("not a state")
    with pytest.raises(ValueError, match=r"state\.npz is not an optimiser state"):
        load_state(path, SIGNATURE)
    with pytest.raises(ValueError, match="MT19937"):
        save_state(path, SIGNATURE, OptimiserState(1, [], [np.random.Generator(np.random.MT19937(0))], 0))


def test_the_digest_tells_data_apart_by_values_names_and_types():
    data = {"y": np.arange(3.0), "N": 3}
    assert digest(data) == digest({"N": 3, "y": np.arange(3.0)})  # order of names is no matter
    others = [{"y": np.arange(3.0) + 1e-12, "N": 3}, {"x": np.arange(3.0), "N": 3},
              {"y": np.arange(3), "N": 3}, {"y": np.arange(3.0), "N": 4}]
    assert len({digest(d) for d in others} | {digest(data)}) == 5


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / "record.txt"
    write_atomic(path, lambda tmp: Path(tmp).write_text("old"))

    def failing(tmp):
        Path(tmp).write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, failing)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["record.txt"]
