"""with_compensation: bf16 / f16 params that follow a float32 master trajectory (int8 and bf16
residuals, stochastic rounding), the emitted update against a NumPy transcription bit for bit,
float32 passthrough, non-finite values, checkpoints, jit and construction errors."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import gradtx
from gradtx._base._checks import HyperparameterError
from gradtx.wrappers._compensation import CompensationState

STEPS = 300
LR = 1e-3


# -- a small least-squares problem -----------------------------------------------------------------


def _problem():
    """16 least-squares problems sharing a matrix, params X of shape (8, 16) in [1, 3)."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(32, 8)).astype(np.float32)
    x_true = rng.uniform(0.5, 2.0, size=(8, 16)).astype(np.float32)
    b = a @ x_true + 0.1 * rng.normal(size=(32, 16)).astype(np.float32)
    x0 = rng.uniform(1.0, 3.0, size=(8, 16)).astype(np.float32)
    return a, b, x0


def _loss(params, a, b):
    x = params["x"].astype(jnp.float32)
    return 0.5 * jnp.mean((a @ x - b) ** 2)


def _train(tx, x0, dtype):
    """Params (in `dtype`, as float32) and the state after STEPS steps of `tx` (jitted)."""
    a, b, _ = _problem()

    @jax.jit
    def train(x0):
        def step(carry, _):
            params, state = carry
            grads = jax.grad(_loss)(params, a, b)
            updates, state = tx.update(grads, state, params)
            return (gradtx.apply_updates(params, updates), state), None

        params = {"x": x0.astype(dtype)}
        (params, state), _ = jax.lax.scan(step, (params, tx.init(params)), None, length=STEPS)
        return params["x"].astype(jnp.float32), state

    x, state = train(x0)
    return np.asarray(x), state


@functools.cache
def _uncompensated(start_dtype, dtype, lr=LR):
    """`_train(_adamw(lr), _start(start_dtype), dtype)[0]`, once per process."""
    return _train(_adamw(lr), _start(start_dtype), dtype)[0]


def _adamw(lr=LR):
    # float32 moments: with the default (the params' dtype) bf16 moments would lose Adam's
    # second-moment increments, an error of the inner optimizer that no wrapper can undo
    return gradtx.adamw(lr, weight_decay=1e-2, mu_dtype=jnp.float32, nu_dtype=jnp.float32)


def _start(dtype):
    _, _, x0 = _problem()
    return x0.astype(dtype).astype(np.float32)  # representable: equal starts


@pytest.mark.parametrize(
    "kwargs",
    [
        {"residual": "int8"},
        {"residual": "bfloat16"},
        {"residual": "int8", "stochastic_rounding": True, "key": 1},
    ],
    ids=["int8", "bfloat16", "int8+stochastic"],
)
def test_bf16_params_track_the_float32_master(kwargs):
    x0 = _start(jnp.bfloat16)
    ref = _uncompensated(jnp.bfloat16, jnp.float32)  # the float32-master trajectory
    plain = _uncompensated(jnp.bfloat16, jnp.bfloat16)
    comp, state = _train(gradtx.with_compensation(_adamw(), **kwargs), x0, jnp.bfloat16)
    moved = np.max(np.abs(ref - x0))
    plain_err, comp_err = np.max(np.abs(plain - ref)), np.max(np.abs(comp - ref))
    assert moved > 0.25  # the reference really moves (lr * steps = 0.3)
    # plain bf16 params never move: every update (~1e-3) is below half a spacing (2^-8, 2^-7)
    assert plain_err > 0.9 * moved
    # compensated: within about half a spacing of the reference (2^-7 for values in [2, 4))
    assert comp_err < 2**-6, comp_err
    assert plain_err > 20 * comp_err
    # the master value p + r is closer still (a bf16 spacing is 2^-6 there)
    r = _decoded_residual(state.residual["x"], comp, kwargs)
    assert np.max(np.abs(comp + r - ref)) < 2**-7


def _decoded_residual(residual, p, kwargs):
    r = np.asarray(residual).astype(np.float32)
    if kwargs["residual"] == "int8":
        steps = 127 if kwargs.get("stochastic_rounding") else 254
        r = r / steps * _spacing_np(p, 7, -126)
    return r


def test_stochastic_rounding_without_residual_is_unbiased_on_the_trajectory():
    x0 = _start(jnp.bfloat16)
    ref = _uncompensated(jnp.bfloat16, jnp.float32)
    plain = _uncompensated(jnp.bfloat16, jnp.bfloat16)
    tx = gradtx.with_compensation(_adamw(), residual=None, stochastic_rounding=True, key=0)
    comp, state = _train(tx, x0, jnp.bfloat16)
    assert jax.tree.leaves(state.residual) == []
    # noisy (each step rounds up or down at random) but without drift
    assert abs(np.mean(comp - ref)) < 0.05 * abs(np.mean(plain - ref))
    assert _rms(comp - ref) < 0.3 * _rms(plain - ref)


def _rms(e):
    return np.sqrt(np.mean(e**2))


def test_float16_params_track_the_float32_master():
    x0 = _start(jnp.float16)
    lr = 1e-4  # below half a float16 spacing of values in [1, 4) (2^-11, 2^-10)
    ref = _train(_adamw(lr), x0, jnp.float32)[0]
    plain, _ = _train(_adamw(lr), x0, jnp.float16)
    comp, _ = _train(gradtx.with_compensation(_adamw(lr)), x0, jnp.float16)
    comp_err, plain_err = np.max(np.abs(comp - ref)), np.max(np.abs(plain - ref))
    # within about half a float16 spacing (2^-10 for values in [2, 4)); plain float16 stays put
    assert comp_err < 2**-9 and plain_err > 10 * comp_err, (comp_err, plain_err)


# -- the emitted update, bit for bit ---------------------------------------------------------------


def _spacing_np(x, nmant, minexp):
    """NumPy transcription: 2^(max(exponent(x), minexp) - nmant), at least 2^-118."""
    _, e = np.frexp(np.abs(x.astype(np.float64)))
    e = np.where(x == 0, minexp, e - 1)  # frexp's exponent is one above IEEE's
    return np.exp2(np.maximum(np.maximum(e, minexp) - nmant, -118)).astype(np.float32)


FORMATS = {
    "bfloat16": (ml_dtypes.bfloat16, 7, -126),
    "float16": (np.float16, 10, -14),
}


def _random_case(dtype_np, n=4000, seed=0):
    """Params of mixed magnitudes, int8 residuals, and updates from tiny to 30x the params
    (crossing binades and signs)."""
    rng = np.random.default_rng(seed)
    p = (rng.normal(size=n) * np.exp2(rng.integers(-6, 6, size=n))).astype(dtype_np)
    q = rng.integers(-127, 128, size=n).astype(np.int8)
    scale = np.exp2(rng.uniform(-14, 5, size=n)) * np.abs(p.astype(np.float32))
    u = (rng.normal(size=n) * scale).astype(np.float32)
    return p, q, u


@pytest.mark.parametrize("fmt", FORMATS)
def test_applied_value_is_the_rounded_exact_value_bit_for_bit(fmt):
    dtype_np, nmant, minexp = FORMATS[fmt]
    p, q, u = _random_case(dtype_np)
    p32 = p.astype(np.float32)
    # NumPy transcription of the step, float32 as the wrapper computes it
    r = q.astype(np.float32) / np.float32(254) * _spacing_np(p32, nmant, minexp)
    exact = (p32 + r) + u
    target = exact.astype(dtype_np)  # round to nearest even (ml_dtypes / NumPy)

    tx = gradtx.with_compensation(gradtx.identity())
    params = {"w": jnp.asarray(p)}
    state = tx.init(params)._replace(residual={"w": jnp.asarray(q)})
    updates, new_state = jax.jit(tx.update)({"w": jnp.asarray(u)}, state, params)
    assert updates["w"].dtype == jnp.float32  # the gradients' dtype
    applied = np.asarray(gradtx.apply_updates(params, updates)["w"])
    t32 = target.astype(np.float32)
    # where target - p is a float32 number, the update carries it: bit for bit
    exact_delta = (t32.astype(np.float64) - p32) == (t32 - p32).astype(np.float64)
    assert exact_delta.mean() > 0.99
    np.testing.assert_array_equal(
        applied[exact_delta].view(np.uint16), target[exact_delta].view(np.uint16)
    )
    crossed = np.floor(np.log2(np.abs(t32) + 1e-30)) != np.floor(np.log2(np.abs(p32) + 1e-30))
    assert (exact_delta & crossed).sum() > 500  # many updates cross binades
    assert (exact_delta & (np.sign(t32) != np.sign(p32))).sum() > 50  # and signs
    # the new residual is exact - applied, coded in 1/254 of the applied value's spacing
    s = _spacing_np(applied.astype(np.float32), nmant, minexp)
    want_q = np.clip(np.round((exact - applied.astype(np.float32)) / s * 254), -127, 127)
    np.testing.assert_array_equal(np.asarray(new_state.residual["w"]), want_q.astype(np.int8))


def test_bf16_updates_keep_the_accounting_exact():
    """With bf16 gradients the update is bf16 and may not carry target - p: the residual is
    taken against the value apply_updates gives (bf16 residual: nothing lost)."""
    p, _, u = _random_case(ml_dtypes.bfloat16, seed=1)
    u = u.astype(ml_dtypes.bfloat16)
    tx = gradtx.with_compensation(gradtx.identity(), residual="bfloat16")
    params = {"w": jnp.asarray(p)}
    state = tx.init(params)
    updates, new_state = tx.update({"w": jnp.asarray(u)}, state, params)
    assert updates["w"].dtype == jnp.bfloat16
    applied = np.asarray(gradtx.apply_updates(params, updates)["w"]).astype(np.float32)
    exact = p.astype(np.float32) + u.astype(np.float32)
    master = applied + np.asarray(new_state.residual["w"]).astype(np.float32)
    # the bf16 residual holds exact - applied to 2^-9 of itself
    err = np.abs(master - exact)
    assert np.all(err <= np.abs(exact - applied) * 2**-8 + 1e-30)
    # and most updates reach the rounded exact value
    target = exact.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.mean(applied == target) > 0.95


# -- float32 params, mixed trees -------------------------------------------------------------------


def test_float32_params_pass_the_inner_updates_through():
    params = {
        "a": np.linspace(-1.0, 1.0, 6, dtype=np.float32),
        "b": np.arange(3.0, dtype=np.float32),
    }
    inner = gradtx.adamw(0.1, weight_decay=1e-2)
    tx = gradtx.with_compensation(inner)
    s_tx = jax.eval_shape(tx.init, params)
    assert s_tx.residual == {"a": None, "b": None} and s_tx.key is None
    rng = np.random.default_rng(0)
    grads = [
        jax.tree.map(lambda x: rng.normal(size=x.shape).astype(x.dtype), params) for _ in range(5)
    ]

    @jax.jit
    def both(params, grads):
        s_in, s_tx = inner.init(params), tx.init(params)
        pairs = []
        for g in grads:
            u_in, s_in = inner.update(g, s_in, params)
            u_tx, s_tx = tx.update(g, s_tx, params)
            pairs.append((u_tx, u_in))
            params = gradtx.apply_updates(params, u_tx)
        return pairs, s_tx.inner_state, s_in

    pairs, s_tx_inner, s_in = both(params, grads)
    for u_tx, u_in in pairs:
        jax.tree.map(np.testing.assert_array_equal, u_tx, u_in)
    jax.tree.map(np.testing.assert_array_equal, s_tx_inner, s_in)


def test_mixed_tree_compensates_only_narrow_leaves():
    params = {
        "f32": jnp.ones(3),
        "bf16": jnp.ones(4, jnp.bfloat16),
        "f16": jnp.ones(2, jnp.float16),
        "none": None,
    }
    tx = gradtx.with_compensation(gradtx.sgd(1e-4))
    state = tx.init(params)
    assert state.residual["f32"] is None and state.residual["none"] is None
    assert state.residual["bf16"].dtype == jnp.int8 and state.residual["bf16"].shape == (4,)
    grads = {k: None if v is None else jnp.ones_like(v) for k, v in params.items()}

    @jax.jit
    def step(params, state):
        updates, state = tx.update(grads, state, params)
        return gradtx.apply_updates(params, updates), state

    for _ in range(50):
        params, state = step(params, state)
    np.testing.assert_allclose(np.asarray(params["f32"]), 1 - 50e-4, rtol=1e-6)
    assert float(params["bf16"][0]) == pytest.approx(1 - 50e-4, abs=2**-9)
    assert float(params["bf16"][0]) < 1.0  # plain bf16 would stay at 1.0
    assert float(params["f16"][0]) == pytest.approx(1 - 50e-4, abs=2**-11)


# -- non-finite values -----------------------------------------------------------------------------


@pytest.mark.parametrize("residual", ["int8", "bfloat16"])
def test_nan_gradient_makes_nan_params(residual):
    tx = gradtx.with_compensation(gradtx.sgd(0.1), residual=residual)

    @jax.jit
    def two_steps(grads):
        params = {"w": jnp.ones(3, jnp.bfloat16)}
        updates, state = tx.update(grads, tx.init(params), params)
        params = gradtx.apply_updates(params, updates)
        updates, state = tx.update({"w": jnp.ones(3, jnp.bfloat16)}, state, params)
        return params["w"], gradtx.apply_updates(params, updates)["w"]

    w, w2 = two_steps({"w": np.array([1.0, np.nan, np.inf], ml_dtypes.bfloat16)})
    w, w2 = np.asarray(w).astype(np.float32), np.asarray(w2).astype(np.float32)
    assert np.isfinite(w[0]) and np.isnan(w[1]) and w[2] == -np.inf
    # they stay visible on the next (finite) step: NaN stays NaN, -inf stays -inf
    assert np.isnan(w2[1]) and w2[2] == -np.inf


def test_nan_residual_is_not_swallowed():
    tx = gradtx.with_compensation(gradtx.sgd(0.1))

    @jax.jit
    def step(residual):
        params = {"w": jnp.ones(2, jnp.bfloat16)}
        state = tx.init(params)._replace(residual={"w": residual})
        updates, state = tx.update({"w": jnp.zeros(2, jnp.bfloat16)}, state, params)
        return gradtx.apply_updates(params, updates)["w"], state

    w, state = step(np.array([0, -128], np.int8))
    w = np.asarray(w).astype(np.float32)
    assert w[0] == 1.0 and np.isnan(w[1])
    assert np.asarray(state.residual["w"])[1] == -128


def test_overflow_to_inf_stays_visible_in_float16():
    tx = gradtx.with_compensation(gradtx.identity())

    @jax.jit
    def two_steps(params, first, second):
        updates, state = tx.update({"w": first}, tx.init(params), params)
        params = gradtx.apply_updates(params, updates)
        updates, state = tx.update({"w": second}, state, params)
        return params["w"], gradtx.apply_updates(params, updates)["w"]

    w, w2 = two_steps(
        {"w": np.array([60000.0, 1.0], np.float16)},
        np.array([10000.0, 0.0], np.float32),
        np.array([-1.0, 0.0], np.float32),
    )
    assert float(w[0]) == np.inf
    assert float(w2[0]) == np.inf


# -- checkpoints, jit, keys ------------------------------------------------------------------------


def _run(tx, params, steps, seed=0):
    rng = np.random.default_rng(seed)
    state = tx.init(params)
    step = jax.jit(tx.update)
    for _ in range(steps):
        grads = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), params)
        updates, state = step(grads, state, params)
        params = gradtx.apply_updates(params, updates)
    return params, state


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"residual": "bfloat16"}, {"residual": None, "stochastic_rounding": True, "key": 3}],
    ids=["int8", "bfloat16", "stochastic"],
)
def test_state_round_trips_through_save_and_load(tmp_path, kwargs):
    params = {"w": jnp.linspace(-1, 1, 12, dtype=jnp.bfloat16).reshape(3, 4), "b": jnp.ones(4)}
    tx = gradtx.with_compensation(gradtx.adam(1e-3), **kwargs)
    params, state = _run(tx, params, 5)
    path = tmp_path / "state.safetensors"
    gradtx.save(path, state)
    loaded = gradtx.load(path, tx.init(params))
    assert jax.tree.structure(loaded) == jax.tree.structure(state)
    jax.tree.map(np.testing.assert_array_equal, loaded, state)
    grads = jax.tree.map(lambda x: jnp.full(x.shape, 0.5, x.dtype), params)
    step = jax.jit(tx.update)
    (u1, s1), (u2, s2) = step(grads, state, params), step(grads, loaded, params)
    jax.tree.map(np.testing.assert_array_equal, (u1, s1), (u2, s2))


def test_jit_and_key_progress():
    params = {"w": jnp.full(64, 1.0, jnp.bfloat16)}
    tx = gradtx.with_compensation(gradtx.sgd(1e-3), residual=None, stochastic_rounding=True, key=7)
    state = tx.init(params)
    step = jax.jit(tx.update)
    grads = {"w": jnp.ones(64, jnp.bfloat16)}
    keys, ws = [np.asarray(state.key)], []
    for _ in range(4):
        updates, state = step(grads, state, params)
        params = gradtx.apply_updates(params, updates)
        keys.append(np.asarray(state.key))
        ws.append(np.asarray(params["w"]).astype(np.float32))
    assert step._cache_size() == 1
    assert len({k.tobytes() for k in keys}) == len(keys)  # a new key every step
    # stochastic rounding: 1 - 1e-3 rounds down to 1 - 2^-8 with probability ~1/4
    assert 0 < np.mean(ws[0] < 1.0) < 0.6
    # reproducible from the key
    again = tx.init({"w": jnp.full(64, 1.0, jnp.bfloat16)})
    u_again, _ = step(grads, again, {"w": jnp.full(64, 1.0, jnp.bfloat16)})
    w_again = np.asarray(gradtx.apply_updates({"w": jnp.full(64, 1.0, jnp.bfloat16)}, u_again)["w"])
    np.testing.assert_array_equal(w_again.astype(np.float32), ws[0])
    # a typed key gives the same stream as its seed
    typed = gradtx.with_compensation(
        gradtx.sgd(1e-3), residual=None, stochastic_rounding=True, key=jax.random.key(7)
    )
    np.testing.assert_array_equal(np.asarray(typed.init(params).key), keys[0])


def test_stochastic_rounding_is_unbiased():
    x = np.full(20000, 1.0 + 0.3 * 2**-7, np.float32)  # 0.3 of the way from 1 to 1 + 2^-7
    params = {"w": np.ones(20000, ml_dtypes.bfloat16)}
    tx = gradtx.with_compensation(gradtx.identity(), residual=None, stochastic_rounding=True, key=0)

    @jax.jit
    def step(params):
        updates, _ = tx.update({"w": x - np.float32(1.0)}, tx.init(params), params)
        return gradtx.apply_updates(params, updates)["w"]

    w = np.asarray(step(params)).astype(np.float64)
    assert set(np.unique(w)) == {1.0, 1.0 + 2**-7}
    assert np.mean(w) == pytest.approx(1.0 + 0.3 * 2**-7, abs=4 * 2**-7 * 0.46 / 141)


def test_works_inside_chain_under_scan():
    params = {"w": jnp.ones(8, jnp.bfloat16)}
    tx = gradtx.with_compensation(gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.sgd(1e-3)))
    state = tx.init(params)
    grads = {"w": jnp.ones(8, jnp.bfloat16)}

    def body(carry, _):
        params, state = carry
        updates, state = tx.update(grads, state, params)
        return (gradtx.apply_updates(params, updates), state), None

    (params, state), _ = jax.lax.scan(body, (params, state), None, length=20)
    # each step moves by 1e-3 / sqrt(8) = 3.5e-4; 20 of them: 7.1e-3 (plain bf16: 0)
    assert float(params["w"][0]) == pytest.approx(1 - 20e-3 / np.sqrt(8), abs=2**-9)


def test_abstract_init():
    params = {
        "w": jax.ShapeDtypeStruct((3, 4), jnp.bfloat16),
        "b": jax.ShapeDtypeStruct((4,), jnp.float32),
    }
    state = jax.eval_shape(gradtx.with_compensation(gradtx.adam(1e-3)).init, params)
    assert isinstance(state, CompensationState)
    assert state.residual["w"].shape == (3, 4) and state.residual["w"].dtype == jnp.int8
    assert state.residual["b"] is None


# -- errors ----------------------------------------------------------------------------------------


def test_construction_errors():
    tx = gradtx.sgd(0.1)
    with pytest.raises(
        HyperparameterError,
        match=r"residual must be one of \['int8', 'bfloat16', None\], got 'int4'",
    ):
        gradtx.with_compensation(tx, residual="int4")
    with pytest.raises(
        HyperparameterError, match=r"with_compensation: residual .*stochastic_rounding=True"
    ):
        gradtx.with_compensation(tx, residual=None)
    with pytest.raises(HyperparameterError, match=r"with_compensation: key .*key=0"):
        gradtx.with_compensation(tx, stochastic_rounding=True)
    with pytest.raises(
        HyperparameterError, match=r"with_compensation: key .*stochastic_rounding=True"
    ):
        gradtx.with_compensation(tx, key=0)
    with pytest.raises(
        ValueError, match=r"with_compensation: key must be an integer seed or a PRNG key"
    ):
        gradtx.with_compensation(tx, stochastic_rounding=True, key="abc")
    with pytest.raises(HyperparameterError, match=r"stochastic_rounding must be True or False"):
        gradtx.with_compensation(tx, stochastic_rounding=1)
    with pytest.raises(
        TypeError,
        match=r"with_compensation: tx must be a GradientTransformation.*gradtx.adam\(1e-3\)",
    ):
        gradtx.with_compensation(gradtx.adam)


def test_update_needs_params():
    params = {"w": jnp.ones(2, jnp.bfloat16)}
    tx = gradtx.with_compensation(gradtx.sgd(0.1))
    state = tx.init(params)
    with pytest.raises(ValueError, match=r"with_compensation needs the current parameters"):
        tx.update(params, state)
    with pytest.raises(ValueError, match=r"with_compensation: expected a CompensationState"):
        tx.update(params, state.inner_state, params)


def test_records_its_arguments_and_rebuilds_with_traced_ones():
    tx = gradtx.with_compensation(gradtx.adam(0.01), residual=None, stochastic_rounding=True, key=3)
    hp = gradtx.hyperparameters(tx)
    assert hp["tx"]["learning_rate"] == pytest.approx(0.01)
    assert "key" not in hp  # a PRNG seed is not tuned
    params = {"w": jnp.ones(4, jnp.bfloat16)}
    state = tx.init(params)
    grads = {"w": jnp.ones(4, jnp.bfloat16)}

    @jax.jit
    def step(hp, state):
        return gradtx.with_hyperparameters(tx, hp).update(grads, state, params)

    u_traced, _ = step(hp, state)
    u_plain, _ = jax.jit(lambda state: tx.update(grads, state, params))(state)
    np.testing.assert_array_equal(np.asarray(u_traced["w"]), np.asarray(u_plain["w"]))
