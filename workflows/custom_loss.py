"""Your own loss and target, as Stan files only, through all four methods.

The worked example of ``docs/your-own-loss.md``. It writes new Stan files into
``--out/stan/`` and uses them with no Python written for them:

- ``log_cosh.stanfunctions``, the log-cosh loss ``log(cosh((y - f) / s))``
  with scale ``s = loss_params[1]`` (squared near 0, absolute far out), in the
  signature of every method's loss slot, ``real loss(real y, real f, vector
  loss_params)``: the same file goes through Gibbs, LCVI and WBB;
- ``banana.stan``, a new q-path target: a banana-shaped density (a Gaussian in
  ``(z1, z2 - b z1^2)``) times 3, so that ``Z = 3`` exactly.

Then:

1. **Gibbs**: the log-cosh Gibbs posterior of a location on heavy-tailed data
   (Student-t, 3 degrees of freedom), its learning rate by the plug-in
   (``gibbs.calibrate_plugin``), Holmes-Walker (``gibbs.calibrate_holmes_walker``)
   and GPC (``gibbs.calibrate_gpc``, grid backend), and the posterior at the
   plug-in rate by NUTS against the exact grid.
2. **LCVI**: decisions for the normal-mean problem under the log-cosh loss,
   plain VI and LCVI (numerical Bayes decisions in process).
3. **WBB**: a weighted log-cosh regression with a ridge penalty, draws by the
   in-process L-BFGS.
4. **q-paths**: SMC from a Gaussian base to the banana, ``log Z`` against
   ``log 3``.

``summary.json`` holds each method's numbers; ``--quick`` shrinks the sizes.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from stanflow import gibbs
from stanflow.gibbs import grid
from stanflow.lcvi import normal_mean, run_lcvi
from stanflow.losses import loss_function
from stanflow.qpaths.annealing import smc
from stanflow.qpaths.kernels import rwm_moves
from stanflow.qpaths.stan_density import stan_log_density
from stanflow.wbb.inprocess import wbb_glm_inprocess
from stanflow.workflows import main, write_text

DESCRIPTION = (
    "Your own loss and target as Stan files only: a log-cosh loss through Gibbs "
    "calibration, LCVI and WBB, and a banana target through q-path SMC"
)
SEED = 20261201

LOG_COSH = """\
// Log-cosh loss with scale s = loss_params[1] > 0: log(cosh((y - f) / s)),
// about ((y - f) / s)^2 / 2 near y = f and |y - f| / s - log 2 far out.
// params: s in (0, inf)
real loss(real y, real f, vector loss_params) {
  real u = abs(y - f) / loss_params[1];
  return u + log1p_exp(-2 * u) - log2();
}
"""

BANANA = """\
// A banana: (z1, z2 - b z1^2) ~ N(0, diag(s1^2, s2^2)), times 3, so Z = 3.
data {
  real b;
  real<lower=0> s1;
  real<lower=0> s2;
}
parameters {
  vector[2] z;
}
model {
  target += normal_lpdf(z[1] | 0, s1);
  target += normal_lpdf(z[2] - b * square(z[1]) | 0, s2);
  target += log(3);
}
"""


def write_stan_files(folder: Path) -> dict[str, Path]:
    """Write the example's Stan files into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "loss": folder / "log_cosh.stanfunctions",
        "target": folder / "banana.stan",
    }
    for key, text in (("loss", LOG_COSH), ("target", BANANA)):
        write_text(files[key], text)
    return files


def gibbs_part(loss: Path, quick: bool, rng: np.random.Generator) -> dict:
    """Learning rates of the log-cosh Gibbs posterior, and its posterior mean."""
    n = 60 if quick else 200
    y = 1.0 + rng.standard_t(3, size=n)
    params = [1.0]
    unbounded = gibbs.location_program(y, loss=loss, loss_params=params)
    plugin = gibbs.calibrate_plugin(unbounded).calibration
    matching = gibbs.calibrate_holmes_walker(unbounded).calibration
    bounds = (float(y.min()) - 1, float(y.max()) + 1)
    program = gibbs.location_program(y, loss=loss, loss_params=params, bounds=bounds)
    gpc = gibbs.calibrate_gpc(
        program, backend=gibbs.GridBackend(401 if quick else 801), B=40 if quick else 200,
        seed=SEED,
    ).calibration
    omega = float(plugin["omega"])
    posterior = gibbs.posterior(
        program, omega=omega, chains=4, iter_sampling=500 if quick else 2000, seed=SEED,
    )
    theta = np.linspace(*bounds, 2001)
    exact = grid.posterior(theta, grid.loss_sums(theta, y, loss_function(loss, params)), omega)
    density = grid.density(exact) * exact.weights
    mean = float(np.sum(theta * density))
    draws = posterior.posterior["theta"].values.ravel()
    return {
        "n": n,
        "estimate": float(plugin["estimate"][0]),
        "omega_plugin": omega,
        "omega_holmes_walker": float(matching["omega"]),
        "omega_gpc": float(gpc["omega"]),
        "gpc_converged": bool(gpc["converged"]),
        "posterior_mean_nuts": float(draws.mean()),
        "posterior_mean_grid": mean,
        "posterior_sd_grid": float(np.sqrt(np.sum((theta - mean) ** 2 * density))),
    }


def lcvi_part(loss: Path, quick: bool, rng: np.random.Generator) -> dict:
    """Plain VI and LCVI decisions for a normal mean under the log-cosh loss."""
    y = rng.normal(0.5, 1.0, size=4 if quick else 8)
    loop = run_lcvi(
        normal_mean(y, 1.0), loss, s=1.0, seed=3, decision_every=500,
        advi_args={"iter": 2000 if quick else 6000, "eta": 0.1},
    )
    first, last = loop.steps[0], loop.steps[-1]
    return {
        "decisions_vi": first.decisions.tolist(),
        "decisions_lcvi": last.decisions.tolist(),
        "steps": len(loop.steps),
    }


def wbb_part(loss: Path, quick: bool, rng: np.random.Generator) -> dict:
    """WBB of a log-cosh regression with a ridge penalty, in process."""
    n = 80 if quick else 300
    X = rng.normal(size=(n, 3))
    y = X @ np.array([1.0, -0.5, 0.0]) + rng.standard_t(3, size=n)
    draws = wbb_glm_inprocess(
        X, y, 1.0, 100 if quick else 1000, seed=SEED, loss=loss,
        loss_params=[1.0], penalty="ridge",
    )
    beta = draws.posterior["beta"].values.reshape(-1, 3)
    return {
        "n": n,
        "beta_mean": beta.mean(axis=0).tolist(),
        "beta_sd": beta.std(axis=0, ddof=1).tolist(),
        "converged": int(draws.sample_stats["converged"].values.sum()),
        "draws": int(beta.shape[0]),
    }


def qpath_part(target_file: Path, quick: bool) -> dict:
    """SMC from N(0, 2^2 I) to the banana; its log Z against log 3."""
    target = stan_log_density(target_file, {"b": 0.5, "s1": 1.0, "s2": 0.5})

    def log_pi0(z: np.ndarray) -> np.ndarray:
        return -0.5 * np.sum((z / 2.0) ** 2, axis=1) - 2 * math.log(2.0 * math.sqrt(2 * math.pi))

    def sample_pi0(rng: np.random.Generator, n: int) -> np.ndarray:
        return 2.0 * rng.standard_normal((n, 2))

    group = smc(log_pi0, sample_pi0, target, q=1.0, n_particles=1000 if quick else 5000,
                n_moves=3, moves=rwm_moves, n_runs=4, seed=SEED).smc
    return {
        "log_z": float(group.attrs["log_z"]),
        "log_z_se": float(group.attrs["log_z_se"]),
        "log_z_exact": math.log(3.0),
        "error": float(group.attrs["log_z"]) - math.log(3.0),
    }


def run(out: Path, quick: bool) -> dict:
    """Write the Stan files, use them in the four methods, return the summary."""
    files = write_stan_files(out / "stan")
    rng = np.random.default_rng(SEED)
    return {
        "stan_files": {k: str(v.relative_to(out)) for k, v in files.items()},
        "gibbs": gibbs_part(files["loss"], quick, rng),
        "lcvi": lcvi_part(files["loss"], quick, rng),
        "wbb": wbb_part(files["loss"], quick, rng),
        "qpaths": qpath_part(files["target"], quick),
    }


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
