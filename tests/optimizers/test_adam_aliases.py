"""The Adam-family aliases: against Optax, against their hand-written chains, validation, traced
hyperparameters and low-precision state."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import grad_sequence
from ..optax_reference import compare_to_optax

LR = lambda count: 0.02 / (1.0 + 0.01 * count)
WD = lambda count: 0.1 * 0.99**count
MASK = lambda params: jax.tree.map(lambda p: p.ndim > 1, params)  # decay matrices only

# (name, ours, Optax's, positional hyperparameters after the learning rate, in Optax's order, all
# different from the defaults and from each other by enough to change the updates beyond the
# tolerance, so a dropped or swapped argument shows).
ALIASES = [
    ("adam", gradtx.adam, optax.adam, (0.8, 0.99, 1e-3, 1e-2)),
    ("adamw", gradtx.adamw, optax.adamw, (0.8, 0.99, 1e-3, 1e-2, None, WD, MASK)),
    ("nadam", gradtx.nadam, optax.nadam, (0.8, 0.99, 1e-3, 1e-2)),
    ("nadamw", gradtx.nadamw, optax.nadamw, (0.8, 0.99, 1e-3, 1e-2, None, WD, MASK)),
    ("adamax", gradtx.adamax, optax.adamax, (0.8, 0.99, 1e-3)),
    ("adamaxw", gradtx.adamaxw, optax.adamaxw, (0.8, 0.99, 1e-3, WD, MASK)),
    ("amsgrad", gradtx.amsgrad, optax.amsgrad, (0.8, 0.99, 1e-3, 1e-2, None, False, True)),
    ("radam", gradtx.radam, optax.radam, (0.8, 0.99, 1e-3, 1e-2, 6.0)),
    ("adabelief", gradtx.adabelief, optax.adabelief, (0.8, 0.99, 1e-3, 1e-4)),
    ("yogi", gradtx.yogi, optax.yogi, (0.8, 0.99, 1e-2)),
    # Optax's novograd cannot take a weight-decay schedule (see the injected test below).
    ("novograd", gradtx.novograd, optax.novograd, (0.8, 0.5, 1e-2, 0.5, 0.05)),
]
NAMES = [a[0] for a in ALIASES]


def _atol(name: str) -> float:
    # NovoGrad's momentum cancels to ~1e-4 in a few entries of O(1) terms; eager and fused
    # reductions round its per-tensor norms differently (see tests/transforms/test_adam.py).
    return 1e-8 if name != "novograd" else 1e-7


def _check_signature_matches_optax(ours, reference) -> None:
    """Optax's parameters, in Optax's order, with its kinds and defaults; ours may add
    keyword-only options (such as `nu_dtype`) after them."""
    theirs = list(inspect.signature(reference).parameters.values())
    mine = list(inspect.signature(ours).parameters.values())
    described = lambda ps: [(p.name, p.kind, p.default) for p in ps]
    positional = lambda ps: [p for p in ps if p.kind is not p.KEYWORD_ONLY]
    assert described(positional(mine)) == described(positional(theirs))
    mine_by_name = {p.name: p for p in mine}
    for p in theirs:
        assert described([mine_by_name[p.name]]) == described([p]), p.name
    extras = [p for p in mine if p.name not in {q.name for q in theirs}]
    assert all(p.kind is p.KEYWORD_ONLY and p.default is None for p in extras), extras


def _small_params() -> dict:
    """A matrix (decayed under MASK) and a vector: quick to compile for every alias at once."""
    return {"w": jnp.asarray(np.random.default_rng(0).normal(size=(3, 2)), jnp.float32),
            "b": jnp.ones(2)}  # fmt: skip


@pytest.mark.parametrize(("name", "ours", "reference", "args"), ALIASES, ids=NAMES)
def test_signature_and_defaults_match_optax(name, ours, reference, args):
    del name, args
    _check_signature_matches_optax(ours, reference)


@pytest.mark.across_versions
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize(("name", "ours", "reference", "args"), ALIASES, ids=NAMES)
def test_matches_optax_with_schedules_and_custom_hyperparameters(name, ours, reference, args, jit):
    compare_to_optax(
        ours(LR, *args),
        reference(LR, *args),
        jit=jit,
        atol=_atol(name),
        reference_key=f"{__name__}:{name}",
    )


def test_novograd_schedule_weight_decay_matches_injected_optax():
    ours = gradtx.novograd(LR, weight_decay=WD)
    reference = optax.inject_hyperparams(optax.novograd)(learning_rate=LR, weight_decay=WD)
    compare_to_optax(ours, reference, jit=True, atol=1e-7)


def test_nesterov_flag_of_adamw_is_nadamw():
    ours = gradtx.adamw(LR, weight_decay=0.1, nesterov=True)
    compare_to_optax(ours, optax.nadamw(LR, weight_decay=0.1), jit=True, atol=1e-8)


BF16 = jnp.bfloat16


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: gradtx.adam(-1e-3),
            "adam: scale_by_learning_rate: learning_rate must be >= 0, got -0.001",
        ),
        (
            lambda: gradtx.adam(1e-3, b1=1.0),
            "adam: scale_by_adam: b1 must be in [0.0, 1.0), got 1.0",
        ),
        (
            lambda: gradtx.adamw(1e-3, b2=-0.1),
            "adamw: scale_by_adam: b2 must be in [0.0, 1.0), got -0.1",
        ),
        (
            # The alias's argument is named first; the primitive's message follows.
            lambda: gradtx.adamw(1e-3, weight_decay=-0.5),
            "adamw: weight_decay must be >= 0, got -0.5"
            " (from weight_decay: rate must be >= 0, got -0.5)",
        ),
        (lambda: gradtx.nadam(1e-3, eps=-1.0), "nadam: scale_by_adam: eps must be >= 0, got -1.0"),
        (
            lambda: gradtx.nadamw(1e-3, eps_root=-1.0),
            "nadamw: scale_by_adam: eps_root must be >= 0, got -1.0",
        ),
        (
            lambda: gradtx.adamax(1e-3, b1=2.0),
            "adamax: scale_by_adamax: b1 must be in [0.0, 1.0), got 2.0",
        ),
        (
            lambda: gradtx.adamaxw(1e-3, weight_decay=-1e-4),
            "adamaxw: weight_decay must be >= 0, got -0.0001"
            " (from weight_decay: rate must be >= 0, got -0.0001)",
        ),
        (
            lambda: gradtx.amsgrad(1e-3, eps=-0.1),
            "amsgrad: scale_by_amsgrad: eps must be >= 0, got -0.1",
        ),
        (
            lambda: gradtx.radam(1e-3, threshold=2.0),
            "radam: scale_by_radam: threshold must be in [4.0, inf], got 2.0",
        ),
        (
            lambda: gradtx.adabelief(-0.1),
            "adabelief: scale_by_learning_rate: learning_rate must be >= 0, got -0.1",
        ),
        (
            lambda: gradtx.yogi(1e-3, b2=1.0),
            "yogi: scale_by_yogi: b2 must be in [0.0, 1.0), got 1.0",
        ),
        (
            lambda: gradtx.novograd(1e-3, weight_decay=-0.1),
            "novograd: scale_by_novograd: weight_decay must be >= 0, got -0.1",
        ),
    ],
)
def test_invalid_hyperparameters_raise_at_construction(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value) == message


TRACEABLE = {
    "adam": lambda lr, b1, b2, wd: gradtx.adam(lr, b1, b2),
    "adamw": lambda lr, b1, b2, wd: gradtx.adamw(lr, b1, b2, weight_decay=wd),
    "nadam": lambda lr, b1, b2, wd: gradtx.nadam(lr, b1, b2),
    "nadamw": lambda lr, b1, b2, wd: gradtx.nadamw(lr, b1, b2, weight_decay=wd),
    "adamax": lambda lr, b1, b2, wd: gradtx.adamax(lr, b1, b2),
    "adamaxw": lambda lr, b1, b2, wd: gradtx.adamaxw(lr, b1, b2, weight_decay=wd),
    "amsgrad": lambda lr, b1, b2, wd: gradtx.amsgrad(lr, b1, b2),
    "radam": lambda lr, b1, b2, wd: gradtx.radam(lr, b1, b2),
    "adabelief": lambda lr, b1, b2, wd: gradtx.adabelief(lr, b1, b2),
    "yogi": lambda lr, b1, b2, wd: gradtx.yogi(lr, b1, b2),
    "novograd": lambda lr, b1, b2, wd: gradtx.novograd(lr, b1, b2, weight_decay=wd),
}


def test_traced_hyperparameters_are_accepted_inside_jit():
    assert set(TRACEABLE) == set(NAMES)
    params = _small_params()
    grads = grad_sequence(params, 2)

    def two_steps(lr, b1, b2, wd):
        out = {}
        for name, make in TRACEABLE.items():
            tx = make(lr, b1, b2, wd)
            s = tx.init(params)
            for g in grads:
                u, s = tx.update(g, s, params)
            out[name] = u
        return out

    values = (0.01, 0.85, 0.95, 0.1)
    traced = jax.jit(two_steps)(*(jnp.float32(v) for v in values))
    concrete = two_steps(*values)
    for name in TRACEABLE:
        leaves = zip(jax.tree.leaves(traced[name]), jax.tree.leaves(concrete[name]), strict=True)
        for a, b in leaves:
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, err_msg=name)


# Aliases with bf16 moments: each must keep its state in bf16 and still solve the quadratic.
LOW_PRECISION = {
    "adam": gradtx.adam(0.05, mu_dtype=BF16, nu_dtype=BF16),
    "adamw": gradtx.adamw(0.05, mu_dtype=BF16, nu_dtype=BF16),
    "nadam": gradtx.nadam(0.05, mu_dtype=BF16, nu_dtype=BF16),
    "adamax": gradtx.adamax(0.05, mu_dtype=BF16, nu_dtype=BF16),
    "amsgrad": gradtx.amsgrad(0.05, mu_dtype=BF16, nu_dtype=BF16),
    "radam": gradtx.radam(0.05, mu_dtype=BF16, nu_dtype=BF16),
    "adabelief": gradtx.adabelief(0.05, mu_dtype=BF16, nu_dtype=BF16),
    "yogi": gradtx.yogi(0.05, mu_dtype=BF16, nu_dtype=BF16),
    "novograd": gradtx.novograd(0.05, mu_dtype=BF16, nu_dtype=BF16),
}


def test_bf16_moments_stay_bf16_and_still_converge():
    rng = np.random.default_rng(0)
    params = _small_params()  # float32
    curv = jax.tree.map(lambda x: jnp.asarray(rng.uniform(0.5, 2.0, x.shape), x.dtype), params)
    target = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), params)

    def loss(p):
        terms = jax.tree.map(lambda x, a, b: 0.5 * jnp.sum(a * (x - b) ** 2), p, curv, target)
        return sum(jax.tree.leaves(terms))

    @jax.jit
    def minimise_all(params):
        def body(_, carry):
            new = {}
            for name, tx in LOW_PRECISION.items():
                p, s = carry[name]
                u, s = tx.update(jax.grad(loss)(p), s, p)
                new[name] = (gradtx.apply_updates(p, u), s)
            return new

        start = {name: (params, tx.init(params)) for name, tx in LOW_PRECISION.items()}
        final = jax.lax.fori_loop(0, 500, body, start)
        return {name: (loss(p), s) for name, (p, s) in final.items()}

    initial = float(loss(params))
    for name, (final_loss, state) in minimise_all(params).items():
        moments = [
            x
            for inner in state
            for field, x in getattr(inner, "_asdict", dict)().items()
            if field in ("mu", "nu", "nu_max")
        ]
        assert moments, name
        assert {x.dtype for x in jax.tree.leaves(moments)} == {jnp.dtype(BF16)}, name
        assert float(final_loss) < 1e-2 * initial, (name, float(final_loss), initial)
