"""Adam-mini: Adam with one second moment per parameter block (a head, a neuron, a token, a
whole tensor) instead of one per entry."""

from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import (
    alias_errors,
    check_in_range,
    check_int,
    check_non_negative,
    check_one_of,
)
from .._base._numerics import abs_sq, bias_correction, safe_increment, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, MaskOrFn, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType, as_leaves
from ..transforms._building_blocks import (
    buffer_value,
    check_moment_dtype,
    ema,
    into_buffer_and_value,
    moment_buffers,
)
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ..tree import assert_same_structure
from ..tree._paths import paths
from ..tree._patterns import resolve_rules

ADAM_MINI_RULES = ("adam", "token", "head", "kv_head", "neuron", "whole")

# The paper's / the reference's parameter names (substrings of the lower-cased '/'-joined path).
EMBED_NAMES = ("embed", "embd", "wte", "tok_embeddings")
OUTPUT_NAMES = ("lm_head", "output")
Q_NAMES = ("q_proj", "wq", "query")
K_NAMES = ("k_proj", "wk", "key")
QK_NAMES = Q_NAMES + K_NAMES
NO_DECAY_NAMES = ("norm", "ln_f")


class ScaleByAdamMiniState(NamedTuple):
    """State of `scale_by_adam_mini`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # EMA of g, the params' shape, dtype mu_dtype or the params'
    nu: Updates  # per block: EMA of mean(g^2) over the block, float32, the block view's shape


def default_rule(path: str, ndim: int) -> str:
    """The paper's partition of a leaf from its path (Zhang et al., Algorithm 3): embeddings by
    token, the output layer by output neuron (= by token), queries by head ("head") and keys by
    key / value head ("kv_head": the same as "head" unless `n_kv_heads` is given, for grouped
    query attention), every other matrix (values, attention projections, MLPs) by output neuron,
    the rest (norm scales, biases, scalars) as one block."""
    name = path.lower()
    if ndim < 2:
        return "whole"
    if any(s in name for s in EMBED_NAMES):
        return "token"
    if any(s in name for s in OUTPUT_NAMES):
        return "neuron"
    if any(s in name for s in Q_NAMES):  # first: a fused "query_key_value" is cut by head
        return "head"
    if any(s in name for s in K_NAMES):
        return "kv_head"
    return "neuron"


class _Blocks(NamedTuple):
    """How one leaf is cut into blocks: the view it is reshaped to, and the axes averaged."""

    view: tuple[int, ...]  # the leaf's shape, with the head axis split for "head"
    axes: tuple[int, ...]  # the axes of the view averaged over (one v per remaining index)

    def nu_shape(self) -> tuple[int, ...]:
        return tuple(1 if a in self.axes else d for a, d in enumerate(self.view))


def _blocks(
    who: str, path: str, shape: tuple[int, ...], rule: str, n_heads, n_kv_heads, axis: int
) -> _Blocks:
    ndim = len(shape)
    everything = tuple(range(ndim))
    if rule == "adam":
        return _Blocks(shape, ())
    if rule == "whole" or ndim == 0:
        return _Blocks(shape, everything)
    if rule == "token":
        return _Blocks(shape, everything[1:])
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"{who}: output_axis {axis} is out of range for {path!r} of shape {shape}; pass an "
            "axis of the leaf (-1 for JAX's (in, out) kernels, 0 for torch's (out, in))"
        )
    axis %= ndim
    if rule == "neuron":
        return _Blocks(shape, tuple(a for a in everything if a != axis))
    # "head" / "kv_head": the output axis is cut into n_heads (n_kv_heads) contiguous groups,
    # one v per head.
    name, heads = "n_heads", n_heads
    if rule == "kv_head" and n_kv_heads is not None:
        name, heads = "n_kv_heads", n_kv_heads
    if heads is None:
        raise ValueError(
            f"{who}: {path!r} is partitioned by head (rule {rule!r}), so n_heads is needed; pass "
            "n_heads=<number of attention heads>, or a pattern giving it another rule"
        )
    if shape[axis] % heads:
        raise ValueError(
            f"{who}: the output axis ({shape[axis]}) of {path!r} of shape {shape} is not "
            f"divisible by {name}={heads}; pass the right {name} or output_axis"
        )
    view = (*shape[:axis], heads, shape[axis] // heads, *shape[axis + 1 :])
    return _Blocks(view, tuple(a for a in range(ndim + 1) if a != axis))


@recorded
def scale_by_adam_mini(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    mu_dtype: MomentDType | None = None,
    *,
    n_heads: int | None = None,
    n_kv_heads: int | None = None,
    patterns: Mapping[str, str] | None = None,
    output_axis: int = -1,
) -> GradientTransformation:
    r"""Rescale updates by Adam-mini: Adam whose second moment is shared by each block of a
    parameter.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      v_{t,b} = \beta_2 v_{t-1,b} + (1-\beta_2)\, \mathrm{mean}_{i \in b}\, g_{t,i}^2, \\
      u_{t,i} = \frac{m_{t,i} / (1-\beta_1^t)}{\sqrt{v_{t,b(i)} / (1-\beta_2^t)} + \epsilon}

    The blocks :math:`b` of a leaf are given by a rule: "adam" (every entry its own block:
    Adam), "token" (one block per index of axis 0: the rows of an embedding table), "neuron"
    (one block per index of `output_axis`: an output neuron), "head" (`output_axis` cut into
    `n_heads` contiguous groups: one block per attention head), "kv_head" (the same, cut into
    `n_kv_heads` groups when given: one block per key / value head under grouped-query
    attention) or "whole" (one block). By default a leaf's rule comes from its path as in the
    paper's Algorithm 3 (see `default_rule`): embeddings ("embed", "embd", "wte",
    "tok_embeddings") by token, the output layer ("lm_head", "output") by output neuron, i.e. by
    token, queries ("q_proj", "wq", "query") by head, keys ("k_proj", "wk", "key") by key / value
    head, every other leaf of rank >= 2 (values, attention projections, MLPs, and also matrices
    whose names the paper does not list) by output neuron, and the leaves of rank < 2 (norm
    scales, biases, scalars) as one block each (the 1-D rule). `patterns` (glob patterns on the
    '/'-joined parameter paths, first match wins) override it.

    The authors' package, `adam_mini.Adam_mini` (1.1.1), partitions as above (keys by
    `n_kv_heads` heads) except in two places: every leaf whose name contains "bias" gets plain
    Adam, and a matrix whose name is in none of its lists (embedding, output, query / key,
    value, attention projection, MLP) is one whole block; ``patterns={"**/*bias*": "adam",
    "<unlisted matrices>": "whole"}`` with `output_axis=0` reproduces it. Its weight decay
    skips the names containing "norm", "ln" or "bias" (`adam_mini`'s default mask skips only
    "norm" and "ln_f"; pass `mask` to match).

    The reference, `pytorch_optimizer.AdamMini` (4.1.0), differs from the paper in two places:
    embeddings and the output layer get plain Adam there, and values / projections / MLPs one
    block per whole tensor; ``patterns={"**/q_proj/**": "head", "**/k_proj/**": "head",
    "**/embed*/**": "adam", "**/lm_head/**": "adam", "**": "whole"}`` with `output_axis=0`
    (torch's layout) reproduces it. `v` is float32 (it is tiny: one number per
    block), of the block view's shape with the averaged axes of size 1 (a leaf of shape
    (in, H * d) under "head" has `v` of shape (1, H, 1)).

    Args:
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, added to the bias-corrected root.
      mu_dtype: dtype of :math:`m` (default: the params'), or a `gradtx.quantized()` spec.
      n_heads: the number of attention heads, needed by the "head" rule (and by "kv_head"
        when `n_kv_heads` is None).
      n_kv_heads: the number of key / value heads (grouped-query attention) for the "kv_head"
        rule; None: `n_heads`. `n_heads` must be a multiple of it.
      patterns: a mapping from glob patterns on parameter paths to one of the rules above.
      output_axis: the axis of the output neurons (and of the heads) of a kernel: -1 for JAX's
        (in, out) layout, 0 for torch's (out, in).

    Returns:
      A `GradientTransformation` with state `ScaleByAdamMiniState(count, mu, nu)`.

    Reference: Zhang et al., "Adam-mini: Use Fewer Learning Rates To Gain More" (ICLR 2025),
    arXiv:2406.16793, Algorithms 1-3.
    """
    who = "scale_by_adam_mini"
    check_in_range(who, "b1", b1, 0.0, 1.0, high_open=True)
    check_in_range(who, "b2", b2, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_moment_dtype(who, "mu_dtype", mu_dtype)
    check_int(who, "output_axis", output_axis)
    if n_heads is not None:
        check_int(who, "n_heads", n_heads, minimum=1)
    if n_kv_heads is not None:
        check_int(who, "n_kv_heads", n_kv_heads, minimum=1)
        if n_heads is not None and n_heads % n_kv_heads:
            raise ValueError(
                f"{who}: n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}"
            )
    rules_in = dict(patterns or {})
    if not isinstance(patterns, Mapping | None):
        raise TypeError(f"{who}: patterns must map glob patterns to rules, got {patterns!r}")
    for rule in rules_in.values():
        check_one_of(who, "a rule in patterns", rule, ADAM_MINI_RULES)

    def leaf_blocks(tree: Any) -> list[_Blocks]:
        leaves = jax.tree.leaves(tree)
        names = paths(tree)
        chosen = (
            jax.tree.leaves(resolve_rules(who, "patterns", rules_in, tree, default="-"))
            if rules_in
            else ["-"] * len(leaves)
        )
        out = []
        for x, name, rule in zip(leaves, names, chosen, strict=True):
            shape = tuple(np.shape(x))
            rule = default_rule(name, len(shape)) if rule == "-" else rule
            out.append(_blocks(who, name, shape, rule, n_heads, n_kv_heads, output_axis))
        return out

    def init(params):
        treedef = jax.tree.structure(params)
        nu = [jnp.zeros(b.nu_shape(), jnp.float32) for b in leaf_blocks(params)]
        return ScaleByAdamMiniState(
            count=zero_count(),
            mu=moment_buffers(params, mu_dtype),
            nu=treedef.unflatten(nu),
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.mu": as_leaves(state.mu)})
        count = safe_increment(state.count)
        c1 = bias_correction(b1, count)
        c2 = bias_correction(b2, count)
        blocks = leaf_blocks(updates)

        def leaf(g, m, v, blk):
            gw = widen(g).astype(jnp.promote_types(g.dtype, jnp.float32))
            m_buf, m_new = into_buffer_and_value(ema(b1, gw, buffer_value(m)), m)
            g2 = abs_sq(gw.reshape(blk.view))
            mean = jnp.mean(g2, axis=blk.axes, keepdims=True) if blk.axes else g2
            v_new = ema(b2, mean.astype(v.dtype), v).astype(v.dtype)
            h = jnp.sqrt(v_new / c2) + eps
            u = (m_new.reshape(blk.view) / c1) / h
            return u.reshape(g.shape).astype(g.dtype), m_buf, v_new

        updates, mu, nu = _map3(leaf, updates, state.mu, state.nu, blocks)
        return updates, ScaleByAdamMiniState(count=count, mu=mu, nu=nu)

    return GradientTransformation(init, update)


def _map3(fn, updates, mu, nu, blocks):
    """`fn` over the leaves of `updates` (with the matching mu, nu and block leaves), split into
    three trees like `updates`."""
    treedef = jax.tree.structure(updates)
    outs = [
        fn(g, m, v, b)
        for g, m, v, b in zip(
            treedef.flatten_up_to(updates),
            treedef.flatten_up_to(mu),
            treedef.flatten_up_to(nu),
            blocks,
            strict=True,
        )
    ]
    return tuple(treedef.unflatten([o[i] for o in outs]) for i in range(3))


def _no_decay_mask(params):
    """The reference's decay rule: every leaf but those whose path names a norm ("norm",
    "ln_f")."""
    names = paths(params)
    flags = [not any(s in n.lower() for s in NO_DECAY_NAMES) for n in names]
    return jax.tree.structure(params).unflatten(flags)


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def adam_mini(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.1,
    mask: MaskOrFn | None = None,
    mu_dtype: MomentDType | None = None,
    *,
    n_heads: int | None = None,
    n_kv_heads: int | None = None,
    patterns: Mapping[str, str] | None = None,
    output_axis: int = -1,
) -> GradientTransformation:
    r"""Adam-mini: AdamW with one second moment per parameter block.

    .. math::  w_t = w_{t-1} - \eta_t \big(u_t + \lambda w_{t-1}\big)

    with :math:`u_t` of `scale_by_adam_mini` (blocks by the paper's partition, overridable by
    `patterns`): `chain(scale_by_adam_mini(...), weight_decay(weight_decay, mask),
    scale_by_learning_rate(learning_rate))`. Every leaf gets Adam-mini; a leaf of rank < 2 is
    one block. The default `mask` decays every leaf whose path does not name a norm ("norm",
    "ln_f"), as `pytorch_optimizer.AdamMini` does.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      weight_decay: :math:`\lambda` >= 0, decoupled (scaled by :math:`\eta_t`).
      mask: which leaves decay (boolean tree, callable or glob patterns); None: all but norms.
      mu_dtype: dtype of the first moment, or a `gradtx.quantized()` spec.
      n_heads: number of attention heads (for the "head" rule of queries and keys).
      n_kv_heads: number of key / value heads (for the "kv_head" rule of keys); None: `n_heads`.
      patterns: glob patterns on parameter paths -> rule (see `scale_by_adam_mini`).
      output_axis: the axis of a kernel's output neurons: -1 (JAX's (in, out)) or 0 (torch's).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.contrib.adam_mini(1e-3, n_heads=2)
      >>> params = {"q_proj": jnp.ones((4, 4)), "mlp": jnp.ones((4, 3)), "b": jnp.zeros(3)}
      >>> updates, state = tx.update(params, tx.init(params), params)

    Reference: Zhang et al., "Adam-mini: Use Fewer Learning Rates To Gain More" (ICLR 2025),
    arXiv:2406.16793; `pytorch_optimizer.AdamMini` (4.1.0).
    """
    return chain(
        scale_by_adam_mini(
            b1,
            b2,
            eps,
            mu_dtype,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            patterns=patterns,
            output_axis=output_axis,
        ),
        weight_decay_tx(weight_decay, _no_decay_mask if mask is None else mask),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["ADAM_MINI_RULES", "ScaleByAdamMiniState", "adam_mini", "scale_by_adam_mini"]
