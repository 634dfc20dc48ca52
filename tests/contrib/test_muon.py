"""Muon: momentum orthogonalised by Newton-Schulz iterations on the matrix-shaped leaves (AdamW
on the others), against Optax 0.2.8's `optax.contrib.muon`; dimension numbers, an independent
check of the orthogonalisation against the SVD's polar factor, a single-matrix parameter tree,
and validation.

Every alias runs against Optax eagerly and under jit (`with_modes`); variants run under jit.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib as oc
import pytest

import gradtx
from gradtx import contrib as gc

from ..helpers import grad_sequence, mixed_params
from ..optax_reference import compare_to_optax, with_modes
from ..wrappers.common import _grads, _steps
from .common import decay_mask, described, sched

MDN = gc.MuonDimensionNumbers


def _muon_dims(p, cls=MDN):
    """Muon on the 2-D leaves and, with a batch axis, on the 3-D one; AdamW elsewhere."""
    dims = {2: cls(), 3: cls(reduction_axis=1, output_axis=(2,))}
    return jax.tree.map(lambda x: dims.get(np.ndim(x)), p)


def _optax_dims(p):
    return _muon_dims(p, oc.MuonDimensionNumbers)


# A looser absolute tolerance, as Optax's own eager and jitted runs differ (measured on these
# cases, beyond rtol 1e-5): Muon's Newton-Schulz matmuls round with the fusion (6.8e-7). Jitted
# runs also allow twice the reference's own float32 noise against its float64 run
# (`float64_noise`): with jax 0.12 on CPU that noise is 5-7x larger (up to ~1e-5 here), equally
# for both libraries, as the fused matmuls round differently. On an AVX2-only CPU jax 0.12's
# eager run is off by 1.25e-6 at step 3 (the vector width sets the rounding): 2e-6.
_MUON_ATOL = 2e-6

# One set of keyword arguments for ours and Optax's (the same schedule objects in both).
_SCHATTEN_RMS_DECAY = dict(
    ns_steps=4,
    preconditioning="schatten",
    consistent_rms=0.2,
    weight_decay=0.1,
    weight_decay_mask=decay_mask,
    adam_learning_rate=lambda t: 0.5 * sched(t),
    adam_weight_decay=0.01,
    adam_b1=0.8,
    adam_b2=0.99,
)

# Optax sends every leaf of rank > 2 without dimension numbers to AdamW; gradtx infers the
# matrix axes and reports a leaf it cannot decide, such as mixed_params' unnamed (2, 2, 2) one:
# named here as Optax treats it.
_AS_OPTAX = {"muon_weight_dimension_numbers": gc.infer_matrix_axes({"pair/b/1": None})}

CASES = [
    # id, ours, Optax, atol
    ("muon", lambda: gc.muon(sched, **_AS_OPTAX), lambda: oc.muon(sched), _MUON_ATOL),
    (
        "muon_plain_adaptive_spectral",
        lambda: gc.muon(
            sched, nesterov=False, adaptive=True, preconditioning="spectral", **_AS_OPTAX
        ),
        lambda: oc.muon(sched, nesterov=False, adaptive=True, preconditioning="spectral"),
        _MUON_ATOL,
    ),
    (
        "muon_aol_dion",
        lambda: gc.muon(sched, ns_coeffs="dion", preconditioning="aol", beta=0.9, **_AS_OPTAX),
        lambda: oc.muon(sched, ns_coeffs="dion", preconditioning="aol", beta=0.9),
        _MUON_ATOL,
    ),
    (
        "muon_schatten_rms_decay",
        lambda: gc.muon(sched, **_SCHATTEN_RMS_DECAY, **_AS_OPTAX),
        lambda: oc.muon(sched, **_SCHATTEN_RMS_DECAY),
        _MUON_ATOL,
    ),
    (
        # one tree for both: ours accepts Optax's MuonDimensionNumbers too
        "muon_dimension_numbers",
        lambda: gc.muon(sched, muon_weight_dimension_numbers=_optax_dims(mixed_params())),
        lambda: oc.muon(sched, muon_weight_dimension_numbers=_optax_dims(mixed_params())),
        _MUON_ATOL,
    ),
    (
        "muon_dimension_numbers_fn",
        lambda: gc.muon(sched, muon_weight_dimension_numbers=_muon_dims),
        lambda: oc.muon(sched, muon_weight_dimension_numbers=_optax_dims),
        _MUON_ATOL,
    ),
]

# The alias once eagerly.
EAGER = {"muon"}


@pytest.mark.across_versions
@pytest.mark.parametrize(("name", "ours", "ref", "atol", "jit"), with_modes(CASES, EAGER))
def test_matches_optax(name, ours, ref, atol, jit):
    compare_to_optax(
        ours(),
        ref(),
        jit=jit,
        atol=atol,
        reference_key=f"{__name__}:{name}",
        float64_noise=jit,
    )


SAME_SIGNATURE = [
    (gc.muon, oc.muon),
    (gc.scale_by_muon, oc.scale_by_muon),
]


# gradtx's own keyword-only arguments after Optax's, each with a default that keeps Optax's
# behaviour
EXTRA_KEYWORDS = {("distributed", "replicated")}


@pytest.mark.parametrize(("ours", "ref"), SAME_SIGNATURE, ids=lambda f: f.__name__)
def test_optax_names_argument_names_and_defaults(ours, ref):
    got = described(ours)
    extra = [(name, default) for name, _, default in got[len(described(ref)) :]]
    assert got[: len(got) - len(extra)] == described(ref)
    assert set(extra) == EXTRA_KEYWORDS


# -- the primitive, dimension numbers, and an independent check of the orthogonalisation ---------


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
        float64_noise=True,
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


# -- invalid hyperparameters raise at construction, naming the function, argument and value --

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
]


@pytest.mark.parametrize(("make", "message"), BAD, ids=range(len(BAD)))
def test_invalid_hyperparameters_raise_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_contrib_muon_on_a_single_matrix_matches_optax():
    params = jnp.linspace(-1.0, 1.0, 12).reshape(3, 4)
    grads = _grads(params.shape)
    ours = _steps(gradtx.contrib.muon(1e-3), params, grads)
    ref = _steps(optax.contrib.muon(1e-3), params, grads)
    for got, want in zip(ours, ref, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def _orthogonality_error(x: np.ndarray, coeffs) -> float:
    """||U U^T - I||_2 (the smaller Gram) of the Newton-Schulz result of `x` under `coeffs`."""
    from gradtx.contrib._muon import _newton_schulz

    u = np.asarray(_newton_schulz(jnp.asarray(x)[None], tuple(coeffs), "frobenius", 1e-7))[0]
    u = u.astype(np.float64)
    gram = u @ u.T if u.shape[0] <= u.shape[1] else u.T @ u
    return float(np.linalg.norm(gram - np.eye(gram.shape[0]), 2))


def test_polar_express_preset_halves_the_orthogonality_error_at_the_same_cost():
    from gradtx.contrib._muon import _NS_COEFFS_PRESETS, _coefficient_table

    pe, standard = _NS_COEFFS_PRESETS["polar_express"], _coefficient_table("t", "standard", 5)
    assert len(pe) == 8 and _coefficient_table("t", "polar_express", 5) == pe[:5]
    # the paper's last row, and the first rows after its safety factor (rounded as NVIDIA's
    # emerging-optimizers prints them)
    assert pe[-1] == (1.875, -1.25, 0.375)
    np.testing.assert_allclose(pe[0], (8.2051, -22.9019, 16.4607), atol=1.1e-4)
    np.testing.assert_allclose(pe[4], (2.2779, -1.6198, 0.3985), atol=1.1e-4)
    rng = np.random.default_rng(0)
    for shape in [(128, 64), (64, 256)]:
        x = rng.normal(size=shape).astype(np.float32)
        std5 = _orthogonality_error(x, standard)
        assert std5 > 0.5  # the standard rows stop at singular values in about [0.7, 1.2]
        assert _orthogonality_error(x, pe[:5]) < 0.6 * std5
        assert _orthogonality_error(x, pe[:6]) < 0.01
    # the same iteration count costs the same: as many matrix products in either program
    x = jnp.ones((1, 32, 16))
    dots = [
        jax.jit(lambda x, c=c: gc._muon._newton_schulz(x, c, "frobenius", 1e-7))
        .lower(x)
        .as_text()
        .count("dot_general")
        for c in (standard, pe[:5])
    ]
    assert dots[0] == dots[1] > 0
    # every alias takes the preset by name
    params = {"w": jnp.ones((8, 4))}
    for make in (gc.muon, gc.normuon):
        tx = make(1e-2, ns_coeffs="polar_express")
        u, _ = tx.update(params, tx.init(params), params)
        assert np.all(np.isfinite(np.asarray(u["w"])))
    with pytest.raises(ValueError, match="ns_coeffs"):
        gc.muon(1e-2, ns_coeffs="polar")
