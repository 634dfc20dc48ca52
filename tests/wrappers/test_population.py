"""Populations (issue 49): K members of one optimizer in one vmapped program equal their
standalone runs; sweeps build the members' hyperparameters; population-based training copies
and perturbs in the graph; a member comes out as an ordinary state; checkpoints round-trip."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from ..helpers import assert_trees_bitwise_equal


def _quadratic(seed: int = 0):
    rng = np.random.default_rng(seed)
    params = {"w": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32), "b": jnp.zeros(3)}
    target = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), params)

    def loss(p):
        pairs = zip(jax.tree.leaves(p), jax.tree.leaves(target), strict=True)
        return sum(jnp.sum((a - b) ** 2) for a, b in pairs)

    return params, loss


def test_members_equal_their_standalone_runs_over_200_steps():
    """K = 8 members (a peak-learning-rate x weight-decay grid of adamw with a warm-up schedule):
    each equals the same optimizer built with its values and run alone, to 1e-6, over 200 steps
    (the shared hyperparameters stay constants, the swept ones are multiplied in float32 either
    way)."""
    tx = gradtx.chain(
        gradtx.clip_by_global_norm(1.0),
        gradtx.adamw(gradtx.warmup_cosine_decay_schedule(0.0, 1e-2, 20, 200), weight_decay=1e-4),
    )
    hp = gradtx.sweep(tx, peak_value=[1e-2, 3e-2, 1e-1, 3e-1], weight_decay=[0.0, 0.1])
    pop = gradtx.population(tx, hp)
    params, loss = _quadratic()
    k = 8
    steps = 200

    @jax.jit
    def pop_step(p, s):
        loss_k, g = jax.vmap(jax.value_and_grad(loss))(p)
        u, s = pop.update(g, s, p)
        return gradtx.apply_updates(p, u), s, loss_k

    p = jax.tree.map(lambda x: jnp.broadcast_to(x, (k, *x.shape)), params)
    s = pop.init(params)
    for _ in range(steps):
        p, s, _ = pop_step(p, s)
    assert pop_step._cache_size() == 1

    for m in range(k):  # the standalone run: the optimizer built with the member's values
        peak, wd = (
            float(hp["transformations"][1]["learning_rate"]["peak_value"][m]),
            float(hp["transformations"][1]["weight_decay"][m]),
        )
        alone = gradtx.chain(
            gradtx.clip_by_global_norm(1.0),
            gradtx.adamw(gradtx.warmup_cosine_decay_schedule(0.0, peak, 20, 200), weight_decay=wd),
        )

        @jax.jit
        def step(q, st, alone=alone):
            g = jax.grad(loss)(q)
            u, st = alone.update(g, st, q)
            return gradtx.apply_updates(q, u), st

        q, st = params, alone.init(params)
        for _ in range(steps):
            q, st = step(q, st)
        mine = gradtx.population_member(p, m)
        for a, b in zip(jax.tree.leaves(mine), jax.tree.leaves(q), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=f"member {m}")
        for a, b in zip(
            jax.tree.leaves(gradtx.population_member(s, m)), jax.tree.leaves(st), strict=True
        ):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=f"member {m} state")


def test_sweep_grid_and_zip():
    tx = gradtx.adamw(1e-3, weight_decay=0.1)
    grid = gradtx.sweep(tx, learning_rate=[1.0, 2.0, 3.0], weight_decay=[0.0, 0.5])
    np.testing.assert_array_equal(grid["learning_rate"], [1, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(grid["weight_decay"], [0, 0.5] * 3)
    np.testing.assert_allclose(grid["b1"], [0.9] * 6)
    zipped = gradtx.sweep(tx, mode="zip", learning_rate=[1.0, 2.0], b2=[0.9, 0.99])
    np.testing.assert_array_equal(zipped["learning_rate"], [1, 2])
    np.testing.assert_allclose(zipped["b2"], [0.9, 0.99])
    with pytest.raises(ValueError, match="equally many values"):
        gradtx.sweep(tx, mode="zip", learning_rate=[1.0, 2.0], b2=[0.9])
    with pytest.raises(KeyError, match=r"no hyperparameter is called 'lr'.*learning_rate"):
        gradtx.sweep(tx, lr=[1.0])
    scheduled = gradtx.adamw(gradtx.linear_schedule(1.0, 0.0, 10))
    with pytest.raises(KeyError, match=r"'learning_rate' holds several numbers.*init_value"):
        gradtx.sweep(scheduled, learning_rate=[1.0, 2.0])
    with pytest.raises(ValueError, match="mode must be 'grid' or 'zip'"):
        gradtx.sweep(tx, mode="product", learning_rate=[1.0])


def test_init_takes_one_tree_or_k_trees_and_validates_members():
    tx = gradtx.sgd(0.1, momentum=0.9)
    pop = gradtx.population(tx, gradtx.sweep(tx, momentum=[0.0, 0.5, 0.9]))
    one = {"w": jnp.ones(2)}
    s1 = pop.init(one)
    assert s1.inner_state[0].trace["w"].shape == (3, 2)  # chain(trace, scale): trace's buffer
    three = [{"w": jnp.full(2, float(i))} for i in range(3)]
    s3 = pop.init(three)
    assert s3.inner_state[0].trace["w"].shape == (3, 2)
    with pytest.raises(ValueError, match=r"member 1: .*momentum"):
        gradtx.population(tx, gradtx.sweep(tx, momentum=[0.5, -1.0]))
    with pytest.raises(ValueError, match="one size K"):
        gradtx.population(tx, {"learning_rate": jnp.ones(2), "momentum": jnp.ones(3)})
    with pytest.raises(ValueError, match="members=K"):
        gradtx.population(tx)
    same = gradtx.population(tx, members=4)  # nothing swept: every member runs tx itself
    assert same.init(one).hyperparams == {"learning_rate": None, "momentum": None}
    assert same.init(one).inner_state[0].trace["w"].shape == (4, 2)


def test_hyperparameters_in_the_state_change_without_recompiling():
    tx = gradtx.sgd(1.0)
    pop = gradtx.population(tx, gradtx.sweep(tx, learning_rate=[1.0, 1.0]))
    params = {"w": jnp.ones((2, 3))}
    state = pop.init({"w": jnp.ones(3)})
    update = jax.jit(pop.update)
    u, state = update(params, state, params)
    np.testing.assert_allclose(u["w"], -np.ones((2, 3)))
    state = gradtx.tree.set(state, learning_rate=jnp.asarray([0.5, 2.0]))
    u, state = update(params, state, params)
    np.testing.assert_allclose(u["w"][:, 0], [-0.5, -2.0])
    assert update._cache_size() == 1


def test_exploit_explore_copies_the_best_over_the_worst_and_perturbs():
    tx = gradtx.adamw(1e-3)
    hp = gradtx.sweep(tx, mode="zip", learning_rate=[1.0, 2.0, 3.0, 4.0], b1=[0.9] * 4)
    pop = gradtx.population(tx, hp)
    params = {"w": jnp.arange(4.0)[:, None] * jnp.ones((4, 2))}
    state = pop.init([{"w": jnp.full(2, float(i))} for i in range(4)])
    scores = jnp.asarray([3.0, 0.5, jnp.nan, 1.0])  # best: member 1; worst: member 2 (NaN)

    @jax.jit
    def pbt(params, state, key):
        return gradtx.population_exploit_explore(params, state, scores, key, fraction=0.25)

    new_params, new_state = pbt(params, state, jax.random.key(0))
    np.testing.assert_array_equal(new_params["w"][2], params["w"][1])  # exploit
    for m in (0, 1, 3):
        np.testing.assert_array_equal(new_params["w"][m], params["w"][m])
        assert new_state.hyperparams["learning_rate"][m] == hp["learning_rate"][m]
    lr2 = float(new_state.hyperparams["learning_rate"][2])
    assert lr2 in (pytest.approx(2.0 * 0.8), pytest.approx(2.0 * 1.25))  # explore
    assert float(new_state.hyperparams["b1"][2]) == pytest.approx(0.9)  # not perturbed
    assert new_state.hyperparams["b2"] is None  # not swept: a constant, not in the state
    np.testing.assert_array_equal(
        new_state.inner_state[0].mu["w"][2], state.inner_state[0].mu["w"][1]
    )
    with pytest.raises(ValueError, match=r"fraction must be in \(0, 0.5\]"):
        gradtx.population_exploit_explore(params, state, scores, jax.random.key(0), fraction=0.9)
    with pytest.raises(KeyError, match=r"no hyperparameter is called 'b2'"):
        gradtx.population_exploit_explore(params, state, scores, jax.random.key(0), perturb="b2")
    with pytest.raises(ValueError, match=r"scores must have shape \(4,\)"):
        gradtx.population_exploit_explore(params, state, scores[:3], jax.random.key(0))


def test_a_population_state_round_trips_through_a_checkpoint(tmp_path):
    tx = gradtx.adamw(1e-3)
    pop = gradtx.population(tx, gradtx.sweep(tx, learning_rate=[1e-3, 1e-2]))
    params = {"w": jnp.ones((2, 3))}
    state = pop.init({"w": jnp.ones(3)})
    _, state = pop.update(params, state, params)
    path = gradtx.save(tmp_path / "pop.npz", state)
    loaded = gradtx.load(path, pop.init({"w": jnp.ones(3)}))
    assert_trees_bitwise_equal(loaded, state, "population state")
    one = gradtx.population_member(state, 1)
    assert jax.tree.structure(one) == jax.tree.structure(tx.init({"w": jnp.ones(3)}))


def test_metrics_of_a_population_have_the_member_axis():
    tx = gradtx.adamw(gradtx.linear_schedule(1.0, 0.0, 10))
    pop = gradtx.population(tx, gradtx.sweep(tx, init_value=[1.0, 2.0, 4.0]))
    params = {"w": jnp.ones((3, 2))}
    state = pop.init({"w": jnp.ones(2)})
    for _ in range(3):
        _, state = pop.update(params, state, params)
    got = jax.jit(gradtx.metrics, static_argnums=0)(pop, state)
    alone = gradtx.metrics(tx, tx.init({"w": jnp.ones(2)}))
    assert sorted(got) == sorted(alone)
    np.testing.assert_allclose(got["learning_rate"], [0.8, 1.6, 3.2], rtol=1e-6)
    np.testing.assert_array_equal(got["step"], [3, 3, 3])


def test_a_hyperparameter_inside_a_tuple_argument_can_be_swept():
    """dog's `init_step=("heuristic", 1e-6)`: the number sits next to a string, so the
    hyperparameters' tree has a None beside it; members are still matched to their values."""
    tx = gradtx.contrib.dog()
    pop = gradtx.population(tx, gradtx.sweep(tx, init_step=[1e-6, 1e-5]))
    params = {"w": jnp.ones((2, 3))}
    u, _ = pop.update(params, pop.init({"w": jnp.ones(3)}), params)
    for m, init_step in enumerate((1e-6, 1e-5)):
        alone = gradtx.contrib.dog(init_step=("heuristic", init_step))
        expected, _ = alone.update(
            {"w": jnp.ones(3)}, alone.init({"w": jnp.ones(3)}), {"w": jnp.ones(3)}
        )
        np.testing.assert_allclose(u["w"][m], expected["w"], rtol=1e-6)


def test_a_donated_step_leaves_the_population_usable():
    tx = gradtx.sgd(0.1)
    hp = gradtx.sweep(tx, learning_rate=[0.1, 0.2])
    pop = gradtx.population(tx, hp)
    step = jax.jit(lambda p, s: pop.update(p, s, p), donate_argnums=(0, 1))
    _, state = step({"w": jnp.ones((2, 3))}, pop.init({"w": jnp.ones(3)}))
    np.testing.assert_allclose(hp["learning_rate"], [0.1, 0.2])  # the sweep's arrays survive
    full = gradtx.population_hyperparameters(pop, state)
    assert full["learning_rate"].shape == (2,)
    second = gradtx.with_hyperparameters(tx, gradtx.population_member(full, 1))
    u, _ = second.update({"w": jnp.ones(3)}, second.init({"w": jnp.ones(3)}))
    np.testing.assert_allclose(u["w"], -0.2 * np.ones(3), rtol=1e-6)
    assert pop.init({"w": jnp.ones(3)}).hyperparams["learning_rate"].shape == (2,)
