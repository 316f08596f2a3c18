"""The neural-net WBB solver: exact gradient, convergence to a gradient
tolerance, integer weights equal duplicated examples, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.wbb import bootstrap_weights
from stanflow.wbb.neural_net import init_params, layer_sizes, objective, predict, train

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
        ({"max_iter": 0}, "max_iter must be an int >= 1"),
        ({"init": np.zeros(3)}, "init must be finite with shape"),
    ],
)
def test_bad_input_raises_errors_naming_the_argument(kwargs, message):
    X, labels = _blobs()
    call = {"X": X, "labels": labels, "lam": 1.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        train(call.pop("X"), call.pop("labels"), call.pop("lam"), **call)
