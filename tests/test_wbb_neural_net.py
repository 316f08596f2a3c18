"""The neural-net WBB solvers: exact gradient, convergence to a gradient
tolerance, integer weights equal duplicated examples, bad input; minibatch Adam:
the summed objective it reports, a start per seed, its first step, a convex optimum."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from scipy.special import logsumexp

from stanflow.wbb import bootstrap_weights
from stanflow.wbb.neural_net import (
    init_params,
    layer_sizes,
    objective,
    predict,
    train,
    train_adam,
)

RNG = np.random.default_rng(99)


def _blobs(n=60, d=4, k=3):
    centres = 2.0 * RNG.normal(size=(k, d))
    labels = np.arange(n) % k
    return centres[labels] + RNG.normal(size=(n, d)), labels


def test_gradient_matches_central_differences():
    X, labels = _blobs(n=25)
    sizes = layer_sizes(4, (6, 5), 3)
    theta = init_params(sizes, 1) + 0.1 * RNG.normal(size=init_params(sizes, 1).size)
    w = RNG.exponential(size=25)
    _, grad = objective(theta, X, labels, sizes, w, 0.3)
    h = 1e-6
    numeric = np.array([
        (objective(theta + h * e, X, labels, sizes, w, 0.3)[0]
         - objective(theta - h * e, X, labels, sizes, w, 0.3)[0]) / (2 * h)
        for e in np.eye(theta.size)
    ])
    # ReLU kinks: no pre-activation may sit within h of 0 for differences to be exact.
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)


def test_weighted_training_reaches_a_stationary_point():
    # ReLU makes the objective non-smooth: minima can sit where some example's
    # pre-activation is exactly 0, and there the full gradient need not vanish.
    # The output layer given the hidden activations is a smooth convex problem
    # (penalised weighted softmax regression), so its gradient must vanish; the
    # whole gradient must fall far below where it started.
    X, labels = _blobs()
    w, wp = bootstrap_weights(2, len(labels), 3)
    fit = train(X, labels, 0.5, hidden=(8, 6), weights=w, prior_weight=wp, gtol=1e-6, ftol=1e-14,
                max_iter=5000)
    start = init_params(fit.sizes, 0)
    last = init_params(fit.sizes, 0).size - (6 + 1) * 3
    for b in range(3):
        assert fit.converged[b]
        value, grad = objective(fit.params[b], X, labels, fit.sizes, w[b], 0.5 * wp[b])
        initial, initial_grad = objective(start, X, labels, fit.sizes, w[b], 0.5 * wp[b])
        assert value == pytest.approx(fit.objective[b]) and value < initial
        assert np.abs(grad[last:]).max() <= 1e-3 * np.abs(initial_grad).max()
        assert np.abs(grad).max() <= 0.05 * np.abs(initial_grad).max()
        assert fit.grad_norm[b] == pytest.approx(np.abs(grad).max())
        assert (predict(fit.params[b], X, fit.sizes) == labels).mean() > 0.9


def test_integer_weights_equal_duplicated_examples():
    X, labels = _blobs(n=30)
    counts = RNG.integers(0, 4, size=30)
    X_dup, labels_dup = np.repeat(X, counts, axis=0), np.repeat(labels, counts)
    sizes = layer_sizes(4, (7, 5), 3)
    theta = init_params(sizes, 4)
    weighted = objective(theta, X, labels, sizes, counts.astype(float), 0.2)
    duplicated = objective(theta, X_dup, labels_dup, sizes, np.ones(counts.sum()), 0.2)
    assert weighted[0] == pytest.approx(duplicated[0], rel=1e-12)
    np.testing.assert_allclose(weighted[1], duplicated[1], rtol=1e-10, atol=1e-12)
    # The same objective gives the same L-BFGS path (up to rounding, which a
    # non-convex problem amplifies over many iterations: compare 15).
    a = train(X, labels, 0.2, hidden=(7, 5), weights=counts.astype(float), init_seed=4, max_iter=15)
    b = train(X_dup, labels_dup, 0.2, hidden=(7, 5), init_seed=4, max_iter=15)
    np.testing.assert_allclose(a.params, b.params, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lam": -1.0}, "lam must be finite and >= 0"),
        ({"weights": np.ones(59)}, "weights must have shape"),
        ({"X": np.full((60, 4), np.nan)}, "X contains NaN"),
        ({"labels": np.full(60, 1.5)}, "labels must be non-negative ints"),
        ({"labels": np.arange(60) % 3, "n_classes": 2}, "labels must be < n_classes = 2"),
        ({"hidden": (8, 0)}, "layer sizes must be ints >= 1"),
        ({"max_iter": 0}, "max_iter must be an integer >= 1"),
        ({"init": np.zeros(3)}, "init must be finite with shape"),
    ],
)
def test_bad_input_raises_errors_naming_the_argument(kwargs, message):
    X, labels = _blobs()
    call = {"X": X, "labels": labels, "lam": 1.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        train(call.pop("X"), call.pop("labels"), call.pop("lam"), **call)


# --- minibatch Adam (train_adam): the published setting's solver -------------------------------


def _direct_objective(theta, X, labels, sizes, w, lam):
    """sum_i w_i CE_i + lam * sum ||W||^2, written out independently of neural_net.objective."""
    at, h, squares = 0, X, 0.0
    for layer, (a, b) in enumerate(pairwise(sizes)):
        W = theta[at : at + a * b].reshape(a, b)
        bias = theta[at + a * b : at + a * b + b]
        at += a * b + b
        squares += np.sum(W**2)
        h = h @ W + bias
        if layer < len(sizes) - 2:
            h = np.maximum(h, 0.0)
    ce = logsumexp(h, axis=1) - h[np.arange(len(labels)), labels]
    return float(np.sum(w * ce) + lam * squares)


def test_adam_reports_the_summed_weighted_objective():
    # The reported objective is sum_i w_i CE_i + lam wp ||W||^2 (lam on the *sum*), checked
    # against a direct computation; the relative decrease is computed from it.
    X, labels = _blobs()
    w, wp = bootstrap_weights(5, len(labels), 3)
    fit = train_adam(X, labels, 0.7, seeds=[1, 2, 3], hidden=(8, 6), weights=w, prior_weight=wp,
                     epochs=5, batch_size=16, dtype=np.float64)
    for b in range(3):
        direct = _direct_objective(fit.params[b], X, labels, fit.sizes, w[b], 0.7 * wp[b])
        assert fit.objective[b] == pytest.approx(direct, rel=1e-10)
        assert fit.converged[b] and fit.n_iter[b] == 5 * 4  # 4 batches (16, 16, 16, 12) an epoch
        start = _direct_objective(init_params(fit.sizes, [1, 2, 3][b]), X, labels, fit.sizes, w[b],
                                  0.7 * wp[b])
        assert fit.objective[b] < start


def test_adam_draws_start_from_their_own_seeds():
    X, labels = _blobs()
    sizes = layer_sizes(4, (8, 6), 3)
    seeds = [11, 12, 11]
    w = np.ones((3, len(labels)))

    def loss_at(theta):
        return _direct_objective(theta, X, labels, sizes, np.ones(len(labels)), 0.0)

    fit = train_adam(X, labels, 0.1, seeds=seeds, hidden=(8, 6), weights=w, epochs=2, dtype=np.float64,
                     record_at=(0, 2), evaluate=loss_at)
    # epoch 0 is the start: He initialisation from the draw's own seed
    for b, seed in enumerate(seeds):
        assert fit.history[b, 0] == pytest.approx(loss_at(init_params(sizes, seed)), rel=1e-12)
    assert not np.allclose(init_params(sizes, 11), init_params(sizes, 12))
    # distinct seeds, distinct draws; the same seed and weights, the same draw
    assert not np.allclose(fit.params[0], fit.params[1])
    np.testing.assert_array_equal(fit.params[0], fit.params[2])
    assert fit.history[0, 1] == pytest.approx(fit.history[2, 1])


def test_adam_full_batch_first_step_follows_the_summed_gradient():
    # One step with the whole data as the batch: Adam's first step is -step * g / (|g| + eps)
    # with g the gradient of the summed weighted objective (no 1/n).
    X, labels = _blobs(n=30)
    sizes = layer_sizes(4, (5,), 3)
    w, wp = bootstrap_weights(7, 30, 1)
    fit = train_adam(X, labels, 0.4, seeds=[3], hidden=(5,), weights=w, prior_weight=wp, epochs=1,
                     batch_size=30, step=1e-2, dtype=np.float64)
    theta0 = init_params(sizes, 3)
    _, g = objective(theta0, X, labels, sizes, w[0], 0.4 * wp[0])
    np.testing.assert_allclose(fit.params[0], theta0 - 1e-2 * g / (np.abs(g) + 1e-7), rtol=1e-9, atol=1e-12)


def test_adam_approaches_the_optimum_of_a_convex_problem():
    # No hidden layer: penalised weighted softmax regression is convex, and L-BFGS to a tight
    # tolerance gives its minimum; Adam minibatches must get close to it.
    X, labels = _blobs(n=90)
    w, wp = bootstrap_weights(8, 90, 1)
    exact = train(X, labels, 2.0, hidden=(), weights=w, prior_weight=wp, gtol=1e-9, ftol=1e-14,
                  max_iter=5000)
    assert exact.converged[0] and exact.grad_norm[0] < 1e-5
    # Adam at a fixed step approaches it slowly (0.3% above after 2000 full-batch steps here)
    fit = train_adam(X, labels, 2.0, seeds=[4], hidden=(), weights=w, prior_weight=wp, epochs=2000,
                     batch_size=90, step=1e-2, dtype=np.float64)
    assert exact.objective[0] <= fit.objective[0] <= exact.objective[0] * (1 + 1e-2)
    assert 0 <= fit.rel_decrease[0] < 1e-4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seeds": [1, 2], "weights": np.ones((1, 60))}, "seeds must have one entry per weight draw"),
        ({"seeds": [-1]}, "seeds must be a 1-d sequence of non-negative ints"),
        ({"seeds": [1.5]}, "seeds must be a 1-d sequence of non-negative ints"),
        ({"epochs": 0}, "epochs must be an integer >= 1"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"step": 0.0}, "step must be finite and > 0"),
        ({"beta2": 1.0}, "beta2 must be in"),
        ({"dtype": np.float16}, "dtype must be numpy.float32 or numpy.float64"),
        ({"record_at": (1,)}, "record_at needs evaluate"),
        ({"record_at": (2, 1), "evaluate": float}, "record_at must increase within 0..epochs"),
        ({"record_at": (9,), "evaluate": float}, "record_at must increase within 0..epochs"),
        ({"lam": -1.0}, "lam must be finite and >= 0"),
        ({"X": np.full((60, 4), np.inf)}, "X contains NaN"),
    ],
)
def test_adam_bad_input_raises_errors_naming_the_argument(kwargs, message):
    X, labels = _blobs()
    call = {"X": X, "labels": labels, "lam": 1.0, "seeds": [1], "epochs": 2, "hidden": (4,), **kwargs}
    with pytest.raises(ValueError, match=message):
        train_adam(call.pop("X"), call.pop("labels"), call.pop("lam"), **call)
