"""A small variational autoencoder for binary images, in NumPy with manual backprop.

The generative model (the decoder) is the one of ``stan/qpaths/vae_decoder.stan``::

    z ~ N(0, I_d),   h = tanh(W1 z + b1),   x_j | z ~ Bernoulli(sigmoid((W2 h + b2)_j)),

``x`` a vector of ``p`` binary pixels. The encoder (inference network) is
``q(z | x) = N(mu(x), diag exp(logvar(x)))`` with one tanh hidden layer. Training
maximises the ELBO ``E_q[log p(x | z)] - KL(q(z | x) || N(0, I))`` by Adam, with
one reparameterised draw ``z = mu + exp(logvar / 2) eps`` per image (Kingma and
Welling 2014); the KL term is in closed form. Gradients are written out by hand
(:func:`elbo_and_grad`; tested against finite differences).

:func:`decoder_log_likelihood` is the NumPy twin of the Stan file's likelihood,
batched over rows of ``z`` (one row per AIS chain) with its gradient in ``z``,
for HMC; a test checks it against the Stan file through bridgestan.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from stanflow.adam import adam_update
from stanflow.qpaths.bdmc import LatentModel

ENCODER = ("We", "be", "Wm", "bm", "Wv", "bv")
DECODER = ("W1", "b1", "W2", "b2")
PARAMETERS = ENCODER + DECODER


class Decoder(NamedTuple):
    """Decoder weights: ``h = tanh(W1 z + b1)``, logits ``W2 h + b2``.

    Attributes
    ----------
    W1 : ndarray, shape (hidden, d)
    b1 : ndarray, shape (hidden,)
    W2 : ndarray, shape (p, hidden)
    b2 : ndarray, shape (p,)
    """

    W1: np.ndarray
    b1: np.ndarray
    W2: np.ndarray
    b2: np.ndarray

    @property
    def latent_dim(self) -> int:
        return self.W1.shape[1]

    @property
    def n_pixels(self) -> int:
        return self.W2.shape[0]

    def stan_data(self, x: ArrayLike) -> dict:
        """Data of ``stan/qpaths/vae_decoder.stan`` for one binary image ``x``."""
        x = check_binary(x, "x", self.n_pixels)
        if x.ndim != 1:
            raise ValueError(f"x must be one image of shape ({self.n_pixels},), got {x.shape}")
        h, d = self.W1.shape
        return {
            "p": self.n_pixels, "d": d, "h": h, "x": x.astype(int).tolist(),
            "W1": self.W1, "b1": self.b1, "W2": self.W2, "b2": self.b2,
        }


def decoder_of(params: dict[str, np.ndarray]) -> Decoder:
    """The decoder part of VAE parameters."""
    return Decoder(*(np.asarray(params[k], dtype=float) for k in DECODER))


def check_decoder(decoder: Decoder) -> Decoder:
    """Shapes and finiteness of a decoder, or a ``ValueError`` naming the field."""
    if not isinstance(decoder, Decoder):
        raise TypeError(f"decoder must be a Decoder, got {type(decoder).__name__}")
    arrays = {k: np.asarray(v, dtype=float) for k, v in decoder._asdict().items()}
    h, d = arrays["W1"].shape if arrays["W1"].ndim == 2 else (0, 0)
    p = arrays["W2"].shape[0] if arrays["W2"].ndim == 2 else 0
    expected = {"W1": (h, d), "b1": (h,), "W2": (p, h), "b2": (p,)}
    for name, shape in expected.items():
        if arrays[name].shape != shape or 0 in shape:
            raise ValueError(
                f"decoder.{name} must have shape {shape} (from W1 {arrays['W1'].shape} "
                f"and W2 {arrays['W2'].shape}), got {arrays[name].shape}"
            )
        if not np.isfinite(arrays[name]).all():
            raise ValueError(f"decoder.{name} must be finite")
    return Decoder(**arrays)


def check_binary(x: ArrayLike, name: str, p: int | None = None) -> np.ndarray:
    """``x`` as a float array of 0/1 pixels (last axis ``p``), or a ``ValueError``."""
    x = np.asarray(x, dtype=float)
    if x.ndim not in (1, 2) or x.size == 0:
        raise ValueError(f"{name} must be a 1-D image or a 2-D array of images, got {x.shape}")
    if p is not None and x.shape[-1] != p:
        raise ValueError(f"{name} must have {p} pixels in its last axis, got {x.shape}")
    if not np.isin(x, (0.0, 1.0)).all():
        raise ValueError(f"{name} must be binary (0 or 1 pixels)")
    return x


def _softplus(a: np.ndarray) -> np.ndarray:
    return np.maximum(a, 0.0) + np.log1p(np.exp(-np.abs(a)))


def _sigmoid(a: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(a))
    return np.where(a >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def decoder_log_likelihood(
    decoder: Decoder, x: ArrayLike, z: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """``log p(x | z)`` and its gradient in ``z``, batched over rows of ``z``.

    Parameters
    ----------
    decoder : Decoder
    x : array_like, shape (p,) or (N, p)
        Binary image(s): one for every row, or one per row.
    z : array_like, shape (N, d)

    Returns
    -------
    (ndarray, ndarray)
        Log-likelihoods, shape ``(N,)``, and gradients, shape ``(N, d)``.
    """
    z = np.asarray(z, dtype=float)
    if z.ndim != 2 or z.shape[1] != decoder.latent_dim:
        raise ValueError(f"z must have shape (N, {decoder.latent_dim}), got {z.shape}")
    x = np.asarray(x, dtype=float)
    hidden = np.tanh(z @ decoder.W1.T + decoder.b1)
    logits = hidden @ decoder.W2.T + decoder.b2
    e = np.exp(-np.abs(logits))
    log_lik = np.sum(x * logits, axis=-1) - np.sum(
        np.maximum(logits, 0.0) + np.log1p(e), axis=1
    )
    residual = x - np.where(logits >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    grad = ((residual @ decoder.W2) * (1.0 - hidden**2)) @ decoder.W1
    return log_lik, grad


def sample_data(
    decoder: Decoder, rng: np.random.Generator, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` draws ``(x, z)`` from the model: ``z`` from the prior, then ``x | z``.

    Each ``z`` is an exact draw from the posterior ``p(z | x)`` of its ``x``.

    Returns
    -------
    (ndarray, ndarray)
        ``x`` of shape ``(n, p)`` (0/1 floats) and ``z`` of shape ``(n, d)``.
    """
    z = rng.standard_normal((n, decoder.latent_dim))
    logits = np.tanh(z @ decoder.W1.T + decoder.b1) @ decoder.W2.T + decoder.b2
    x = (rng.uniform(size=logits.shape) < _sigmoid(logits)).astype(float)
    return x, z


def init_vae(
    rng: np.random.Generator, n_pixels: int, hidden: int, latent_dim: int
) -> dict[str, np.ndarray]:
    """Initial VAE parameters: Glorot-scaled normal weights, zero biases."""
    shapes = {
        "We": (hidden, n_pixels), "Wm": (latent_dim, hidden), "Wv": (latent_dim, hidden),
        "W1": (hidden, latent_dim), "W2": (n_pixels, hidden),
    }
    params = {
        name: rng.normal(scale=np.sqrt(2.0 / sum(shape)), size=shape)
        for name, shape in shapes.items()
    }
    for name, size in (("be", hidden), ("bm", latent_dim), ("bv", latent_dim),
                       ("b1", hidden), ("b2", n_pixels)):
        params[name] = np.zeros(size)
    return params


def elbo_and_grad(
    params: dict[str, np.ndarray], x: np.ndarray, eps: np.ndarray
) -> tuple[float, dict[str, np.ndarray]]:
    """Mean ELBO over the rows of ``x`` at noise ``eps``, and its gradient.

    Parameters
    ----------
    params : dict
        Encoder ``We, be`` (hidden layer), ``Wm, bm`` (mean), ``Wv, bv`` (log
        variance); decoder ``W1, b1, W2, b2``.
    x : ndarray, shape (n, p)
        Binary images.
    eps : ndarray, shape (n, d)
        Standard normal noise of the reparameterisation.

    Returns
    -------
    (float, dict)
        The mean over images of ``log p(x | z) - KL(q(z | x) || N(0, I))`` with
        ``z = mu + exp(logvar / 2) eps``, and its gradient for every parameter.
    """
    n = x.shape[0]
    # Encoder.
    he = np.tanh(x @ params["We"].T + params["be"])
    mu = he @ params["Wm"].T + params["bm"]
    logvar = he @ params["Wv"].T + params["bv"]
    sd = np.exp(0.5 * logvar)
    z = mu + sd * eps
    # Decoder.
    hd = np.tanh(z @ params["W1"].T + params["b1"])
    logits = hd @ params["W2"].T + params["b2"]
    log_lik = np.sum(x * logits - _softplus(logits), axis=1)
    kl = 0.5 * np.sum(mu**2 + np.exp(logvar) - 1.0 - logvar, axis=1)
    elbo = float(np.mean(log_lik - kl))
    # Backward pass, for the mean ELBO.
    g_logits = (x - _sigmoid(logits)) / n
    grads = {"W2": g_logits.T @ hd, "b2": g_logits.sum(axis=0)}
    g_pre_d = (g_logits @ params["W2"]) * (1.0 - hd**2)
    grads["W1"] = g_pre_d.T @ z
    grads["b1"] = g_pre_d.sum(axis=0)
    g_z = g_pre_d @ params["W1"]
    g_mu = g_z - mu / n
    g_logvar = g_z * eps * 0.5 * sd - 0.5 * (np.exp(logvar) - 1.0) / n
    grads["Wm"], grads["bm"] = g_mu.T @ he, g_mu.sum(axis=0)
    grads["Wv"], grads["bv"] = g_logvar.T @ he, g_logvar.sum(axis=0)
    g_pre_e = (g_mu @ params["Wm"] + g_logvar @ params["Wv"]) * (1.0 - he**2)
    grads["We"], grads["be"] = g_pre_e.T @ x, g_pre_e.sum(axis=0)
    return elbo, grads


class Training(NamedTuple):
    """Result of :func:`train_vae`.

    Attributes
    ----------
    params : dict
        Final parameters.
    elbo : ndarray
        Mean training ELBO (one draw per image) of every epoch.
    n_steps : int
        Adam steps taken.
    """

    params: dict[str, np.ndarray]
    elbo: np.ndarray
    n_steps: int


def train_vae(
    x: ArrayLike,
    *,
    latent_dim: int,
    hidden: int,
    n_epochs: int,
    batch_size: int = 100,
    learning_rate: float = 1e-3,
    seed: int | None = None,
) -> Training:
    """Fit the VAE to binary images by Adam on the reparameterised ELBO.

    Parameters
    ----------
    x : array_like, shape (n, p)
        Binary training images.
    latent_dim, hidden : int
        ``d`` and the hidden units of both networks.
    n_epochs : int
        Passes over the shuffled data, ``ceil(n / batch_size)`` Adam steps each.
    batch_size : int, default 100
    learning_rate : float, default 1e-3
        Adam's step (``beta1 = 0.9``, ``beta2 = 0.999``, ``eps = 1e-8``).
    seed : int, optional

    Returns
    -------
    Training
    """
    x = check_binary(x, "x")
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"x must be (n, p) with n >= 2 images, got {x.shape}")
    for name, value in (("latent_dim", latent_dim), ("hidden", hidden),
                        ("n_epochs", n_epochs), ("batch_size", batch_size)):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    if not (np.isfinite(learning_rate) and learning_rate > 0):
        raise ValueError(f"learning_rate must be positive, got {learning_rate}")
    rng = np.random.default_rng(seed)
    params = init_vae(rng, x.shape[1], hidden, latent_dim)
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(v) for k, v in params.items()}
    step, history = 0, []
    for _ in range(n_epochs):
        order = rng.permutation(x.shape[0])
        total = 0.0
        for start in range(0, x.shape[0], batch_size):
            batch = x[order[start : start + batch_size]]
            eps = rng.standard_normal((batch.shape[0], latent_dim))
            elbo, grads = elbo_and_grad(params, batch, eps)
            total += elbo * batch.shape[0]
            step += 1
            for k, g in grads.items():  # ascent on the ELBO
                adam_update(params[k], g, m[k], v[k], step, learning_rate, ascent=True)
        history.append(total / x.shape[0])
    return Training(params, np.array(history), step)


def elbo(params: dict[str, np.ndarray], x: ArrayLike, rng: np.random.Generator) -> float:
    """Mean ELBO of ``x`` with one reparameterised draw per image."""
    x = check_binary(x, "x")
    eps = rng.standard_normal((x.shape[0], params["Wm"].shape[0]))
    return elbo_and_grad(params, x, eps)[0]


def decoder_model(decoder: Decoder) -> LatentModel:
    """The decoder's likelihood as a :class:`~stanflow.qpaths.bdmc.LatentModel` for AIS."""
    decoder = check_decoder(decoder)
    return LatentModel(partial(decoder_log_likelihood, decoder), decoder.latent_dim)
