"""The shared Adam kernel against Adam's closed-form first steps."""

import numpy as np
import pytest

from stanflow.adam import adam_update


def test_first_step_moves_every_coordinate_by_lr_against_the_gradient_sign():
    # After one step the bias-corrected moments are g and g^2: the step is lr g / (|g| + eps).
    g = np.array([3.0, -0.5, 1e-3])
    param, m, v = np.zeros(3), np.zeros(3), np.zeros(3)
    adam_update(param, g, m, v, 1, 0.1, eps=1e-8)
    np.testing.assert_allclose(param, -0.1 * g / (np.abs(g) + 1e-8), rtol=1e-12)
    np.testing.assert_allclose(m, 0.1 * g)
    np.testing.assert_allclose(v, 0.001 * g**2)
    ascended = np.zeros(3)
    adam_update(ascended, g, np.zeros(3), np.zeros(3), 1, 0.1, eps=1e-8, ascent=True)
    np.testing.assert_allclose(ascended, -param)


def test_constant_gradient_keeps_unit_normalised_steps_and_dtype():
    # With a constant gradient the bias-corrected moments stay g and g^2 at every step.
    g = np.array([2.0, -4.0], dtype=np.float32)
    param, m, v = np.ones(2, np.float32), np.zeros(2, np.float32), np.zeros(2, np.float32)
    for t in range(1, 6):
        adam_update(param, g, m, v, t, 0.01, eps=0.0)
    assert param.dtype == np.float32
    np.testing.assert_allclose(param, 1 - 5 * 0.01 * np.sign(g), rtol=1e-5)


def test_minimises_a_quadratic():
    target = np.array([1.0, -2.0])
    x, m, v = np.zeros(2), np.zeros(2), np.zeros(2)
    for t in range(1, 3001):
        adam_update(x, 2 * (x - target), m, v, t, 0.01)
    assert x == pytest.approx(target, abs=1e-3)
