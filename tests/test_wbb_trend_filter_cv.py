"""K-fold cross-validation of the trend-filtering penalty."""

from __future__ import annotations

import numpy as np
import pytest

from stanflow.wbb import trend_filter
from stanflow.wbb.trend_filter_cv import cv_trend_filter


def _data(seed: int = 0, n: int = 120) -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(0, 1, n)
    f = np.where(x < 0.4, 3 * x, np.where(x < 0.7, 1.2 - 2 * (x - 0.4), 0.6 + 4 * (x - 0.7)))
    return f, f + np.random.default_rng(seed).normal(scale=0.3, size=n)


def test_cv_choice_is_close_to_the_oracle_and_far_better_than_the_extremes():
    # CV is noisy on one data set (its error curve is flat near the minimum), so
    # judge it over four: each choice far better than the grid's ends, and on
    # the geometric mean within a factor 2.5 of the oracle's error to f.
    lams = np.geomspace(0.01, 100.0, 13)
    ratios = []
    for seed in range(4):
        f, y = _data(seed)
        cv = cv_trend_filter(y, lams, 1, folds=5)
        truth_error = np.array([np.mean((trend_filter(y, lam, 1).theta[0] - f) ** 2) for lam in lams])
        chosen = truth_error[np.flatnonzero(lams == cv.lam)[0]]
        assert chosen < 0.5 * min(truth_error[0], truth_error[-1])
        assert cv.cv_error.shape == (13,) and cv.n_unconverged.sum() == 0
        assert 0 <= cv.max_relative_gap <= 1e-5  # every fold solve met the default tolerance
        # Held-out error includes the noise (variance 0.09), so it exceeds the error to f.
        assert np.all(cv.cv_error > 0.09 * 0.6)
        ratios.append(chosen / truth_error.min())
    assert np.exp(np.mean(np.log(ratios))) < 2.5


def test_held_out_weight_barely_matters_once_small():
    _, y = _data(seed=1)
    lams = np.geomspace(0.1, 10.0, 5)
    coarse = cv_trend_filter(y, lams, 1, eps=1e-2)
    fine = cv_trend_filter(y, lams, 1, eps=1e-4)
    assert np.allclose(coarse.cv_error, fine.cv_error, rtol=0.03)
    assert coarse.lam == fine.lam


def test_folds_hold_out_every_kth_point():
    # k = 0 with a huge penalty fits a constant, the mean of the training points
    # (held-out points have weight eps), so the CV error of pure noise is about
    # its variance about the mean.
    y = np.random.default_rng(3).normal(size=200)
    cv = cv_trend_filter(y, [1e6], 0, folds=4)
    assert cv.cv_error[0] == pytest.approx(np.mean((y - y.mean()) ** 2), rel=0.05)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lams": [0.0]}, "lams must be a non-empty"),
        ({"lams": []}, "lams must be a non-empty"),
        ({"folds": 1}, "folds must be >= 2"),
        ({"folds": 100}, "folds must be >= 2 and at most"),
        ({"eps": 0.0}, "eps must be finite and > 0"),
        ({"eps": 1.0}, "eps must be < 1"),
    ],
)
def test_inputs_are_checked(kwargs, message):
    _, y = _data()
    args = {"lams": [1.0]} | kwargs
    lams = args.pop("lams")
    with pytest.raises(ValueError, match=message):
        cv_trend_filter(y, lams, 1, **args)
