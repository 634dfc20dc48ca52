"""RMSprop, centered RMSprop, Adagrad and Adadelta primitives against Optax and NumPy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import compare_to_numpy, grad_sequence, mixed_params, run, state_dtypes
from ..optax_reference import compare_to_optax, with_modes

# (id, ours, Optax's): the same updates over 100 steps. Each primitive's base configuration runs
# eagerly and a variant under jit (see `with_modes` below).
MATCHES_OPTAX = [
    ("rms", lambda: gradtx.scale_by_rms(), lambda: optax.scale_by_rms()),
    (
        "rms_eps_outside_debiased",
        lambda: gradtx.scale_by_rms(0.8, 1e-6, 0.5, eps_in_sqrt=False, bias_correction=True),
        lambda: optax.scale_by_rms(0.8, 1e-6, 0.5, eps_in_sqrt=False, bias_correction=True),
    ),
    (
        "stddev_eps_outside",
        lambda: gradtx.scale_by_stddev(0.8, 1e-3, 0.2, eps_in_sqrt=False),
        lambda: optax.scale_by_stddev(0.8, 1e-3, 0.2, eps_in_sqrt=False),
    ),
    (
        "rms_centered",
        lambda: gradtx.scale_by_rms(0.95, 1e-4, centered=True),
        lambda: optax.scale_by_stddev(0.95, 1e-4),
    ),
    ("rss", lambda: gradtx.scale_by_rss(), lambda: optax.scale_by_rss()),
    ("adadelta", lambda: gradtx.scale_by_adadelta(), lambda: optax.scale_by_adadelta()),
    # Other settings (zero initial accumulator, rho = 0.95, ...) are covered by the alias tests.
]


@pytest.mark.parametrize(
    ("key", "ours", "reference", "jit"),
    with_modes(
        MATCHES_OPTAX,
        eager={"rms", "rms_centered", "rss", "adadelta"},
        jit={"rms_eps_outside_debiased", "stddev_eps_outside", "rss", "adadelta"},
    ),
)
def test_matches_optax(key, ours, reference, jit):
    compare_to_optax(
        ours(), reference(), jit=jit, reference_key=f"{__name__}:{key}", reference_jit=False
    )


def _nnabla_adagrad(lr, eps):
    """nnabla's Adagrad (reference sheet §1): G += g^2; w -= lr g / (sqrt(G) + eps)."""

    def make():
        acc: list = []

        def ref(grads, params):
            if not acc:
                acc.extend(np.zeros_like(g) for g in grads)
            out = []
            for i, g in enumerate(grads):
                acc[i] = acc[i] + g * g
                out.append(-lr * g / (np.sqrt(acc[i]) + eps))
            return out

        return ref

    return make


def test_rss_eps_outside_matches_nnabla_adagrad(use_jit):
    tx = gradtx.adagrad(0.05, initial_accumulator_value=0.0, eps=1e-8, eps_in_sqrt=False)
    compare_to_numpy(tx, _nnabla_adagrad(0.05, 1e-8), jit=use_jit)


def test_rss_with_zero_accumulator_passes_zero_gradients_as_zero():
    tx = gradtx.scale_by_rss(0.0)
    params = {"a": np.zeros(3, np.float32), "b": np.ones(2, np.float32)}
    updates, _ = jax.jit(lambda g: tx.update(g, tx.init(params)))(params)
    np.testing.assert_array_equal(updates["a"], np.zeros(3))
    np.testing.assert_allclose(updates["b"], np.ones(2) / np.sqrt(1.0 + 1e-7), rtol=1e-6)


def test_rms_state_layout_does_not_depend_on_bias_correction():
    params = mixed_params()
    plain = gradtx.scale_by_rms().init(params)
    debiased = gradtx.scale_by_rms(bias_correction=True).init(params)
    assert jax.tree.structure(plain) == jax.tree.structure(debiased)


@pytest.mark.parametrize(
    "make",
    [
        lambda: gradtx.scale_by_rms(),
        lambda: gradtx.scale_by_stddev(),
        lambda: gradtx.scale_by_rss(),
        lambda: gradtx.scale_by_adadelta(),
    ],
    ids=["rms", "stddev", "rss", "adadelta"],
)
def test_bf16_keeps_dtypes_and_stays_close_to_float32(make):
    tx = make()
    params32 = mixed_params()
    params16 = mixed_params(dtype=jnp.bfloat16)
    grads32 = grad_sequence(params32, 5, scale=0.1)
    grads16 = [gradtx.tree.cast(g, jnp.bfloat16) for g in grads32]
    state16 = tx.init(params16)
    assert all(d == jnp.bfloat16 for d in state_dtypes(state16) if d != jnp.int32)
    updates16, final16, _ = run(tx, params16, grads16, jit=False)
    # The same bf16 gradients, carried in float32: the bf16 run may only differ by its storage.
    grads = [gradtx.tree.cast(g, jnp.float32) for g in grads16]
    updates32, _, _ = run(tx, params32, grads, jit=False)
    assert state_dtypes(final16) == state_dtypes(state16)
    for u16, u32 in zip(updates16, updates32, strict=True):
        for a, b in zip(jax.tree.leaves(u16), jax.tree.leaves(u32), strict=True):
            assert a.dtype == jnp.bfloat16
            np.testing.assert_allclose(np.asarray(a, np.float32), b, rtol=5e-2, atol=1e-2)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: gradtx.scale_by_rms(decay=1.0), r"scale_by_rms: decay must be in \[0.0, 1.0\)"),
        (lambda: gradtx.scale_by_rms(eps=-1e-8), "scale_by_rms: eps must be >= 0, got -1e-08"),
        (
            lambda: gradtx.scale_by_rms(initial_scale=-1.0),
            "scale_by_rms: initial_scale must be >= 0, got -1.0",
        ),
        (
            lambda: gradtx.scale_by_rms(decay=-0.1, centered=True),
            r"scale_by_stddev: decay must be in \[0.0, 1.0\), got -0.1",
        ),
        (lambda: gradtx.scale_by_stddev(eps=-1), "scale_by_stddev: eps must be >= 0, got -1"),
        (
            lambda: gradtx.scale_by_rss(initial_accumulator_value=-0.1),
            "scale_by_rss: initial_accumulator_value must be >= 0, got -0.1",
        ),
        (lambda: gradtx.scale_by_rss(eps=-1.0), "scale_by_rss: eps must be >= 0, got -1.0"),
        (
            lambda: gradtx.scale_by_adadelta(rho=1.5),
            r"scale_by_adadelta: rho must be in \[0.0, 1.0\), got 1.5",
        ),
        (lambda: gradtx.scale_by_adadelta(eps=-2), "scale_by_adadelta: eps must be >= 0, got -2"),
    ],
)
def test_invalid_hyperparameters_raise_naming_argument_and_value(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_traced_hyperparameters_are_accepted():
    params = mixed_params()
    grads = grad_sequence(params, 1)[0]

    @jax.jit
    def step(decay, eps, rho):
        rms = gradtx.scale_by_rms(decay, eps, bias_correction=True)
        delta = gradtx.scale_by_adadelta(rho, eps)
        a, _ = rms.update(grads, rms.init(params))
        b, _ = delta.update(grads, delta.init(params))
        return a, b

    traced = step(0.8, 1e-3, 0.7)
    rms, delta = (
        gradtx.scale_by_rms(0.8, 1e-3, bias_correction=True),
        gradtx.scale_by_adadelta(0.7, 1e-3),
    )

    @jax.jit
    def concrete():  # the same hyperparameters as Python numbers
        return rms.update(grads, rms.init(params))[0], delta.update(grads, delta.init(params))[0]

    for a, b in zip(jax.tree.leaves(traced), jax.tree.leaves(concrete()), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_mismatched_state_names_the_transformation_and_path():
    tx = gradtx.scale_by_rms()
    state = tx.init({"a": jnp.ones(2), "b": jnp.ones(3)})
    with pytest.raises(ValueError, match=r"scale_by_rms: updates and state\.nu differ"):
        tx.update({"a": jnp.ones(2)}, state)


# -- centered RMSprop: the variance is clamped at 0 --------------------------------------------

CENTERED = [
    ("stddev", lambda: gradtx.scale_by_stddev()),
    ("stddev_eps_outside", lambda: gradtx.scale_by_stddev(eps_in_sqrt=False)),
    ("rms_centered", lambda: gradtx.scale_by_rms(centered=True)),
    ("rmsprop_centered", lambda: gradtx.rmsprop(1e-3, centered=True)),
    ("rmsprop_centered_momentum", lambda: gradtx.rmsprop(1e-3, centered=True, momentum=0.9)),
    ("rmsprop_graves", lambda: gradtx.rmsprop_graves(1e-4)),
]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=str)
@pytest.mark.parametrize(("name", "make"), CENTERED, ids=[c[0] for c in CENTERED])
def test_centered_stays_finite_for_a_constant_gradient(name, make, dtype):
    # v - m^2 of a constant gradient is a difference of equal numbers; before the clamp, 345 of
    # 1000 elements were NaN after 50 steps (in Optax too).
    tx = make()
    params = {"w": np.zeros(1000, dtype)}
    grads = {"w": np.linspace(-3.0, 3.0, 1000).astype(dtype)}

    @jax.jit
    def go():
        def body(s, _):
            u, s = tx.update(grads, s, params)
            return s, u["w"]

        return jax.lax.scan(body, tx.init(params), None, length=1000)

    state, updates = go()
    assert np.all(np.isfinite(np.asarray(updates, np.float32)))
    for leaf in jax.tree.leaves(state):
        assert np.all(np.isfinite(np.asarray(leaf, np.float32)))


def test_optax_bias_corrected_centered_rmsprop_gives_huge_then_nan_updates():
    # Why bias_correction=True is refused: Optax's v_hat - m_hat^2 is exactly 0 at the first
    # step and rounds below 0 later, so its updates are huge and then NaN.
    g = {"w": np.linspace(-3.0, 3.0, 1000).astype(np.float32)}
    tx = optax.scale_by_stddev(bias_correction=True)

    @jax.jit
    def go():
        def body(state, _):
            u, state = tx.update(g, state)
            return state, u["w"]

        return jax.lax.scan(body, tx.init(g), None, length=50)[1]

    updates = np.asarray(go())
    # the first variance is 0 up to rounding: steps of ~1/sqrt(eps) times g, or NaN
    huge_or_nan = ~(np.abs(updates[0]) <= 1000.0 * np.abs(g["w"]))
    assert np.mean(huge_or_nan) > 0.5
    bad = max(int(np.sum(~np.isfinite(u))) for u in updates[1:])
    assert bad > 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: gradtx.scale_by_stddev(bias_correction=True),
        lambda: gradtx.scale_by_rms(centered=True, bias_correction=True),
        lambda: gradtx.rmsprop(1e-3, centered=True, bias_correction=True),
    ],
)
def test_centered_with_bias_correction_is_rejected(make):
    with pytest.raises(ValueError, match=r"bias_correction=True is not supported with centering"):
        make()
