"""gradtx.microbatching against optax.microbatching: microbatch, micro_vmap, micro_grad,
reshape_batch_axis, the accumulation types and custom accumulators."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.microbatching as omb
import pytest

import gradtx
from gradtx import microbatching as mb

from .helpers import assert_trees_close

B = 8  # batch size


def _data(seed=0, batch=B):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, 3)).astype(np.float32)
    y = rng.normal(size=(batch,)).astype(np.float32)
    z = rng.normal(size=(2, batch)).astype(np.float32)  # batch on axis 1
    return jax.device_put((x, y, z))


def _fun(x, scale, *, z):
    """Mapped outputs, reductions and a tree, from batch args x (axis 0) and z (axis 1)."""
    per_example = x * scale + jnp.sum(z, axis=0)[:, None]
    return {
        "mapped": per_example,
        "total": jnp.sum(per_example, axis=0),
        "stats": (jnp.mean(x), jnp.max(z)),
    }


_whole = jax.jit(_fun)  # the reference: `_fun` on the whole batch, one program for all cases


def _types(lib):
    t = lib.AccumulationType
    return t


def _accumulator(lib, mean_kind):
    t = lib.AccumulationType
    return {"mapped": t.CONCAT, "total": t.SUM, "stats": (getattr(t, mean_kind), t.SUM)}


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("size", [1, 2, 8])
@pytest.mark.parametrize("mean_kind", ["MEAN", "RUNNING_MEAN"])
def test_microbatch_matches_optax(mean_kind, size, use_jit):
    x, _, z = _data()
    fs = [
        lib.microbatch(
            _fun,
            argnums=0,
            microbatch_size=size,
            accumulator=_accumulator(lib, mean_kind),
            argnames="z",
            in_axes=(0, 1),
        )
        for lib in (mb, omb)
    ]
    both = lambda x, z: [f(x, 1.5, z=z) for f in fs]
    outs = (jax.jit(both) if use_jit else both)(x, z)
    assert_trees_close(outs[0], outs[1], 1e-6, 1e-6)
    # and CONCAT / SUM give what the function gives on the whole batch
    whole = _whole(x, 1.5, z=z)
    assert_trees_close(outs[0]["mapped"], whole["mapped"], 1e-6, 1e-6)
    assert_trees_close(outs[0]["total"], whole["total"], 1e-5, 1e-6)


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
def test_num_real_microbatches_matches_optax(use_jit):
    x, y, _ = _data()
    fun = lambda x, y: (jnp.mean(x * y[:, None], axis=0), jnp.sum(y), x)
    fs = []
    for lib in (mb, omb):
        t = lib.AccumulationType
        fs.append(
            lib.microbatch(
                fun, (0, 1), 2, (t.RUNNING_MEAN, t.SUM, t.CONCAT), num_real_microbatches=np.int32(3)
            )
        )
    both = lambda x, y: [f(x, y) for f in fs]
    outs = (jax.jit(both) if use_jit else both)(x, y)
    assert_trees_close(outs[0], outs[1], 1e-6, 1e-7)
    # the running mean is over the 3 microbatches that ran (examples i, i + 4 for i < 3)
    ran = np.asarray([0, 4, 1, 5, 2, 6])
    expected = np.mean(np.asarray(x)[ran] * np.asarray(y)[ran, None], axis=0)
    np.testing.assert_allclose(outs[0][0], expected, rtol=1e-5)


def test_microbatch_none_returns_fun():
    assert mb.microbatch(_fun, 0, None) is _fun


@pytest.mark.parametrize("axis", [0, 1])
def test_reshape_batch_axis_matches_optax(axis):
    x = np.arange(2 * 12 * 3.0).reshape((2, 12, 3) if axis == 1 else (12, 2, 3))
    tree = {"x": x, "y": [x + 1]}
    ours, ref = jax.jit(
        lambda t: (mb.reshape_batch_axis(t, 4, axis), omb.reshape_batch_axis(t, 4, axis))
    )(tree)
    assert_trees_close(ours, ref, 0, 0)
    assert ours["x"].shape[axis : axis + 2] == (3, 4)


def test_reshape_keeps_explicit_batch_sharding(cpu_devices):
    mesh = jax.make_mesh((4,), ("batch",), axis_types=(jax.sharding.AxisType.Explicit,))
    x = np.arange(16 * 2, dtype=np.float32).reshape(16, 2)
    with jax.set_mesh(mesh):
        xs = jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.P("batch")))
        split = jax.jit(lambda v: mb.reshape_batch_axis(v, 8))(xs)
        assert jax.typeof(split).sharding.spec[:2] == (None, "batch")
        mapped = jax.jit(mb.micro_vmap(lambda v: v * 3, microbatch_size=8))(xs)
        assert jax.typeof(mapped).sharding.spec[0] == "batch"
    np.testing.assert_array_equal(split, mb.reshape_batch_axis(x, 8))
    np.testing.assert_array_equal(mapped, x * 3)


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("kind", ["CONCAT", "SUM", "MEAN"])
def test_micro_vmap_matches_optax_and_vmap(kind, use_jit):
    x, y, _ = _data()
    w = jax.device_put(np.arange(3.0, dtype=np.float32))
    fun = lambda x, w, y: (jnp.dot(x, w) * y, {"sq": x**2})
    fs = [
        lib.micro_vmap(
            fun,
            in_axes=(0, None),
            microbatch_size=2,
            accumulator=getattr(lib.AccumulationType, kind),
        )
        for lib in (mb, omb)
    ]
    both = lambda x, w, y: [f(x, w, y=y) for f in fs]
    outs = (jax.jit(both) if use_jit else both)(x, w, y)
    assert_trees_close(outs[0], outs[1], 1e-6, 1e-6)
    mapped = jax.jit(jax.vmap(lambda x, y: fun(x, w, y)))(x, y)
    reduce = {"CONCAT": lambda v: v, "SUM": lambda v: v.sum(0), "MEAN": lambda v: v.mean(0)}[kind]
    assert_trees_close(outs[0], jax.tree.map(reduce, mapped), 1e-5, 1e-6)


def _loss(params, features, targets):
    pred = features @ params["w"] + params["b"]
    return 0.5 * jnp.mean((pred - targets) ** 2)


def _loss_aux(params, features, targets):
    return _loss(params, features, targets), {"pred": features @ params["w"]}


def _dp_grad(lib, size, has_aux, keep_batch_dim):
    clip = lambda g: lib.per_example_global_norm_clip(jax.tree.map(lambda x: x[None], g), 1.0)[0]
    clip_ref = lambda g: optax.per_example_global_norm_clip(
        jax.tree.map(lambda x: x[None], g), 1.0
    )[0]
    micro = mb if lib is gradtx else omb
    loss = _loss_aux if has_aux else _loss
    if not keep_batch_dim:
        loss = functools.partial(lambda f, p, x, t: f(p, x[None], t[None]), loss)
    return micro.micro_grad(
        loss,
        has_aux=has_aux,
        batch_argnums=(1, 2),
        keep_batch_dim=keep_batch_dim,
        microbatch_size=size,
        accumulator=micro.AccumulationType.MEAN,
        transform_fn=clip if lib is gradtx else clip_ref,
        metrics_fn=lambda g: lib.tree.norm(g),
    )


@pytest.mark.parametrize(
    ("size", "has_aux", "keep_batch_dim"), [(None, False, True), (2, True, True), (4, False, False)]
)
def test_micro_grad_trains_like_optax(size, has_aux, keep_batch_dim):
    """DP-style training (per-example clipped mean gradients, then SGD) for 100 steps."""
    rng = np.random.default_rng(4)
    features = jnp.asarray(rng.normal(size=(B, 3)), jnp.float32)
    # noisy targets: the residuals (and so the per-example gradients) stay O(1), no cancellation
    noise = rng.normal(size=B)
    targets = jnp.asarray(features @ np.array([1.0, -2.0, 0.5]) + 0.3 + noise, jnp.float32)
    params = {"w": jnp.zeros(3), "b": jnp.zeros(())}
    libs = (gradtx, optax)
    grad_fns = [_dp_grad(lib, size, has_aux, keep_batch_dim) for lib in libs]
    txs = [lib.sgd(lib.linear_schedule(1.0, 0.1, 50)) for lib in libs]

    @jax.jit
    def step(carries):  # a step of each library's run, in one program
        out = []
        for lib, grad_fn, tx, (p, s) in zip(libs, grad_fns, txs, carries, strict=True):
            grads, aux = grad_fn(p, features, targets)
            u, s = tx.update(grads, s, p)
            out.append((lib.apply_updates(p, u), s, aux))
        return out

    carries = [(params, tx.init(params)) for tx in txs]
    runs: list[list] = [[], []]
    for _ in range(100):
        out = step(carries)
        carries = [(p, s) for p, s, _ in out]
        for history, (p, _, aux) in zip(runs, out, strict=True):
            history.append((p, aux))
    for i, ((p, aux), (rp, raux)) in enumerate(zip(*runs, strict=True)):
        assert_trees_close(p, rp, 1e-5, 1e-6, msg=f"step {i}")
        assert_trees_close(tuple(aux), tuple(raux), 1e-5, 1e-6, msg=f"aux at step {i}")
    assert runs[0][-1][1].values.shape == (B,)


def test_micro_grad_eager_matches_optax():
    rng = np.random.default_rng(5)
    features = rng.normal(size=(B, 3)).astype(np.float32)
    targets = rng.normal(size=(B,)).astype(np.float32)
    params = {"w": np.ones(3, np.float32), "b": np.zeros((), np.float32)}
    params, features, targets = jax.device_put((params, features, targets))
    ours = _dp_grad(gradtx, 2, True, True)(params, features, targets)
    ref = jax.jit(_dp_grad(optax, 2, True, True))(params, features, targets)  # the reference
    assert_trees_close(ours[0], ref[0], 1e-6, 1e-7)
    assert_trees_close(tuple(ours[1]), tuple(ref[1]), 1e-6, 1e-7)


def test_custom_and_optax_accumulators():
    x, _, _ = _data()
    running_max = mb.Accumulator(
        init=lambda spec: jnp.full(spec.shape, -jnp.inf, spec.dtype),
        update=lambda carry, value, i: jnp.maximum(carry, value),
        finalize=lambda carry: carry,
        aggregate=lambda values: jnp.max(values, axis=0),
    )
    ours = mb.microbatch(lambda v: jnp.max(v, axis=0), 0, 2, running_max)(x)
    np.testing.assert_array_equal(ours, np.max(np.asarray(x), axis=0))
    # Optax's accumulation types and Accumulator objects are accepted too
    both = mb.microbatch(
        lambda v: (v.sum(0), v), 0, 4, (omb.AccumulationType.SUM, omb._microbatching._concat(2))
    )(x)
    assert_trees_close(both, (x.sum(0), x), 1e-6, 1e-6)


BAD = [
    (
        "size_0",
        lambda: mb.microbatch(_fun, 0, 0),
        ValueError,
        "microbatch: microbatch_size must be an integer >= 1 or None, got 0",
    ),
    (
        "size_str",
        lambda: mb.micro_vmap(_fun, microbatch_size="2"),
        ValueError,
        "micro_vmap: microbatch_size must be an integer >= 1 or None, got '2'",
    ),
    (
        "reshape_size",
        lambda: mb.reshape_batch_axis(jnp.ones(4), 0),
        ValueError,
        "reshape_batch_axis: microbatch_size must be an integer >= 1, got 0",
    ),
    (
        "argnums",
        lambda: mb.microbatch(_fun, "x", 2),
        ValueError,
        "microbatch: argnums must be an integer or a sequence of them, got 'x'",
    ),
    (
        "in_axes",
        lambda: mb.microbatch(_fun, (0, 1), 2, in_axes=(0,)),
        ValueError,
        "microbatch: in_axes must give one axis per batch argument",
    ),
    (
        "accumulator",
        lambda: mb.microbatch(_fun, 0, 2, "sum"),
        ValueError,
        "microbatch: accumulator leaves must be an AccumulationType",
    ),
    (
        "num_real",
        lambda: mb.microbatch(_fun, 0, 2, num_real_microbatches=-1),
        ValueError,
        "microbatch: num_real_microbatches must be an integer >= 0",
    ),
    (
        "out_axes",
        lambda: mb.micro_vmap(_fun, out_axes=1),
        ValueError,
        "micro_vmap: out_axes must be 0",
    ),
    (
        "has_aux",
        lambda: mb.micro_grad(_loss, has_aux=1),
        ValueError,
        "micro_grad: has_aux must be True or False, got 1",
    ),
    (
        "batch_argnums",
        lambda: mb.micro_grad(_loss, batch_argnums=-1),
        ValueError,
        "micro_grad: batch_argnums must be non-negative integers, got -1",
    ),
    ("fun", lambda: mb.microbatch(3, 0, 2), TypeError, "microbatch: fun must be callable"),
]


@pytest.mark.parametrize(("name", "build", "error", "message"), BAD, ids=[b[0] for b in BAD])
def test_invalid_arguments_raise_with_name_and_value(name, build, error, message):
    with pytest.raises(error) as info:
        build()
    assert str(info.value).startswith(message), str(info.value)


def test_bad_batches_raise_when_called():
    x, y, _ = _data()
    with pytest.raises(
        ValueError, match="microbatch: the batch size 8 must be divisible by microbatch_size 3"
    ):
        mb.microbatch(lambda v: v, 0, 3)(x)
    with pytest.raises(
        ValueError, match=r"microbatch: the batch arguments have different batch sizes \[6, 8\]"
    ):
        mb.microbatch(lambda a, b: a, (0, 1), 2)(x, y[:6])
    with pytest.raises(ValueError, match="MEAN and RUNNING_MEAN accumulators need floating-point"):
        mb.microbatch(lambda v: v, 0, 2, mb.AccumulationType.MEAN)(jnp.arange(8))
