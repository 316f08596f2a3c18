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

import arviz as az

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
    posterior = az.from_cmdstanpy(fit).posterior[["mu", "tau", "theta"]]
    summary = az.summary(posterior, kind="all", round_to="none")
    reference = {
        "settings": {"chains": CHAINS, "draws": DRAWS, "warmup": WARMUP,
                     "adapt_delta": 0.95, "seed": SEED},
        "divergences": int(fit.divergences.sum()),
        "parameters": {
            name: {"mean": row["mean"], "sd": row["sd"], "mcse_mean": row["mcse_mean"],
                   "ess_bulk": row["ess_bulk"], "r_hat": row["r_hat"]}
            for name, row in summary.iterrows()
        },
    }
    OUT.write_text(json.dumps(reference, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
