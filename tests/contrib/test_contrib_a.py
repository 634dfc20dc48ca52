"""gradtx.contrib, part A (issue 11): Muon, schedule-free, Prodigy, D-Adaptation, DoG / DoWG,
Mechanic and COCOB against Optax 0.2.8's `optax.contrib`, plus what Optax does not check.

Every alias runs against Optax eagerly and under jit (`with_modes`); variants run under jit.
Learning-rate schedules start at 1 (these methods treat the learning rate as a multiplier).
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib as oc
import pytest
from optax.contrib import _dog as optax_dog

import gradtx
from gradtx import contrib as gc

from ..helpers import grad_sequence, mixed_params
from ..optax_reference import compare_to_optax, with_modes

MDN = gc.MuonDimensionNumbers


def _sched(t):
    return 1.0 / (1.0 + 0.01 * t)


def _warmup(t):
    return jnp.minimum(1.0, (t + 1.0) / 10.0)


def _decay_mask(p):
    return jax.tree.map(lambda x: x.size > 4, p)


def _muon_dims(p, cls=MDN):
    """Muon on the 2-D leaves and, with a batch axis, on the 3-D one; AdamW elsewhere."""
    dims = {2: cls(), 3: cls(reduction_axis=1, output_axis=(2,))}
    return jax.tree.map(lambda x: dims.get(np.ndim(x)), p)


def _optax_dims(p):
    return _muon_dims(p, oc.MuonDimensionNumbers)


# Looser absolute tolerances where Optax's own eager and jitted runs differ (measured on these
# cases, beyond rtol 1e-5): updates that are differences of parameter-sized values carry the
# rounding of |params| (COCOB's x_0 + ... - x_t with |x| ~ 1: 1.2e-7; schedule-free's
# y_{t+1} - y_t with |y| up to ~10 at a learning rate of 1: 1.9e-6), and Muon's Newton-Schulz
# matmuls round with the fusion (6.8e-7).
_COCOB_ATOL = 2.5e-7
_SF_ATOL = 2.5e-6
_MUON_ATOL = 1e-6

CASES = [
    # id, ours, Optax, atol
    ("muon", lambda: gc.muon(_sched), lambda: oc.muon(_sched), _MUON_ATOL),
    (
        "muon_plain_adaptive_spectral",
        lambda: gc.muon(_sched, nesterov=False, adaptive=True, preconditioning="spectral"),
        lambda: oc.muon(_sched, nesterov=False, adaptive=True, preconditioning="spectral"),
        _MUON_ATOL,
    ),
    (
        "muon_aol_dion",
        lambda: gc.muon(_sched, ns_coeffs="dion", preconditioning="aol", beta=0.9),
        lambda: oc.muon(_sched, ns_coeffs="dion", preconditioning="aol", beta=0.9),
        _MUON_ATOL,
    ),
    (
        "muon_schatten_rms_decay",
        lambda: gc.muon(
            _sched,
            ns_steps=4,
            preconditioning="schatten",
            consistent_rms=0.2,
            weight_decay=0.1,
            weight_decay_mask=_decay_mask,
            adam_learning_rate=lambda t: 0.5 * _sched(t),
            adam_weight_decay=0.01,
            adam_b1=0.8,
            adam_b2=0.99,
        ),
        lambda: oc.muon(
            _sched,
            ns_steps=4,
            preconditioning="schatten",
            consistent_rms=0.2,
            weight_decay=0.1,
            weight_decay_mask=_decay_mask,
            adam_learning_rate=lambda t: 0.5 * _sched(t),
            adam_weight_decay=0.01,
            adam_b1=0.8,
            adam_b2=0.99,
        ),
        _MUON_ATOL,
    ),
    (
        # one tree for both: ours accepts Optax's MuonDimensionNumbers too
        "muon_dimension_numbers",
        lambda: gc.muon(_sched, muon_weight_dimension_numbers=_optax_dims(mixed_params())),
        lambda: oc.muon(_sched, muon_weight_dimension_numbers=_optax_dims(mixed_params())),
        _MUON_ATOL,
    ),
    (
        "muon_dimension_numbers_fn",
        lambda: gc.muon(_sched, muon_weight_dimension_numbers=_muon_dims),
        lambda: oc.muon(_sched, muon_weight_dimension_numbers=_optax_dims),
        _MUON_ATOL,
    ),
    (
        "schedule_free",
        lambda: gc.schedule_free(gradtx.adam(_warmup, b1=0.0), _warmup, b1=0.95),
        lambda: oc.schedule_free(optax.adam(_warmup, b1=0.0), _warmup, b1=0.95),
        _SF_ATOL,
    ),
    (
        "schedule_free_adamw",
        lambda: gc.schedule_free_adamw(1.0, warmup_steps=10, weight_decay=1e-2),
        lambda: oc.schedule_free_adamw(1.0, warmup_steps=10, weight_decay=1e-2),
        _SF_ATOL,
    ),
    (
        "schedule_free_sgd",
        lambda: gc.schedule_free_sgd(warmup_steps=10, weight_decay=1e-3, weight_lr_power=1.0),
        lambda: oc.schedule_free_sgd(warmup_steps=10, weight_decay=1e-3, weight_lr_power=1.0),
        _SF_ATOL,
    ),
    ("prodigy", lambda: gc.prodigy(_sched), lambda: oc.prodigy(_sched), 1e-7),
    (
        "prodigy_safeguard_decay",
        lambda: gc.prodigy(
            _sched, beta3=0.99, safeguard_warmup=True, weight_decay=0.01, estim_lr_coef=2.0
        ),
        lambda: oc.prodigy(
            _sched, beta3=0.99, safeguard_warmup=True, weight_decay=0.01, estim_lr_coef=2.0
        ),
        1e-7,
    ),
    ("dadapt_adamw", lambda: gc.dadapt_adamw(_sched), lambda: oc.dadapt_adamw(_sched), 1e-7),
    (
        "dadapt_adamw_decay",
        lambda: gc.dadapt_adamw(_sched, betas=(0.8, 0.99), weight_decay=0.01, estim_lr0=1e-4),
        lambda: oc.dadapt_adamw(_sched, betas=(0.8, 0.99), weight_decay=0.01, estim_lr0=1e-4),
        1e-7,
    ),
    ("dog", lambda: gc.dog(_sched), lambda: oc.dog(_sched), 1e-7),
    (
        "dog_distance_decay",
        lambda: gc.dog(_sched, ("distance", 1e-3), weight_decay=1e-3, mask=_decay_mask),
        lambda: oc.dog(_sched, ("distance", 1e-3), weight_decay=1e-3, mask=_decay_mask),
        1e-7,
    ),
    (
        "scale_by_dog_learning_rate",
        lambda: gc.scale_by_dog(("learning_rate", 1e-2)),
        lambda: optax_dog.scale_by_dog(("learning_rate", 1e-2)),
        1e-7,
    ),
    ("dowg", lambda: gc.dowg(_sched), lambda: oc.dowg(_sched), 1e-7),
    (
        "dowg_init_decay",
        lambda: gc.dowg(_sched, init_estim_sq_dist=1e-3, weight_decay=1e-3),
        lambda: oc.dowg(_sched, init_estim_sq_dist=1e-3, weight_decay=1e-3),
        1e-7,
    ),
    (
        "scale_by_dowg",
        lambda: gc.scale_by_dowg(eps=1e-3),
        lambda: optax_dog.scale_by_dowg(eps=1e-3),
        1e-7,
    ),
    (
        "mechanize",
        lambda: gc.mechanize(gradtx.adam(_sched)),
        lambda: oc.mechanize(optax.adam(_sched)),
        1e-7,
    ),
    (
        "mechanize_sgd",
        lambda: gc.mechanize(
            gradtx.sgd(_sched, momentum=0.9), weight_decay=0.0, s_init=1e-4, num_betas=3
        ),
        lambda: oc.mechanize(
            optax.sgd(_sched, momentum=0.9), weight_decay=0.0, s_init=1e-4, num_betas=3
        ),
        1e-7,
    ),
    ("cocob", lambda: gc.cocob(_sched), lambda: oc.cocob(_sched), _COCOB_ATOL),
    (
        "cocob_decay",
        lambda: gc.cocob(_sched, alpha=10.0, weight_decay=1e-3, mask=_decay_mask),
        lambda: oc.cocob(_sched, alpha=10.0, weight_decay=1e-3, mask=_decay_mask),
        _COCOB_ATOL,
    ),
    (
        "scale_by_cocob",
        lambda: gc.scale_by_cocob(eps=1e-6),
        lambda: oc.scale_by_cocob(eps=1e-6),
        _COCOB_ATOL,
    ),
]

# Each alias once eagerly (`schedule_free` runs eagerly inside its two aliases).
EAGER = {
    "muon",
    "schedule_free_adamw",
    "schedule_free_sgd",
    "prodigy",
    "dadapt_adamw",
    "dog",
    "dowg",
    "mechanize",
    "cocob",
}


@pytest.mark.parametrize(("name", "ours", "ref", "atol", "jit"), with_modes(CASES, EAGER))
def test_matches_optax(name, ours, ref, atol, jit):
    compare_to_optax(ours(), ref(), jit=jit, atol=atol, reference_key=f"{__name__}:{name}")


SAME_SIGNATURE = [
    (gc.muon, oc.muon),
    (gc.scale_by_muon, oc.scale_by_muon),
    (gc.schedule_free, oc.schedule_free),
    (gc.schedule_free_adamw, oc.schedule_free_adamw),
    (gc.schedule_free_sgd, oc.schedule_free_sgd),
    (gc.schedule_free_eval_params, oc.schedule_free_eval_params),
    (gc.prodigy, oc.prodigy),
    (gc.dadapt_adamw, oc.dadapt_adamw),
    (gc.dog, oc.dog),
    (gc.dowg, oc.dowg),
    (gc.scale_by_dog, optax_dog.scale_by_dog),
    (gc.scale_by_dowg, optax_dog.scale_by_dowg),
    (gc.mechanize, oc.mechanize),
    (gc.cocob, oc.cocob),
    (gc.scale_by_cocob, oc.scale_by_cocob),
]


@pytest.mark.parametrize(("ours", "ref"), SAME_SIGNATURE, ids=lambda f: f.__name__)
def test_optax_names_argument_names_and_defaults(ours, ref):
    def described(fn):
        params = inspect.signature(fn).parameters.values()
        return [(p.name, p.kind, p.default) for p in params]

    assert described(ours) == described(ref)


# --------------------------------------------------------------------------------------------
# Muon: the primitive, dimension numbers, and an independent check of the orthogonalisation
# --------------------------------------------------------------------------------------------


def _matrices():
    rng = np.random.default_rng(7)
    return {
        "w": jnp.asarray(rng.normal(size=(3, 5)), jnp.float32),
        "tall": jnp.asarray(rng.normal(size=(4, 2)), jnp.float32),
        "conv": jnp.asarray(rng.normal(size=(2, 3, 4)), jnp.float32),
    }


def test_scale_by_muon_matches_optax_with_dimension_numbers():
    def dims(cls):
        return {"w": cls(), "tall": None, "conv": cls(reduction_axis=(0, 1), output_axis=-1)}

    compare_to_optax(
        gc.scale_by_muon(weight_dimension_numbers=dims(MDN), beta=0.9),
        oc.scale_by_muon(weight_dimension_numbers=dims(oc.MuonDimensionNumbers), beta=0.9),
        jit=True,
        params=_matrices(),
        atol=_MUON_ATOL,
    )


def test_scale_by_muon_without_dimension_numbers_takes_every_leaf_as_a_matrix():
    # Optax's scale_by_muon() fails on any tree but a single array; ours treats each leaf as a
    # plain matrix, which is what Optax gives leaf by leaf.
    params = {k: v for k, v in _matrices().items() if v.ndim == 2}
    grads = grad_sequence(params, 3)
    ours = gc.scale_by_muon()
    state = ours.init(params)
    ref = oc.scale_by_muon()
    ref_step = jax.jit(ref.update)
    ref_states = {k: ref.init(v) for k, v in params.items()}
    for g in grads:
        u, state = jax.jit(ours.update)(g, state)
        for k in params:
            expected, ref_states[k] = ref_step(g[k], ref_states[k])
            np.testing.assert_allclose(u[k], expected, rtol=1e-5, atol=_MUON_ATOL)


def _polar(x):
    u, _, vt = np.linalg.svd(np.asarray(x, np.float64), full_matrices=False)
    return u @ vt


def test_newton_schulz_converges_to_the_polar_factor():
    # With the classic cubic coefficients (1.5, -0.5, 0) and enough iterations, the iteration
    # converges to U V^T of the SVD; without momentum (beta=0) the input is the gradient itself.
    tx = gc.scale_by_muon(
        ns_coeffs=(1.5, -0.5, 0.0),
        ns_steps=12,
        beta=0.0,
        nesterov=False,
        weight_dimension_numbers={"w": MDN(), "tall": MDN(), "conv": MDN(1, 2)},
    )
    g = _matrices()
    u, _ = tx.update(g, tx.init(g))
    np.testing.assert_allclose(u["w"], _polar(g["w"]), atol=1e-5)
    np.testing.assert_allclose(u["tall"], _polar(g["tall"]), atol=1e-5)
    for b in range(2):  # axis 0 is a batch axis: each slice on its own
        np.testing.assert_allclose(u["conv"][b], _polar(g["conv"][b]), atol=1e-5)


def test_muon_sends_non_matrices_to_adamw():
    params = {"w": jnp.ones((3, 4)), "b": jnp.ones(4), "s": jnp.ones(())}
    state = gc.muon(0.1).init(params)
    inner = state.inner_states
    assert jax.tree.leaves(inner["muon"][0].mu) == [inner["muon"][0].mu["w"]]
    adam_mu = gradtx.tree.get(inner["adam"], "mu")
    assert isinstance(adam_mu["w"], gradtx.MaskedNode) and adam_mu["b"].shape == (4,)


def test_muon_dimension_number_errors_name_the_leaf_shape():
    tx = gc.scale_by_muon()
    params = {"v": jnp.ones(3)}
    with pytest.raises(ValueError, match=r"scale_by_muon: a parameter of shape \(3,\)"):
        tx.update(params, tx.init(params))
    tx = gc.scale_by_muon(weight_dimension_numbers=MDN(0, 0))
    params = {"w": jnp.ones((2, 2))}
    with pytest.raises(ValueError, match="must be non-empty and disjoint"):
        tx.update(params, tx.init(params))


# --------------------------------------------------------------------------------------------
# Schedule-free: the evaluation params
# --------------------------------------------------------------------------------------------


def _run(tx, params, grads):
    @jax.jit
    def go(params, stacked):
        def body(carry, g):
            p, s = carry
            u, s = tx.update(g, s, p)
            return (gradtx.apply_updates(p, u), s), None

        return jax.lax.scan(body, (params, tx.init(params)), stacked)[0]

    return go(params, jax.tree.map(lambda *xs: jnp.stack(xs), *grads))


def test_schedule_free_eval_params_match_optax():
    params = mixed_params()
    grads = grad_sequence(params, 100)
    p, s = _run(gc.schedule_free_adamw(0.5, warmup_steps=5), params, grads)
    p_ref, s_ref = _run(oc.schedule_free_adamw(0.5, warmup_steps=5), params, grads)
    ours = gc.schedule_free_eval_params(s, p)
    expected = oc.schedule_free_eval_params(s_ref, p_ref)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # The evaluation point differs from the training point (it is the average x, not y).
    assert not np.allclose(jax.tree.leaves(ours)[0], jax.tree.leaves(p)[0])
    # A state holding the schedule-free state (here a chain) works too.
    chained = gc.schedule_free_eval_params((gradtx.EmptyState(), s), p)
    for a, b in zip(jax.tree.leaves(chained), jax.tree.leaves(ours), strict=True):
        np.testing.assert_array_equal(a, b)


def test_schedule_free_eval_params_needs_a_schedule_free_state():
    params = {"w": jnp.ones(2)}
    with pytest.raises(ValueError, match="schedule_free_eval_params: state must be"):
        gc.schedule_free_eval_params(gradtx.adam(0.1).init(params), params)


# --------------------------------------------------------------------------------------------
# Prodigy and D-Adaptation: all-zero first gradients (Optax: NaN forever)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ours", "ref"),
    [(gc.prodigy, oc.prodigy), (gc.dadapt_adamw, oc.dadapt_adamw)],
    ids=["prodigy", "dadapt_adamw"],
)
def test_zero_first_gradients_keep_the_estimate(ours, ref):
    params = {"w": jnp.ones(3), "b": jnp.ones(2)}
    zeros = jax.tree.map(jnp.zeros_like, params)
    grad = jax.jit(jax.grad(lambda p: sum(jnp.sum((x + 2.0) ** 2) for x in jax.tree.leaves(p))))
    ref_tx = ref()
    ref_u, ref_state = ref_tx.update(zeros, ref_tx.init(params), params)
    ref_u, _ = ref_tx.update(grad(params), ref_state, params)
    assert np.isnan(np.asarray(ref_u["w"])).all()  # the defect avoided here
    tx = ours()
    step = jax.jit(tx.update)
    u, state = step(zeros, tx.init(params), params)
    assert float(state.estim_lr) == pytest.approx(1e-6)
    assert all(bool(jnp.all(x == 0)) for x in jax.tree.leaves(u))
    start = float(sum(jnp.sum((x + 2.0) ** 2) for x in jax.tree.leaves(params)))
    for _ in range(30):
        u, state = step(grad(params), state, params)
        params = gradtx.apply_updates(params, u)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(params))
    assert float(state.estim_lr) > 1e-3  # the estimate grew, and the loss fell
    assert float(sum(jnp.sum((x + 2.0) ** 2) for x in jax.tree.leaves(params))) < start


# --------------------------------------------------------------------------------------------
# DoG's initial distance, and params checks
# --------------------------------------------------------------------------------------------


def test_dog_heuristic_initial_distance():
    params = {"w": jnp.array([3.0, 4.0])}
    state = gc.scale_by_dog(("heuristic", 0.5)).init(params)
    assert float(state.max_dist) == pytest.approx(0.5 * (1.0 + 5.0))
    state = gc.scale_by_dog(("distance", 0.25)).init(params)
    assert float(state.max_dist) == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("make", "who"),
    [
        (lambda: gc.dog(), "scale_by_dog"),
        (lambda: gc.dowg(), "scale_by_dowg"),
        (lambda: gc.cocob(), "weight_decay"),
        (lambda: gc.scale_by_cocob(), "scale_by_cocob"),
        (lambda: gc.prodigy(), "prodigy"),
        (lambda: gc.dadapt_adamw(), "dadapt_adamw"),
        (lambda: gc.mechanize(gradtx.sgd(1.0)), "mechanize"),
        (lambda: gc.schedule_free_sgd(), "schedule_free"),
    ],
)
def test_needs_params(make, who):
    tx = make()
    params = {"w": jnp.ones(2)}
    with pytest.raises(ValueError, match=f"{who} needs the current parameters"):
        tx.update(params, tx.init(params))


# --------------------------------------------------------------------------------------------
# Invalid hyperparameters raise at construction, naming the function, argument and value
# --------------------------------------------------------------------------------------------

BAD = [
    (lambda: gc.muon(0.1, beta=1.0), r"muon: scale_by_muon: beta must be in \[0.0, 1.0\), got 1.0"),
    (lambda: gc.muon(0.1, ns_coeffs="polar"), "muon: ns_coeffs must be one of"),
    (lambda: gc.muon(0.1, preconditioning="svd"), "preconditioning must be one of"),
    (lambda: gc.muon(-0.1), "learning_rate must be .*>= 0, got -0.1"),
    (lambda: gc.muon(0.1, weight_decay=-1.0), "muon: weight_decay must be .*>= 0, got -1.0"),
    (lambda: gc.muon(0.1, adam_b2=1.5), r"b2 must be in \[0.0, 1.0\), got 1.5"),
    (lambda: gc.scale_by_muon(ns_steps=0), "scale_by_muon: ns_steps must be >= 1, got 0"),
    (lambda: gc.scale_by_muon(ns_coeffs=(1.0, 2.0)), r"must have shape \(3,\) or \(n, 3\)"),
    (
        lambda: gc.scale_by_muon(ns_coeffs=((1.0, 2.0, 3.0),) * 6, ns_steps=5),
        "ns_coeffs has 6 rows, more than ns_steps=5",
    ),
    (lambda: gc.scale_by_shape(consistent_rms=-0.2), "consistent_rms must be .*>= 0, got -0.2"),
    (lambda: gc.schedule_free_adamw(b1=0.0), r"b1 must be in \(0.0, 1.0\], got 0.0"),
    (lambda: gc.schedule_free_adamw(b2=1.0), r"schedule_free_adamw: b2 must be in \[0.0, 1.0\)"),
    (lambda: gc.schedule_free_sgd(learning_rate=-1.0), "learning_rate must be .*>= 0, got -1.0"),
    (lambda: gc.schedule_free_sgd(warmup_steps=0), "warmup_steps must be >= 1, got 0"),
    (
        lambda: gc.schedule_free(gradtx.sgd(0.1), 0.1, weight_lr_power=-2.0),
        "weight_lr_power must be .*>= 0, got -2.0",
    ),
    (lambda: gc.prodigy(betas=(0.9, 1.0)), r"prodigy: betas\[1\] must be in \[0.0, 1.0\)"),
    (lambda: gc.prodigy(beta3=-0.1), r"prodigy: beta3 must be in \[0.0, 1.0\), got -0.1"),
    (lambda: gc.prodigy(estim_lr0=0.0), "prodigy: estim_lr0 must be > 0, got 0.0"),
    (lambda: gc.prodigy(weight_decay=-1e-3), "prodigy: weight_decay must be .*>= 0, got -0.001"),
    (lambda: gc.dadapt_adamw(betas=(1.2, 0.9)), r"dadapt_adamw: betas\[0\] must be in"),
    (lambda: gc.dadapt_adamw(eps=-1.0), "dadapt_adamw: eps must be .*>= 0, got -1.0"),
    (lambda: gc.dog(init_step=("magic", 1.0)), r"dog: scale_by_dog: init_step\[0\] must be one"),
    (lambda: gc.dog(init_step=("distance", 0.0)), r"init_step\[1\] must be > 0, got 0.0"),
    (lambda: gc.dog(init_step=1e-6), "init_step must be a pair"),
    (lambda: gc.dog(weight_decay=-1.0), "dog: weight_decay must be .*>= 0, got -1.0"),
    (lambda: gc.dowg(eps=0.0), "scale_by_dowg: eps .* must be > 0, got 0.0"),
    (lambda: gc.dowg(init_estim_sq_dist=-1.0), "init_estim_sq_dist must be > 0, got -1.0"),
    (lambda: gc.mechanize(gradtx.sgd(1.0), num_betas=0), "num_betas must be >= 1, got 0"),
    (lambda: gc.mechanize(gradtx.sgd(1.0), s_init=0.0), "mechanize: s_init must be > 0"),
    (lambda: gc.mechanize(gradtx.sgd(1.0), weight_decay=-1.0), "weight_decay must be .*>= 0"),
    (lambda: gc.cocob(alpha=0.0), "cocob: scale_by_cocob: alpha must be > 0, got 0.0"),
    (lambda: gc.cocob(weight_decay=-1.0), "cocob: weight_decay must be .*>= 0, got -1.0"),
    (lambda: gc.scale_by_cocob(eps=-1e-8), "scale_by_cocob: eps must be > 0, got -1e-08"),
]


@pytest.mark.parametrize(("make", "message"), BAD, ids=range(len(BAD)))
def test_invalid_hyperparameters_raise_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_factory_instead_of_a_base_optimizer_is_named():
    with pytest.raises(
        TypeError, match=r"schedule_free: base_optimizer .* \(did you pass a factory"
    ):
        gc.schedule_free(gradtx.sgd, 0.1)
    with pytest.raises(TypeError, match="mechanize: base_optimizer must be a GradientTrans"):
        gc.mechanize(None)
