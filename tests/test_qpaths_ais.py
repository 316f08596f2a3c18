"""AIS with HMC along q-paths (stanflow.qpaths.latent_ais) and the BDMC sandwich
(stanflow.qpaths.bdmc), the NumPy VAE (workflows/_qpaths_vae.py) and the workflow qpaths-ais.

Independent truths: a linear-Gaussian latent model, whose ``log p(x)`` is the
log density of ``N(b, A A' + sigma^2 I)``, and a Bernoulli decoder with a
two-dimensional latent, whose ``log p(x)`` is computed by quadrature on a grid.
The VAE's hand-written gradients are checked against finite differences, the
NumPy decoder against ``stan/qpaths/vae_decoder.stan`` through bridgestan.
"""

from __future__ import annotations

import json

import _qpaths_vae as vae
import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp
from threadpoolctl import threadpool_limits

from stanflow.qpaths.bdmc import (
    LatentModel,
    bdmc_sandwich,
    forward_ais,
    reverse_ais,
    tune_step_size,
)
from stanflow.qpaths.latent_ais import (
    Point,
    hmc_move,
    linear_schedule,
    log_standard_normal,
    qpath_point,
    target_weight,
)
from stanflow.qpaths.qmath import log_qpath


@pytest.fixture(autouse=True)
def one_blas_thread():
    """Small products: threads only add overhead on the shared machine."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


# -- independent truths --------------------------------------------------------

D, P, SIGMA = 3, 12, 0.3


def linear_gaussian(seed: int = 1):
    """``x | z ~ N(A z + b, SIGMA^2 I)``: model, simulated data, their z and log p(x)."""
    rng = np.random.default_rng(seed)
    A, b = rng.normal(size=(P, D)), rng.normal(size=P)

    def log_likelihood(x, z):
        r = x - (z @ A.T + b)
        value = -0.5 * np.sum(r**2, axis=1) / SIGMA**2 - 0.5 * P * np.log(2 * np.pi * SIGMA**2)
        return value, r @ A / SIGMA**2

    z = rng.standard_normal((12, D))
    x = z @ A.T + b + SIGMA * rng.standard_normal((12, P))
    truth = stats.multivariate_normal(b, A @ A.T + SIGMA**2 * np.eye(P)).logpdf(x)
    return LatentModel(log_likelihood, D), x, z, truth


def small_decoder(seed: int = 2, d: int = 2, p: int = 10, h: int = 6) -> vae.Decoder:
    rng = np.random.default_rng(seed)
    return vae.Decoder(rng.normal(size=(h, d)), rng.normal(size=h),
                       1.5 * rng.normal(size=(p, h)), 0.5 * rng.normal(size=p))


def quadrature_log_evidence(decoder: vae.Decoder, x: np.ndarray) -> np.ndarray:
    """``log p(x)`` for a 2-D latent: Riemann sum on a 241 x 241 grid over [-6, 6]^2."""
    grid = np.linspace(-6, 6, 241)
    z = np.stack(np.meshgrid(grid, grid), axis=-1).reshape(-1, 2)
    cell = np.log((grid[1] - grid[0]) ** 2)
    return np.array([
        logsumexp(vae.decoder_log_likelihood(decoder, image, z)[0] + log_standard_normal(z))
        + cell
        for image in x
    ])


# -- the q-path gradient and the HMC kernel ---------------------------------------


@pytest.mark.parametrize(("beta", "q"), [(0.3, 1.0), (0.3, 0.99), (0.05, 0.9), (0.7, 0.999)])
def test_qpath_gradient_matches_finite_differences(beta, q):
    model, x, _, _ = linear_gaussian()
    z = np.random.default_rng(3).standard_normal((4, D))
    point = qpath_point(z, *model(x[:4], z), beta, q)

    def log_density(zz):
        log_prior = log_standard_normal(zz)
        return log_qpath(log_prior, log_prior + model(x[:4], zz)[0], beta, q)

    np.testing.assert_allclose(point.log_density, log_density(z), rtol=1e-12)
    step = 1e-6
    for j in range(D):
        e = np.zeros(D)
        e[j] = step
        numeric = (log_density(z + e) - log_density(z - e)) / (2 * step)
        np.testing.assert_allclose(point.grad[:, j], numeric, rtol=1e-5, atol=1e-5)


def test_target_weight_ends_and_geometric_limit():
    log_lik = np.array([-500.0, -3.0, 0.0, 2.0])
    assert np.all(target_weight(log_lik, 0.0, 0.99) == 0)
    assert np.all(target_weight(log_lik, 1.0, 0.99) == 1)
    np.testing.assert_allclose(target_weight(log_lik, 0.4, 1.0), 0.4, rtol=1e-15)
    np.testing.assert_allclose(target_weight(log_lik, 0.4, 1 - 1e-12), 0.4, rtol=1e-9)
    # q < 1 puts less weight on the target where its density is small.
    assert target_weight(log_lik, 0.4, 0.9)[0] < 1e-20


def test_hmc_keeps_its_target():
    """Exact N(0, I) draws (beta = 0) stay N(0, I) draws after HMC moves."""
    model, x, _, _ = linear_gaussian()
    rng = np.random.default_rng(5)
    n = 4000
    rows = np.repeat(x[:1], n, axis=0)
    z = rng.standard_normal((n, D))

    def evaluate(zz):
        return qpath_point(zz, *model(rows, zz), 0.0, 1.0)

    point: Point = evaluate(z)
    rates = []
    for _ in range(5):
        point, accepted = hmc_move(rng, point, evaluate, 0.8, 4)
        rates.append(accepted.mean())
    assert 0.5 < np.mean(rates) <= 1.0
    np.testing.assert_allclose(point.z.mean(axis=0), 0.0, atol=0.08)
    np.testing.assert_allclose(point.z.var(axis=0), 1.0, atol=0.1)


# -- the BDMC sandwich against the truth -----------------------------------------


@pytest.mark.parametrize("q", [1.0, 0.99])
def test_bdmc_sandwiches_the_linear_gaussian_evidence(q):
    model, x, z, truth = linear_gaussian()
    steps = tune_step_size(model, x, q=q, n_distributions=40, chains=8, n_leapfrog=5, seed=3)
    assert np.all(steps.step_size > 0) and steps.beta[0] == 0 and steps.beta[-1] == 1
    gaps = {}
    for k in (5, 300):
        result = bdmc_sandwich(model, x, z, linear_schedule(k), chains=8, q=q,
                               step_size=steps, n_leapfrog=5, seed=4)
        lower, upper = result.lower.log_z - truth, result.upper.log_z - truth
        # Mean over 12 data points; the bounds hold in expectation, up to MC error.
        assert lower.mean() < 0.05 + 3 * lower.std(ddof=1) / np.sqrt(len(lower)), (k, lower)
        assert upper.mean() > -0.05 - 3 * upper.std(ddof=1) / np.sqrt(len(upper)), (k, upper)
        gaps[k] = result.gap.mean()
        np.testing.assert_allclose(result.gap, result.upper.log_z - result.lower.log_z)
    assert gaps[5] > 3.0  # a coarse schedule: a wide sandwich, clearly on both sides
    assert abs(gaps[300]) < 1.0 and gaps[300] < gaps[5] / 5


def test_bdmc_sandwiches_the_bernoulli_decoder_by_quadrature():
    """The bounds hold in expectation over the simulated pairs (x, z*) and the chains:
    checked on the mean over 8 data points, with their standard error."""
    decoder = small_decoder(p=40, h=8)
    model = vae.decoder_model(decoder)
    x, z = vae.sample_data(decoder, np.random.default_rng(7), 8)
    truth = quadrature_log_evidence(decoder, x)
    steps = tune_step_size(model, x, n_distributions=40, chains=8, n_leapfrog=5, seed=8)
    for q in (1.0, 0.99):
        gaps = {}
        for k in (3, 200):
            result = bdmc_sandwich(model, x, z, linear_schedule(k), chains=16, q=q,
                                   step_size=steps, n_leapfrog=5, seed=9)
            lower, upper = result.lower.log_z - truth, result.upper.log_z - truth
            se = max(lower.std(ddof=1), upper.std(ddof=1)) / np.sqrt(len(truth))
            assert lower.mean() < 3 * se + 0.05, (q, k, lower)
            assert upper.mean() > -3 * se - 0.05, (q, k, upper)
            gaps[k] = result.gap.mean()
        assert gaps[3] > 1.0 and abs(gaps[200]) < 0.3, gaps


def test_per_data_point_q():
    model, x, z, _ = linear_gaussian()
    q = np.array([1.0, 0.99, 0.999])
    result = bdmc_sandwich(model, x[:3], z[:3], linear_schedule(10), chains=4, q=q,
                           step_size=0.1, n_leapfrog=3, seed=1)
    assert result.gap.shape == (3,) and np.isfinite(result.gap).all()


# -- the NumPy VAE -------------------------------------------------------------------


def test_vae_gradients_match_finite_differences():
    rng = np.random.default_rng(11)
    params = vae.init_vae(rng, n_pixels=7, hidden=5, latent_dim=3)
    params = {k: v + 0.3 * rng.standard_normal(v.shape) for k, v in params.items()}
    x = (rng.uniform(size=(4, 7)) < 0.5).astype(float)
    eps = rng.standard_normal((4, 3))
    _, grads = vae.elbo_and_grad(params, x, eps)
    assert set(grads) == set(vae.PARAMETERS)
    step = 1e-6
    for name in vae.PARAMETERS:
        numeric = np.zeros_like(params[name])
        for index in np.ndindex(params[name].shape):
            for sign in (1, -1):
                moved = {k: v.copy() for k, v in params.items()}
                moved[name][index] += sign * step
                numeric[index] += sign * vae.elbo_and_grad(moved, x, eps)[0] / (2 * step)
        np.testing.assert_allclose(grads[name], numeric, rtol=1e-5, atol=1e-7, err_msg=name)


def test_decoder_gradient_matches_finite_differences():
    decoder = small_decoder(d=3)
    rng = np.random.default_rng(12)
    x = (rng.uniform(size=10) < 0.5).astype(float)
    z = rng.standard_normal((5, 3))
    _, grad = vae.decoder_log_likelihood(decoder, x, z)
    step = 1e-6
    for j in range(3):
        e = np.zeros(3)
        e[j] = step
        numeric = (vae.decoder_log_likelihood(decoder, x, z + e)[0]
                   - vae.decoder_log_likelihood(decoder, x, z - e)[0]) / (2 * step)
        np.testing.assert_allclose(grad[:, j], numeric, rtol=1e-6, atol=1e-6)


def test_training_raises_the_elbo():
    decoder = small_decoder(p=16, d=2)
    x, _ = vae.sample_data(decoder, np.random.default_rng(13), 300)
    fit = vae.train_vae(x, latent_dim=2, hidden=8, n_epochs=30, batch_size=50,
                        learning_rate=1e-2, seed=1)
    assert fit.n_steps == 30 * 6
    assert fit.elbo[-1] > fit.elbo[0] + 1.0
    # The ELBO of the fitted model (mean of 20000 draws per image) is below its
    # log p(x) (quadrature, d = 2).
    fitted = vae.decoder_of(fit.params)
    images = x[:4]
    elbos = [vae.elbo(fit.params, np.repeat(image[None], 20000, axis=0), np.random.default_rng(1))
             for image in images]
    assert np.all(np.array(elbos) < quadrature_log_evidence(fitted, images)), elbos


# -- bad input -----------------------------------------------------------------------


def test_bad_input_raises_clear_errors():
    model, x, z, _ = linear_gaussian()
    schedule = linear_schedule(5)
    with pytest.raises(ValueError, match="schedule must be strictly increasing"):
        forward_ais(model, x, [0.0, 0.5, 0.4, 1.0], chains=2)
    with pytest.raises(ValueError, match="schedule must increase from 0 to 1"):
        forward_ais(model, x, schedule[::-1], chains=2)
    with pytest.raises(ValueError, match="chains must be an integer >= 1"):
        forward_ais(model, x, schedule, chains=0)
    with pytest.raises(ValueError, match="z_star must have shape"):
        reverse_ais(model, x, z[:3], schedule, chains=2)
    with pytest.raises(ValueError, match="q must be a scalar or have one value per data point"):
        forward_ais(model, x, schedule, chains=2, q=[0.9, 1.0])
    with pytest.raises(ValueError, match="q must be finite"):
        forward_ais(model, x, schedule, chains=2, q=np.nan)
    with pytest.raises(ValueError, match="step_size must be positive"):
        forward_ais(model, x, schedule, chains=2, step_size=-1.0)
    with pytest.raises(ValueError, match="n_leapfrog must be an integer >= 1"):
        forward_ais(model, x, schedule, chains=2, n_leapfrog=0)
    with pytest.raises(ValueError, match="n_distributions must be an integer >= 2"):
        linear_schedule(1)
    bad_model = LatentModel(lambda xx, zz: (np.zeros(3), zz), D)
    with pytest.raises(ValueError, match="log_likelihood must return shapes"):
        forward_ais(bad_model, x, schedule, chains=2)
    with pytest.raises(ValueError, match="log_likelihood must have a latent_dim attribute"):
        forward_ais(model.function, x, schedule, chains=2)
    with pytest.raises(ValueError, match=r"step_size\(0.25\) must be positive"):
        forward_ais(model, x, schedule, chains=2, step_size=lambda beta: -1.0)
    with pytest.raises(ValueError, match="latent_dim must be an integer >= 1"):
        LatentModel(model.function, 0)
    decoder = small_decoder()
    with pytest.raises(ValueError, match="x must be binary"):
        vae.train_vae(np.full((5, 10), 0.5), latent_dim=2, hidden=3, n_epochs=1)
    with pytest.raises(ValueError, match="n_epochs must be a positive integer"):
        vae.train_vae(np.ones((5, 10)), latent_dim=2, hidden=3, n_epochs=0)
    with pytest.raises(ValueError, match="x must have 10 pixels"):
        decoder.stan_data(np.ones(9))
    with pytest.raises(ValueError, match=r"decoder.b1 must have shape \(6,\)"):
        vae.decoder_model(decoder._replace(b1=np.ones(5)))
    with pytest.raises(ValueError, match=r"decoder\.W2 must be finite"):
        vae.decoder_model(decoder._replace(W2=np.full_like(decoder.W2, np.nan)))
    with pytest.raises(ValueError, match=r"z must have shape \(N, 2\)"):
        vae.decoder_log_likelihood(decoder, np.ones(10), np.zeros((3, 4)))


# -- against the Stan file, and the workflow (need the toolchain) -----------------------


@pytest.mark.e2e
def test_numpy_twin_equals_the_stan_file(cmdstan):
    from stanflow.models import program_path
    from stanflow.qpaths.stan_density import stan_log_density

    decoder = small_decoder(d=3, p=20, h=7)
    rng = np.random.default_rng(21)
    x, _ = vae.sample_data(decoder, rng, 2)
    z = rng.standard_normal((6, 3))
    for image in x:
        density = stan_log_density(program_path("qpaths/vae_decoder"), decoder.stan_data(image))
        assert density.dim == 3
        log_lik, grad = vae.decoder_log_likelihood(decoder, image, z)
        np.testing.assert_allclose(density(z), log_lik + log_standard_normal(z), rtol=1e-12)
        for row in range(len(z)):
            _, gradient = density.model.log_density_gradient(z[row], propto=False)
            np.testing.assert_allclose(gradient, grad[row] - z[row], rtol=1e-10, atol=1e-12)


@pytest.mark.e2e
def test_quick_workflow(cmdstan, tmp_path):
    from stanflow.workflows import run_workflow

    summary = run_workflow("qpaths-ais", tmp_path, quick=True)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert (tmp_path / "bdmc_gap.png").stat().st_size > 0
    assert summary["seed"] > 0
    assert summary["stan_check"]["max_abs_log_density_difference"] < 1e-8
    assert summary["stan_check"]["max_abs_gradient_difference"] < 1e-8
    paths, ks = summary["settings"]["paths"], summary["settings"]["n_distributions"]
    assert set(summary["gap"]) == set(paths) and "geometric" in paths
    for name in paths:
        assert list(summary["gap"][name]) == [str(k) for k in ks]
        assert all(np.isfinite(list(summary["gap"][name].values())))
        # Each forward bound is below each reverse bound on average, up to MC error.
        for k in ks:
            assert summary["lower"][name][str(k)] < summary["upper"][name][str(k)] + 1.0
    assert summary["q"]["geometric"][str(ks[0])]["median"] == 1.0
    assert summary["training"]["train_elbo_last_epoch"] > summary["training"][
        "train_elbo_first_epoch"]

    def longest(value):
        if isinstance(value, dict):
            return max((longest(v) for v in value.values()), default=0)
        if isinstance(value, list):
            return max(len(value), *(longest(v) for v in value)) if value else 0
        return 0

    assert longest(summary) <= 100

    def stored(name, k):
        return json.loads((tmp_path / "runs" / name / f"K={k}.json").read_text())

    # One piece per path and K; where a heuristic's q is 1 everywhere, its cell is the geometric one's.
    for name in paths:
        for k in ks:
            record = stored(name, k)
            assert record["config"]["path"] == name and record["config"]["K"] == k
            if record.get("same_as") == "geometric":
                assert record["lower"] == stored("geometric", k)["lower"]
    # A rerun reads the decoder and every cell back: the same summary.
    again = run_workflow("qpaths-ais", tmp_path, quick=True)
    assert {k: v for k, v in again.items() if k != "provenance"} == {
        k: v for k, v in summary.items() if k != "provenance"}
