"""Solvers III, Optax algorithms: the rules where gradtx differs from Optax 0.2.8 (Rprop's
one-step delay, SM3 on rank-0 leaves) checked against NumPy transcriptions of the published
rules, Polyak SGD with `value=`, noisy SGD's reproducibility, edge cases, and the errors raised
for invalid hyperparameters.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import (
    assert_trees_close,
    compare_to_numpy,
    compare_transformations,
    grad_sequence,
    mixed_params,
)

# -- Rprop ------------------------------------------------------------------------------------

RPROP = {"learning_rate": 0.1, "min_step_size": 1e-3, "max_step_size": 0.3}


def make_rprop_reference(
    learning_rate, eta_minus=0.5, eta_plus=1.2, min_step_size=1e-6, max_step_size=50.0, sign=1.0
):
    """iRprop- (Igel & Hüsken 2003, as torch.optim.Rprop) over float64 leaves."""

    def make():
        state: dict = {}

        def ref(grads, params):
            del params
            if not state:
                state["step"] = [np.full_like(g, learning_rate) for g in grads]
                state["prev"] = [np.zeros_like(g) for g in grads]
            out = []
            for i, g in enumerate(grads):
                agreement = g * state["prev"][i]
                step = state["step"][i]
                step = np.where(agreement > 0, np.minimum(step * eta_plus, max_step_size), step)
                step = np.where(agreement < 0, np.maximum(step * eta_minus, min_step_size), step)
                update = np.where(agreement < 0, 0.0, step * np.sign(g))
                state["step"][i], state["prev"][i] = step, update
                out.append(sign * update)
            return out

        return ref

    return make


def test_scale_by_rprop_follows_the_published_rule(use_jit):
    compare_to_numpy(gradtx.scale_by_rprop(**RPROP), make_rprop_reference(**RPROP), jit=use_jit)


def test_rprop_descends_by_the_published_rule():
    kwargs = {"learning_rate": 0.05, "eta_minus": 0.3, "eta_plus": 1.5, "max_step_size": 1.0}
    compare_to_numpy(gradtx.rprop(**kwargs), make_rprop_reference(**kwargs, sign=-1.0))


def test_rprop_state_matches_optax_and_its_update_is_not_a_step_late():
    """Optax 0.2.8 evolves the same state but emits the previous step's update (zeroed where
    the sign just flipped): google-deepmind/optax PR #1725. gradtx emits the update it stores."""
    params = mixed_params()
    ours, theirs = gradtx.scale_by_rprop(**RPROP), optax.scale_by_rprop(**RPROP)
    ours_step, theirs_step = jax.jit(ours.update), jax.jit(theirs.update)
    s, t = ours.init(params), theirs.init(params)
    previous = None
    for i, g in enumerate(grad_sequence(params, 100)):
        u, s = ours_step(g, s)
        v, t = theirs_step(g, t)
        assert_trees_close(s.step_sizes, t.step_sizes, 1e-6, 0.0, msg=f"step sizes, step {i}")
        assert_trees_close(s.prev_updates, t.prev_updates, 1e-6, 0.0, msg=f"updates, step {i}")
        assert_trees_close(u, s.prev_updates, 0.0, 0.0, msg=f"emitted update, step {i}")
        if previous is None:
            late = jax.tree.map(jnp.zeros_like, g)
            assert all(bool(jnp.all(x != 0)) for x in jax.tree.leaves(u))
        else:
            late = jax.tree.map(lambda gi, p: jnp.where(gi * p < 0, 0.0, p), g, previous)
        assert_trees_close(v, late, 1e-6, 0.0, msg=f"Optax's update, step {i}")
        previous = u


# -- SM3 --------------------------------------------------------------------------------------


def make_sm3_reference(b1=0.9, b2=1.0, eps=1e-8):
    """SM3 with the per-axis slice cover (Anil et al. 2019, Optax's form) over float64 leaves;
    a rank-0 or rank-1 leaf keeps its full accumulator."""
    c = 1.0 if b2 == 1.0 else 1.0 - b2

    def make():
        state: dict = {}

        def ref(grads, params):
            del params
            if not state:
                state["acc"] = [[np.zeros(n) for n in g.shape] or [np.zeros(())] for g in grads]
                state["nu"] = [np.zeros_like(g) for g in grads]
            out = []
            for i, g in enumerate(grads):
                accs = state["acc"][i]
                if g.ndim < 2:
                    previous = accs[0]
                else:
                    previous = np.full(g.shape, np.inf)
                    for r, acc in enumerate(accs):
                        shape = [1] * g.ndim
                        shape[r] = g.shape[r]
                        previous = np.minimum(previous, acc.reshape(shape))
                a = c * g * g + b2 * previous
                scaled = np.where(a > 0, g / np.sqrt(a + eps), 0.0)
                state["nu"][i] = (1 - b1) * scaled + b1 * state["nu"][i]
                if g.ndim < 2:
                    state["acc"][i] = [a]
                else:
                    state["acc"][i] = [
                        a.max(axis=tuple(x for x in range(g.ndim) if x != r)) for r in range(g.ndim)
                    ]
                out.append(state["nu"][i])
            return out

        return ref

    return make


def test_scale_by_sm3_handles_rank_0_leaves_where_optax_fails():
    params = {"scalar": jnp.asarray(0.5), "matrix": jnp.ones((3, 2))}
    with pytest.raises(IndexError):
        optax.scale_by_sm3().update(params, optax.scale_by_sm3().init(params))
    # the mixed tree has a rank-0 leaf and a rank-3 one
    compare_to_numpy(gradtx.scale_by_sm3(0.5, 0.9), make_sm3_reference(0.5, 0.9), jit=True)


def test_scale_by_sm3_state_is_one_vector_per_axis_and_rejects_complex():
    state = gradtx.scale_by_sm3().init({"w": jnp.ones((4, 3, 2)), "s": jnp.ones(())})
    assert [a.shape for a in state.mu["w"]] == [(4,), (3,), (2,)]
    assert [a.shape for a in state.mu["s"]] == [()]
    with pytest.raises(ValueError, match="scale_by_sm3: complex parameters are not supported"):
        gradtx.scale_by_sm3().init({"w": jnp.ones(3, jnp.complex64)})


# -- Polyak -----------------------------------------------------------------------------------


def _values(steps: int = 100, seed: int = 2) -> list[dict]:
    """Loss values, some below f_min (a negative gap), as `value=` extra arguments."""
    rng = np.random.default_rng(seed)
    return [{"value": jnp.float32(v)} for v in rng.uniform(-1.0, 4.0, steps)]


LR = lambda count: 0.5 * 0.5 * (1.0 + jnp.cos(jnp.pi * jnp.minimum(count, 100) / 120))


@pytest.mark.parametrize(
    ("ours", "reference", "jit"),
    [
        pytest.param(gradtx.polyak_sgd, optax.polyak_sgd, False, id="eager-polyak_sgd"),
        pytest.param(
            lambda: gradtx.polyak_sgd(0.05, scaling=LR, f_min=0.5, eps=0.1, variant="sps+"),
            lambda: optax.polyak_sgd(0.05, scaling=LR, f_min=0.5, eps=0.1, variant="sps+"),
            True,
            id="jit-polyak_sgd_schedule_sps_plus",
        ),
        pytest.param(
            lambda: gradtx.scale_by_polyak(f_min=-0.5, max_learning_rate=0.3, variant="sps+"),
            lambda: optax.scale_by_polyak(f_min=-0.5, max_learning_rate=0.3, variant="sps+"),
            True,
            id="jit-scale_by_polyak",
        ),
    ],
)
def test_polyak_matches_optax(ours, reference, jit):
    compare_transformations(ours(), reference(), extra_args=_values(), jit=jit)


def test_scale_by_polyak_needs_the_value_and_gives_zero_for_a_zero_gradient():
    tx = gradtx.scale_by_polyak()
    g = {"w": jnp.zeros(3)}
    with pytest.raises(ValueError, match="scale_by_polyak needs the monitored value"):
        tx.update(g, tx.init(g))
    updates, _ = tx.update(g, tx.init(g), value=jnp.float32(2.0))
    np.testing.assert_array_equal(np.asarray(updates["w"]), np.zeros(3))


def test_polyak_sgd_lands_on_the_minimum_of_a_quadratic_in_one_step():
    # f(w) = |w|^2 / 2: gap / |g|^2 = 1/2 is too short, the cap 1.0 is not hit; f_min = 0.
    tx = gradtx.polyak_sgd()
    w = jnp.array([3.0, -4.0])
    value, grad = jax.value_and_grad(lambda w: 0.5 * jnp.sum(w**2))(w)
    updates, _ = tx.update(grad, tx.init(w), w, value=value)
    np.testing.assert_allclose(np.asarray(w + updates), 0.5 * np.asarray(w), rtol=1e-6)


# -- noisy SGD, distance over gradients, set_to_zero ------------------------------------------


def _first_update(tx, params):
    g = jax.tree.map(jnp.ones_like, params)
    return tx.update(g, tx.init(params), params)[0]


def test_noisy_sgd_is_reproducible_from_its_key_or_seed():
    params = mixed_params()
    a = _first_update(gradtx.noisy_sgd(0.1, key=5), params)
    assert_trees_close(a, _first_update(gradtx.noisy_sgd(0.1, key=5), params), 0.0, 0.0)
    assert_trees_close(a, _first_update(gradtx.noisy_sgd(0.1, seed=5), params), 0.0, 0.0)
    typed = _first_update(gradtx.noisy_sgd(0.1, key=jax.random.key(5)), params)
    assert_trees_close(a, typed, 0.0, 0.0)
    other = _first_update(gradtx.noisy_sgd(0.1, key=6), params)
    assert not np.allclose(np.asarray(a["dense"]["kernel"]), np.asarray(other["dense"]["kernel"]))


def test_distance_over_gradients_needs_params_and_keeps_rank_0_updates():
    tx = gradtx.scale_by_distance_over_gradients(global_scale=-1.0)
    params = {"s": jnp.asarray(2.0), "v": jnp.ones(3)}
    with pytest.raises(ValueError, match="scale_by_distance_over_gradients needs the current"):
        tx.update(params, tx.init(params))
    updates = _first_update(tx, params)
    assert updates["s"].shape == ()
    # r_0 = 1e-6 (1 + |w_0|), G_1 = |g|^2: u = -r_0 / sqrt(1 + 1e-8) * g
    np.testing.assert_allclose(float(updates["s"]), -3e-6 / np.sqrt(1 + 1e-8), rtol=1e-6)


def test_set_to_zero_keeps_shapes_and_dtypes():
    params = mixed_params(dtype=jnp.bfloat16)
    updates = _first_update(gradtx.set_to_zero(), params)
    for u, p in zip(jax.tree.leaves(updates), jax.tree.leaves(params), strict=True):
        assert (u.shape, u.dtype) == (p.shape, p.dtype)
        assert not bool(jnp.any(u))


def test_add_decayed_weights_is_weight_decay_with_globs():
    tx = gradtx.add_decayed_weights(0.5, mask="**/kernel")
    params = mixed_params()
    assert isinstance(tx.init(params), gradtx.WeightDecayState)
    updates = _first_update(tx, params)
    expected_kernel = 1.0 + 0.5 * np.asarray(params["dense"]["kernel"])
    np.testing.assert_allclose(np.asarray(updates["dense"]["kernel"]), expected_kernel, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(updates["dense"]["bias"]), np.ones(4))


# -- invalid hyperparameters ------------------------------------------------------------------

INVALID = [
    (lambda: gradtx.scale_by_adan(b1=1.0), "scale_by_adan: b1 must be in [0.0, 1.0), got 1.0"),
    (lambda: gradtx.adan(0.1, b3=-0.1), "adan: scale_by_adan: b3 must be in [0.0, 1.0), got -0.1"),
    (
        lambda: gradtx.adan(0.1, weight_decay=-1.0),
        "adan: weight_decay must be >= 0, got -1.0 (from weight_decay: rate must be >= 0",
    ),
    (
        lambda: gradtx.adan(-0.1),
        "adan: scale_by_learning_rate: learning_rate must be >= 0, got -0.1",
    ),
    (lambda: gradtx.fromage(-0.1), "fromage: learning_rate must be >= 0, got -0.1"),
    (
        lambda: gradtx.fromage(0.1, min_norm=-1.0),
        "fromage: scale_by_trust_ratio: min_norm must be >= 0, got -1.0",
    ),
    (lambda: gradtx.scale_by_sm3(eps=-1.0), "scale_by_sm3: eps must be >= 0, got -1.0"),
    (
        lambda: gradtx.sm3(0.1, momentum=2.0),
        "sm3: momentum must be in [0.0, 1.0], got 2.0 (from scale_by_sm3: b1 must be in",
    ),
    (lambda: gradtx.scale_by_rprop(0.0), "scale_by_rprop: learning_rate must be > 0, got 0.0"),
    (
        lambda: gradtx.rprop(0.1, eta_plus=0.0),
        "rprop: scale_by_rprop: eta_plus must be > 1, got 0.0",
    ),
    (
        lambda: gradtx.rprop(0.1, min_step_size=1.0, max_step_size=0.5),
        "rprop: scale_by_rprop: max_step_size must be >= min_step_size (1.0), got 0.5",
    ),
    (
        lambda: gradtx.scale_by_polyak(variant="spss"),
        "scale_by_polyak: variant must be one of ['sps', 'sps+'], got 'spss' (did you mean",
    ),
    (
        lambda: gradtx.polyak_sgd(max_learning_rate=-1.0),
        "polyak_sgd: scale_by_polyak: max_learning_rate must be >= 0, got -1.0",
    ),
    (
        lambda: gradtx.polyak_sgd(scaling=-1.0),
        "polyak_sgd: scaling must be >= 0, got -1.0 (from scale_by_learning_rate: learning_rate",
    ),
    (
        lambda: gradtx.optimistic_gradient_descent(-0.1),
        "optimistic_gradient_descent: scale_by_learning_rate: learning_rate must be >= 0, got -0.1",
    ),
    (lambda: gradtx.optimistic_adam(-0.1), "optimistic_adam: learning_rate must be >= 0, got -0.1"),
    (
        lambda: gradtx.optimistic_adam_v2(0.1, b1=1.0),
        "optimistic_adam_v2: scale_by_adam: b1 must be in [0.0, 1.0), got 1.0",
    ),
    (lambda: gradtx.noisy_sgd(0.1, eta=-1.0), "noisy_sgd: add_noise: eta must be >= 0, got -1.0"),
    (lambda: gradtx.noisy_sgd(0.1, key=1, seed=2), "noisy_sgd: add_noise: give either seed or key"),
    (
        lambda: gradtx.signum(0.1, beta=1.0),
        "signum: beta must be in [0.0, 1.0), got 1.0 (from scale_by_lion: b1 must be in",
    ),
    (
        lambda: gradtx.scale_by_distance_over_gradients(reps_rel=0.0),
        "scale_by_distance_over_gradients: reps_rel must be > 0, got 0.0",
    ),
    (
        lambda: gradtx.scale_by_optimistic_gradient(beta=np.ones(2)),
        "scale_by_optimistic_gradient: beta must be a scalar (or a schedule returning one), got an "
        "array of shape (2,)",
    ),
    (
        lambda: gradtx.scale_by_distance_over_gradients(param_dtype=jnp.int32),
        "scale_by_distance_over_gradients: param_dtype must be a floating-point dtype",
    ),
    (
        lambda: gradtx.normalize_by_update_norm(eps=-1.0),
        "normalize_by_update_norm: eps must be >= 0, got -1.0",
    ),
    (
        lambda: gradtx.add_decayed_weights(-0.1),
        "add_decayed_weights: weight_decay must be >= 0, got -0.1 (from weight_decay: rate",
    ),
]


@pytest.mark.parametrize(
    ("build", "message"),
    INVALID,
    ids=[m.split(":")[0] + f"-{i}" for i, (_, m) in enumerate(INVALID)],
)
def test_invalid_hyperparameters_raise_at_construction(build, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


def test_rprop_learning_rate_is_a_number_not_a_schedule():
    with pytest.raises(ValueError, match="scale_by_rprop: learning_rate is the initial step size"):
        gradtx.scale_by_rprop(lambda count: 0.1)
