"""WBB independent draws per second against the Bayesian bridge's effective samples per second.

The diabetes problem of ``wbb-diabetes``: 1000 WBB lasso draws of each variant
(independent by construction, so ESS = draws) timed end to end (weights,
solves, InferenceData), against the bridge of ``stan/wbb/bridge.stan`` by NUTS
(4 chains x 1000 draws after 1000 warm-up, model already compiled), whose
rate is the smallest bulk ESS of the ten coefficients per second of sampling
wall time (warm-up included). Both in the same run.

    python bench/wbb_bridge.py
"""

from __future__ import annotations

import json
import sys
import time

from _common import REPO, RESULTS_DIR

from stanflow import arviz_compat
from stanflow.wbb import wbb_lasso

sys.path.insert(0, str(REPO / "workflows"))
from wbb_diabetes import SETTINGS, bridge, cv_alpha, diabetes

B = 1000


def main() -> None:
    X, y, _ = diabetes()
    lam = len(y) * cv_alpha(X, y)[0]
    rates = {}
    for prior in ("fixed", "random"):
        start = time.perf_counter()
        wbb_lasso(X, y, lam, B, seed=5, prior=prior, fit_intercept=True, on_failure="raise")
        rates[f"wbb_{prior}_draws_per_second"] = B / (time.perf_counter() - start)
    posterior, seconds = bridge(X, y, **SETTINGS["full"]["bridge"])
    ess = arviz_compat.ess(posterior, var_names=["beta"])["beta"].values
    rates["bridge_min_ess_per_second"] = float(ess.min() / seconds)
    rates["bridge_median_ess_per_second"] = float(sorted(ess)[len(ess) // 2] / seconds)
    result = {
        "draws": B,
        "bridge_wall_seconds": seconds,
        "bridge_min_ess_bulk": float(ess.min()),
        **rates,
        "ratio_wbb_random_to_bridge_min_ess": rates["wbb_random_draws_per_second"]
        / rates["bridge_min_ess_per_second"],
    }
    print(json.dumps(result, indent=1))
    (RESULTS_DIR / "wbb_bridge.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
