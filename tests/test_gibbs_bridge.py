"""The SMC bridge's pure parts (:mod:`stanflow.gibbs.path.bridge`).

Truths: Kish's design effect of a clustered sample built with a known
intraclass correlation; the effective size of two-valued weights in closed
form. The bridge against exact posteriors is in ``test_gibbs_transport.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.gibbs.path.bridge import clustered_ess, next_lambda


def clustered(rng, families: int, size: int, rho: float, d: int = 6):
    """``families`` families of ``size`` particles, intraclass correlation ``rho`` in every
    coordinate and in the log density."""
    labels = np.repeat(np.arange(families), size)
    effect = rng.normal(size=(families, d + 1)) * np.sqrt(rho)
    values = effect[labels] + rng.normal(size=(families * size, d + 1)) * np.sqrt(1 - rho)
    return values[:, :d], values[:, d], labels


def test_exact_copies_count_as_their_families():
    rng = np.random.default_rng(0)
    x, lp, labels = clustered(rng, 40, 10, 1.0)
    assert clustered_ess(x, lp, labels) == pytest.approx(40)


def test_independent_particles_count_as_themselves():
    rng = np.random.default_rng(1)
    found = [clustered_ess(*clustered(rng, 50, 8, 0.0)) for _ in range(30)]
    assert 0.7 * 400 < np.mean(found) <= 400  # one standard error above: errs low
    x, lp, _ = clustered(rng, 50, 8, 0.0)
    assert clustered_ess(x, lp, np.arange(400)) == 400
    assert clustered_ess(x, lp, np.zeros(400, int)) == 1


@pytest.mark.parametrize("rho", [0.05, 0.2, 0.5])
def test_the_design_effect_of_a_known_intraclass_correlation(rho):
    """``S / (1 + (m - 1) rho)`` for families of ``m = 10``: on average a little below it
    (the correlation is taken one standard error high), rarely above."""
    rng = np.random.default_rng(2)
    truth = 600 / (1 + 9 * rho)
    found = np.array([clustered_ess(*clustered(rng, 60, 10, rho)) for _ in range(60)])
    assert 0.75 * truth < found.mean() < truth
    assert np.mean(found > truth) < 0.2


def test_a_few_families_never_count_as_many_draws():
    """Three families of 133 particles, barely correlated within: the size stays far below
    the particle count (the correlation's error with three families is large)."""
    rng = np.random.default_rng(4)
    found = [clustered_ess(*clustered(rng, 3, 133, 0.05)) for _ in range(30)]
    assert max(found) < 0.5 * 400 / (1 + 132 * 0.05) + 100


def test_the_slowest_of_coordinates_and_log_density_sets_the_size():
    """Coordinates mixed, log density still clustered: the log density's correlation counts."""
    rng = np.random.default_rng(3)
    x, _, labels = clustered(rng, 60, 10, 0.0)
    _, lp, _ = clustered(rng, 60, 10, 0.5)
    assert 0.6 * 600 / (1 + 9 * 0.5) < clustered_ess(x, lp, labels) < 600 / (1 + 9 * 0.4)


def test_next_lambda_keeps_the_wanted_effective_size():
    """Half the particles at difference 0, half at ``c``: weights 1 and ``exp(-c t)`` for a
    step ``t``, Kish's size ``S (1 + a)^2 / (2 (1 + a^2))`` with ``a = exp(-c t)``."""
    S, c, lam = 1000, 2.0, 0.3
    difference = np.r_[np.zeros(S // 2), np.full(S // 2, c)]
    found = next_lambda(difference, lam, 0.8 * S)
    a = np.exp(-c * (found - lam))
    assert S * (1 + a) ** 2 / (2 * (1 + a**2)) == pytest.approx(0.8 * S, rel=1e-6)
    assert next_lambda(np.zeros(S), lam, 0.8 * S) == 1.0
    assert next_lambda(1e-9 * difference, lam, 0.8 * S) == 1.0


def test_next_lambda_counts_the_particles_own_weights():
    """Particles weighted 1 and ``b`` before the step: the step's weights multiply theirs."""
    S, c, lam, b = 1000, 2.0, 0.0, 0.5
    difference = np.r_[np.zeros(S // 2), np.full(S // 2, c)]
    log_w = np.r_[np.zeros(S // 2), np.full(S // 2, np.log(b))]
    found = next_lambda(difference, lam, 0.6 * S, log_w)
    a = b * np.exp(-c * (found - lam))
    assert S * (1 + a) ** 2 / (2 * (1 + a**2)) == pytest.approx(0.6 * S, rel=1e-6)
