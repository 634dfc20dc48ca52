"""Adam-mini against `pytorch_optimizer.AdamMini` (4.1.0) over 60 float32 steps (with the
patterns that reproduce the reference's partition), against the authors' package
`adam_mini.Adam_mini` (1.1.1) over 60 float32 steps on a small Llama-like block (embedding,
norms, grouped-query attention q / k / v / o with biases, MLP, an unlisted matrix, lm_head),
against a NumPy transcription of the paper's partition (its default), and its edge cases.

Tolerance: 1e-5 absolute on parameters of size ~1 after 60 steps of lr 1e-2 against
pytorch_optimizer and the NumPy transcription, 1e-4 against the authors' package (measured:
4e-6): all sides run in float32 with the same operations up to the order of the block mean's
summation and of the bias corrections (the package applies 1 / sqrt(1 - b2^t) to sqrt(v) and
folds 1 / (1 - b1^t) into the step in float64 Python scalars), which compound over 60 steps.

The authors' package partitions as gradtx's default (keys by `n_kv_heads` heads: the "kv_head"
rule) except that every name containing "bias" gets plain Adam (gradtx: one whole block, the
1-D rule) and a matrix named in none of its lists is one whole block (gradtx: by output
neuron); `AUTHORS_PATTERNS` reproduces it, and `test_default_partition_vs_authors` pins where
the default differs. Its weight decay skips names containing "norm", "ln" or "bias" (gradtx's
default mask: "norm", "ln_f"). Where it departs from the paper (q / k cut into blocks of
dim * dim / n_heads entries, which is one head only when the projection's input width is
`dim`), gradtx follows the paper: `test_head_partition_follows_the_paper_not_dim`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradtx.contrib._adam_mini import (
    ScaleByAdamMiniState,
    adam_mini,
    default_rule,
    scale_by_adam_mini,
)

from .torch_reference import gradtx_trajectory

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")

STEPS = 60
LR = 1e-2
D, HEADS, VOCAB = 8, 2, 10
SHAPES = {  # torch's layout: (out, in)
    "embed": (VOCAB, D),
    "q_proj": (D, D),
    "k_proj": (D, D),
    "v_proj": (D, D),
    "mlp": (6, D),
    "norm": (D,),
    "lm_head": (VOCAB, D),
}
REFERENCE_PATTERNS = {  # as in scale_by_adam_mini's docstring
    "**/q_proj/**": "head",
    "**/k_proj/**": "head",
    "**/embed*/**": "adam",
    "**/lm_head/**": "adam",
    "**": "whole",
}


def _problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    params = {k: {"weight": rng.normal(size=s).astype(np.float32)} for k, s in SHAPES.items()}
    scale = np.exp(rng.normal(size=STEPS)).astype(np.float32)
    grads = {
        k: {
            "weight": (scale.reshape((-1,) + (1,) * len(s)) * rng.normal(size=(STEPS, *s))).astype(
                np.float32
            )
        }
        for k, s in SHAPES.items()
    }
    return params, grads


class _Model(torch.nn.Module):
    def __init__(self, params):
        super().__init__()
        for k, v in params.items():
            sub = torch.nn.Module()
            sub.weight = torch.nn.Parameter(torch.tensor(v["weight"]))
            setattr(self, k, sub)


def _torch_run(params, grads, weight_decay):
    model = _Model(params)
    opt = pytorch_optimizer.AdamMini(
        model, lr=LR, betas=(0.9, 0.999), weight_decay=weight_decay, num_embeds=D,
        num_heads=HEADS, eps=1e-8, foreach=False,
    )  # fmt: skip
    named = dict(model.named_parameters())
    out = {k: [] for k in params}
    for t in range(STEPS):
        for k in params:
            named[f"{k}.weight"].grad = torch.tensor(grads[k]["weight"][t])
        opt.step()
        for k in params:
            out[k].append(named[f"{k}.weight"].detach().numpy().copy())
    return {k: {"weight": np.stack(v)} for k, v in out.items()}


def _max_diff(a, b) -> float:
    return max(
        float(np.max(np.abs(x - y)))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=False)
    )


@pytest.mark.across_versions
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_matches_pytorch_optimizer(weight_decay):
    params, grads = _problem()
    tx = adam_mini(
        LR, weight_decay=weight_decay, n_heads=HEADS, patterns=REFERENCE_PATTERNS, output_axis=0
    )
    ours = gradtx_trajectory(tx, params, grads)
    ref = _torch_run(params, grads, weight_decay)
    assert _max_diff(ours, ref) < 1e-5
    # the trajectory moved (the test could fail)
    assert _max_diff(ours, {k: {"weight": v["weight"][None]} for k, v in params.items()}) > 0.1


def _numpy_paper(params, grads, b1=0.9, b2=0.999, eps=1e-8, axis=-1):
    """The paper's Algorithm 3 partition in JAX layout (in, out): embed by row, q / k by head of
    the output axis, other matrices by output column, vectors as one block; float64."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v_ = {k: None for k in p}
    out = []
    for t in range(1, STEPS + 1):
        for k in p:
            g = grads[k][t - 1].astype(np.float64)
            if g.ndim < 2:
                blk = np.full_like(g, np.mean(g * g))
            elif k == "embed":
                blk = np.broadcast_to(np.mean(g * g, axis=1, keepdims=True), g.shape)
            elif k in ("q", "k"):
                hd = g.shape[1] // HEADS
                per = np.stack([np.mean(g[:, h * hd : (h + 1) * hd] ** 2) for h in range(HEADS)])
                blk = np.repeat(per, hd)[None, :] * np.ones_like(g)
            else:
                blk = np.broadcast_to(np.mean(g * g, axis=0, keepdims=True), g.shape)
            m[k] = b1 * m[k] + (1 - b1) * g
            v_[k] = (1 - b2) * blk if v_[k] is None else b2 * v_[k] + (1 - b2) * blk
            u = (m[k] / (1 - b1**t)) / (np.sqrt(v_[k] / (1 - b2**t)) + eps)
            p[k] = p[k] - LR * u
        out.append({k: x.copy() for k, x in p.items()})
    return {k: np.stack([o[k] for o in out]) for k in p}


def test_default_partition_matches_numpy_paper():
    rng = np.random.default_rng(3)
    shapes = {"embed": (VOCAB, D), "q": (D, D), "k": (D, D), "mlp": (D, 6), "b": (6,)}
    params = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    grads = {k: rng.normal(size=(STEPS, *s)).astype(np.float32) for k, s in shapes.items()}
    tx = adam_mini(LR, weight_decay=0.0, n_heads=HEADS, patterns={"q": "head", "k": "head"})
    ours = gradtx_trajectory(tx, params, grads)
    ref = _numpy_paper(params, grads)
    assert _max_diff(ours, ref) < 1e-5
    # and the partition is not Adam's (a per-entry v gives another trajectory)
    adam_like = gradtx_trajectory(adam_mini(LR, weight_decay=0.0, patterns={"**": "adam"}),
                                  params, grads)  # fmt: skip
    assert _max_diff(adam_like, ref) > 1e-3


def test_default_rules_and_state_shapes():
    assert default_rule("transformer/embed/embedding", 2) == "token"
    assert default_rule("lm_head/kernel", 2) == "neuron"
    assert default_rule("block_0/attn/q_proj/kernel", 2) == "head"
    assert default_rule("block_0/attn/v_proj/kernel", 2) == "neuron"
    assert default_rule("block_0/mlp/kernel", 2) == "neuron"
    assert default_rule("block_0/norm/scale", 1) == "whole"
    params = {
        "embed": jnp.zeros((10, 8)),
        "q_proj": jnp.zeros((8, 8)),
        "mlp": jnp.zeros((8, 6)),
        "conv": jnp.zeros((3, 3, 4, 5)),
        "b": jnp.zeros(6),
        "s": jnp.zeros(()),
    }
    state = scale_by_adam_mini(n_heads=2).init(params)
    assert isinstance(state, ScaleByAdamMiniState) and state.count.dtype == jnp.int32
    assert jax.tree.map(lambda x: x.shape, state.mu) == jax.tree.map(lambda x: x.shape, params)
    assert {k: v.shape for k, v in state.nu.items()} == {
        "embed": (10, 1), "q_proj": (1, 2, 1), "mlp": (1, 6), "conv": (1, 1, 1, 5),
        "b": (1,), "s": (),
    }  # fmt: skip
    assert all(v.dtype == jnp.float32 for v in state.nu.values())


def test_edge_cases():
    tx = scale_by_adam_mini(patterns={"**": "neuron"})
    update = jax.jit(tx.update)
    params = {"w": jnp.ones((4, 3))}
    state = tx.init(params)
    # zero gradients: zero updates, no NaN
    u, s = update({"w": jnp.zeros((4, 3))}, state)
    assert np.all(np.asarray(u["w"]) == 0)
    # constant gradients: after bias correction the update is g / (|g| + eps) = sign
    s = state
    for _ in range(5):
        u, s = update({"w": jnp.full((4, 3), 0.5)}, s)
    np.testing.assert_allclose(u["w"], 1.0, rtol=1e-4)  # float32 bias corrections
    # huge and tiny (all finite; sign preserved)
    for scale in (1e15, 1e-15):
        g = {"w": scale * jnp.arange(1.0, 13.0).reshape(4, 3)}
        u, _ = update(g, state)
        assert np.all(np.isfinite(u["w"])) and np.all(np.asarray(u["w"]) > 0)
    # bf16 params and grads: bf16 updates, float32 nu, bf16 mu
    pb = {"w": jnp.ones((4, 3), jnp.bfloat16)}
    sb = tx.init(pb)
    ub, sb = jax.jit(tx.update)(pb, sb)
    assert ub["w"].dtype == jnp.bfloat16 and sb.mu["w"].dtype == jnp.bfloat16
    assert sb.nu["w"].dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(ub["w"], np.float32), 1.0, rtol=1e-2)


def test_checkpoint_round_trip_and_scan():
    tx = adam_mini(1e-2, n_heads=2)
    params = {"q_proj": jnp.ones((4, 4)), "b": jnp.ones(4)}
    state = tx.init(params)
    step = jax.jit(tx.update)
    for i in range(3):
        _, state = step(jax.tree.map(lambda x: x * (i + 1.0), params), state, params)
    leaves, treedef = jax.tree.flatten(state)
    restored = treedef.unflatten([np.asarray(x).copy() for x in leaves])
    a, _ = step(params, state, params)
    b, _ = step(params, restored, params)
    assert all(
        np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=False)
    )


def test_construction_errors():
    with pytest.raises(ValueError, match="b1"):
        scale_by_adam_mini(b1=1.0)
    with pytest.raises(ValueError, match="eps"):
        scale_by_adam_mini(eps=-1.0)
    with pytest.raises(ValueError, match="did you mean 'head'"):
        scale_by_adam_mini(patterns={"**": "heads"})
    with pytest.raises(ValueError, match="n_heads"):
        scale_by_adam_mini(n_heads=0)
    with pytest.raises(ValueError, match="n_heads"):  # q_proj needs heads
        scale_by_adam_mini().init({"q_proj": jnp.zeros((4, 4))})
    with pytest.raises(ValueError, match="divisible"):
        scale_by_adam_mini(n_heads=3).init({"q_proj": jnp.zeros((4, 4))})
    with pytest.raises(ValueError, match="output_axis"):
        scale_by_adam_mini(output_axis=2).init({"w": jnp.zeros((4, 4))})
    with pytest.raises(ValueError, match="nothing"):
        scale_by_adam_mini(patterns={"nothing": "whole"}).init({"w": jnp.zeros((4, 4))})
    with pytest.raises(ValueError, match="weight_decay"):
        adam_mini(1e-3, weight_decay=-1.0)


# --------------------------------------------------------------------------------------------
# The authors' package, adam_mini.Adam_mini (1.1.1)
# --------------------------------------------------------------------------------------------

AD, AHEADS, AKV, AFFN = 8, 4, 2, 12  # dim, heads, key / value heads (GQA), MLP width
AHD = AD // AHEADS
AUTHORS_SHAPES = {  # torch's (out, in) layout, Llama-like names
    "embed_tokens.weight": (VOCAB, AD),
    "layers.0.attn_norm.weight": (AD,),
    "layers.0.self_attn.q_proj.weight": (AD, AD),
    "layers.0.self_attn.q_proj.bias": (AD,),
    "layers.0.self_attn.k_proj.weight": (AKV * AHD, AD),
    "layers.0.self_attn.v_proj.weight": (AKV * AHD, AD),
    "layers.0.self_attn.o_proj.weight": (AD, AD),
    "layers.0.ffn_norm.weight": (AD,),
    "layers.0.mlp.up_proj.weight": (AFFN, AD),
    "layers.0.mlp.up_proj.bias": (AFFN,),
    "layers.0.mlp.down_proj.weight": (AD, AFFN),
    "layers.0.router.weight": (3, AD),  # in none of the package's name lists
    "norm.weight": (AD,),
    "lm_head.weight": (VOCAB, AD),
}
# The package's partition through gradtx: the default rule (with n_kv_heads) plus these.
AUTHORS_PATTERNS = {"**/bias": "adam", "**/router/**": "whole"}
# Where gradtx's default partition differs from the package's (the rest agrees).
DEFAULT_DIFFERS = {
    "layers.0.self_attn.q_proj.bias",
    "layers.0.mlp.up_proj.bias",
    "layers.0.router.weight",
}


def _nest(flat):
    """{"a.b.c": x} -> {"a": {"b": {"c": x}}}: gradtx's paths are the torch names with '/'."""
    out: dict = {}
    for name, x in flat.items():
        *head, last = name.split(".")
        node = out
        for k in head:
            node = node.setdefault(k, {})
        node[last] = x
    return out


def _flat(tree, names):
    def get(name):
        node = tree
        for k in name.split("."):
            node = node[k]
        return node

    return {n: get(n) for n in names}


def _authors_problem(shapes, seed=5):
    rng = np.random.default_rng(seed)
    params = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    scale = np.exp(rng.normal(size=STEPS)).astype(np.float32)
    grads = {
        k: (scale.reshape((-1,) + (1,) * len(s)) * rng.normal(size=(STEPS, *s))).astype(np.float32)
        for k, s in shapes.items()
    }
    return params, grads


def _authors_run(params, grads, weight_decay, *, dim=AD, n_heads=AHEADS, n_kv_heads=AKV):
    adam_mini_pkg = pytest.importorskip("adam_mini")
    named = [(k, torch.nn.Parameter(torch.tensor(v))) for k, v in params.items()]
    opt = adam_mini_pkg.Adam_mini(
        named, lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay, dim=dim,
        n_heads=n_heads, n_kv_heads=n_kv_heads, verbose=False,
    )  # fmt: skip
    out = {k: [] for k in params}
    for t in range(STEPS):
        for k, p in named:
            p.grad = torch.tensor(grads[k][t])
        opt.step()
        for k, p in named:
            out[k].append(p.detach().numpy().copy())
    return {k: np.stack(v) for k, v in out.items()}, opt


def _authors_mask(params):
    """The package's decay rule: not the names containing "norm", "ln" or "bias"."""
    return _nest({k: not any(s in k for s in ("norm", "ln", "bias")) for k in params})


def _gradtx_run(tx, params, grads):
    ours = gradtx_trajectory(tx, _nest(params), _nest(grads))
    return _flat(ours, params)


def _leaf_diffs(a, b):
    return {k: float(np.max(np.abs(a[k] - b[k]))) for k in a}


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_matches_authors_adam_mini(weight_decay):
    params, grads = _authors_problem(AUTHORS_SHAPES)
    ref, _ = _authors_run(params, grads, weight_decay)
    kw = dict(n_heads=AHEADS, patterns=AUTHORS_PATTERNS, output_axis=0)
    tx = adam_mini(LR, weight_decay=weight_decay, mask=_authors_mask(params), n_kv_heads=AKV, **kw)
    diffs = _leaf_diffs(_gradtx_run(tx, params, grads), ref)
    assert max(diffs.values()) < 1e-4, diffs
    # the trajectory moved (the test could fail)
    assert min(float(np.max(np.abs(ref[k][-1] - params[k]))) for k in params) > 0.05
    if weight_decay:
        return
    # without n_kv_heads the keys are cut into n_heads groups (half a key head each): not the
    # package's (nor the paper's) partition (the leaves are independent: run the key alone)
    key = "layers.0.self_attn.k_proj.weight"
    tx = adam_mini(LR, weight_decay=0.0, n_heads=AHEADS, output_axis=0)
    alone = _gradtx_run(tx, {key: params[key]}, {key: grads[key]})
    assert float(np.max(np.abs(alone[key] - ref[key]))) > 1e-3


def test_default_partition_vs_authors():
    """gradtx's default partition agrees with the package's on every leaf but the biases (the
    package: Adam; gradtx: one block, the 1-D rule) and the unlisted matrix (the package: one
    block; gradtx: by output neuron); its default decay mask also decays the biases."""
    params, grads = _authors_problem(AUTHORS_SHAPES, seed=6)
    ref, _ = _authors_run(params, grads, 0.0)
    tx = adam_mini(LR, weight_decay=0.0, n_heads=AHEADS, n_kv_heads=AKV, output_axis=0)
    diffs = _leaf_diffs(_gradtx_run(tx, params, grads), ref)
    assert max(v for k, v in diffs.items() if k not in DEFAULT_DIFFERS) < 1e-4, diffs
    assert min(diffs[k] for k in DEFAULT_DIFFERS) > 1e-3, diffs
    from gradtx.contrib._adam_mini import _no_decay_mask

    decays = _flat(_no_decay_mask(_nest(params)), params)
    assert decays["layers.0.mlp.up_proj.bias"] and not decays["norm.weight"]


def test_head_partition_follows_the_paper_not_dim():
    """The package cuts a query / key into blocks of dim * dim / n_heads entries, one head only
    when the projection's input width is `dim`; the paper partitions by head. On a key of
    input width 2 * dim (cross-attention from a wider encoder) the package keeps 2 * n_heads
    second moments (half a head each) where gradtx keeps n_heads (one per head)."""
    shapes = {"cross.k_proj.weight": (AD, 2 * AD), "cross.v_proj.weight": (AD, 2 * AD)}
    params, grads = _authors_problem(shapes, seed=7)
    _, opt = _authors_run(params, grads, 0.0, n_kv_heads=None)
    group = next(g for g in opt.param_groups if g["name"] == "cross.k_proj.weight")
    pkg_v = opt.state[group["params"][0]]["vmean"]
    assert tuple(pkg_v.shape) == (2 * AHEADS, 1)
    tx = scale_by_adam_mini(n_heads=AHEADS, output_axis=0)
    p = _nest(params)
    g = _nest({k: v[0] for k, v in grads.items()})
    _, state = jax.jit(tx.update)(g, tx.init(p))
    nu = np.asarray(state.nu["cross"]["k_proj"]["weight"])
    assert nu.shape == (AHEADS, 1, 1)
    g_k = grads["cross.k_proj.weight"][0].astype(np.float64)
    per_head = (g_k**2).reshape(AHEADS, AHD * 2 * AD).mean(axis=1)
    np.testing.assert_allclose(nu.ravel(), 1e-3 * per_head, rtol=1e-5)


def test_kv_head_rule():
    params = {"q_proj": jnp.zeros((8, 8)), "k_proj": jnp.zeros((8, 4)), "wv": jnp.zeros((8, 4))}
    assert default_rule("attn/k_proj/kernel", 2) == "kv_head"
    assert default_rule("attn/query_key_value/kernel", 2) == "head"  # fused: by query head
    nu = scale_by_adam_mini(n_heads=4, n_kv_heads=2).init(params).nu
    assert {k: v.shape for k, v in nu.items()} == {
        "q_proj": (1, 4, 1), "k_proj": (1, 2, 1), "wv": (1, 4),
    }  # fmt: skip
    # without n_kv_heads, keys are cut by n_heads (the behaviour before n_kv_heads)
    assert scale_by_adam_mini(n_heads=4).init(params).nu["k_proj"].shape == (1, 4, 1)
    with pytest.raises(ValueError, match="n_kv_heads"):
        scale_by_adam_mini(n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="n_kv_heads=3"):
        scale_by_adam_mini(n_heads=3, n_kv_heads=3).init({"k_proj": jnp.zeros((8, 4))})
