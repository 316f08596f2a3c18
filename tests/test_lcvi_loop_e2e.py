"""The LCVI loop on eight schools (the model of test_lcvi_stan_e2e, cached): it records
plain VI and LCVI iterations, and LCVI does not raise the empirical risk of plain VI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from stanflow.lcvi.loop import empirical_risk, lcvi, settled
from stanflow.lcvi.losses import get_loss
from stanflow.models import STAN_DIR

SCHOOLS = json.loads((STAN_DIR.parent / "data" / "eight_schools.json").read_text())


def test_empirical_risk_and_settling():
    loss = get_loss("tilted", q=0.2)
    assert empirical_risk(np.array([1.0, -1.0]), np.zeros(2), loss) == pytest.approx(
        0.5
    )
    with pytest.raises(ValueError, match=r"h \(decisions\) must have shape \(2,\)"):
        empirical_risk(np.zeros(2), np.zeros(3), loss)
    assert settled(np.zeros(3), np.full(3, 0.01), 0.05)
    assert not settled(np.zeros(3), np.array([0.0, 0.1, 0.0]), 0.05)


@pytest.mark.e2e
def test_loop_records_vi_and_lcvi_iterations(cmdstan):
    idata = lcvi(SCHOOLS, "tilted", q=0.2, max_iter=4, seed=3)
    dec = idata.decisions
    assert dec.h.shape[1] == 8 and 2 <= dec.sizes["iteration"] <= 5
    assert np.all(np.isfinite(dec.elbo)) and np.all(np.isfinite(dec.utility))
    assert dec.attrs["scale"] > 0 and dec.attrs["loss_params"] == [0.2]
    assert float(dec.risk[-1]) <= float(dec.risk[0]) * 1.05
    assert idata.posterior.theta.shape[-1] == 8


def test_loop_rejects_bad_input_before_running():
    with pytest.raises(ValueError, match="q must be in"):
        lcvi(SCHOOLS, "tilted", q=1.5)
    with pytest.raises(ValueError, match="n_outcomes and max_iter"):
        lcvi(SCHOOLS, "squared", n_outcomes=0)
