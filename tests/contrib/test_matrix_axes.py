"""Matrix axes inferred for the matrix optimizers (gradtx/contrib/_matrix_axes.py): experts, a
stack of layers for every matrix optimizer, overrides, the ambiguous-leaf error and
`explain_matrix_axes`. Each inferred run is compared with the same
run given the dimension numbers by hand (the same program: equal to the last bit). The Flax models
(linen, nnx, a CNN) are in test_matrix_axes_flax.py."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradtx import contrib
from gradtx.contrib import MuonDimensionNumbers as MDN
from gradtx.contrib import explain_matrix_axes, infer_matrix_axes

L, D, F = 3, 4, 6  # layers, width, hidden


def _grads(params, seed):
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: jnp.asarray(rng.normal(size=np.shape(x)), jnp.float32), params)


def _updates(tx, params, steps=3):
    """The updates of `steps` jitted steps on fixed random gradients (one program)."""

    @jax.jit
    def run(params):
        state = tx.init(params)
        out = []
        for i in range(steps):
            u, state = tx.update(_grads(params, i), state, params)
            out.append(u)
        return out

    return run(params)


def _assert_same(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)


# -- experts and conv kernels by path names ------------------------------------------------------


def _moe_params():
    rng = np.random.default_rng(0)
    leaf = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)
    return {
        "moe": {"experts": {"wi": leaf(4, D, F), "wo": leaf(4, F, D)}, "router": leaf(D, 4)},
        "norm": {"scale": leaf(D)},
    }


@pytest.mark.across_versions
def test_moe_experts_are_a_batch_axis():
    params = _moe_params()
    by_hand = {"moe": {"experts": MDN(1, 2), "router": MDN(0, 1)}, "norm": None}
    _assert_same(
        _updates(contrib.muon(0.02), params),
        _updates(contrib.muon(0.02, muon_weight_dimension_numbers=by_hand), params),
    )


_STACKED = {
    "layers": {"mlp": {"kernel": np.ones((L, D, F), np.float32)}},
    "head": np.ones((F, 2), np.float32),
    "head_bias": np.ones(2, np.float32),
}


@pytest.mark.parametrize(
    ("name", "dims_class", "kwargs"),
    [
        ("soap", contrib.SoapDimensionNumbers, {"precondition_frequency": 2}),
        ("shampoo", contrib.ShampooDimensionNumbers, {"start_preconditioning_step": 1}),
        ("normuon", MDN, {}),
        ("scion", MDN, {}),
        ("dion", contrib.DionDimensionNumbers, {"rank": 2}),
    ],
)
def test_every_matrix_optimizer_infers_a_stack(name, dims_class, kwargs):
    params = jax.tree.map(jnp.asarray, _grads(_STACKED, 7))
    by_hand = {"layers": dims_class(1, 2), "head": dims_class(0, 1), "head_bias": None}
    make = getattr(contrib, name)
    _assert_same(
        _updates(make(0.01, **kwargs), params),
        _updates(make(0.01, weight_dimension_numbers=by_hand, **kwargs), params),
    )


# -- ambiguity, overrides, explanation ----------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "path", "example"),
    [
        ({"moe": {"wi": jnp.ones((4, 3, 5))}}, "moe/wi", "reduction_axis=1, output_axis=2"),
        ({"k": jnp.ones((3, 3, 2, 4))}, "k", "reduction_axis=(0, 1, 2), output_axis=3"),
        # a layer axis and a spatial axis cannot be told apart by names alone
        ({"layers": {"Conv_0": {"kernel": jnp.ones((2, 3, 3, 4, 4))}}}, "layers/Conv_0/kernel", ""),
    ],
)
def test_an_ambiguous_leaf_is_an_error_naming_it_and_the_override(params, path, example):
    with pytest.raises(ValueError) as info:
        contrib.muon(0.02).init(params)
    message = str(info.value)
    assert f"'{path}'" in message and "never flattened silently" in message
    assert f"muon_weight_dimension_numbers=gradtx.contrib.infer_matrix_axes({{'{path}': " in message
    assert example in message and f"{{'{path}': None}}" in message
    with pytest.raises(ValueError, match=f"'{path}'.*SoapDimensionNumbers"):
        contrib.soap(0.01).init(params)


def test_overrides_first_match_wins_and_none_is_the_fallback():
    params = _moe_params()
    spec = infer_matrix_axes(
        {"moe/experts/wi": MDN(2, 1), "**/experts/**": MDN(1, 2), "moe/router": None}
    )
    state = contrib.muon(0.02, muon_weight_dimension_numbers=spec).init(params)
    assert "router" in state.inner_states["adam"][0].mu["moe"]
    table = explain_matrix_axes(params, spec)
    wi, wo = (
        next(r for r in table.splitlines() if r.startswith(p))
        for p in ("moe/experts/wi", "moe/experts/wo")
    )
    assert wi.split()[4:7] == ["0", "2", "1"] and "override 'moe/experts/wi'" in wi
    assert wo.split()[4:7] == ["0", "1", "2"] and "override '**/experts/**'" in wo
    by_hand = {"moe": {"experts": {"wi": MDN(2, 1), "wo": MDN(1, 2)}, "router": None}, "norm": None}
    _assert_same(
        _updates(contrib.muon(0.02, muon_weight_dimension_numbers=spec), params),
        _updates(contrib.muon(0.02, muon_weight_dimension_numbers=by_hand), params),
    )


def test_override_mistakes_are_errors():
    params = _moe_params()
    with pytest.raises(ValueError, match=r"'\*\*/expert/\*\*'.*matches no parameter"):
        contrib.muon(
            0.02, muon_weight_dimension_numbers=infer_matrix_axes({"**/expert/**": None})
        ).init(params)
    # one spec for several models: strict=False lets a pattern match nothing
    loose = infer_matrix_axes({"**/expert/**": None}, strict=False)
    contrib.muon(0.02, muon_weight_dimension_numbers=loose).init(params)
    with pytest.raises(ValueError, match="must map to dimension numbers"):
        infer_matrix_axes({"**": (1, 2)})
    # a dict of globs is a prefix tree of the params, not patterns: the error says how
    with pytest.raises(ValueError, match="infer_matrix_axes"):
        contrib.muon(0.02, muon_weight_dimension_numbers={"**/experts/**": MDN(1, 2)}).init(params)


def test_explain_is_logged_once(caplog):
    params = {"layers": {"w": jnp.ones((5, 3, 7))}, "b": jnp.ones(7), "m": jnp.ones((3, 7))}
    tx = contrib.muon(0.02)
    with caplog.at_level(logging.INFO, logger="gradtx.contrib"):
        tx.init(params)
        tx.init(params)
        jax.jit(tx.update)(params, tx.init(params), params)
    logged = [r.getMessage() for r in caplog.records if r.name == "gradtx.contrib"]
    assert len(logged) == 1
    assert explain_matrix_axes(params) in logged[0]
    lines = explain_matrix_axes(params).splitlines()
    assert lines[0].split() == ["path", "shape", "batch", "reduction", "output", "why"]
    assert lines[1].startswith("b ") and "not a matrix (rank < 2)" in lines[1]
    assert lines[2].split()[:6] == ["layers/w", "(5,", "3,", "7)", "0", "1"]
    assert lines[3].split()[3:6] == ["-", "0", "1"] and lines[3].endswith("2-D default")


# -- Kron: the batch axes by the same decisions --------------------------------------------------


def _kron_params():
    rng = np.random.default_rng(3)
    leaf = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)
    return {
        "layers": {"mlp": {"kernel": leaf(L, D, F)}, "norm": {"bias": leaf(L, D)}},
        "head": leaf(F, 2),
        "head_bias": leaf(2),
        "u": leaf(2, 3, 4),  # names say nothing: no batch axes (not an error for Kron)
        "v": leaf(2, 3, 4),
    }


def _kron_updates(batch_axes, params, steps=3):
    """The updates of `steps` Kron steps (each refitting the factors), one scanned program."""
    tx = contrib.kron(0.01, preconditioner_update_probability=1.0, batch_axes=batch_axes)
    grads = [_grads(params, i) for i in range(steps)]

    @jax.jit
    def run(params, grads):
        step = lambda state, g: tx.update(g, state, params)[::-1]
        return jax.lax.scan(step, tx.init(params), grads)[1]

    return run(params, jax.tree.map(lambda *g: jnp.stack(g), *grads))


def test_kron_infers_the_batch_axes_of_stacks():
    params = _kron_params()
    by_hand = {
        "layers": {"mlp": {"kernel": (0,)}, "norm": {"bias": (0,)}},  # a stack of vectors too
        "head": (),
        "head_bias": (),
        "u": (),
        "v": (),
    }
    qs = contrib.scale_by_kron().init(params).qs
    assert [q.shape for q in qs["layers"]["mlp"]["kernel"]] == [(L, D, D), (L, F, F)]
    assert [q.shape for q in qs["layers"]["norm"]["bias"]] == [(L, D)]
    assert [q.shape for q in qs["u"]] == [(2, 2), (3, 3), (4, 4)]
    _assert_same(_kron_updates(None, params), _kron_updates(by_hand, params))


def test_kron_batch_axes_by_overrides_and_axis_names():
    params = _kron_params()
    spec = infer_matrix_axes(
        {"u": MDN(reduction_axis=0, output_axis=-1), "layers/mlp/**": None},
        axis_names={
            "layers": None,
            "head": None,
            "head_bias": None,
            "u": None,
            "v": ("stage", None, None),
        },
    )
    by_hand = {
        "layers": {"mlp": {"kernel": ()}, "norm": {"bias": (0,)}},  # None: a factor per axis
        "head": (),
        "head_bias": (),
        "u": (1,),  # the axis that is neither reduction nor output
        "v": (0,),
    }
    table = explain_matrix_axes(params, spec, kron=True).splitlines()
    assert [r.split()[0] for r in table if r.split()[-1:] != ["why"]] == sorted(
        ["head", "head_bias", "layers/mlp/kernel", "layers/norm/bias", "u", "v"]
    )
    assert next(r for r in table if r.startswith("u ")).split()[4] == "1"
    _assert_same(_kron_updates(spec, params), _kron_updates(by_hand, params))


def test_kron_logs_its_batch_axes_once(caplog):
    # shapes of their own: each table is logged once per process
    params = {"blocks": {"w": jnp.ones((2, 5, 3))}, "u": jnp.ones((3, 2, 5)), "b": jnp.ones(7)}
    tx = contrib.scale_by_kron()
    with caplog.at_level(logging.INFO, logger="gradtx.contrib"):
        tx.init(params)
        jax.eval_shape(tx.update, params, tx.init(params))  # traced, not compiled
    logged = [r.getMessage() for r in caplog.records if r.name == "gradtx.contrib"]
    assert len(logged) == 1 and explain_matrix_axes(params, kron=True) in logged[0]
    row = next(r for r in explain_matrix_axes(params, kron=True).splitlines() if r[:2] == "u ")
    assert row.split()[4] == "-" and "not a matrix, a factor per other axis" in row
    with pytest.raises(ValueError, match=r"kron=True.*infer_matrix_axes"):
        explain_matrix_axes(params, {"u": MDN()}, kron=True)
