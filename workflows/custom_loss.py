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
Each method is a cell of the workflow runner (:mod:`stanflow.experiment`) with
its own random stream for its data.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from stanflow import gibbs
from stanflow.experiment import Cell, CellRun, Experiment, Records, own_fields
from stanflow.gibbs import grid
from stanflow.lcvi import normal_mean, run_lcvi
from stanflow.losses import loss_function
from stanflow.qpaths.annealing import smc
from stanflow.qpaths.kernels import rwm_moves
from stanflow.qpaths.stan_density import stan_log_density
from stanflow.wbb import GlmProblem
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


STAN_FILES = {"loss": "log_cosh.stanfunctions", "target": "banana.stan"}


def write_stan_files(folder: Path) -> None:
    """Write the example's Stan files into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for key, text in (("loss", LOG_COSH), ("target", BANANA)):
        write_text(folder / STAN_FILES[key], text)


def gibbs_part(loss: Path, sizes: dict[str, int], rng: np.random.Generator) -> dict:
    """Learning rates of the log-cosh Gibbs posterior, and its posterior mean."""
    n = sizes["n"]
    y = 1.0 + rng.standard_t(3, size=n)
    params = [1.0]
    unbounded = gibbs.location_program(y, loss=loss, loss_params=params)
    plugin = gibbs.calibrate_plugin(unbounded).calibration
    matching = gibbs.calibrate_holmes_walker(unbounded).calibration
    bounds = (float(y.min()) - 1, float(y.max()) + 1)
    program = gibbs.location_program(y, loss=loss, loss_params=params, bounds=bounds)
    gpc = gibbs.calibrate_gpc(
        program, backend=gibbs.GridBackend(sizes["grid"]), B=sizes["B"], seed=SEED,
    ).calibration
    omega = float(plugin["omega"])
    posterior = gibbs.posterior(
        program, omega=omega, chains=4, iter_sampling=sizes["draws"], seed=SEED,
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


def lcvi_part(loss: Path, sizes: dict[str, int], rng: np.random.Generator) -> dict:
    """Plain VI and LCVI decisions for a normal mean under the log-cosh loss."""
    y = rng.normal(0.5, 1.0, size=sizes["n"])
    loop = run_lcvi(
        normal_mean(y, 1.0), loss, s=1.0, seed=3, decision_every=500,
        advi_args={"iter": sizes["iter"], "eta": 0.1},
    )
    first, last = loop.steps[0], loop.steps[-1]
    return {
        "decisions_vi": first.decisions.tolist(),
        "decisions_lcvi": last.decisions.tolist(),
        "steps": len(loop.steps),
    }


def wbb_part(loss: Path, sizes: dict[str, int], rng: np.random.Generator) -> dict:
    """WBB of a log-cosh regression with a ridge penalty, in process."""
    n = sizes["n"]
    X = rng.normal(size=(n, 3))
    y = X @ np.array([1.0, -0.5, 0.0]) + rng.standard_t(3, size=n)
    problem = GlmProblem(X, y, 1.0, loss=loss, loss_params=[1.0], penalty="ridge")
    draws = wbb_glm_inprocess(problem, sizes["draws"], seed=SEED)
    beta = draws.posterior["beta"].values.reshape(-1, 3)
    return {
        "n": n,
        "beta_mean": beta.mean(axis=0).tolist(),
        "beta_sd": beta.std(axis=0, ddof=1).tolist(),
        "converged": int(draws.sample_stats["converged"].values.sum()),
        "draws": int(beta.shape[0]),
    }


def qpath_part(target_file: Path, sizes: dict[str, int]) -> dict:
    """SMC from N(0, 2^2 I) to the banana; its log Z against log 3."""
    target = stan_log_density(target_file, {"b": 0.5, "s1": 1.0, "s2": 0.5})

    def log_pi0(z: np.ndarray) -> np.ndarray:
        return -0.5 * np.sum((z / 2.0) ** 2, axis=1) - 2 * math.log(2.0 * math.sqrt(2 * math.pi))

    def sample_pi0(rng: np.random.Generator, n: int) -> np.ndarray:
        return 2.0 * rng.standard_normal((n, 2))

    group = smc(log_pi0, sample_pi0, target, q=1.0, n_particles=sizes["particles"],
                n_moves=3, moves=rwm_moves, n_runs=4, seed=SEED).smc
    return {
        "log_z": float(group.attrs["log_z"]),
        "log_z_se": float(group.attrs["log_z_se"]),
        "log_z_exact": math.log(3.0),
        "error": float(group.attrs["log_z"]) - math.log(3.0),
    }


SETTINGS = {
    "quick": {
        "gibbs": {"n": 60, "grid": 401, "B": 40, "draws": 500},
        "lcvi": {"n": 4, "iter": 2000},
        "wbb": {"n": 80, "draws": 100},
        "qpaths": {"particles": 1000},
    },
    "full": {
        "gibbs": {"n": 200, "grid": 801, "B": 200, "draws": 2000},
        "lcvi": {"n": 8, "iter": 6000},
        "wbb": {"n": 300, "draws": 1000},
        "qpaths": {"particles": 5000},
    },
}
"""Per method: data size and the method's effort (grid points, resamples, draws, iterations)."""
DATA_PARTS = {"gibbs": gibbs_part, "lcvi": lcvi_part, "wbb": wbb_part}
"""The methods that use the loss file, each on data of its own."""
PARTS = [*DATA_PARTS, "qpaths"]


def cells(settings: dict[str, Any]) -> list[Cell]:
    """One cell per method."""
    return [Cell(method, settings[method]) for method in PARTS]


def compute(run: CellRun) -> dict:
    """One method with the example's Stan file (the loss's on data from its own random stream)."""
    stan = run.out / "stan"
    if run.cell.name == "qpaths":
        return qpath_part(stan / STAN_FILES["target"], dict(run.params))
    part = DATA_PARTS[run.cell.name]
    return part(stan / STAN_FILES["loss"], dict(run.params), run.rng(PARTS.index(run.cell.name)))


def summarise(settings: dict[str, Any], records: Records) -> dict[str, Any]:
    """Each method's numbers, and where the Stan files are."""
    return {
        "stan_files": {key: f"stan/{name}" for key, name in STAN_FILES.items()},
        **{method: own_fields(records[method]) for method in PARTS},
    }


EXPERIMENT = Experiment(settings=SETTINGS, cells=cells, compute=compute, summarise=summarise,
                        seed=SEED)


def run(out: Path, quick: bool) -> dict:
    """Write the Stan files, use them in the four methods, return the summary."""
    write_stan_files(out / "stan")
    return EXPERIMENT.run(out, quick)


if __name__ == "__main__":
    sys.exit(main(run, DESCRIPTION))
