"""Write the long reference run of non-centred eight schools used by the tests.

Run from the repository root (takes about a minute)::

    python tests/reference/make_eight_schools_reference.py

It samples 8 chains x 25,000 draws (after 2,000 warm-up iterations, adapt_delta
0.95) and stores, for mu, tau and theta[1..8], the posterior mean, sd and the
Monte Carlo standard error of the mean, so that a short run can be checked
against it with a tolerance set from both MCSEs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xarray as xr

from stanflow import arviz_compat
from stanflow.models import compile_model, program_path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).with_name("eight_schools.json")
CHAINS, DRAWS, WARMUP, SEED = 8, 25_000, 2_000, 20261129


def main() -> None:
    model = compile_model(program_path("models/eight_schools_noncentered"))
    data = json.loads((ROOT / "data" / "eight_schools.json").read_text())
    fit = model.sample(
        data=data, chains=CHAINS, iter_warmup=WARMUP, iter_sampling=DRAWS,
        adapt_delta=0.95, seed=SEED, show_progress=False,
    )
    posterior = arviz_compat.from_cmdstanpy(fit)["posterior"][["mu", "tau", "theta"]]
    columns = {
        "mean": posterior.mean(("chain", "draw")),
        "sd": posterior.std(("chain", "draw"), ddof=1),
        "mcse_mean": arviz_compat.mcse(posterior),
        "ess_bulk": arviz_compat.ess(posterior),
        "r_hat": arviz_compat.rhat(posterior),
    }
    rows = {key: by_element(ds) for key, ds in columns.items()}
    reference = {
        "settings": {"chains": CHAINS, "draws": DRAWS, "warmup": WARMUP,
                     "adapt_delta": 0.95, "seed": SEED},
        "divergences": int(fit.divergences.sum()),
        "parameters": {
            name: {key: rows[key][name] for key in columns} for name in rows["mean"]
        },
    }
    OUT.write_text(json.dumps(reference, indent=2) + "\n")
    print(f"wrote {OUT}")


def by_element(ds: xr.Dataset) -> dict[str, float]:
    """``{"mu": ..., "theta[0]": ...}``: each element of each variable, 0-based labels."""
    out = {}
    for name, values in ds.data_vars.items():
        for index, value in np.ndenumerate(values.values):
            label = f"{name}[{','.join(map(str, index))}]" if index else str(name)
            out[label] = float(value)
    return out


if __name__ == "__main__":
    main()
