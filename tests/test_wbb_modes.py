"""The atom at zero and the mode count of one coefficient's draws."""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.wbb.modes import count_modes, shape_summary, silverman_bandwidth


def _mixture(centres, m=2000, sd=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(np.asarray(centres)[rng.integers(len(centres), size=m)], sd)


@pytest.mark.parametrize(("centres", "modes"), [((0.0,), 1), ((-4.0, 4.0), 2), ((-8.0, 0.0, 8.0), 3)])
def test_separated_normal_mixtures(centres, modes):
    assert count_modes(_mixture(centres)) == modes


def test_close_components_make_one_mode():
    # Two unit normals 1 sd apart: the mixture density is unimodal (separation < 2 sd).
    assert count_modes(_mixture((-0.5, 0.5), m=4000)) == 1


def test_the_atom_at_zero_is_not_a_mode():
    draws = np.concatenate([np.zeros(500), _mixture((6.0,), m=1500)])
    assert count_modes(draws) == 1
    summary = shape_summary(draws, eps=0.1)
    assert summary["p_zero"] == 0.25 and summary["n_modes"] == 1
    # The same draws with the atom spread a little off zero: now it is a second mode.
    spread = np.where(draws == 0, np.random.default_rng(2).normal(0.0, 0.3, draws.size), draws)
    assert count_modes(spread) == 2


def test_few_nonzero_draws_have_no_modes():
    draws = np.concatenate([np.zeros(100), np.arange(1.0, 10.0)])
    assert count_modes(draws) == 0
    assert count_modes(np.full(50, 2.0)) == 0


def test_small_bumps_below_the_prominence_threshold_are_ignored():
    # 1% of draws far away make a bump about 1% as prominent as the main mode: not counted.
    draws = np.concatenate([_mixture((0.0,), m=3960), _mixture((30.0,), m=40, seed=1)])
    assert count_modes(draws) == 1


def test_silverman_bandwidth_formula():
    x = np.array([0.0, 1.0, 2.0, 3.0, 10.0])
    sd, iqr = np.std(x, ddof=1), 3.0 - 1.0
    assert silverman_bandwidth(x) == pytest.approx(0.9 * min(sd, iqr / 1.349) * 5 ** -0.2)


def test_shape_summary_counts():
    draws = np.array([0.0, 0.0, 0.05, -0.2, 1.0, 2.0])
    summary = shape_summary(draws, eps=0.1)
    assert summary["p_zero"] == pytest.approx(2 / 6)
    assert summary["p_small"] == pytest.approx(3 / 6)
    assert summary["sd"] == pytest.approx(np.std(draws, ddof=1))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: count_modes(np.zeros((3, 3))), "draws must be a non-empty 1-d array"),
        (lambda: count_modes(np.array([1.0, np.nan])), "draws contains NaN"),
        (lambda: shape_summary(np.ones(3), eps=0.0), "eps must be finite and > 0"),
        (lambda: silverman_bandwidth(np.ones(1)), "x must have at least 2 values"),
    ],
)
def test_inputs_are_checked(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("m", [200, 1000, 4000])
def test_unimodal_skewed_draws_have_one_mode(seed, m):
    # Sampling noise puts ripples on a single mode; none is prominent enough to count.
    draws = np.random.default_rng(seed).gamma(3.0, size=m)
    assert count_modes(draws) == 1
