"""Numbers of the Gibbs calibrations on the shipped templates, as the code gave them
before the templates became loss programs (commit 31eb842, 2026-12-02).

tests/test_gibbs_template_numbers.py checks that the templates, now loss programs
served by the same code as any user's program, give these numbers. This script ran
once on that commit (its API: data and loss arguments instead of a program); it is
kept as the record of how the reference was made, not to be run again. The data
are in gibbs_template_data.py, which the test shares.

    python tests/reference/make_gibbs_template_reference.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from gibbs_template_data import CAUCHY, linear_data, location_data

from stanflow import arviz_compat
from stanflow.gibbs import (
    calibrate_gpc,
    calibrate_holmes_walker,
    calibrate_path,
    calibrate_plugin,
    gibbs_path,
    posterior,
)
from stanflow.gibbs.gpc import risk_minimiser
from stanflow.losses import loss_function

OUT = Path(__file__).with_name("gibbs_templates.json")
def calibration(result) -> dict:
    group = arviz_compat.group(result, "calibration")
    return {name: np.asarray(group[name].values).tolist() for name in group.data_vars}


def main() -> None:
    cauchy = OUT.with_name("cauchy.stanfunctions")
    cauchy.write_text(CAUCHY)
    y = location_data()
    yl, X = linear_data()
    record: dict = {"commit": "31eb842", "plugin": {}, "holmes_walker": {}}
    location_losses = {
        "absolute": None, "check": {"tau": 0.3}, "huber": {"delta": 0.7}, "squared": None,
    }
    for name, params in location_losses.items():
        record["plugin"][f"location/{name}"] = calibration(
            calibrate_plugin(y, loss=name, loss_params=params))
        record["holmes_walker"][f"location/{name}"] = calibration(
            calibrate_holmes_walker(y, loss=name, loss_params=params))
    record["plugin"]["location/cauchy-file"] = calibration(
        calibrate_plugin(y, loss=cauchy, loss_params=[0.8]))
    for tau in (0.5, 0.9):
        params = {"tau": tau}
        beta = risk_minimiser(yl, X, loss_function("check", params))
        record["plugin"][f"linear/check-{tau}"] = calibration(
            calibrate_plugin(yl, loss="check", loss_params=params, X=X, estimate=beta))
        record["holmes_walker"][f"linear/check-{tau}"] = calibration(
            calibrate_holmes_walker(yl, loss="check", loss_params=params, X=X, estimate=beta))
    record["gpc_grid"] = calibration(
        calibrate_gpc(y[:60], bounds=(0, 8), B=100, seed=3, grid_points=401))
    record["gpc_stan_reweight"] = calibration(calibrate_gpc(
        y[:60], bounds=(0, 8), backend="stan", B=40, seed=4, max_steps=4,
        draws=500, warmup=300, proposal_draws=4000))
    record["gpc_stan_resample"] = calibration(calibrate_gpc(
        y[:60], bounds=(0, 8), backend="stan", design="resample", B=30, seed=5,
        max_steps=3, draws=500, warmup=300))
    path = gibbs_path(y, omega_max=2.0, bounds=(0, 8), n_particles=1000, seed=6)
    group = arviz_compat.group(path, "path")
    record["path_location"] = {
        "omega": group["omega"].values.tolist(),
        "log_z": group["log_z"].values.tolist(),
        "mean_theta": group["theta"].values.mean(axis=(1, 2)).tolist(),
    }
    path = gibbs_path(
        yl, X=X, loss="check", loss_params={"tau": 0.9}, prior="normal",
        prior_params={"mean": 0.0, "sd": 10.0}, omega_max=1.0, n_particles=1000, seed=7,
    )
    group = arviz_compat.group(path, "path")
    record["path_linear"] = {
        "omega": group["omega"].values.tolist(),
        "log_z": group["log_z"].values.tolist(),
        "mean_beta": group["theta"].values.mean(axis=1).tolist(),
    }
    cal = calibrate_path(y[:80], bounds=(0, 8), B=100, n_particles=2000, seed=8)
    group = arviz_compat.group(cal, "calibration")
    record["calibrate_path"] = {
        "rule": group["rule"].values.tolist(),
        "rule_omega": group["rule_omega"].values.tolist(),
        "rule_mean": group["rule_mean"].values.tolist(),
        "omega_path": group["omega_path"].values.tolist(),
    }
    fit = posterior(y[:50], omega=0.7, bounds=(0, 8), chains=2, iter_sampling=500, seed=9)
    record["posterior_location"] = {
        "theta": fit.posterior["theta"].values.tolist(),
    }
    fit = posterior(
        yl, omega=1.0, X=X, loss="check", loss_params={"tau": 0.5}, prior="normal",
        prior_params={"mean": 0.0, "sd": 10.0}, chains=1, iter_sampling=300, seed=10,
    )
    record["posterior_linear"] = {"beta_mean": fit.posterior["beta"].values.mean(axis=(0, 1)).tolist()}
    cauchy.unlink()
    OUT.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
