"""The moment-averaging path and the q-paths between two Gaussians, against truths
computed independently: moments by numerical integration, the geometric path's
natural-parameter closed form, and the mixture written out."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from stanflow.qpaths import gaussian_moment_average, log_qpath

BASE, TARGET = (-4.0, 3.0), (4.0, 1.0)  # (mean, variance)
BETAS = np.array([0.0, 0.05, 0.3, 0.5, 0.8, 1.0])


def numeric_moments(density, lo=-40.0, hi=40.0) -> tuple[float, float]:
    """E[x] and E[x^2] of a normalised density by adaptive quadrature."""
    first = integrate.quad(lambda x: x * density(x), lo, hi, points=[-4, 0, 4], limit=200)[0]
    second = integrate.quad(lambda x: x**2 * density(x), lo, hi, points=[-4, 0, 4], limit=200)[0]
    return first, second


def gaussian(mean_var):
    return stats.norm(mean_var[0], np.sqrt(mean_var[1]))


@pytest.mark.parametrize("beta", BETAS)
def test_moment_average_matches_the_interpolated_moments(beta):
    """E[x] and E[x^2] of N(mean_beta, var_beta), integrated numerically, are the
    linear interpolation of the endpoints' moments, also integrated numerically."""
    m0 = numeric_moments(gaussian(BASE).pdf)
    m1 = numeric_moments(gaussian(TARGET).pdf)
    mean, var = gaussian_moment_average(*BASE, *TARGET, beta)
    mb = numeric_moments(stats.norm(mean, np.sqrt(var)).pdf)
    np.testing.assert_allclose(mb, (1 - beta) * np.array(m0) + beta * np.array(m1), atol=1e-9)


def test_moment_average_is_the_moment_match_of_the_mixture():
    """The q = 0 path (mixture) normalised numerically has the moment-averaging
    mean and variance; the moment-averaging path is a single Gaussian."""
    for beta in BETAS[1:-1]:
        def mixture(x, beta=beta):
            return np.exp(log_qpath(gaussian(BASE).logpdf(x), gaussian(TARGET).logpdf(x), beta, 0.0))

        first, second = numeric_moments(mixture)
        mean, var = gaussian_moment_average(*BASE, *TARGET, beta)
        assert first == pytest.approx(mean, abs=1e-9)
        assert second - first**2 == pytest.approx(var, abs=1e-8)


def test_moment_average_minimises_the_weighted_kl_to_the_endpoints():
    """Among Gaussians, N(mean_beta, var_beta) minimises (1-b) KL(pi0||q) + b KL(pi1||q)
    (closed-form Gaussian KL, minimised numerically)."""
    def kl(p, m, v):  # KL(N(p) || N(m, v))
        return 0.5 * (np.log(v / p[1]) + (p[1] + (p[0] - m) ** 2) / v - 1)

    beta = 0.3

    def objective(t):
        return (1 - beta) * kl(BASE, t[0], np.exp(t[1])) + beta * kl(TARGET, t[0], np.exp(t[1]))

    fit = optimize.minimize(
        objective, x0=[0.0, 0.0], method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-14}
    )
    mean, var = gaussian_moment_average(*BASE, *TARGET, beta)
    assert fit.x[0] == pytest.approx(mean, abs=1e-6)
    assert np.exp(fit.x[1]) == pytest.approx(var, rel=1e-6)


def test_endpoints_are_exact_and_arrays_broadcast():
    mean, var = gaussian_moment_average(*BASE, *TARGET, BETAS)
    assert mean.shape == var.shape == BETAS.shape
    assert (mean[0], var[0]) == BASE and (mean[-1], var[-1]) == TARGET
    assert np.all(var > 0)


@pytest.mark.parametrize("beta", [0.1, 0.5, 0.9])
def test_geometric_qpath_is_the_precision_weighted_gaussian(beta):
    """q = 1 between Gaussians is N with precision (1-b)/v0 + b/v1 and precision-weighted
    mean: compare log_qpath, normalised on a grid, with that density pointwise."""
    x = np.linspace(-30, 30, 60_001)
    log_density = log_qpath(gaussian(BASE).logpdf(x), gaussian(TARGET).logpdf(x), beta, 1.0)
    density = np.exp(log_density - log_density.max())
    density /= np.trapezoid(density, x)
    precision = (1 - beta) / BASE[1] + beta / TARGET[1]
    mean = ((1 - beta) * BASE[0] / BASE[1] + beta * TARGET[0] / TARGET[1]) / precision
    truth = stats.norm.pdf(x, mean, 1 / np.sqrt(precision))
    np.testing.assert_allclose(density, truth, atol=1e-9)
    # ... and it differs from moment averaging, except at the ends.
    ma_mean, ma_var = gaussian_moment_average(*BASE, *TARGET, beta)
    assert abs(ma_mean - mean) > 0.5 and ma_var > 1 / precision


def test_q0_qpath_is_the_mixture_density():
    x = np.linspace(-15, 15, 301)
    for beta in (0.2, 0.7):
        mixture = (1 - beta) * gaussian(BASE).pdf(x) + beta * gaussian(TARGET).pdf(x)
        value = np.exp(log_qpath(gaussian(BASE).logpdf(x), gaussian(TARGET).logpdf(x), beta, 0.0))
        np.testing.assert_allclose(value, mixture, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize(
    "args, name",
    [
        ((np.nan, 1.0, 0.0, 1.0, 0.5), "mean0"),
        ((0.0, 0.0, 0.0, 1.0, 0.5), "var0"),
        ((0.0, 1.0, 0.0, -1.0, 0.5), "var1"),
        ((0.0, 1.0, np.inf, 1.0, 0.5), "mean1"),
        ((0.0, 1.0, 0.0, 1.0, 1.5), "beta"),
    ],
)
def test_bad_input_names_the_argument(args, name):
    with pytest.raises(ValueError, match=name):
        gaussian_moment_average(*args)
