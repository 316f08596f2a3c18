"""Grid posteriors against closed forms, exact piecewise integration and the
variational identity; no compiler needed."""

from __future__ import annotations

import itertools
import math
from statistics import NormalDist

import numpy as np
import pytest

from stanflow.gibbs import grid, log_prior_on_grid
from stanflow.losses import loss_function

RNG = np.random.default_rng(20240504)
Y = RNG.normal(1.3, 2.0, size=30)


def test_trapezoid_is_exact_for_linear_and_simpson_for_cubic_integrands():
    uneven = np.sort(RNG.uniform(-1, 2, size=50))
    w = grid.quadrature_weights(uneven)
    a, b = uneven[0], uneven[-1]
    assert w @ (3 * uneven - 1) == pytest.approx(1.5 * (b**2 - a**2) - (b - a))

    even = np.linspace(-1, 2, 11)
    w = grid.quadrature_weights(even, "simpson")
    assert w @ (even**3 - even) == pytest.approx((2**4 - 1) / 4 - (2**2 - 1) / 2)


@pytest.mark.parametrize("rule", grid.RULES)
def test_squared_loss_with_normal_prior_is_the_conjugate_normal(rule):
    # L_n(theta) = sum (y_i - theta)^2 = n (theta - ybar)^2 + S, so exp(-omega L_n)
    # is a normal kernel of precision 2 omega n; with a N(mu0, s0^2) prior the
    # posterior is N(mean, 1 / precision) and
    # Z = exp(-omega S) sqrt(2 pi v) N(ybar | mu0, v + s0^2), v = 1 / (2 omega n).
    omega, mu0, s0 = 0.7, 1.0, 2.0
    n, ybar = len(Y), Y.mean()
    S = np.sum((Y - ybar) ** 2)
    precision = 2 * omega * n + 1 / s0**2
    exact = NormalDist(
        (2 * omega * n * ybar + mu0 / s0**2) / precision, precision**-0.5
    )
    v = 1 / (2 * omega * n)
    log_z = (
        -omega * S
        + 0.5 * math.log(2 * math.pi * v)
        + math.log(NormalDist(mu0, math.sqrt(v + s0**2)).pdf(ybar))
    )
    theta = np.linspace(-20, 20, 40001)
    sums = grid.loss_sums(theta, Y, loss_function("squared"))
    post = grid.posterior(
        theta,
        sums,
        omega,
        log_prior=log_prior_on_grid(theta, "normal", {"mean": mu0, "sd": s0}),
        rule=rule,
    )

    assert post.log_z == pytest.approx(log_z, abs=1e-9)
    pdf = np.array([exact.pdf(t) for t in theta])
    np.testing.assert_allclose(grid.density(post), pdf, atol=1e-9 * pdf.max())
    q = np.array([0.025, 0.25, 0.5, 0.9, 0.975])
    np.testing.assert_allclose(
        grid.quantile(post, q), [exact.inv_cdf(p) for p in q], atol=1e-5
    )


def test_flat_prior_squared_loss_posterior_has_precision_two_omega_n():
    omega, n = 2.5, len(Y)
    theta = np.linspace(Y.mean() - 3, Y.mean() + 3, 6001)
    post = grid.posterior(
        theta, grid.loss_sums(theta, Y, loss_function("squared")), omega
    )
    exact = NormalDist(Y.mean(), (2 * omega * n) ** -0.5)
    v = 1 / (2 * omega * n)
    S = np.sum((Y - Y.mean()) ** 2)

    # The uniform prior on the grid's range has density 1 / 6.
    assert post.log_z == pytest.approx(
        -omega * S + 0.5 * math.log(2 * math.pi * v) - math.log(6), abs=1e-9
    )
    lower, upper = grid.interval(post, 0.9)
    assert lower == pytest.approx(exact.inv_cdf(0.05), abs=1e-5)
    assert upper == pytest.approx(exact.inv_cdf(0.95), abs=1e-5)


def exact_absolute_loss(y, omega, a, b, x):
    """log Z and the CDF at x for |y - theta| with a uniform prior on [a, b].

    L_n is linear between sorted data points, so exp(-omega L_n) integrates in
    closed form on each piece.
    """
    knots = np.unique(np.concatenate([[a, b], y[(y > a) & (y < b)]]))
    pieces = []
    for lo, hi in itertools.pairwise(knots):
        slope = np.sum(lo >= y) - np.sum(lo < y)  # d L_n / d theta on (lo, hi)
        level = np.sum(np.abs(y - lo))  # L_n(lo)
        rate = omega * slope
        mass = hi - lo if abs(rate) < 1e-12 else -math.expm1(-rate * (hi - lo)) / rate
        pieces.append((lo, hi, rate, level, mass))
    z = sum(math.exp(-omega * level) * mass for *_, level, mass in pieces)

    def cdf(t):
        total = 0.0
        for lo, hi, rate, level, mass in pieces:
            if t <= lo:
                break
            width = min(t, hi) - lo
            part = width if abs(rate) < 1e-12 else -math.expm1(-rate * width) / rate
            total += math.exp(-omega * level) * (part if t < hi else mass)
        return total / z

    return math.log(z / (b - a)), [cdf(t) for t in x]


def test_absolute_loss_matches_exact_piecewise_integration():
    y = RNG.gamma(2.0, 1.0, size=25)
    omega, a, b = 1.7, 0.0, 8.0
    x = [1.0, 1.5, np.median(y), 2.2, 3.0]
    log_z, cdf = exact_absolute_loss(y, omega, a, b, x)
    theta = np.linspace(a, b, 40001)
    post = grid.posterior(
        theta, grid.loss_sums(theta, y, loss_function("absolute")), omega
    )

    assert post.log_z == pytest.approx(log_z, abs=1e-6)
    np.testing.assert_allclose(
        grid.cdf_at(post, np.array(x)[:, None]).ravel(), cdf, atol=1e-6
    )


def test_batches_of_data_sets_and_learning_rates_match_one_at_a_time():
    theta = np.linspace(-4, 6, 501)
    y = RNG.normal(1.0, 1.0, size=(3, 2, 20))
    omegas = np.array([0.3, 1.0, 4.0, 9.0])
    loss = loss_function("check", {"tau": 0.3})
    post = grid.posterior(theta, grid.loss_sums(theta, y, loss, max_elements=1), omegas)

    assert post.log_density.shape == (3, 2, 4, 501)
    assert grid.interval(post).shape == (3, 2, 4, 2)
    assert grid.quantile(post, [0.1, 0.5, 0.9]).shape == (3, 2, 4, 3)
    single = grid.posterior(theta, grid.loss_sums(theta, y[2, 1], loss), omegas[3])
    assert post.log_z[2, 1, 3] == pytest.approx(single.log_z, rel=1e-12)
    np.testing.assert_allclose(single.log_density, post.log_density[2, 1, 3])


def test_quantiles_invert_the_cdf_and_intervals_are_equal_tailed():
    theta = np.linspace(0, 8, 2001)
    y = RNG.gamma(2.0, 1.0, size=(4, 40))
    post = grid.posterior(
        theta, grid.loss_sums(theta, y, loss_function("absolute")), [0.5, 3]
    )
    q = np.array([0.01, 0.3, 0.5, 0.99])
    values = grid.quantile(post, q)
    for k, p in enumerate(q):
        np.testing.assert_allclose(grid.cdf_at(post, values[..., k]), p, atol=1e-12)
    np.testing.assert_allclose(
        grid.interval(post, 0.8), grid.quantile(post, [0.1, 0.9])
    )
    np.testing.assert_allclose(grid.cdf(post)[..., -1], 1.0)


def test_variational_identity_holds_and_the_gibbs_posterior_minimises_it():
    # omega E_rho[L_n] + KL(rho || prior) = KL(rho || pi_n) - log Z_n(omega), so the
    # left side is at least -log Z_n, with equality exactly at rho = pi_n. The
    # integrals here use numpy's trapezoid, independently of grid's weights.
    theta = np.linspace(-3, 5, 4001)
    y = RNG.standard_t(3, size=40) + 1.0
    omega = 0.8
    sums = grid.loss_sums(theta, y, loss_function("huber", {"delta": 1.0}))
    log_prior = log_prior_on_grid(theta, "normal", {"mean": 0.0, "sd": 1.5})
    post = grid.posterior(theta, sums, omega, log_prior=log_prior)
    log_prior = log_prior - np.log(np.trapezoid(np.exp(log_prior), theta))
    log_gibbs = post.log_density

    def kl(log_p, log_q):
        return np.trapezoid(np.exp(log_p) * (log_p - log_q), theta)

    def free_energy(log_rho):
        return omega * np.trapezoid(np.exp(log_rho) * sums, theta) + kl(
            log_rho, log_prior
        )

    family = [
        -0.5 * ((theta - a) / s) ** 2 for a in (0.5, 1.0, 1.5) for s in (0.1, 0.3)
    ]
    normalised = [r - np.log(np.trapezoid(np.exp(r), theta)) for r in family]
    for log_rho in [*normalised, log_gibbs]:
        assert free_energy(log_rho) == pytest.approx(
            kl(log_rho, log_gibbs) - post.log_z, abs=1e-8
        )
        assert free_energy(log_rho) > -post.log_z - 1e-8
    assert free_energy(log_gibbs) == pytest.approx(-post.log_z, abs=1e-8)
    assert min(free_energy(r) for r in normalised) > -post.log_z + 1e-3


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda t, s: grid.posterior(t, s, 0.0), "omega must be positive"),
        (lambda t, s: grid.posterior(t, s, [1.0, -2.0]), "omega must be positive"),
        (lambda t, s: grid.posterior(t, s, np.nan), "omega must be positive"),
        (lambda t, s: grid.posterior(t, s[:, :-1], 1.0), r"sums must have shape"),
        (lambda t, s: grid.posterior(t[::-1], s, 1.0), "strictly increasing"),
        (lambda t, s: grid.posterior(t, s, 1.0, log_prior=t[:3]), "log_prior"),
        (lambda t, s: grid.posterior(t, s, 1.0, rule="gauss"), "rule must be one of"),
        (lambda t, s: grid.posterior(t[:-1], s[:, :-1], 1.0, rule="simpson"), "odd"),
        (lambda t, s: grid.quantile(grid.posterior(t, s, 1.0), 1.0), r"q must be in"),
        (lambda t, s: grid.interval(grid.posterior(t, s, 1.0), 95), "level must be"),
        (lambda t, s: grid.loss_sums(t, [], loss_function("absolute")), "observations"),
        (lambda t, s: grid.loss_sums(t, [1.0, np.inf], abs), "y must be finite"),
    ],
)
def test_bad_input_is_rejected_with_the_argument_named(call, message):
    theta = np.linspace(0, 1, 11)
    sums = grid.loss_sums(theta, np.array([[0.2, 0.5]]), loss_function("squared"))
    with pytest.raises(ValueError, match=message):
        call(theta, sums)


def test_a_loss_that_is_not_callable_is_a_type_error():
    with pytest.raises(TypeError, match="loss must be callable"):
        grid.loss_sums(np.linspace(0, 1, 5), [0.5], "absolute")
