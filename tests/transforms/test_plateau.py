"""reduce_on_plateau (against Optax and a NumPy rule, negative losses included) and RETURNN's
newbob (against a transcription of RETURNN's learning-rate control)."""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib
import pytest

import gradtx

from ..helpers import mixed_params

PARAMS = {"w": jnp.ones(3, jnp.float32)}


def drive(tx, values):
    """Feed `values` one per update (jitted scan); returns the scale applied at each call."""

    @jax.jit
    def go(values):
        def body(state, v):
            updates, state = tx.update(PARAMS, state, PARAMS, value=v)
            return state, updates["w"][0]

        return jax.lax.scan(body, tx.init(PARAMS), values)

    state, scales = go(jnp.asarray(values, jnp.float32))
    return state, np.asarray(scales, np.float64)


def loss_sequence(n=400, seed=0, offset=0.0):
    """A noisy decreasing loss with long plateaus, rounded so comparisons are not knife-edge."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    trend = 2.0 * np.exp(-t / 60.0) + 0.3 * (t > 200)
    noise = rng.normal(scale=0.03, size=n)
    flat = (t // 40) % 3 == 2  # every third stretch of 40 steps is a plateau
    values = np.where(flat, np.round(trend[(t // 40) * 40], 3), trend + noise)
    return np.round(values, 4).astype(np.float32) + np.float32(offset)


def plateau_rule(values, *, factor, patience, rtol, atol, cooldown, accumulation_size, min_scale):
    """The reduce-on-plateau rule with a sign-correct relative margin, in NumPy."""
    scale, best, plateau, cool, buf, out = 1.0, math.inf, 0, 0, [], []
    for v in values:
        buf.append(float(v))
        if len(buf) == accumulation_size:
            avg, buf = float(np.mean(buf)), []
            threshold = math.inf if best == math.inf else best - rtol * abs(best) - atol
            if avg < threshold:
                best, plateau = avg, 0
            else:
                plateau += 1
            if cool > 0:
                cool, plateau = cool - 1, 0
            elif plateau >= patience:
                scale, plateau, cool = max(scale * factor, min_scale), 0, cooldown
        out.append(scale)
    return np.asarray(out)


CONFIGS = [
    dict(
        factor=0.5, patience=5, rtol=1e-4, atol=0.0, cooldown=0, accumulation_size=1, min_scale=0.0
    ),
    dict(
        factor=0.3, patience=3, rtol=1e-3, atol=0.0, cooldown=4, accumulation_size=1, min_scale=0.01
    ),
    dict(
        factor=0.5, patience=2, rtol=1e-2, atol=1e-3, cooldown=2, accumulation_size=4, min_scale=0.0
    ),
    dict(
        factor=0.7, patience=1, rtol=0.0, atol=5e-3, cooldown=1, accumulation_size=3, min_scale=0.2
    ),
]


@pytest.mark.parametrize("config", CONFIGS)
def test_matches_optax_on_positive_losses(config):
    values = loss_sequence()
    _, ours = drive(gradtx.reduce_on_plateau(**config), values)
    _, theirs = drive(optax.contrib.reduce_on_plateau(**config), values)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    assert ours[-1] < 1.0  # the sequence does plateau: the comparison is not vacuous


@pytest.mark.parametrize("offset", [-10.0, -1.5])
@pytest.mark.parametrize("config", CONFIGS)
def test_negative_losses_follow_the_relative_rule(config, offset):
    values = loss_sequence(seed=1, offset=offset)  # all negative (-10) or crossing zero (-1.5)
    _, ours = drive(gradtx.reduce_on_plateau(**config), values)
    np.testing.assert_allclose(ours, plateau_rule(values, **config), rtol=1e-6)
    assert ours[-1] < 1.0


def test_flat_negative_loss_is_a_plateau():
    """Optax's margin `(1 - rtol) * best` makes a flat negative loss look like progress."""
    values = np.full(8, -1.0, np.float32)
    _, ours = drive(gradtx.reduce_on_plateau(factor=0.1, patience=2), values)
    np.testing.assert_allclose(ours, [1, 1, 0.1, 0.1, 0.01, 0.01, 1e-3, 1e-3], rtol=1e-6)


def test_state_layout_chain_dtypes_and_jit():
    params = mixed_params(dtype=jnp.bfloat16)
    tx = gradtx.chain(
        gradtx.reduce_on_plateau(patience=1, factor=0.5, cooldown=1),
        gradtx.scale_by_learning_rate(0.1),
    )
    state = tx.init(params)
    plateau_state = state[0]
    assert isinstance(plateau_state, gradtx.ReduceOnPlateauState)
    assert [x.dtype for x in plateau_state] == [
        jnp.float32,
        jnp.float32,
        jnp.int32,
        jnp.int32,
        jnp.int32,
        jnp.float32,
    ]
    step = jax.jit(lambda g, s, v: tx.update(g, s, params, value=v))
    for v in [1.0, 1.0, 1.0]:
        updates, new_state = step(params, state, jnp.asarray(v, jnp.bfloat16))
        assert jax.tree.structure(new_state) == jax.tree.structure(state)
        state = new_state
    assert all(u.dtype == jnp.bfloat16 for u in jax.tree.leaves(updates))
    assert float(state[0].scale) == 0.5
    leaf = jax.tree.leaves(updates)[0]
    np.testing.assert_allclose(
        np.asarray(leaf, np.float32),
        np.asarray(-0.05 * jax.tree.leaves(params)[0].astype(jnp.float32), np.float32),
        rtol=1e-2,
    )


def test_state_is_optaxs_layout_and_signature_matches():
    import inspect

    from gradtx.transforms._plateau import ReduceLROnPlateauState, ReduceOnPlateauState

    assert ReduceOnPlateauState is ReduceLROnPlateauState is gradtx.contrib.ReduceLROnPlateauState
    assert gradtx.contrib.reduce_on_plateau is gradtx.reduce_on_plateau
    assert ReduceLROnPlateauState._fields == optax.contrib.ReduceLROnPlateauState._fields
    ours = inspect.signature(gradtx.reduce_on_plateau).parameters
    theirs = inspect.signature(optax.contrib.reduce_on_plateau).parameters
    assert [(n, p.default) for n, p in ours.items()] == [(n, p.default) for n, p in theirs.items()]


def drive_states(tx, values):
    """Like `drive`, but returns every state along the run."""

    @jax.jit
    def go(values):
        def body(state, v):
            _, state = tx.update(PARAMS, state, PARAMS, value=v)
            return state, state

        return jax.lax.scan(body, tx.init(PARAMS), values)[1]

    return go(jnp.asarray(values, jnp.float32))


@pytest.mark.parametrize("config", [CONFIGS[1], CONFIGS[2]])
def test_every_state_field_matches_optax(config):
    values = loss_sequence(n=120, seed=2)
    ours = drive_states(gradtx.reduce_on_plateau(**config), values)
    theirs = drive_states(optax.contrib.reduce_on_plateau(**config), values)
    for name in optax.contrib.ReduceLROnPlateauState._fields:
        np.testing.assert_allclose(
            getattr(ours, name), getattr(theirs, name), rtol=1e-6, err_msg=name
        )
    assert len(set(np.asarray(ours.scale).tolist())) > 1


@functools.cache
def _optax_field_steps():
    """gradtx's and Optax's jitted update for one configuration (compiled once per module)."""
    kw = dict(factor=0.5, patience=5, rtol=1e-4, atol=0.0, cooldown=5, accumulation_size=3)
    kw["min_scale"] = 0.01
    return (
        jax.jit(gradtx.reduce_on_plateau(**kw).update),
        jax.jit(optax.contrib.reduce_on_plateau(**kw).update),
    )


@pytest.mark.parametrize(
    "fields",
    [
        dict(best_value=1.0, plateau_count=3, scale=0.1, cooldown_count=0, count=0, avg_value=0.0),
        dict(best_value=1.0, plateau_count=0, scale=0.1, cooldown_count=3, count=0, avg_value=0.0),
        dict(best_value=1.0, plateau_count=4, scale=0.01, cooldown_count=0, count=0, avg_value=0.0),
        dict(best_value=2.0, plateau_count=1, scale=0.5, cooldown_count=0, count=2, avg_value=1.5),
    ],
)
@pytest.mark.parametrize("value", [0.5, 2.0])
def test_states_built_by_optax_field_names(fields, value):
    """Optax's own tests build the state by field name and unpack it positionally."""
    from gradtx.transforms._plateau import ReduceLROnPlateauState

    dtypes = dict(plateau_count=jnp.int32, cooldown_count=jnp.int32, count=jnp.int32)
    arrays = {k: jnp.asarray(v, dtypes.get(k, jnp.float32)) for k, v in fields.items()}
    ours, theirs = _optax_field_steps()
    for _ in range(3):
        v = jnp.asarray(value, jnp.float32)
        u1, s1 = ours(PARAMS, ReduceLROnPlateauState(**arrays), value=v)
        u2, s2 = theirs(PARAMS, optax.contrib.ReduceLROnPlateauState(**arrays), value=v)
        np.testing.assert_allclose(u1["w"], u2["w"], rtol=1e-6)
        scale, _best_value, _plateau_count, _cooldown_count, *_ = s1  # unpacks as Optax's
        for a, b in zip(s1, s2, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        arrays = s1._asdict()
    assert s1.count.dtype == jnp.int32 and scale.dtype == jnp.float32


def test_missing_value_says_how_to_pass_it():
    tx = gradtx.chain(gradtx.reduce_on_plateau(), gradtx.scale_by_learning_rate(0.1))
    with pytest.raises(ValueError, match=r"value=loss"):
        tx.update(PARAMS, tx.init(PARAMS), PARAMS)
    with pytest.raises(ValueError, match="scalar"):
        gradtx.reduce_on_plateau().update(
            PARAMS, gradtx.reduce_on_plateau().init(PARAMS), value=jnp.ones(2)
        )


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        (dict(patience=0), "patience"),
        (dict(factor=0.0), "factor"),
        (dict(factor=1.5), "factor"),
        (dict(cooldown=-1), "cooldown"),
        (dict(accumulation_size=0), "accumulation_size"),
        (dict(rtol=-0.1), "rtol"),
        (dict(atol=-1.0), "atol"),
        (dict(min_scale=-0.1), "min_scale"),
    ],
)
def test_reduce_on_plateau_validation(kwargs, arg):
    with pytest.raises(ValueError, match=rf"reduce_on_plateau: {arg} must be"):
        gradtx.reduce_on_plateau(**kwargs)


# --------------------------------------------------------------------------------------------
# newbob: a transcription of RETURNN's learning_rate_control (epochs numbered from 1)
# --------------------------------------------------------------------------------------------


def returnn_newbob(
    errors,
    kind,
    *,
    decay=0.5,
    growth=1.0,
    threshold=-0.01,
    grow_threshold=None,
    div_by_old=False,
    relative_lr=False,
    num_epochs=5,
    update_interval=None,
    min_lr=0.0,
    min_epochs_per_lr=0,
    default=1.0,
):
    """The learning rate RETURNN picks for epoch e+1 once epoch e's error is known, per e."""
    lrs, errs = {}, {}
    interval = num_epochs if update_interval is None else update_interval
    grow_thr = threshold if grow_threshold is None else grow_threshold

    def relative_error(old, new):
        r = (errs[new] - errs[old]) / abs(errs[old] if div_by_old else errs[new])
        if relative_lr and lrs[new] > 0:
            r /= lrs[new] / default
        return r

    def decay_or_grow(lr, dec, grow=None):
        grow = (not dec) if grow is None else grow
        if dec:
            lr = max(lr * decay, min_lr)
        if grow:
            lr = lr * growth
        return lr

    def calc(e):
        before = [x for x in sorted(lrs) if x < e]
        if min_epochs_per_lr > 1:
            last = [lrs[x] for x in before[-min_epochs_per_lr:]]
            if len(set(last)) >= 2 or 0 < len(last) < min_epochs_per_lr:
                return last[-1]
        if kind == "multi_epoch":
            lr = lrs[before[-1]] if before else default
            if interval > 1 and e % interval != 1:
                return lr
            window = before[-(num_epochs + 1) :]
            if len(window) <= 1:
                return lr
            pairs = itertools.pairwise(window)
            mean = float(np.mean([relative_error(a, b) for a, b in pairs]))
            return decay_or_grow(lr, mean > threshold, mean < grow_thr)
        if e - 1 not in lrs:
            return default
        lr = lrs[e - 1]
        if e - 2 not in lrs:
            return lr
        if kind == "relative":
            return decay_or_grow(lr, relative_error(e - 2, e - 1) > threshold)
        return decay_or_grow(lr, errs[e - 1] - errs[e - 2] > threshold)

    out = []
    for e, err in enumerate(errors, start=1):
        if e not in lrs:
            lrs[e] = calc(e)
        errs[e] = float(err)
        lrs[e + 1] = calc(e + 1)
        out.append(lrs[e + 1] / default)
    return np.asarray(out)


def epoch_errors(n=60, seed=3):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    errors = 1.0 + 2.0 * np.exp(-t / 12.0) + rng.normal(scale=0.02, size=n)
    errors[25:35] += np.linspace(0.0, 0.2, 10)  # a bad stretch
    return np.round(errors, 4).astype(np.float32)


NEWBOB_CASES = [
    ("relative", {}, {}),
    ("relative", dict(relative_error_div_by_old=True), dict(div_by_old=True)),
    (
        "relative",
        dict(growth=1.1, relative_to_scale=True, min_scale=0.05),
        dict(growth=1.1, relative_lr=True, min_lr=0.05),
    ),
    ("newbob_abs", dict(threshold=-0.05, decay=0.7), dict(threshold=-0.05, decay=0.7)),
    (
        "multi_epoch",
        dict(num_epochs=3, update_interval=1, grow_threshold=-0.03, growth=1.2),
        dict(num_epochs=3, update_interval=1, grow_threshold=-0.03, growth=1.2),
    ),
    ("multi_epoch", {}, {}),
    (
        "multi_epoch",
        dict(num_epochs=4, update_interval=2, relative_to_scale=True),
        dict(num_epochs=4, update_interval=2, relative_lr=True),
    ),
    ("relative", dict(min_epochs_per_scale=3, growth=1.05), dict(min_epochs_per_lr=3, growth=1.05)),
]


@pytest.mark.parametrize(("mode", "ours", "ref"), NEWBOB_CASES)
def test_newbob_matches_returnn(mode, ours, ref):
    errors = epoch_errors()
    kind = {"newbob_abs": "absolute"}.get(mode, mode)
    want = returnn_newbob(errors, kind, **ref)
    _, got = drive(gradtx.newbob(mode, **ours), errors)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert len(set(np.round(want, 6))) > 1  # the scale does change along the sequence


def test_newbob_with_scaled_learning_rate_rule():
    """relative_to_scale divides by lr / initial lr: RETURNN with a default lr of 0.3."""
    errors = epoch_errors(seed=4)
    want = returnn_newbob(errors, "relative", relative_lr=True, growth=1.1, default=0.3)
    _, got = drive(gradtx.newbob(relative_to_scale=True, growth=1.1), errors)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_newbob_accumulates_an_epoch_over_several_calls():
    errors = epoch_errors(n=40)
    rng = np.random.default_rng(5)
    per_step = np.repeat(errors, 4) + rng.normal(scale=0.01, size=160).astype(np.float32)
    epoch_means = per_step.reshape(40, 4).mean(axis=1)
    want = returnn_newbob(epoch_means, "relative")
    _, got = drive(gradtx.newbob(accumulation_size=4), per_step)
    np.testing.assert_allclose(got[3::4], want, rtol=1e-5)
    # within an epoch the scale holds the value set at the end of the previous one
    np.testing.assert_allclose(got[4::4], want[:-1], rtol=1e-5)
    np.testing.assert_allclose(got[:3], 1.0)


def test_newbob_state_and_errors():
    tx = gradtx.newbob("newbob_multi_epoch", num_epochs=4)
    state = tx.init(PARAMS)
    assert isinstance(state, gradtx.NewbobState) and state.relative_errors.shape == (4,)
    with pytest.raises(ValueError, match=r"newbob needs the monitored value"):
        tx.update(PARAMS, state)
    with pytest.raises(ValueError, match=r"newbob: grow_threshold must be <= threshold"):
        gradtx.newbob("multi_epoch", threshold=-0.02, grow_threshold=0.0)
    with pytest.raises(ValueError, match=r"newbob: mode must be one of .*did you mean"):
        gradtx.newbob("relativ")
    for kwargs, arg in [
        (dict(decay=0.0), "decay"),
        (dict(num_epochs=0), "num_epochs"),
        (dict(update_interval=0), "update_interval"),
        (dict(accumulation_size=0), "accumulation_size"),
        (dict(min_epochs_per_scale=-1), "min_epochs_per_scale"),
    ]:
        with pytest.raises(ValueError, match=rf"newbob: {arg} must be"):
            gradtx.newbob(**kwargs)
