"""gradtx.contrib, part B (sophia, sam, adopt, ademamix, madgrad, momo, galore, acprop, dpsgd):
against `optax.contrib` over 100 steps, eager and jit, plus validation and the documented
differences from Optax."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib as oc
import pytest

import gradtx
from gradtx import contrib as gc

from ..helpers import assert_trees_close, grad_sequence, mixed_params, random_like
from ..optax_reference import EAGER_STEPS, compare_to_optax, with_modes

# A learning-rate schedule that starts at one.
LR = lambda count: 1.0 / (1.0 + 0.05 * count)
SMALL_LR = lambda count: 0.05 / (1.0 + 0.01 * count)
MASK = lambda params: jax.tree.map(lambda p: p.ndim > 1, params)


def _loss(params: Any) -> jax.Array:
    """A smooth loss > 0 with a non-diagonal Hessian (so that Hutchinson's estimate is random)."""
    leaves = jax.tree.leaves(params)
    quartic = sum(jnp.sum(0.25 * x**4 + 0.5 * x**2) for x in leaves)
    coupling = 0.1 * sum(jnp.sum(x) for x in leaves) ** 2
    return quartic + coupling + 1.0


# -- a driver for references that need extra arguments or per-example gradients ---------------


def _scan(tx: Any, params: Any, stacked: Any, extra: Callable) -> Any:
    def body(carry, g):
        p, s = carry
        u, s = tx.update(g, s, p, **extra(p))
        return (gradtx.apply_updates(p, u), s), u

    return jax.lax.scan(body, (params, tx.init(params)), stacked)[1]


_jitted = jax.jit(
    lambda txs, extra, params, stacked: [_scan(tx, params, stacked, extra) for tx in txs],
    static_argnums=(0, 1),
)


def _unstack(tree: Any, steps: int) -> list:
    tree = jax.tree.map(np.asarray, tree)
    return [jax.tree.map(lambda x, i=i: x[i], tree) for i in range(steps)]


def _compare(
    ours: Any,
    reference: Any,
    *,
    jit: bool,
    params: Any = None,
    grads: list | None = None,
    extra: Callable = lambda p: {},
    rtol: float = 1e-5,
    atol: float = 1e-7,
) -> None:
    """Like `compare_to_optax`, with `extra(params)` passed to every update (e.g. `value=`) and
    any gradient sequence (e.g. per-example gradients). The reference always runs jitted."""
    params = mixed_params() if params is None else params
    grads = grad_sequence(params, 100) if grads is None else grads
    steps = len(grads)
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *grads)
    if jit:
        got, expected = (
            _unstack(u, steps) for u in _jitted((ours, reference), extra, params, stacked)
        )
    else:
        expected = _unstack(_jitted((reference,), extra, params, stacked)[0], steps)
        state, p, got = ours.init(params), params, []
        for g in grads[:EAGER_STEPS]:  # the whole sequence is checked by the jitted case
            u, state = ours.update(g, state, p, **extra(p))
            p = gradtx.apply_updates(p, u)
            got.append(u)
    for i, (u, e) in enumerate(zip(got, expected[: len(got)], strict=True)):
        assert_trees_close(u, e, rtol, atol, msg=f"step {i}")


# Looser absolute tolerances, only where Optax's own eager and jit runs differ by as much:
# - madgrad: its update is x_new - x of two O(1) numbers, so a one-ulp difference in x_new
#   (rounded differently eagerly and fused) is ~2.4e-7; Optax eager vs jit: 4.8e-7.
# - momo with an adaptive lower bound: the bound and the step size switch on comparisons of
#   nearly equal numbers; Optax eager vs jit differs by up to 4e-5 of a leaf's scale.
ATOL = {
    "madgrad": 1e-6,
    "madgrad_wd": 1e-6,
    "scale_by_madgrad": 1e-6,
    "momo_schedule_wd_adaptive": 1e-6,
    "momo_adam_schedule_wd_adaptive": 1e-6,
}

# -- the plain gradient transformations: compare_to_optax ---------------------------------------

_TENTH_LR = lambda count: 0.1 * LR(count)
_B3 = lambda count: 0.999 - 0.09 / (1.0 + 0.1 * count)
_ALPHA = lambda count: jnp.minimum(5.0, 0.1 * count)

PLAIN = [
    ("adopt", lambda: gc.adopt(LR), lambda: oc.adopt(LR)),
    (
        "adopt_nesterov_noclip",
        lambda: gc.adopt(0.1, 0.8, 0.99, 1e-4, nesterov=True, use_clipping=False),
        lambda: oc.adopt(0.1, 0.8, 0.99, 1e-4, nesterov=True, use_clipping=False),
    ),
    (
        "scale_by_adopt_clip_fn",
        lambda: gc.scale_by_adopt(0.8, clip_value_fn=lambda c: 0.5 * c**0.5),
        lambda: oc.scale_by_adopt(0.8, clip_value_fn=lambda c: 0.5 * c**0.5),
    ),
    ("ademamix", lambda: gc.ademamix(LR), lambda: oc.ademamix(LR)),
    (
        "ademamix_schedules_wd",
        lambda: gc.ademamix(SMALL_LR, 0.8, 0.99, _B3, _ALPHA, 1e-3, 1e-4, None, 0.1, MASK),
        lambda: oc.ademamix(SMALL_LR, 0.8, 0.99, _B3, _ALPHA, 1e-3, 1e-4, None, 0.1, MASK),
    ),
    (
        "scale_by_ademamix",
        lambda: gc.scale_by_ademamix(b3=0.99),
        lambda: oc.scale_by_ademamix(b3=0.99),
    ),
    # Its momentum is an undamped sum (~100 g for b1=0.99): a learning rate of one would move
    # the params by ~100 per step, so the schedule is scaled down.
    (
        "simplified_ademamix",
        lambda: gc.simplified_ademamix(_TENTH_LR),
        lambda: oc.simplified_ademamix(_TENTH_LR),
    ),
    (
        "simplified_ademamix_alpha_wd",
        lambda: gc.simplified_ademamix(SMALL_LR, 0.9, 0.99, _ALPHA, 1e-3, 1e-4, 0.1, MASK),
        lambda: oc.simplified_ademamix(SMALL_LR, 0.9, 0.99, _ALPHA, 1e-3, 1e-4, 0.1, MASK),
    ),
    (
        "scale_by_simplified_ademamix",
        lambda: gc.scale_by_simplified_ademamix(0.9, 0.99, 2.0, 1e-3),
        lambda: oc.scale_by_simplified_ademamix(0.9, 0.99, 2.0, 1e-3),
    ),
    ("acprop", lambda: gc.acprop(LR), lambda: oc.acprop(LR)),
    (
        "scale_by_acprop",
        lambda: gc.scale_by_acprop(0.8, 0.99, 1e-3, 1e-6),
        lambda: oc.scale_by_acprop(0.8, 0.99, 1e-3, 1e-6),
    ),
    (
        "acprop_wd",
        lambda: gc.acprop(SMALL_LR, 0.8, 0.99, 1e-3, 1e-6, 0.1, MASK),
        lambda: oc.acprop(SMALL_LR, 0.8, 0.99, 1e-3, 1e-6, 0.1, MASK),
    ),
    ("madgrad", lambda: gc.madgrad(LR), lambda: oc.madgrad(LR)),
    (
        "scale_by_madgrad",
        lambda: gc.scale_by_madgrad(SMALL_LR, 0.5, 1e-4),
        lambda: oc.scale_by_madgrad(SMALL_LR, 0.5, 1e-4),
    ),
    (
        "madgrad_wd",
        lambda: gc.madgrad(SMALL_LR, 0.5, 1e-2, 1e-4),
        lambda: oc.madgrad(SMALL_LR, 0.5, 1e-2, 1e-4),
    ),
]


@pytest.mark.parametrize(
    ("name", "ours", "reference", "jit"),
    with_modes(PLAIN, eager={"adopt", "ademamix", "simplified_ademamix", "acprop", "madgrad"}),
)
def test_plain_against_optax(name, ours, reference, jit):
    atol = ATOL.get(name, 1e-7)
    compare_to_optax(ours(), reference(), jit=jit, atol=atol, reference_key=f"{__name__}:{name}")


# -- galore: Optax's GaLore fails on None leaves, so the comparison tree has none --------------


def _dense_params() -> dict:
    p = mixed_params()
    return {"dense": p["dense"], "w": p["layers"][1]["w"], "row": p["pair"].a,
            "cube": p["pair"].b[1], "scalar": p["pair"].b[0], "vec": p["layers"][0]}  # fmt: skip


def _all_axes(gn):
    return lambda params: jax.tree.map(
        lambda p: gn(0, tuple(range(1, p.ndim))) if p.ndim >= 2 else None, params
    )


GALORE = [
    (
        "scale_by_galore",
        lambda: gc.scale_by_galore(2, 4, 2.0),
        lambda: oc.scale_by_galore(2, 4, 2.0),
    ),
    (
        "galore",
        lambda: gc.galore(LR, rank=2, update_proj_gap=7),
        lambda: oc.galore(LR, rank=2, update_proj_gap=7),
    ),
    (
        "galore_dims_wd_base",
        lambda: gc.galore(
            SMALL_LR,
            1,
            3,
            0.5,
            gradtx.scale_by_rms(),
            0.1,
            MASK,
            _all_axes(gc.GaLoreDimensionNumbers),
        ),
        lambda: oc.galore(
            SMALL_LR,
            1,
            3,
            0.5,
            optax.scale_by_rms(),
            0.1,
            MASK,
            _all_axes(oc.GaLoreDimensionNumbers),
        ),
    ),
]


@pytest.mark.parametrize(
    ("name", "ours", "reference", "jit"),
    with_modes(GALORE, eager={"galore"}),
)
def test_galore_against_optax(name, ours, reference, jit):
    _compare(ours(), reference(), jit=jit, params=_dense_params(),
             grads=grad_sequence(_dense_params(), 100))  # fmt: skip


def test_galore_passes_none_leaves_through():
    full = mixed_params()
    dense = {"dense": full["dense"], "layers": [full["layers"][0], {"w": full["layers"][1]["w"]}],
             "pair": full["pair"]}  # fmt: skip
    tx = gc.galore(0.1, rank=1, update_proj_gap=2)
    grads = grad_sequence(full, 3)
    s_full, s_dense = tx.init(full), tx.init(dense)
    for g in grads:
        g_dense = {"dense": g["dense"], "layers": [g["layers"][0], {"w": g["layers"][1]["w"]}],
                   "pair": g["pair"]}  # fmt: skip
        u_full, s_full = tx.update(g, s_full, full)
        u_dense, s_dense = tx.update(g_dense, s_dense, dense)
        assert u_full["layers"][1]["frozen"] is None and u_full["none"] is None
        assert_trees_close(jax.tree.leaves(u_full), jax.tree.leaves(u_dense), 0, 0)


# -- momo / momo_adam: the loss goes in as value= -----------------------------------------------

_VALUE = lambda p: {"value": _loss(p)}

MOMO = [
    ("momo", lambda: gc.momo(), lambda: oc.momo()),
    (
        "momo_schedule_wd_adaptive",
        lambda: gc.momo(LR, 0.8, 0.5, 0.1, True),
        lambda: oc.momo(LR, 0.8, 0.5, 0.1, True),
    ),
    ("momo_adam", lambda: gc.momo_adam(), lambda: oc.momo_adam()),
    (
        "momo_adam_schedule_wd_adaptive",
        lambda: gc.momo_adam(LR, 0.8, 0.99, 1e-3, 0.5, 0.1, True),
        lambda: oc.momo_adam(LR, 0.8, 0.99, 1e-3, 0.5, 0.1, True),
    ),
]


@pytest.mark.parametrize(
    ("name", "ours", "reference", "jit"), with_modes(MOMO, eager={"momo", "momo_adam"})
)
def test_momo_against_optax(name, ours, reference, jit):
    _compare(ours(), reference(), jit=jit, extra=_VALUE, atol=ATOL.get(name, 1e-7))


@pytest.mark.parametrize("factory", [gc.momo, gc.momo_adam], ids=["momo", "momo_adam"])
def test_momo_needs_the_loss_and_the_params(factory):
    tx = factory()
    params = mixed_params()
    g = grad_sequence(params, 1)[0]
    with pytest.raises(
        ValueError,
        match=rf"^{factory.__name__} needs the monitored value \(e\.g\. the loss\): call "
        r"update\(grads, state, params, value=loss\)",
    ):
        tx.update(g, tx.init(params), params)
    with pytest.raises(ValueError, match=rf"^{factory.__name__} needs the current parameters"):
        tx.update(g, tx.init(params), None, value=1.0)


# -- sophia: Hutchinson's estimator gets obj_fn= ------------------------------------------------

_OBJ = lambda p: {"obj_fn": _loss}

SOPHIA = [
    (
        "sophia",
        lambda: gc.sophia(LR, hessian_diagonal_fn=gc.hutchinson_estimator_diag_hessian()),
        lambda: oc.sophia(LR),
    ),
    (
        "sophia_every_3_no_clip_seeded",
        lambda: gc.sophia(
            SMALL_LR,
            0.9,
            0.9,
            1e-4,
            0.1,
            MASK,
            0.5,
            None,
            3,
            gc.hutchinson_estimator_diag_hessian(jax.random.PRNGKey(5)),
        ),
        lambda: oc.sophia(
            SMALL_LR,
            0.9,
            0.9,
            1e-4,
            0.1,
            MASK,
            0.5,
            None,
            3,
            oc.hutchinson_estimator_diag_hessian(jax.random.PRNGKey(5)),
        ),
    ),
]


@pytest.mark.parametrize(("name", "ours", "reference", "jit"), with_modes(SOPHIA, eager={"sophia"}))
def test_sophia_against_optax(name, ours, reference, jit):
    # Eagerly, the Hessian-vector product (forward over reverse through the quartic loss) rounds
    # unlike the fused one, and the learning rate of 1 carries it on: Optax's own eager and jit
    # runs differ by up to 1.7e-4 (relative) over these steps, hence the eager tolerance.
    _compare(ours(), reference(), jit=jit, extra=_OBJ, rtol=1e-5 if jit else 5e-4)


def test_hutchinson_is_exact_for_a_diagonal_hessian_and_reproducible():
    params = {"a": jnp.array([1.0, -2.0, 0.5]), "b": jnp.array([[0.3, 1.5]])}
    f = lambda p: sum(jnp.sum(x**4) for x in jax.tree.leaves(p))
    est = gc.hutchinson_estimator_diag_hessian(3)
    diag, state = est.update(None, est.init(params), params, obj_fn=f)
    for d, x in zip(jax.tree.leaves(diag), jax.tree.leaves(params), strict=True):
        np.testing.assert_allclose(d, 12 * x**2, rtol=1e-6)
    # With off-diagonal terms the estimate is random: fresh signs each call, same for a seed.
    g = lambda p: _loss(p)
    first, s1 = est.update(None, est.init(params), params, obj_fn=g)
    again, _ = est.update(None, est.init(params), params, obj_fn=g)
    second, _ = est.update(None, s1, params, obj_fn=g)
    assert_trees_close(first, again, 0, 0)
    assert not np.allclose(jax.tree.leaves(first)[0], jax.tree.leaves(second)[0])
    with pytest.raises(ValueError, match=r"^hutchinson_estimator_diag_hessian needs the objective"):
        est.update(None, state, params)


# -- sam -----------------------------------------------------------------------------------------

SAM = [
    (
        "sam",
        lambda: gc.sam(gradtx.sgd(LR), gradtx.chain(gc.normalize(), gradtx.sgd(0.05))),
        lambda: oc.sam(optax.sgd(LR), optax.chain(oc.normalize(), optax.sgd(0.05))),
    ),
    (
        "sam_period_3_adam_keep_state",
        lambda: gc.sam(
            gradtx.adam(SMALL_LR),
            gradtx.chain(gc.normalize(), gradtx.sgd(0.05, momentum=0.5)),
            sync_period=3,
            reset_state=False,
        ),
        lambda: oc.sam(
            optax.adam(SMALL_LR),
            optax.chain(oc.normalize(), optax.sgd(0.05, momentum=0.5)),
            sync_period=3,
            reset_state=False,
        ),
    ),
    (
        "sam_period_3_momentum_reset",
        lambda: gc.sam(
            gradtx.sgd(SMALL_LR),
            gradtx.chain(gc.normalize(), gradtx.sgd(0.05, momentum=0.5)),
            sync_period=3,
        ),
        lambda: oc.sam(
            optax.sgd(SMALL_LR),
            optax.chain(oc.normalize(), optax.sgd(0.05, momentum=0.5)),
            sync_period=3,
        ),
    ),
]


@pytest.mark.parametrize(("name", "ours", "reference", "jit"), with_modes(SAM, eager={"sam"}))
def test_sam_against_optax(name, ours, reference, jit):
    compare_to_optax(ours(), reference(), jit=jit, reference_key=f"{__name__}:{name}")


_GRAD_FN = lambda p: {"grad_fn": lambda q, i: jax.grad(_loss)(q)}


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_sam_opaque_mode_against_optax(jit):
    ours = gc.sam(gradtx.sgd(SMALL_LR), gradtx.chain(gc.normalize(), gradtx.sgd(0.05)),
                  sync_period=3, opaque_mode=True)  # fmt: skip
    ref = oc.sam(optax.sgd(SMALL_LR), optax.chain(oc.normalize(), optax.sgd(0.05)),
                 sync_period=3, opaque_mode=True)  # fmt: skip
    _compare(ours, ref, jit=jit, grads=grad_sequence(mixed_params(), 30), extra=_GRAD_FN)
    with pytest.raises(ValueError, match=r"^sam: opaque_mode=True needs"):
        ours.update(grad_sequence(mixed_params(), 1)[0], ours.init(mixed_params()), mixed_params())


def test_sam_with_sync_period_one_is_the_outer_optimizer():
    # Documented difference: Optax's transparent mode steps from the previous call's cache
    # here, so its params never move more than one step away from the start.
    compare_to_optax(
        gc.sam(gradtx.adam(0.1), gradtx.sgd(0.05), sync_period=1),
        optax.adam(0.1),
        jit=True,
        steps=20,
    )


def test_normalize_keeps_a_zero_gradient_zero():
    # Documented difference: Optax's normalize divides by a zero norm (NaN).
    zero = jax.tree.map(jnp.zeros_like, mixed_params())
    out, _ = gc.normalize().update(zero, gc.normalize().init(zero))
    assert all(bool(jnp.all(x == 0)) for x in jax.tree.leaves(out))
    g = grad_sequence(mixed_params(), 1)[0]
    out, _ = gc.normalize().update(g, gc.NormalizeState())
    np.testing.assert_allclose(gradtx.tree.norm(out), 1.0, rtol=1e-6)


# -- dpsgd: per-example gradients, the same key --------------------------------------------------

BATCH = 4


def _per_example_grads(params: Any, steps: int) -> list:
    rng = np.random.default_rng(7)
    batched = jax.tree.map(lambda x: jnp.zeros((BATCH, *jnp.shape(x)), x.dtype), params)
    return [random_like(batched, rng, scale=0.5) for _ in range(steps)]


DPSGD = [
    (
        "dpsgd",
        lambda: gc.dpsgd(LR, 1.0, 0.5, seed=3),
        lambda: oc.dpsgd(LR, 1.0, 0.5, seed=3),
    ),
    (
        "dpsgd_nesterov",
        lambda: gc.dpsgd(SMALL_LR, 0.7, 1.1, 11, 0.9, True),
        lambda: oc.dpsgd(SMALL_LR, 0.7, 1.1, 11, 0.9, True),
    ),
    (
        "differentially_private_aggregate_key",
        lambda: gc.differentially_private_aggregate(2.0, 0.3, jax.random.key(9)),
        lambda: oc.differentially_private_aggregate(2.0, 0.3, jax.random.key(9)),
    ),
]


@pytest.mark.parametrize(("name", "ours", "reference", "jit"), with_modes(DPSGD, eager={"dpsgd"}))
def test_dpsgd_against_optax(name, ours, reference, jit):
    params = mixed_params()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Optax's dpsgd passes `seed=`
        reference = reference()
    _compare(ours(), reference, jit=jit, params=params, grads=_per_example_grads(params, 100))


def test_dpsgd_is_reproducible_from_its_seed_and_clips():
    params = {"w": jnp.zeros(3), "b": jnp.zeros(())}
    grads = {"w": 100.0 * jnp.ones((BATCH, 3)), "b": jnp.ones((BATCH,))}
    run = lambda tx: tx.update(grads, tx.init(params), params)[0]
    a, b = run(gc.dpsgd(1.0, 1.0, 0.5, seed=0)), run(gc.dpsgd(1.0, 1.0, 0.5, seed=0))
    c = run(gc.dpsgd(1.0, 1.0, 0.5, seed=jax.random.key(1)))
    assert_trees_close(a, b, 0, 0)
    assert not np.allclose(a["w"], c["w"])
    # Without noise every example is clipped to norm 1, so the mean has norm 1.
    quiet = run(gc.dpsgd(1.0, 1.0, 0.0, seed=0))
    np.testing.assert_allclose(gradtx.tree.norm(quiet), 1.0, rtol=1e-6)
    tx = gc.differentially_private_aggregate(1.0, 0.0, 0)
    with pytest.raises(ValueError, match="expects per-example gradients"):
        tx.update({"w": jnp.ones((2, 3)), "b": jnp.ones((3,))}, tx.init(params))


# -- state, params and dtypes ---------------------------------------------------------------------


def test_madgrad_takes_x0_from_the_first_update_and_inits_from_shapes():
    params = mixed_params()
    structs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    tx = gc.madgrad(0.1)
    abstract = tx.init(structs)  # no values needed: x0 is taken at the first update
    concrete = tx.init(params)
    assert jax.tree.structure(abstract) == jax.tree.structure(concrete)
    g = grad_sequence(params, 1)[0]
    _, state = tx.update(g, abstract, params)
    assert_trees_close(gradtx.tree.get(state, "x0"), params, 0, 0)
    primitive = gc.scale_by_madgrad(0.1)
    with pytest.raises(ValueError, match=r"^scale_by_madgrad needs the current parameters"):
        primitive.update(g, primitive.init(params), None)


@pytest.mark.parametrize(
    "make",
    [
        lambda: gc.adopt(0.1, mu_dtype=jnp.bfloat16),
        lambda: gc.ademamix(0.1, mu_dtype=jnp.bfloat16),
        lambda: gc.sophia(0.1, mu_dtype=jnp.bfloat16),
    ],
    ids=["adopt", "ademamix", "sophia"],
)
def test_mu_dtype_is_kept(make):
    tx = make()
    params = mixed_params()
    state = tx.init(params)
    dtypes = [x.dtype for x in jax.tree.leaves(state)]
    assert jnp.bfloat16 in dtypes
    for g in grad_sequence(params, 2):
        updates, state = tx.update(g, state, params, obj_fn=_loss)
        assert [x.dtype for x in jax.tree.leaves(state)] == dtypes
        assert all(u.dtype == jnp.float32 for u in jax.tree.leaves(updates))


# -- signatures and validation ---------------------------------------------------------------------

SIGNATURES = [
    (gc.adopt, oc.adopt), (gc.scale_by_adopt, oc.scale_by_adopt),
    (gc.ademamix, oc.ademamix), (gc.scale_by_ademamix, oc.scale_by_ademamix),
    (gc.simplified_ademamix, oc.simplified_ademamix),
    (gc.scale_by_simplified_ademamix, oc.scale_by_simplified_ademamix),
    (gc.madgrad, oc.madgrad), (gc.scale_by_madgrad, oc.scale_by_madgrad),
    (gc.momo, oc.momo), (gc.momo_adam, oc.momo_adam),
    (gc.galore, oc.galore), (gc.scale_by_galore, oc.scale_by_galore),
    (gc.acprop, oc.acprop), (gc.scale_by_acprop, oc.scale_by_acprop),
    (gc.dpsgd, oc.dpsgd),
    (gc.differentially_private_aggregate, oc.differentially_private_aggregate),
    (gc.sam, oc.sam), (gc.normalize, oc.normalize),
    (gc.sophia, oc.sophia),
    (gc.hutchinson_estimator_diag_hessian, oc.hutchinson_estimator_diag_hessian),
]  # fmt: skip


@pytest.mark.parametrize(("ours", "theirs"), SIGNATURES, ids=[s[0].__name__ for s in SIGNATURES])
def test_signature_matches_optax(ours, theirs):
    """Optax's parameter names, order, kinds and defaults. Callable defaults are compared by
    behaviour elsewhere; Sophia's `hessian_diagonal_fn=None` means Optax's default estimator.
    Ours may add keyword-only options after Optax's."""
    ref = list(inspect.signature(theirs).parameters.values())
    mine = list(inspect.signature(ours).parameters.values())
    extras = mine[len(ref) :]  # keyword-only additions, e.g. acprop's nu_dtype
    assert all(p.kind is p.KEYWORD_ONLY and p.default is None for p in extras), extras
    mine = mine[: len(ref)]
    assert [(p.name, p.kind) for p in mine] == [(p.name, p.kind) for p in ref]
    for p, q in zip(mine, ref, strict=True):
        if callable(q.default) or isinstance(q.default, optax.GradientTransformation):
            continue
        assert p.default == q.default or (p.default is None and q.default is None), p.name


INVALID = [
    (gc.adopt, {"learning_rate": 0.1, "b1": 1.0}, "adopt: scale_by_adopt: b1 must be in"),
    (gc.adopt, {"learning_rate": -0.1}, "adopt: scale_by_learning_rate: learning_rate"),
    (gc.ademamix, {"learning_rate": 0.1, "b3": 1.5}, "ademamix: scale_by_ademamix: b3"),
    (gc.ademamix, {"learning_rate": 0.1, "weight_decay": -1.0}, "ademamix: weight_decay must"),
    (gc.simplified_ademamix, {"learning_rate": 0.1, "eps": -1.0}, "simplified_ademamix: .*eps"),
    (gc.acprop, {"learning_rate": 0.1, "b2": -0.1}, "acprop: scale_by_acprop: b2"),
    (gc.madgrad, {"learning_rate": 0.1, "momentum": 1.0}, "madgrad: scale_by_madgrad: momentum"),
    (gc.madgrad, {"learning_rate": -1.0}, "madgrad: scale_by_madgrad: learning_rate"),
    (gc.momo, {"beta": 1.0}, "momo: beta must be in"),
    (gc.momo, {"weight_decay": -1.0}, "momo: weight_decay must be >= 0"),
    (gc.momo_adam, {"b2": 2.0}, "momo_adam: b2 must be in"),
    (gc.momo_adam, {"lower_bound": float("nan")}, "momo_adam: lower_bound must be finite"),
    (gc.galore, {"learning_rate": 0.1, "rank": 0}, "galore: scale_by_galore: rank must be >= 1"),
    (gc.galore, {"learning_rate": 0.1, "update_proj_gap": 1.5}, "galore: .*update_proj_gap"),
    (gc.sophia, {"learning_rate": 0.1, "gamma": 0.0}, "sophia: scale_by_sophia: gamma must be"),
    (gc.sophia, {"learning_rate": 0.1, "update_interval": 0}, "sophia: .*update_interval"),
    (gc.sophia, {"learning_rate": 0.1, "clip_threshold": -1.0}, "sophia: .*clip_threshold"),
    (gc.hutchinson_estimator_diag_hessian, {"random_seed": "x"}, "hutchinson.*random_seed"),
    (gc.dpsgd, {"learning_rate": 0.1, "l2_norm_clip": -1.0, "noise_multiplier": 1.0, "seed": 0},
     "dpsgd: differentially_private_aggregate: l2_norm_clip must be >= 0, got -1.0"),
    (gc.dpsgd, {"learning_rate": 0.1, "l2_norm_clip": 1.0, "noise_multiplier": 1.0, "seed": 0,
                "momentum": 1.5}, "dpsgd: momentum must be in"),
    (gc.differentially_private_aggregate, {"l2_norm_clip": 1.0, "noise_multiplier": 1.0},
     "differentially_private_aggregate: needs an explicit key"),
    (gc.differentially_private_aggregate,
     {"l2_norm_clip": 1.0, "noise_multiplier": -1.0, "key": 0}, "noise_multiplier must be >= 0"),
    (gc.sam, {"optimizer": None, "adv_optimizer": None}, "sam: sync_period|sam: optimizer"),
    (lambda **kw: gc.sam(gradtx.sgd(0.1), gradtx.sgd(0.1), **kw), {"sync_period": 0},
     "sam: sync_period must be >= 1, got 0"),
]  # fmt: skip


@pytest.mark.parametrize(("factory", "kwargs", "message"), INVALID)
def test_invalid_hyperparameters_raise_at_construction(factory, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        factory(**kwargs)


def test_galore_rejects_bad_dimension_numbers_at_init():
    params = {"w": jnp.ones((2, 3))}
    bad = gc.galore(0.1, weight_dimension_numbers={"w": gc.GaLoreDimensionNumbers(0, 0)})
    with pytest.raises(ValueError, match="scale_by_galore: reduction axes"):
        bad.init(params)
    vector = gc.galore(0.1, weight_dimension_numbers={"w": gc.GaLoreDimensionNumbers(0, 1)})
    with pytest.raises(ValueError, match="scale_by_galore: GaLore projects leaves of rank"):
        vector.init({"w": jnp.ones(3)})


def test_acprop_keeps_a_float32_second_moment_for_float16_params():
    # A float16 second moment underflows to 0 for small gradients; ACProp divides the next
    # gradient by it (plus eps=1e-16), which overflowed float16 to inf before.
    params = {"w": jnp.zeros(4, jnp.float16)}
    tiny = {"w": jnp.asarray([1e-4, -1e-4, 2e-4, 3e-4], jnp.float16)}
    tx = gc.acprop(0.1)
    state = tx.init(params)
    assert gradtx.tree.get(state, "nu")["w"].dtype == jnp.float32
    for g in (tiny, tiny, jax.tree.map(lambda x: 2 * x, tiny)):
        updates, state = tx.update(g, state, params)
        assert updates["w"].dtype == jnp.float16
        assert bool(jnp.all(jnp.isfinite(updates["w"])))
    explicit = gc.scale_by_acprop(nu_dtype=jnp.float16).init(params)
    assert explicit.nu["w"].dtype == jnp.float16
