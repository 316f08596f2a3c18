"""Bayesian logistic regression as an SMC target: UCI data and vectorised densities.

The model of the q-path SMC experiments (Masrani, Brekelmans et al., UAI 2021): predictors
standardised to mean 0 and standard deviation 0.5, an intercept column, labels
``y in {-1, +1}``, prior ``z ~ N(0, 5^2 I)`` (the normalised base ``pi0``) and
target ``pi1(z) = pi0(z) prod_i sigmoid(y_i x_i' z)``, so ``Z = p(y)``.

The log-likelihood of ``N`` particles is one ``(N, d) x (d, n)`` matrix product
followed by an elementwise ``log sigmoid``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import optimize, stats
from threadpoolctl import ThreadpoolController

PRIOR_SD = 5.0
PREDICTOR_SD = 0.5
CHUNK = 512
"""Particles per block of the log-likelihood."""
_BLAS = ThreadpoolController()
DATASETS = {
    "pima": (
        "uci/pima-indians-diabetes.data",
        (
            "https://archive.ics.uci.edu/dataset/34/diabetes (Pima Indians "
            "Diabetes, 768 rows, 8 predictors, label 0/1 in the last column)"
        ),
    ),
    "sonar": (
        "uci/sonar.all-data",
        (
            "https://archive.ics.uci.edu/dataset/151 (Connectionist Bench Sonar, "
            "208 rows, 60 predictors, label R/M in the last column)"
        ),
    ),
}


@dataclass(frozen=True)
class LogisticTarget:
    """Design matrix ``X`` (shape ``(n, d)``, intercept first) and labels ``y`` (+-1).

    The attributes ``log_pi0``, ``sample_pi0`` and ``log_pi1`` are the
    callables :func:`stanflow.qpaths.annealing.smc` takes. ``kernel_dtype`` is the
    floating type of the log-likelihood's products and log-sigmoids
    (``"float32"`` is about 25% faster; the per-particle sums are always
    accumulated in float64, and for Pima they then differ from float64 by
    about 1e-5, far below any SMC error).
    """

    X: np.ndarray
    y: np.ndarray
    prior_sd: float = PRIOR_SD
    kernel_dtype: str = "float64"

    def __post_init__(self) -> None:
        if self.kernel_dtype not in ("float64", "float32"):
            raise ValueError(
                f"kernel_dtype must be 'float64' or 'float32', got {self.kernel_dtype!r}"
            )

    @property
    def dim(self) -> int:
        """Number of coefficients ``d`` (predictors + intercept)."""
        return self.X.shape[1]

    def log_pi0(self, z: np.ndarray) -> np.ndarray:
        """Log prior ``N(0, prior_sd^2 I)`` of particles ``z`` (N, d), shape (N,)."""
        d = z.shape[1]
        return -0.5 * np.sum(z**2, axis=1) / self.prior_sd**2 - d * (
            np.log(self.prior_sd) + 0.5 * np.log(2 * np.pi)
        )

    def sample_pi0(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws from the prior, shape (n, d)."""
        return self.prior_sd * rng.standard_normal((n, self.dim))

    def log_likelihood(self, z: np.ndarray) -> np.ndarray:
        """``sum_i log sigmoid(y_i x_i' z)`` for particles ``z`` (N, d), shape (N,)."""
        dtype = np.dtype(self.kernel_dtype)
        signed = (self.X * self.y[:, None]).T.astype(dtype)
        out = np.empty(len(z))
        # Blocks of particles keep the temporaries in cache; in-place ufuncs.
        # One BLAS thread: the products are small, and threads contend.
        with _BLAS.limit(limits=1, user_api="blas"):
            for start in range(0, len(z), CHUNK):
                margin = z[start : start + CHUNK].astype(dtype) @ signed
                # log sigmoid(m) = min(m, 0) - log1p(exp(-|m|))
                tail = np.abs(margin)
                np.negative(tail, out=tail)
                np.exp(tail, out=tail)
                np.log1p(tail, out=tail)
                np.minimum(margin, 0.0, out=margin)
                out[start : start + CHUNK] = margin.sum(
                    axis=1, dtype=np.float64
                ) - tail.sum(axis=1, dtype=np.float64)
        return out

    def log_pi1(self, z: np.ndarray) -> np.ndarray:
        """Unnormalised posterior: log prior + log-likelihood, shape (N,)."""
        return self.log_pi0(z) + self.log_likelihood(z)

    def stan_data(self) -> dict[str, object]:
        """Data of ``stan/qpaths/logistic_regression.stan``, the same target in Stan."""
        n, d = self.X.shape
        return {"n": n, "d": d, "X": self.X, "y": self.y, "prior_sd": self.prior_sd}

    def importance_log_z(
        self, rng: np.random.Generator, n: int = 200_000, df: float = 5.0
    ) -> tuple[float, float]:
        """``log Z`` by importance sampling from a Laplace-fitted Student-t.

        An independent check of SMC estimates: the proposal is a multivariate
        t (``df`` degrees of freedom) at the posterior mode with scale
        ``1.2 x`` the inverse Hessian there (the logistic posterior is close to
        Gaussian, so the weights are well behaved).

        Returns
        -------
        (float, float)
            The estimate and its delta-method standard error.
        """
        mode = optimize.minimize(
            lambda z: -self.log_pi1(z[None])[0],
            np.zeros(self.dim),
            jac=lambda z: -self._grad_log_pi1(z),
            method="BFGS",
        ).x
        p = 1 / (1 + np.exp(-self.X @ mode))
        hessian = (self.X * (p * (1 - p))[:, None]).T @ self.X + np.eye(
            self.dim
        ) / self.prior_sd**2
        proposal = stats.multivariate_t(mode, 1.2 * np.linalg.inv(hessian), df=df)
        z = proposal.rvs(n, random_state=rng)
        log_w = self.log_pi1(z) - proposal.logpdf(z)
        w = np.exp(log_w - log_w.max())
        return float(np.log(w.mean()) + log_w.max()), float(
            w.std() / np.sqrt(n) / w.mean()
        )

    def _grad_log_pi1(self, z: np.ndarray) -> np.ndarray:
        margin = self.y * (self.X @ z)
        return -z / self.prior_sd**2 + self.X.T @ (self.y / (1 + np.exp(margin)))


def data_path(name: str, data_dir: str | Path | None = None) -> Path:
    """The file of dataset ``name`` under ``data_dir`` (default ``$STANFLOW_DATA_DIR``).

    Raises
    ------
    ValueError
        Unknown ``name``.
    FileNotFoundError
        No data directory or no file; the message names the file and its origin.
    """
    if name not in DATASETS:
        raise ValueError(f"dataset must be one of {sorted(DATASETS)}, got {name!r}")
    relative, origin = DATASETS[name]
    if data_dir is None:
        data_dir = os.environ.get("STANFLOW_DATA_DIR")
        if not data_dir:
            raise FileNotFoundError(
                f"STANFLOW_DATA_DIR is not set; the {name} data is read from "
                f"$STANFLOW_DATA_DIR/{relative} (origin: {origin})"
            )
    path = Path(data_dir) / relative
    if not path.is_file():
        raise FileNotFoundError(f"missing data file {path} (origin: {origin})")
    return path


def load_uci(
    name: str, data_dir: str | Path | None = None, kernel_dtype: str = "float64"
) -> LogisticTarget:
    """Pima or Sonar as a :class:`LogisticTarget` (``kernel_dtype``: see there).

    Predictors are centred and scaled to standard deviation 0.5 (population
    sd), an intercept column of ones is prepended, labels map to +-1 (Pima:
    1 -> +1, 0 -> -1; Sonar: M -> +1, R -> -1).
    """
    path = data_path(name, data_dir)
    raw = np.loadtxt(path, delimiter=",", dtype=str)
    predictors = raw[:, :-1].astype(float)
    labels = raw[:, -1]
    positive = "M" if name == "sonar" else "1"
    y = np.where(labels == positive, 1.0, -1.0)
    scaled = (predictors - predictors.mean(axis=0)) / predictors.std(axis=0)
    X = np.column_stack([np.ones(len(y)), PREDICTOR_SD * scaled])
    return LogisticTarget(X, y, kernel_dtype=kernel_dtype)
