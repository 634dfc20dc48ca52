"""Matrix axes inferred from Flax models (gradtx/contrib/_matrix_axes.py): linen's `nn.scan`
metadata, axis names given as a tree for unboxed params, nnx metadata through `nnx.Optimizer`,
and a linen CNN's conv kernels; each against the same run given the dimension numbers by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx import contrib
from gradtx.contrib import MuonDimensionNumbers as MDN
from gradtx.contrib import explain_matrix_axes, infer_matrix_axes

from .test_matrix_axes import D, F, L, _assert_same, _updates

nn = pytest.importorskip("flax.linen")
nnx = pytest.importorskip("flax.nnx")


# -- linen: nn.scan with metadata, under a name that says nothing --------------------------------


def _part(init, names):
    return nn.with_partitioning(init, names)


class _Block(nn.Module):
    @nn.compact
    def __call__(self, x, _):
        dense = lambda n, names: nn.Dense(
            n,
            kernel_init=_part(nn.initializers.lecun_normal(), names),
            bias_init=_part(nn.initializers.zeros, names[1:]),
        )
        h = dense(F, ("embed", "mlp"))(x)
        x = x + dense(D, ("mlp", "embed"))(jax.nn.gelu(h))
        norm = nn.LayerNorm(
            scale_init=_part(nn.initializers.ones, ("embed",)),
            bias_init=_part(nn.initializers.zeros, ("embed",)),
        )
        return norm(x), None


class _Linen(nn.Module):
    @nn.compact
    def __call__(self, x):
        scanned = nn.scan(
            _Block,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            length=L,
            metadata_params={nn.PARTITION_NAME: "layers"},
        )
        x, _ = scanned(name="trunk")(x, None)
        return nn.Dense(2, kernel_init=_part(nn.initializers.lecun_normal(), ("embed", "vocab")))(x)


def _linen_params():
    return _Linen().init(jax.random.key(0), jnp.ones((2, D)))["params"]


def _linen_by_hand():
    stacked, vectors = MDN(1, 2), None
    dense = {"kernel": stacked, "bias": vectors}
    return {
        "trunk": {"Dense_0": dense, "Dense_1": dense, "LayerNorm_0": vectors},
        "Dense_0": {"kernel": MDN(0, 1), "bias": None},
    }


def test_linen_scanned_layers_read_the_scan_metadata():
    params = _linen_params()
    assert isinstance(params["trunk"]["Dense_0"]["kernel"], nn.Partitioned)
    table = explain_matrix_axes(params)
    kernel = next(r for r in table.splitlines() if r.startswith("trunk/Dense_0/kernel "))
    assert kernel.split()[4:7] == ["0", "1", "2"] and "axis names ('layers', 'embed'" in kernel
    inferred = _updates(contrib.muon(0.02), params)
    by_hand = _updates(contrib.muon(0.02, muon_weight_dimension_numbers=_linen_by_hand()), params)
    _assert_same(inferred, by_hand)
    # the LayerNorm scales (3, 4) are stacks of vectors: AdamW, not a 3 x 4 matrix
    scale = next(r for r in table.splitlines() if r.startswith("trunk/LayerNorm_0/scale "))
    assert "(3, 4)" in scale and "fallback" in scale and "stack of vectors" in scale


def test_axis_names_given_as_a_tree_for_unboxed_params():
    params = _linen_params()
    names = nn.get_partition_spec(params)
    plain = nn.unbox(params)
    spec = infer_matrix_axes(axis_names=names)
    _assert_same(
        _updates(contrib.muon(0.02, muon_weight_dimension_numbers=spec), plain),
        _updates(contrib.muon(0.02, muon_weight_dimension_numbers=_linen_by_hand()), plain),
    )


# -- nnx: layers made by nnx.vmap with transform_metadata, trained by nnx.Optimizer -------------


class _NnxBlock(nnx.Module):
    def __init__(self, rngs):
        part = nnx.with_partitioning
        self.lin = nnx.Linear(
            D,
            F,
            rngs=rngs,
            kernel_init=part(nnx.initializers.lecun_normal(), ("embed", "mlp")),
            bias_init=part(nnx.initializers.zeros, ("mlp",)),
        )


class _Nnx(nnx.Module):
    def __init__(self):
        @nnx.vmap(in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers"})
        def make(key):
            return _NnxBlock(nnx.Rngs(key))

        self.trunk = make(jax.random.split(jax.random.key(0), L))
        self.head = nnx.Linear(F, 2, rngs=nnx.Rngs(1))

    def __call__(self, x):
        @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
        def body(block, x):
            return jnp.tanh(block.lin(x))[..., :D]

        return self.head(jnp.concatenate([body(self.trunk, x)] * 2, -1)[..., :F])


def _nnx_run(tx):
    with nnx.use_eager_sharding(False):
        model = _Nnx()
    opt = nnx.Optimizer(model, tx, wrt=nnx.Param)

    @nnx.jit
    def step(model, opt, x):
        grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(model)
        opt.update(model, grads)

    for i in range(3):
        step(model, opt, jnp.asarray(np.random.default_rng(i).normal(size=(2, D)), jnp.float32))
    return nnx.state(model, nnx.Param)


def test_nnx_stack_metadata_read_at_init_holds_in_updates_of_plain_arrays():
    """nnx.Optimizer passes boxed state to `init` and plain arrays to `update`: the decisions
    made from the metadata at `init` hold. The stack is named "trunk" (no path rule)."""

    def by_hand(tree):
        def dims(path, _):
            if "trunk" in path:
                return MDN(1, 2) if "kernel" in path else None
            return MDN(0, 1) if "kernel" in path else None

        return gradtx.tree.map_with_path(dims, tree, is_leaf=lambda x: isinstance(x, nnx.Variable))

    muon = lambda spec: contrib.muon(0.02, muon_weight_dimension_numbers=spec)
    _assert_same(_nnx_run(muon(None)), _nnx_run(muon(by_hand)))


def test_nnx_kron_keeps_the_batch_axes_read_from_metadata_at_init():
    """Kron's factor shapes are fixed at `init`, from the boxed state's metadata; at `update`
    the plain arrays of "trunk" (no stack name) alone would give no batch axes."""

    def by_hand(tree):
        # the stacked kernels and biases (a stack of vectors) have the layer axis as batch axis
        axes = lambda path, _: (0,) if "trunk" in path else ()
        return gradtx.tree.map_with_path(axes, tree, is_leaf=lambda x: isinstance(x, nnx.Variable))

    kron = lambda batch_axes: contrib.kron(
        0.01, preconditioner_update_probability=1.0, batch_axes=batch_axes
    )
    _assert_same(_nnx_run(kron(None)), _nnx_run(kron(by_hand)))


# -- conv kernels -------------------------------------------------------------------------------


class _Cnn(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(F, (3, 3))(x))
        return nn.Dense(2)(x.mean((1, 2)))


def test_conv_kernels_flatten_spatial_and_input_channels():
    params = _Cnn().init(jax.random.key(0), jnp.ones((1, 5, 5, 2)))["params"]
    assert params["Conv_0"]["kernel"].shape == (3, 3, 2, F)
    conv = MDN(reduction_axis=(0, 1, 2), output_axis=3)
    by_hand = {"Conv_0": {"kernel": conv, "bias": None}, "Dense_0": {"kernel": MDN(), "bias": None}}
    _assert_same(
        _updates(contrib.muon(0.02), params),
        _updates(contrib.muon(0.02, muon_weight_dimension_numbers=by_hand), params),
    )
