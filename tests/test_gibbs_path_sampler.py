"""The learning-rate path's sampler settings, ``PathSampler``: each field checked when
the object is made, with an error naming it; the two defaults (the sweep's and
``calibrate_path``'s) as documented."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from stanflow.gibbs import PathSampler
from stanflow.gibbs.path import CALIBRATION_SAMPLER


def fields(sampler: PathSampler) -> tuple:
    return sampler.n_particles, sampler.n_moves, sampler.target_ess, sampler.moves


def test_the_defaults_are_the_sweeps_and_calibrate_paths():
    assert fields(PathSampler()) == (2000, 5, 0.5, "rwm")
    assert fields(CALIBRATION_SAMPLER) == (4000, 3, 0.5, "rwm")


@pytest.mark.parametrize("field, value, message", [
    ("n_particles", 49, r"n_particles must be an integer >= 50 \(50 per parameter\), got 49"),
    ("n_particles", 100.0, "n_particles must be an integer >= 50"),
    ("n_particles", True, "n_particles must be an integer >= 50"),
    ("n_moves", 0, "n_moves must be an integer >= 1, got 0"),
    ("n_moves", 2.5, "n_moves must be an integer >= 1, got 2.5"),
    ("target_ess", 0.0, r"target_ess must lie in \(0, 1\), got 0.0"),
    ("target_ess", 1.0, r"target_ess must lie in \(0, 1\), got 1.0"),
    ("target_ess", "half", "target_ess must lie in"),
    ("moves", "hmc", r"moves must be one of \('rwm', 'nuts', 'auto'\), got 'hmc'"),
])
def test_each_bad_field_is_named_when_the_sampler_is_made(field, value, message):
    with pytest.raises(ValueError, match=message):
        PathSampler(**{field: value})


def test_numpy_numbers_are_accepted_and_stored_as_python_numbers():
    sampler = PathSampler(n_particles=np.int64(300), n_moves=np.int32(2),
                          target_ess=np.float64(0.25), moves="auto")
    assert fields(sampler) == (300, 2, 0.25, "auto")
    assert [type(v) for v in fields(sampler)[:3]] == [int, int, float]


def test_changing_one_setting_keeps_the_others_and_is_checked_again():
    more = dataclasses.replace(CALIBRATION_SAMPLER, n_particles=8000)
    assert fields(more) == (8000, 3, 0.5, "rwm")
    with pytest.raises(ValueError, match="n_moves"):
        dataclasses.replace(CALIBRATION_SAMPLER, n_moves=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        CALIBRATION_SAMPLER.n_particles = 10  # type: ignore[misc]
