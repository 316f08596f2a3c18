"""The authors' minibatch LCVI for matrix factorisation (workflows/_lcvi_mf_recipe.py).

- The NumPy twin's log density and gradient equal the Stan file's
  (``stan/lcvi/matrix_factorisation.stan``'s evaluation form through bridgestan) to 1e-9.
- The optimiser's gradients are the twin's: with one draw and the whole
  matrix as the batch they equal its gradient at the drawn factors; over the
  batches of an epoch (equal sizes, fixed draws) the scaled minibatch
  gradients average to the full-batch gradient exactly.
- Plain VI by the recipe recovers a low-rank matrix from half its cells; a
  run stopped and rerun from its checkpoint gives the uninterrupted run's
  numbers exactly; bad input is named before any work.
"""

from __future__ import annotations

import numpy as np
import pytest
from _lcvi_mf_recipe import (
    BatchCells,
    MinibatchFit,
    Recipe,
    _cells,
    _loss_gradient,
    elbo_gradient,
    fit,
    log_density_gradient,
    utility_gradient,
)

from stanflow.lcvi import Utility
from stanflow.lcvi.joint_optimiser import joint_model
from stanflow.lcvi.mf import matrix_factorisation, split_cells
from stanflow.losses import bound_loss

LOSS = bound_loss("check", tau=0.8)
I, J, K = 12, 7, 2


def _problem(seed: int = 3, noise_sd: float = 1.0):
    rng = np.random.default_rng(seed)
    return matrix_factorisation(rng.normal(size=(I, J)), split_cells((I, J), rng), K=K,
                                noise_sd=noise_sd)


@pytest.mark.e2e
@pytest.mark.parametrize("kind, scale, coefficient", [("exp", 0.7, 0.7), ("linear", 4.0, 0.25)])
def test_twin_equals_the_stan_file(cmdstan, kind, scale, coefficient):
    problem = _problem()
    joint = joint_model(problem.bind(LOSS), Utility(kind=kind, scale=scale, n_outcomes=1), 1.0)
    rng = np.random.default_rng(8)
    U, V = rng.normal(size=(I, K)), rng.normal(size=(J, K))
    h, eps_y = rng.normal(size=problem.n), rng.standard_normal(problem.n)
    point = np.zeros(joint.parts["lcvi"].stop)
    point[joint.parts["theta"]] = np.concatenate([U.ravel(order="F"), V.ravel(order="F")])
    point[joint.parts["h"]], point[joint.parts["z"]] = h, eps_y
    point[joint.parts["lcvi"]] = joint.settings
    lp_stan, grad = joint.library.log_density_gradient(point, propto=False)
    lp, g_U, g_V, g_h = log_density_gradient(problem, LOSS, coefficient, U, V, h, eps_y)
    assert lp == pytest.approx(lp_stan, rel=1e-12, abs=1e-9)
    assert np.allclose(g_U.ravel(order="F"), grad[: I * K], rtol=1e-9, atol=1e-9)
    assert np.allclose(g_V.ravel(order="F"), grad[I * K : (I + J) * K], rtol=1e-9, atol=1e-9)
    assert np.allclose(g_h, grad[joint.parts["h"]], rtol=1e-9, atol=1e-9)


def _factors(rng):
    return tuple(rng.normal(size=shape) for shape in [(I, K), (I, K), (J, K), (J, K)])


def test_one_draw_of_the_whole_matrix_gives_the_twins_gradient():
    problem = _problem()
    cells = _cells(problem, np.dtype(float))
    rng = np.random.default_rng(1)
    factors = _factors(rng)
    mu_U, rho_U, mu_V, rho_V = factors
    eps = (rng.standard_normal((1, I, K)), rng.standard_normal((1, J, K)))
    U = mu_U + np.logaddexp(0, rho_U) * eps[0][0]
    V = mu_V + np.logaddexp(0, rho_V) * eps[1][0]
    everything = BatchCells(cells.mask, cells.y, 1.0)
    _, g_U, g_V, _ = log_density_gradient(problem, LOSS, 0.0, U, V, np.zeros(problem.n),
                                          np.zeros(problem.n))
    grads = elbo_gradient(everything, factors, eps, 1.0, 100.0)
    assert np.allclose(grads[0], g_U) and np.allclose(grads[2], g_V)
    # the utility term: the twin's gradient with the coefficient minus without it
    H = rng.normal(size=(I, J))
    eps_y = rng.standard_normal((1, cells.mask.sum()))  # the training cells, row-major
    dense = np.zeros((I, J))
    dense[cells.mask] = eps_y[0]
    h, e = H[cells.rows, cells.cols], dense[cells.rows, cells.cols]
    with_u = log_density_gradient(problem, LOSS, 0.6, U, V, h, e)
    without = log_density_gradient(problem, LOSS, 0.0, U, V, h, e)
    utility, g_H = utility_gradient(everything, factors, eps, eps_y, H, _loss_gradient(LOSS),
                                    0.6, 1.0)
    assert np.allclose(utility[0], with_u[1] - without[1])
    assert np.allclose(utility[2], with_u[2] - without[2])
    assert np.allclose(g_H[cells.rows, cells.cols], with_u[3])
    assert np.all(g_H[~cells.mask] == 0)


def test_the_scale_gradients_are_finite_differences_of_the_elbo():
    problem = _problem()
    cells = _cells(problem, np.dtype(float))
    rng = np.random.default_rng(6)
    factors = _factors(rng)
    eps = (rng.standard_normal((1, I, K)), rng.standard_normal((1, J, K)))

    def elbo(rho_U, rho_V):  # one draw: log density at it plus the entropies (constants left out)
        U = factors[0] + np.logaddexp(0, rho_U) * eps[0][0]
        V = factors[2] + np.logaddexp(0, rho_V) * eps[1][0]
        lp = log_density_gradient(problem, LOSS, 0.0, U, V, np.zeros(problem.n),
                                  np.zeros(problem.n))[0]
        return lp + np.sum(np.log(np.logaddexp(0, rho_U))) + np.sum(np.log(np.logaddexp(0, rho_V)))

    grads = elbo_gradient(BatchCells(cells.mask, cells.y, 1.0), factors, eps, 1.0, 100.0)
    step = 1e-6
    for which, index in [(1, (3, 1)), (1, (0, 0)), (3, (2, 1)), (3, (6, 0))]:
        plus, minus = [list(factors[1::2]) for _ in range(2)]
        plus[which // 2] = plus[which // 2].copy()
        minus[which // 2] = minus[which // 2].copy()
        plus[which // 2][index] += step
        minus[which // 2][index] -= step
        finite = (elbo(*plus) - elbo(*minus)) / (2 * step)
        assert grads[which][index] == pytest.approx(finite, rel=1e-5, abs=1e-6)


def test_scaled_minibatch_gradients_average_to_the_full_batch():
    problem = _problem()
    cells = _cells(problem, np.dtype(float))
    rng = np.random.default_rng(2)
    factors = _factors(rng)
    T = 3
    eps = (rng.standard_normal((T, I, K)), rng.standard_normal((T, J, K)))
    eps_y, H = rng.standard_normal((T, I, J)), rng.normal(size=(I, J))  # used on the mask
    dloss = _loss_gradient(LOSS)

    def gradients(rows, scale):
        batch = BatchCells(cells.mask[rows], cells.y[rows], scale)
        part = (factors[0][rows], factors[1][rows], factors[2], factors[3])
        part_eps = (eps[0][:, rows], eps[1])
        elbo = elbo_gradient(batch, part, part_eps, 1.0, 100.0)
        utility, g_H = utility_gradient(batch, part, part_eps, eps_y[:, rows][:, batch.mask],
                                        H[rows], dloss, 0.6, 1.0)
        full = [np.zeros((I, K)), np.zeros((I, K)), None, None, np.zeros((I, J))]
        total = [a + b for a, b in zip(elbo, utility, strict=True)]
        full[0][rows], full[1][rows], full[2], full[3] = total
        full[4][rows] = g_H
        return full

    whole = gradients(np.arange(I), 1.0)
    order = np.random.default_rng(0).permutation(I)
    batches = [gradients(order[b : b + 4], I / 4) for b in range(0, I, 4)]
    for k in range(5):
        average = sum(batch[k] for batch in batches) / len(batches)
        assert np.allclose(average, whole[k]), k


def test_plain_vi_by_the_recipe_recovers_a_low_rank_matrix():
    rng = np.random.default_rng(5)
    I_, J_, K_ = 40, 30, 2
    truth = rng.normal(size=(I_, K_)) @ rng.normal(size=(J_, K_)).T
    Y = truth + 0.1 * rng.standard_normal((I_, J_))
    split = split_cells((I_, J_), rng, p_train=0.6)
    problem = matrix_factorisation(Y, split, K=K_, noise_sd=0.1)
    recipe = Recipe(iterations=4000, lr=0.02, batch_rows=10, elbo_draws=3, utility_draws=5)
    result = fit(problem, LOSS, 0.0, recipe=recipe, seed=1)
    assert isinstance(result, MinibatchFit) and result.h.shape == (problem.n,)
    draws = result.draws(200, np.random.default_rng(0))
    U = draws[:, : I_ * K_].reshape(-1, K_, I_).transpose(0, 2, 1)
    V = draws[:, I_ * K_ :].reshape(-1, K_, J_).transpose(0, 2, 1)
    mean = np.mean(U @ V.transpose(0, 2, 1), axis=0)
    test = (split.test_rows, split.test_cols)
    rmse = np.sqrt(np.mean((mean - truth)[test] ** 2))
    assert rmse < 0.3 < np.std(truth[test])  # the test cells, never seen


@pytest.mark.parametrize(
    "loss, coefficient, recipe, every, match",
    [
        (bound_loss("linex", c=1.0), 0.5, Recipe(), 1000, "linex"),
        (LOSS, -1.0, Recipe(), 1000, "coefficient"),
        (LOSS, 0.5, Recipe(batch_rows=0), 1000, "recipe.batch_rows"),
        (LOSS, 0.5, Recipe(lr=0.0), 1000, "recipe.lr"),
        (LOSS, 0.5, Recipe(), 0, "checkpoint_every"),
    ],
)
def test_bad_input_is_named(loss, coefficient, recipe, every, match):
    with pytest.raises(ValueError, match=match):
        fit(_problem(), loss, coefficient, recipe=recipe, checkpoint_every=every)


def test_a_run_stopped_and_rerun_from_its_checkpoint_is_the_uninterrupted_run(
    tmp_path, monkeypatch
):
    import _lcvi_mf_recipe as recipe_module

    problem = _problem()
    recipe = Recipe(iterations=30, batch_rows=5, elbo_draws=2, utility_draws=3)
    whole = fit(problem, LOSS, 0.5, recipe=recipe, seed=4)
    state = tmp_path / "state.npz"
    calls = []
    elbo = recipe_module.elbo_gradient

    def crashing(*args):
        calls.append(1)
        if len(calls) == 20:  # during step 20: the last state saved is step 14's
            raise KeyboardInterrupt
        return elbo(*args)

    monkeypatch.setattr(recipe_module, "elbo_gradient", crashing)
    with pytest.raises(KeyboardInterrupt):
        fit(problem, LOSS, 0.5, recipe=recipe, seed=4, checkpoint=state, checkpoint_every=7)
    calls.clear()
    resumed = fit(problem, LOSS, 0.5, recipe=recipe, seed=4, checkpoint=state, checkpoint_every=7)
    assert len(calls) == 30 - 14
    for field in ("mu_U", "sd_U", "mu_V", "sd_V", "h"):
        assert np.array_equal(getattr(resumed, field), getattr(whole, field)), field
    calls.clear()  # the finished state: nothing left to do
    again = fit(problem, LOSS, 0.5, recipe=recipe, seed=4, checkpoint=state, checkpoint_every=7)
    assert not calls and np.array_equal(again.h, whole.h)
    with pytest.raises(ValueError, match=r"state\.npz is the state of another run"):
        fit(problem, LOSS, 0.5, recipe=recipe, seed=5, checkpoint=state)
