"""q-path math against closed forms: mixture, geometric limit, min/max limits,
q-log/q-exp, incremental weights, the TI integrand, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.qpaths import (
    dlog_qpath_dbeta,
    exp_q,
    ln_q,
    log_incremental_weight,
    log_qpath,
    q_from_delta,
)

RNG = np.random.default_rng(3)
LP0 = RNG.normal(-3, 4, size=200)
LP1 = RNG.normal(-3, 4, size=200)
BETAS = np.array([0.0, 1e-6, 0.2, 0.5, 0.9, 1.0])


def direct(lp0, lp1, beta, q):
    """The power mean written out, for moderate log densities."""
    s = 1 - q
    return np.log((1 - beta) * np.exp(s * lp0) + beta * np.exp(s * lp1)) / s


@pytest.mark.parametrize("q", [-2.0, 0.0, 0.3, 0.9, 1.5])
@pytest.mark.parametrize("beta", BETAS)
def test_matches_the_power_mean(beta, q):
    np.testing.assert_allclose(
        log_qpath(LP0, LP1, beta, q), direct(LP0, LP1, beta, q), rtol=1e-10, atol=1e-10
    )


def test_q0_is_the_mixture_and_endpoints_are_exact():
    mixture = np.log(0.3 * np.exp(LP0) + 0.7 * np.exp(LP1))
    np.testing.assert_allclose(log_qpath(LP0, LP1, 0.7, 0.0), mixture, rtol=1e-12)
    for q in (-5.0, 0.0, 0.5, 1 - 1e-12, 1.0, 4.0):
        assert np.array_equal(log_qpath(LP0, LP1, 0.0, q), LP0)
        assert np.array_equal(log_qpath(LP0, LP1, 1.0, q), LP1)


@pytest.mark.parametrize("beta", BETAS)
def test_geometric_at_q1_and_continuous_towards_it(beta):
    geometric = (1 - beta) * LP0 + beta * LP1
    np.testing.assert_array_equal(log_qpath(LP0, LP1, beta, 1.0), geometric)
    for one_minus_q, tol in (
        (1e-6, 1e-4),
        (1e-9, 1e-7),
        (1e-12, 1e-10),
        (-1e-12, 1e-10),
    ):
        value = log_qpath(LP0, LP1, beta, 1 - one_minus_q)
        np.testing.assert_allclose(value, geometric, rtol=0, atol=tol)
    np.testing.assert_allclose(
        log_qpath(LP0, LP1, beta, q_from_delta(np.inf)), geometric, atol=0
    )


def test_large_negative_q_tends_to_max_and_large_positive_q_to_min():
    # log pi = max + log(weight of the max) / s, s = 1 - q.
    np.testing.assert_allclose(
        log_qpath(LP0, LP1, 0.4, -1e7), np.maximum(LP0, LP1), atol=1e-6
    )
    np.testing.assert_allclose(
        log_qpath(LP0, LP1, 0.4, 1e7), np.minimum(LP0, LP1), atol=1e-6
    )


def test_zero_densities():
    lp0 = np.array([-np.inf, -1.0, -np.inf])
    lp1 = np.array([-2.0, -np.inf, -np.inf])
    # mixture keeps the positive part, geometric and q > 1 give zero density
    np.testing.assert_allclose(
        log_qpath(lp0, lp1, 0.25, 0.0), [np.log(0.25) - 2, np.log(0.75) - 1, -np.inf]
    )
    assert np.all(np.isneginf(log_qpath(lp0, lp1, 0.25, 1.0)))
    assert np.all(np.isneginf(log_qpath(lp0, lp1, 0.25, 2.0)))


def test_q_log_and_exp():
    u = np.exp(RNG.normal(0, 2, size=50))
    for q in (-1.0, 0.0, 0.5, 1 - 1e-13, 1.0, 2.0):
        x = ln_q(u, q)
        if abs(1 - q) > 1e-3:
            np.testing.assert_allclose(x, (u ** (1 - q) - 1) / (1 - q), rtol=1e-9)
        np.testing.assert_allclose(exp_q(x, q), u, rtol=1e-9)
    np.testing.assert_allclose(ln_q(u, 1.0), np.log(u))
    assert exp_q(-3.0, 0.5) == 0.0  # 1 + 0.5 * (-3) < 0: outside the support
    # the q-path identity pi0 exp_q(beta ln_q(pi1 / pi0))
    for q in (0.0, 0.5, 1.0):
        via_q = LP0 + np.log(exp_q(0.3 * ln_q(np.exp(LP1 - LP0), q), q))
        np.testing.assert_allclose(log_qpath(LP0, LP1, 0.3, q), via_q, rtol=1e-9)


@pytest.mark.parametrize("q", [-1.0, 0.0, 0.5, 1 - 1e-10, 1.0, 3.0])
def test_incremental_weights_are_differences(q):
    for beta, beta_next in ((0.0, 0.1), (0.1, 0.35), (0.8, 1.0), (0.4, 0.4)):
        np.testing.assert_allclose(
            log_incremental_weight(LP0, LP1, beta, beta_next, q),
            log_qpath(LP0, LP1, beta_next, q) - log_qpath(LP0, LP1, beta, q),
            rtol=1e-9,
            atol=1e-9,
        )
    np.testing.assert_allclose(
        log_incremental_weight(LP0, LP1, 0.2, 0.3, 1.0), 0.1 * (LP1 - LP0)
    )


@pytest.mark.parametrize("q", [-1.0, 0.0, 0.5, 1 - 1e-10, 3.0])
def test_ti_integrand_is_the_derivative(q):
    h = 1e-6
    numeric = (log_qpath(LP0, LP1, 0.3 + h, q) - log_qpath(LP0, LP1, 0.3 - h, q)) / (
        2 * h
    )
    np.testing.assert_allclose(
        dlog_qpath_dbeta(LP0, LP1, 0.3, q), numeric, rtol=1e-5, atol=1e-6
    )
    # at the endpoints: (e^{s l} - 1) / s at beta = 0, (1 - e^{-s l}) / s at 1
    s, l = 1 - q, LP1 - LP0
    np.testing.assert_allclose(
        dlog_qpath_dbeta(LP0, LP1, 0.0, q), np.expm1(s * l) / s, rtol=1e-9
    )
    np.testing.assert_allclose(
        dlog_qpath_dbeta(LP0, LP1, 1.0, q), -np.expm1(-s * l) / s, rtol=1e-9
    )


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"beta must lie in \[0, 1\]"):
        log_qpath(LP0, LP1, 1.2, 0.5)
    with pytest.raises(ValueError, match="beta_next must lie"):
        log_incremental_weight(LP0, LP1, 0.2, -0.1, 0.5)
    with pytest.raises(ValueError, match="q must be finite"):
        log_qpath(LP0, LP1, 0.5, np.nan)
    bad = LP1.copy()
    bad[7] = np.nan
    with pytest.raises(ValueError, match=r"log_pi1 contains NaN.*index \(7,\)"):
        log_qpath(LP0, bad, 0.5, 1.0)
    with pytest.raises(ValueError, match="log_pi0 contains NaN or \\+inf"):
        log_qpath(np.inf, 0.0, 0.5, 1.0)
    with pytest.raises(ValueError, match="zero density"):
        log_incremental_weight(-np.inf, -np.inf, 0.2, 0.3, 0.5)
    with pytest.raises(ValueError, match="delta must not be NaN"):
        q_from_delta(np.nan)
    assert q_from_delta(3.0) == pytest.approx(0.999)
