"""A small neural-net classifier for WBB draws: ReLU hidden layers, softmax output.

Each draw solves

    minimise_theta  sum_i w_i CE_i(theta)  +  lam * wp * sum_l ||W_l||_F^2

with ``CE_i = -log softmax(f_theta(x_i))_{y_i}``, ``f_theta`` a fully connected
network with ReLU hidden layers (``hidden``, e.g. ``(128, 64)``) and the L2
penalty on the weight matrices (not the biases). The loss is a weighted *sum*,
so an example of integer weight ``m`` counts as ``m`` copies of it; Keras's
``kernel_regularizer=l2(c)`` on the *mean* loss corresponds to ``lam = c n``.

Solver: full-batch L-BFGS (``scipy.optimize.minimize(method="L-BFGS-B")``, no
bounds) on the exact objective with the gradient by backpropagation in NumPy.
Why: a WBB draw must be the *minimiser* of its weighted objective, and
full-batch L-BFGS gives a checkable stopping rule (scipy's projected-gradient
``gtol`` or relative decrease ``ftol``) that minibatch methods do not; with a few
thousand examples a full-batch gradient costs one pass of two BLAS matrix
products per layer, and ``bench/wbb_nn.py`` measures it reaching the same
objective as Adam minibatches in the same time (ahead under CPU contention).
All draws start from the same parameters (He initialisation from
``init_seed``, or a warm start ``init`` such as the unit-weight solution, which
cuts the iterations per draw), so the spread of the draws comes from the
weights, not from the start.
A draw has converged when L-BFGS stopped on its own criteria
(``OptimizeResult.status == 0``) within ``max_iter`` iterations.

:func:`train_adam` is the other solver: minibatch Adam for a fixed number of
epochs, every draw from its own random (He) initialisation and its own
minibatch order (``seeds``), the way a deep-learning framework trains a
network. Each minibatch step follows the gradient of the unbiased estimate
``(n / m) sum_{i in batch} w_i CE_i + lam * wp * sum_l ||W_l||^2`` of the same
summed objective, so ``lam`` means the same in both solvers. It stops on its
budget, not on a stationarity rule: what it reports (the full objective, its
gradient and its relative decrease over the last epoch) says how far from a
minimum a draw ended.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
from scipy.optimize import minimize

from stanflow.adam import adam_update
from stanflow.validation import check_int, check_positive
from stanflow.wbb._checks import (
    check_lam,
    check_weights,
)


@dataclass(frozen=True)
class NetResult:
    """Trained networks of a batch of weighted problems.

    Attributes
    ----------
    params : ndarray, shape (B, n_params)
        Flat parameters (:func:`unflatten` splits them into layers).
    sizes : tuple of int
        Layer widths, input first, classes last.
    converged : ndarray of bool, shape (B,)
    objective : ndarray, shape (B,)
    grad_norm : ndarray, shape (B,)
        Largest absolute gradient entry at the returned parameters.
    n_iter : ndarray of int, shape (B,)
    """

    params: np.ndarray
    sizes: tuple[int, ...]
    converged: np.ndarray
    objective: np.ndarray
    grad_norm: np.ndarray
    n_iter: np.ndarray


def layer_sizes(n_features: int, hidden: Sequence[int], n_classes: int) -> tuple[int, ...]:
    """``(n_features, *hidden, n_classes)`` after checking each is a positive int."""
    sizes = (n_features, *hidden, n_classes)
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"layer sizes must be ints >= 1, got {sizes}")
    return tuple(int(s) for s in sizes)


def n_params(sizes: Sequence[int]) -> int:
    """Number of weights and biases."""
    return sum((a + 1) * b for a, b in pairwise(sizes))


def unflatten(theta: np.ndarray, sizes: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Views ``(W_l (a, b), b_l (b,))`` of the flat parameters, layer by layer."""
    layers, at = [], 0
    for a, b in pairwise(sizes):
        W = theta[at : at + a * b].reshape(a, b)
        at += a * b
        layers.append((W, theta[at : at + b]))
        at += b
    return layers


def init_params(sizes: Sequence[int], seed: int) -> np.ndarray:
    """He-normal weights (sd ``sqrt(2 / fan_in)``), zero biases."""
    rng = np.random.default_rng(seed)
    theta = np.zeros(n_params(sizes))
    for W, _ in unflatten(theta, sizes):
        W[...] = rng.normal(0.0, np.sqrt(2.0 / W.shape[0]), size=W.shape)
    return theta


def logits(theta: np.ndarray, X: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """Output-layer scores, shape (n, n_classes)."""
    layers = unflatten(theta, sizes)
    h = X
    for W, b in layers[:-1]:
        h = np.maximum(h @ W + b, 0.0)
    W, b = layers[-1]
    return h @ W + b


def predict(theta: np.ndarray, X: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """Predicted classes, shape (n,)."""
    return logits(theta, X, sizes).argmax(axis=1)


def objective(
    theta: np.ndarray, X: np.ndarray, labels: np.ndarray, sizes: Sequence[int],
    w: np.ndarray, penalty: float,
) -> tuple[float, np.ndarray]:
    """``sum_i w_i CE_i + penalty * sum_l ||W_l||^2`` and its gradient (backpropagation)."""
    layers = unflatten(theta, sizes)
    activations = [X]
    for W, b in layers[:-1]:
        activations.append(np.maximum(activations[-1] @ W + b, 0.0))
    W, b = layers[-1]
    z = activations[-1] @ W + b
    z -= z.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(z).sum(axis=1))
    rows = np.arange(X.shape[0])
    value = w @ (log_norm - z[rows, labels])
    grad = np.zeros_like(theta)
    grads = unflatten(grad, sizes)
    delta = np.exp(z - log_norm[:, None])
    delta[rows, labels] -= 1.0
    delta *= w[:, None]
    for layer in range(len(layers) - 1, -1, -1):
        W, _ = layers[layer]
        gW, gb = grads[layer]
        gW[...] = activations[layer].T @ delta + 2 * penalty * W
        gb[...] = delta.sum(axis=0)
        value += penalty * np.sum(W * W)
        if layer:
            delta = (delta @ W.T) * (activations[layer] > 0)
    return float(value), grad


def train(
    X: np.ndarray,
    labels: np.ndarray,
    lam: float,
    *,
    hidden: Sequence[int] = (128, 64),
    n_classes: int | None = None,
    weights: np.ndarray | None = None,
    prior_weight: float | np.ndarray = 1.0,
    init_seed: int = 0,
    init: np.ndarray | None = None,
    gtol: float = 1e-5,
    ftol: float = 1e-10,
    max_iter: int = 1000,
) -> NetResult:
    """Train one network per weight draw by full-batch L-BFGS.

    Parameters
    ----------
    X : ndarray, shape (n, d)
        Features, finite.
    labels : ndarray of int, shape (n,)
        Classes ``0 .. n_classes - 1``.
    lam : float
        L2 penalty level, ``>= 0`` (sum-loss scaling, see the module docstring).
    hidden : sequence of int
        Widths of the ReLU hidden layers.
    n_classes : int, optional
        Number of classes (``labels.max() + 1`` if omitted).
    weights : ndarray, shape (n,) or (B, n), optional
        Non-negative per-example loss weights; unit weights if omitted.
    prior_weight : float or ndarray, shape (B,)
        Non-negative multiplier of the penalty per draw.
    init_seed : int
        Seed of the shared He initialisation.
    init : ndarray, shape (n_params,), optional
        Warm start of every draw instead (e.g. the unit-weight solution).
    gtol, ftol : float
        L-BFGS-B's stopping tolerances (largest gradient entry; relative decrease).
    max_iter : int
        Largest number of L-BFGS iterations per draw.

    Returns
    -------
    NetResult
    """
    X, labels, sizes = _check_problem(X, labels, hidden, n_classes)
    lam = check_lam(lam)
    w, wp = check_weights(weights, prior_weight, X.shape[0])
    gtol, ftol = check_positive(gtol, "gtol"), check_positive(ftol, "ftol")
    max_iter = check_int(max_iter, "max_iter")
    start = init_params(sizes, init_seed) if init is None else np.asarray(init, dtype=float)
    if start.shape != (n_params(sizes),) or not np.all(np.isfinite(start)):
        raise ValueError(f"init must be finite with shape ({n_params(sizes)},), got {start.shape}")
    fits = []
    for b in range(w.shape[0]):
        res = minimize(objective, start, args=(X, labels, sizes, w[b], lam * wp[b]), jac=True,
                       method="L-BFGS-B", options={"gtol": gtol, "ftol": ftol, "maxiter": max_iter,
                                                   "maxfun": 2 * max_iter})
        fits.append((res.x, res.status == 0, res.fun, np.abs(res.jac).max(), res.nit))
    params, converged, value, grad_norm, n_iter = (np.array(a) for a in zip(*fits, strict=True))
    return NetResult(params, sizes, converged, value, grad_norm, n_iter)


@dataclass(frozen=True)
class AdamResult(NetResult):
    """:class:`NetResult` of :func:`train_adam`, plus

    Attributes
    ----------
    rel_decrease : ndarray, shape (B,)
        ``(F_prev - F) / F`` of the full objective ``F`` over the last epoch
        (``F_prev`` one epoch before the end; negative if it rose).
    history : ndarray, shape (B, len(record_at))
        ``evaluate(theta)`` at the epochs of ``record_at`` (0 = the start).
    """

    rel_decrease: np.ndarray
    history: np.ndarray


def train_adam(
    X: np.ndarray,
    labels: np.ndarray,
    lam: float,
    *,
    seeds: Sequence[int],
    hidden: Sequence[int] = (128, 64),
    n_classes: int | None = None,
    weights: np.ndarray | None = None,
    prior_weight: float | np.ndarray = 1.0,
    epochs: int = 20,
    batch_size: int = 100,
    step: float = 1e-3,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-7,
    dtype: type[np.floating] = np.float32,
    record_at: Sequence[int] = (),
    evaluate: Callable[[np.ndarray], float] | None = None,
) -> AdamResult:
    """Train one network per weight draw by minibatch Adam, each from its own start.

    Parameters
    ----------
    X, labels, lam, hidden, n_classes, weights, prior_weight
        As in :func:`train`; ``weights`` of shape (B, n) (or ``None``: unit
        weights for every seed).
    seeds : sequence of int, length B
        Draw ``b`` starts from ``init_params(sizes, seeds[b])`` and shuffles
        its minibatches with a generator of ``SeedSequence(seeds[b], spawn_key=(1,))``.
    epochs : int
        Passes over the data (each a fresh random order).
    batch_size : int
        Examples per step (the last batch of an epoch may be smaller).
    step, beta1, beta2, eps : float
        Adam's step size and moment parameters (Keras's defaults).
    dtype : numpy float type
        Precision of the minibatch steps (float32 halves the cost); the
        reported objective, gradient and ``rel_decrease`` are float64.
    record_at : sequence of int
        Increasing epochs (0..epochs) at which ``evaluate(theta)`` is recorded.
    evaluate : callable, optional
        ``evaluate(theta) -> float`` (e.g. test accuracy); needed if ``record_at``.

    Returns
    -------
    AdamResult
        ``converged`` is True for every draw whose parameters and objective are
        finite (Adam stops on its budget; ``rel_decrease`` and ``grad_norm``
        say how close to stationary it ended); ``n_iter`` counts steps.
    """
    X, labels, sizes = _check_problem(X, labels, hidden, n_classes)
    lam = check_lam(lam)
    n = X.shape[0]
    draw_seeds = np.asarray(seeds)
    if (draw_seeds.ndim != 1 or draw_seeds.size < 1
            or not np.issubdtype(draw_seeds.dtype, np.integer) or np.any(draw_seeds < 0)):
        raise ValueError(f"seeds must be a 1-d sequence of non-negative ints, got {draw_seeds!r}")
    if weights is None:
        weights = np.ones((draw_seeds.size, n))
    w, wp = check_weights(weights, prior_weight, n)
    if w.shape[0] != draw_seeds.size:
        raise ValueError(
            f"seeds must have one entry per weight draw ({w.shape[0]}), got {draw_seeds.size}"
        )
    epochs = check_int(epochs, "epochs")
    batch_size = check_int(batch_size, "batch_size")
    step = check_positive(step, "step")
    eps = check_positive(eps, "eps")
    for value, name in ((beta1, "beta1"), (beta2, "beta2")):
        if not 0 <= value < 1:
            raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be numpy.float32 or numpy.float64, got {dtype!r}")
    record_at = [int(e) for e in record_at]
    if any(e < 0 or e > epochs for e in record_at) or any(a >= b for a, b in pairwise(record_at)):
        raise ValueError(f"record_at must increase within 0..epochs = {epochs}, got {record_at}")
    if record_at and evaluate is None:
        raise ValueError("record_at needs evaluate")

    def evaluations(theta: np.ndarray, epoch: int) -> list[float]:
        """``[evaluate(theta)]`` at an epoch of ``record_at``, else none."""
        if evaluate is None or epoch not in record_at:
            return []
        return [evaluate(theta.astype(float))]

    Xd = X.astype(dtype)
    results = []
    for b in range(draw_seeds.size):
        rng = np.random.default_rng(np.random.SeedSequence(int(draw_seeds[b]), spawn_key=(1,)))
        theta = init_params(sizes, int(draw_seeds[b])).astype(dtype)
        m, v = np.zeros_like(theta), np.zeros_like(theta)
        wb, penalty = w[b].astype(dtype), lam * wp[b]
        history = evaluations(theta, 0)
        t, previous = 0, np.nan
        for epoch in range(1, epochs + 1):
            if epoch == epochs:
                previous = objective(theta.astype(float), X, labels, sizes, w[b], penalty)[0]
            order = rng.permutation(n)
            for start in range(0, n, batch_size):
                batch = order[start : start + batch_size]
                # (n / m) sum over the batch: an unbiased estimate of the summed loss
                scale = dtype(n / batch.size)
                _, grad = objective(theta, Xd[batch], labels[batch], sizes, scale * wb[batch],
                                    penalty)
                t += 1
                adam_update(theta, grad, m, v, t, step, betas=(beta1, beta2), eps=eps)
            history += evaluations(theta, epoch)
        final = theta.astype(float)
        value, grad = objective(final, X, labels, sizes, w[b], penalty)
        finite = bool(np.isfinite(value) and np.all(np.isfinite(final)))
        results.append((final, finite, value, np.abs(grad).max(), t, (previous - value) / abs(value),
                        history))
    params, converged, values, grad_norm, n_iter, rel, histories = (
        np.array(a) for a in zip(*results, strict=True)
    )
    return AdamResult(params, sizes, converged, values, grad_norm, n_iter, rel,
                      histories.reshape(draw_seeds.size, len(record_at)))


def _check_problem(
    X: np.ndarray, labels: np.ndarray, hidden: Sequence[int], n_classes: int | None
) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """Checked float features, int labels and the layer sizes."""
    X = np.asarray(X, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-dimensional (n, d), got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or infinite values")
    labels = np.asarray(labels)
    if labels.shape != (X.shape[0],):
        raise ValueError(f"labels must have shape ({X.shape[0]},), got {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        raise ValueError("labels must be non-negative ints")
    n_classes = int(labels.max()) + 1 if n_classes is None else n_classes
    if labels.max() >= n_classes:
        raise ValueError(f"labels must be < n_classes = {n_classes}")
    return X, labels, layer_sizes(X.shape[1], hidden, n_classes)
