"""Thermodynamic integration with NUTS per beta (run layer) on a Gaussian target
whose log Z is known (exp(1.5) N(2, 0.7^2) from a N(0, 1) base)."""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.qpaths.stan_ti import thermodynamic_integration_stan

pytestmark = pytest.mark.e2e

LOG_Z = 1.5
DATA = {
    "d": 1,
    "n_base_params": 2,
    "base_params": [0.0, 1.0],
    "n_target_params": 3,
    "target_params": [2.0, 0.7, LOG_Z],
}


@pytest.mark.parametrize("q", [1.0, 0.9])
def test_ti_with_nuts_recovers_log_z(qpath_gaussian_model, q, tmp_path):
    schedule = np.linspace(0, 1, 41) ** 2
    idata = thermodynamic_integration_stan(
        qpath_gaussian_model, DATA, schedule, q=q, chains=2, draws=1000, warmup=300,
        seed=4, out_dir=tmp_path,
    )
    group = idata.smc
    assert group.attrs["moves"].startswith("NUTS")
    assert abs(group.attrs["log_z"] - LOG_Z) < 4 * group.attrs["log_z_se"] + 0.02
    assert group.attrs["log_z_se"] < 0.1
    assert np.all(group["ess"] > 200) and int(group["divergences"].sum()) == 0
    assert (tmp_path / "plan.json").is_file()


def test_ti_with_nuts_rejects_bad_input(qpath_gaussian_model):
    with pytest.raises(ValueError, match="odd number"):
        thermodynamic_integration_stan(qpath_gaussian_model, DATA, [0, 0.5, 0.7, 1])
    with pytest.raises(ValueError, match="missing"):
        thermodynamic_integration_stan(qpath_gaussian_model, {"d": 1}, [0, 0.5, 1])
    with pytest.raises(ValueError, match="beta"):
        thermodynamic_integration_stan(
            qpath_gaussian_model, {**DATA, "beta": 0.5}, [0, 0.5, 1])
    with pytest.raises(ValueError, match="schedule"):
        thermodynamic_integration_stan(qpath_gaussian_model, DATA, [0, 1.5, 1])
