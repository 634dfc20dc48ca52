"""The Adam-family primitives against Optax, plus validation, dtypes and traced hyperparameters."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import grad_sequence, mixed_params
from ..optax_reference import compare_to_optax

# (id, ours, Optax's): each pair must give the same updates over 100 steps. Each primitive's
# first (default) case also runs eagerly; the variants run under jit. (Non-default b1, b2, eps,
# eps_root, Nesterov and NovoGrad's decay also reach every primitive through the alias tests.)
MATCHES_OPTAX = [
    ("adam", lambda: gradtx.scale_by_adam(), lambda: optax.scale_by_adam()),
    (
        "adam_nesterov_eps_root",
        lambda: gradtx.scale_by_adam(0.8, 0.95, 1e-3, 1e-2, nesterov=True),
        lambda: optax.scale_by_adam(0.8, 0.95, 1e-3, 1e-2, nesterov=True),
    ),
    ("adamax", lambda: gradtx.scale_by_adamax(), lambda: optax.scale_by_adamax()),
    ("amsgrad", lambda: gradtx.scale_by_amsgrad(), lambda: optax.scale_by_amsgrad()),
    (
        "amsgrad_no_bias_correction",
        lambda: gradtx.scale_by_amsgrad(
            0.9, 0.99, 1e-3, 1e-6, bias_correction_mu=False, bias_correction_nu=False
        ),
        lambda: optax.scale_by_amsgrad(
            0.9, 0.99, 1e-3, 1e-6, bias_correction_mu=False, bias_correction_nu=False
        ),
    ),
    ("belief", lambda: gradtx.scale_by_belief(), lambda: optax.scale_by_belief()),
    (
        "belief_nesterov",
        lambda: gradtx.scale_by_belief(0.8, 0.99, 1e-3, 1e-4, nesterov=True),
        lambda: optax.scale_by_belief(0.8, 0.99, 1e-3, 1e-4, nesterov=True),
    ),
    ("yogi", lambda: gradtx.scale_by_yogi(), lambda: optax.scale_by_yogi()),
    (
        "yogi_custom",
        lambda: gradtx.scale_by_yogi(0.8, 0.9, 1e-2, 1e-3, initial_accumulator_value=0.5),
        lambda: optax.scale_by_yogi(0.8, 0.9, 1e-2, 1e-3, initial_accumulator_value=0.5),
    ),
    ("radam", lambda: gradtx.scale_by_radam(), lambda: optax.scale_by_radam()),
    (
        # b2 = 0.9 makes rho_t cross the threshold (8) within the run, so both branches are hit.
        "radam_nesterov_threshold",
        lambda: gradtx.scale_by_radam(0.8, 0.9, 1e-3, 1e-2, threshold=8.0, nesterov=True),
        lambda: optax.scale_by_radam(0.8, 0.9, 1e-3, 1e-2, threshold=8.0, nesterov=True),
    ),
    ("novograd", lambda: gradtx.scale_by_novograd(), lambda: optax.scale_by_novograd()),
]
DEFAULT_CASES = {"adam", "adamax", "amsgrad", "belief", "yogi", "radam", "novograd"}


def _optax_cases():
    for name, ours, reference in MATCHES_OPTAX:
        for jit in [False, True] if name in DEFAULT_CASES else [True]:
            yield pytest.param(ours, reference, jit, id=f"{'jit' if jit else 'eager'}-{name}")


@pytest.mark.parametrize(("ours", "reference", "jit"), list(_optax_cases()))
def test_matches_optax(ours, reference, jit, request):
    # NovoGrad's momentum sums O(1) normalised steps that cancel to ~1e-4 in a few entries, and
    # its per-tensor norms are reductions that XLA orders differently when fused than eagerly:
    # an absolute slack of 1e-6 (relative to O(1) terms) covers that.
    atol = 1e-6 if "novograd" in request.node.callspec.id else 1e-7
    name = request.node.callspec.id.split("-", 1)[1]
    compare_to_optax(ours(), reference(), jit=jit, atol=atol, reference_key=f"{__name__}:{name}")


def test_radam_rectification_switches_on_within_the_run():
    # Guards the radam_threshold case above: the rho_t >= threshold branch must be reached.
    b2, threshold = 0.9, 8.0
    ro_inf = 2 / (1 - b2) - 1
    ro = [ro_inf - 2 * t * b2**t / (1 - b2**t) for t in range(1, 101)]
    assert ro[0] < threshold <= ro[-1]


def test_novograd_schedule_weight_decay_matches_injected_optax():
    decay = lambda count: 0.1 / (1.0 + 0.05 * count)
    ours = gradtx.scale_by_novograd(weight_decay=decay)
    reference = optax.inject_hyperparams(optax.scale_by_novograd)(weight_decay=decay)
    compare_to_optax(ours, reference, jit=True, atol=1e-6)


def test_novograd_without_decay_needs_no_params():
    params = mixed_params()
    g = grad_sequence(params, 1)[0]
    tx = gradtx.scale_by_novograd()
    with_params, _ = tx.update(g, tx.init(params), params)
    without, _ = tx.update(g, tx.init(params))
    for a, b in zip(jax.tree.leaves(with_params), jax.tree.leaves(without), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_novograd_with_decay_needs_params():
    params = mixed_params()
    tx = gradtx.scale_by_novograd(weight_decay=0.1)
    with pytest.raises(ValueError, match="scale_by_novograd needs the current parameters"):
        tx.update(grad_sequence(params, 1)[0], tx.init(params))


def test_novograd_momentum_may_be_8_bit():
    # the momentum is a moment buffer of the tier (plain or gradtx.quantized()); the per-leaf
    # norm scalars are not, and a quantized nu_dtype is refused at construction
    params = jax.device_put(
        {"w": np.random.default_rng(0).normal(size=(64, 80)).astype(np.float32)}
    )
    grads = grad_sequence(params, 20)
    plain, quantized = (
        gradtx.scale_by_novograd(),
        gradtx.scale_by_novograd(mu_dtype=gradtx.quantized(block_size=256, min_size=0)),
    )
    s_plain, s_quant = jax.jit(lambda p: (plain.init(p), quantized.init(p)))(params)
    assert s_quant.mu["w"].codes.dtype == jnp.int8  # a signed 8-bit code per value

    @jax.jit  # both in one program, reused for every step
    def step(g, s_plain, s_quant):
        return plain.update(g, s_plain), quantized.update(g, s_quant)

    for g in grads:
        (u_plain, s_plain), (u_quant, s_quant) = step(g, s_plain, s_quant)
    scale = float(np.max(np.abs(np.asarray(u_plain["w"]))))
    np.testing.assert_allclose(u_quant["w"], u_plain["w"], atol=0.05 * scale)
    with pytest.raises(ValueError, match=r"scale_by_novograd: nu_dtype must be a floating-point"):
        gradtx.scale_by_novograd(nu_dtype=gradtx.quantized())


# Factories taking (b1, b2, eps) so the same cases serve validation and traced hyperparameters.
FACTORIES = {
    "scale_by_adam": lambda b1, b2, eps: gradtx.scale_by_adam(b1, b2, eps, nesterov=True),
    "scale_by_adamax": gradtx.scale_by_adamax,
    "scale_by_amsgrad": gradtx.scale_by_amsgrad,
    "scale_by_belief": gradtx.scale_by_belief,
    "scale_by_yogi": gradtx.scale_by_yogi,
    "scale_by_radam": gradtx.scale_by_radam,
    "scale_by_novograd": lambda b1, b2, eps: gradtx.scale_by_novograd(b1, b2, eps, 0.0, 0.1),
}


@pytest.mark.parametrize("who", list(FACTORIES))
@pytest.mark.parametrize(
    ("arg", "value", "kwargs"),
    [
        ("b1", "1.0", {"b1": 1.0}),
        ("b1", "-0.1", {"b1": -0.1}),
        ("b2", "1.5", {"b2": 1.5}),
        ("eps", "-1e-08", {"eps": -1e-8}),
    ],
)
def test_invalid_moment_hyperparameters_raise(who, arg, value, kwargs):
    args = {"b1": 0.9, "b2": 0.99, "eps": 1e-8, **kwargs}
    allowed = ">= 0" if arg == "eps" else "in [0.0, 1.0)"
    with pytest.raises(ValueError) as info:
        FACTORIES[who](**args)
    assert str(info.value) == f"{who}: {arg} must be {allowed}, got {value}"


@pytest.mark.parametrize(
    ("factory", "kwargs", "message"),
    [
        (
            gradtx.scale_by_adam,
            {"eps_root": -1.0},
            "scale_by_adam: eps_root must be >= 0, got -1.0",
        ),
        (
            gradtx.scale_by_amsgrad,
            {"eps_root": -0.5},
            "scale_by_amsgrad: eps_root must be >= 0, got -0.5",
        ),
        (
            gradtx.scale_by_belief,
            {"eps_root": -0.5},
            "scale_by_belief: eps_root must be >= 0, got -0.5",
        ),
        (
            gradtx.scale_by_yogi,
            {"initial_accumulator_value": -1.0},
            "scale_by_yogi: initial_accumulator_value must be >= 0, got -1.0",
        ),
        (
            gradtx.scale_by_radam,
            {"threshold": 3.0},
            r"scale_by_radam: threshold must be in [4.0, inf], got 3.0",
        ),
        (
            gradtx.scale_by_novograd,
            {"weight_decay": -0.1},
            "scale_by_novograd: weight_decay must be >= 0, got -0.1",
        ),
    ],
)
def test_invalid_other_hyperparameters_raise(factory, kwargs, message):
    with pytest.raises(ValueError) as info:
        factory(**kwargs)
    assert str(info.value) == message


def _small_params() -> dict:
    """A matrix and a vector: enough for checks that are not about tree handling, and quick to
    compile for all primitives at once."""
    w = np.random.default_rng(0).normal(size=(3, 2)).astype(np.float32)
    return jax.device_put({"w": w, "b": np.ones(2, np.float32)})


def test_traced_hyperparameters_are_accepted():
    # One compilation for all primitives: b1, b2, eps are traced when each is constructed.
    params = _small_params()
    g = grad_sequence(params, 1)[0]

    def first_updates(b1, b2, eps):
        out = {}
        for who, factory in FACTORIES.items():
            tx = factory(b1, b2, eps)
            out[who] = tx.update(g, tx.init(params), params)[0]
        return out

    traced = jax.jit(first_updates)(jnp.float32(0.8), jnp.float32(0.95), jnp.float32(1e-6))
    # compiled too, the hyperparameters Python floats, concrete while the updates are traced
    concrete = jax.jit(lambda: first_updates(0.8, 0.95, 1e-6))()
    for who in FACTORIES:
        for a, b in zip(jax.tree.leaves(traced[who]), jax.tree.leaves(concrete[who]), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, err_msg=who)


WITH_DTYPES = {
    "scale_by_adam": gradtx.scale_by_adam,
    "scale_by_adamax": gradtx.scale_by_adamax,
    "scale_by_amsgrad": gradtx.scale_by_amsgrad,
    "scale_by_belief": gradtx.scale_by_belief,
    "scale_by_yogi": gradtx.scale_by_yogi,
    "scale_by_radam": gradtx.scale_by_radam,
    "scale_by_novograd": gradtx.scale_by_novograd,
}


def test_mu_and_nu_dtype_hold_the_state_dtype():
    params = _small_params()  # float32
    txs = {who: f(mu_dtype=jnp.bfloat16, nu_dtype=jnp.bfloat16) for who, f in WITH_DTYPES.items()}

    @jax.jit
    def two_steps(g1, g2):
        out = {}
        for who, tx in txs.items():
            _, state = tx.update(g1, tx.init(params), params)
            out[who] = tx.update(g2, state, params)
        return out

    for who, (updates, state) in two_steps(*grad_sequence(params, 2)).items():
        assert state.count.dtype == jnp.int32 and int(state.count) == 2, who
        moments = [x for name, x in state._asdict().items() if name != "count"]
        assert {x.dtype for x in jax.tree.leaves(moments)} == {jnp.dtype(jnp.bfloat16)}, who
        assert {u.dtype for u in jax.tree.leaves(updates)} == {jnp.dtype(jnp.float32)}, who


def test_tiny_float16_gradient_gives_a_finite_update():
    # Regression: Adam squared g = 1e-3 in float16, (1 - b2) g^2 underflowed to 0 and the first
    # update was -inf. The rules now widen the gradients to float32 first.
    params = {"w": np.ones(3, np.float16)}
    g = {"w": np.array([1e-3, -1e-3, 0.5], np.float16)}
    txs = {who: factory() for who, factory in WITH_DTYPES.items()}
    first = jax.jit(
        lambda g: {w: tx.update(g, tx.init(params), params)[0] for w, tx in txs.items()}
    )
    for who, updates in first(g).items():
        u = np.asarray(updates["w"], np.float32)
        assert updates["w"].dtype == jnp.float16, who
        assert np.all(np.isfinite(u)), (who, u)
        assert np.all(np.sign(u) == np.sign(np.asarray(g["w"], np.float32))), (who, u)


def test_structure_mismatch_names_the_transformation_and_path():
    params = {"a": jnp.ones(2), "b": jnp.ones(3)}
    tx = gradtx.scale_by_belief()
    with pytest.raises(ValueError, match=r"scale_by_belief: updates and state\.mu differ"):
        tx.update({"a": jnp.ones(2)}, tx.init(params))


def test_amsgrad_denominator_never_shrinks():
    # After a large gradient, AMSGrad keeps dividing by its maximum: a later small gradient
    # gets a smaller step than Adam gives it.
    params = {"w": np.zeros(1, np.float32)}
    grads = [{"w": np.array([10.0], np.float32)}] + [{"w": np.array([0.1], np.float32)}] * 30
    ams, adam = gradtx.scale_by_amsgrad(), gradtx.scale_by_adam()

    @jax.jit  # the 31 steps of both in one program
    def last_updates(params, grads):
        s_ams, s_adam = ams.init(params), adam.init(params)
        for g in grads:
            u_ams, s_ams = ams.update(g, s_ams)
            u_adam, s_adam = adam.update(g, s_adam)
        return u_ams, u_adam

    u_ams, u_adam = last_updates(params, grads)
    assert abs(float(np.asarray(u_ams["w"])[0])) < abs(float(np.asarray(u_adam["w"])[0]))


def test_bf16_moments_update_is_computed_from_the_stored_moments():
    # With bf16 buffers the update is a function of the saved state alone (and XLA can then
    # write the moments in place): u_t = m_hat(mu_t) / (sqrt(nu_t / c2 + eps_root) + eps), with
    # mu_t, nu_t the bf16 values in the returned state. Over 100 steps it stays within bf16
    # rounding of Optax, which reads the unrounded float32 moments.
    b1, b2, eps, eps_root = 0.8, 0.95, 1e-3, 1e-2
    bf16 = jnp.bfloat16
    tx = gradtx.scale_by_adam(b1, b2, eps, eps_root, mu_dtype=bf16, nu_dtype=bf16)
    ref = optax.scale_by_adam(b1, b2, eps, eps_root, mu_dtype=bf16)
    params = mixed_params()
    step = jax.jit(lambda g, s, ref_s: (tx.update(g, s), ref.update(g, ref_s)))
    state, ref_state = jax.jit(lambda p: (tx.init(p), ref.init(p)))(params)
    for t, g in enumerate(grad_sequence(params, 100), start=1):
        (u, state), (ref_u, ref_state) = step(g, state, ref_state)
        c1, c2 = 1 - b1**t, 1 - b2**t
        for ui, mi, vi, ri in zip(
            *(jax.tree.leaves(x) for x in (u, state.mu, state.nu, ref_u)), strict=True
        ):
            assert mi.dtype == vi.dtype == bf16
            m, v = np.asarray(mi, np.float64), np.asarray(vi, np.float64)
            want = (m / c1) / (np.sqrt(v / c2 + eps_root) + eps)
            np.testing.assert_allclose(ui, want, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(ui, ri, rtol=2e-2, atol=2e-2)
