"""Training across slow links: DiLoCo and Streaming DiLoCo, local steps with a periodic outer step
on the replica-averaged pseudo-gradient."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import GetAttrKey, SequenceKey

from .._base._checks import (
    HyperparameterError,
    check_axis_name,
    check_int,
    error_context,
    expect_state,
)
from .._base._introspect import counts_run_steps, register
from .._base._numerics import safe_increment, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import OptState, Params
from ..core._transformation import (
    GradientTransformation,
    as_transformation,
    chain,
    forward_extra_args,
    require_params,
)
from ..state import _quantize
from ..state._quantize import MomentDType, QuantizedDtype
from ..transforms._building_blocks import copy_params
from ..transforms._momentum import trace
from ..transforms._scaling import scale_by_learning_rate
from ..tree import assert_same_structure, cast_like
from ._partition import _is_placeholder, _pruned


@counts_run_steps("count")
class DiLoCoState(NamedTuple):
    """The state of `diloco`."""

    inner_state: OptState  # the inner optimizer's state (this replica's own)
    outer_state: tuple[OptState, ...]  # the outer optimizer's state, one per fragment
    anchor: Params  # the params at the last synchronisation (of each leaf's fragment)
    count: jax.Array  # type: ignore[assignment]  # int32, saturating: the steps taken
    bytes_sent: jax.Array  # float32: pseudo-gradient bytes this replica all-reduced last step
    total_bytes_sent: jax.Array  # float32: the same, summed over all steps


def _report(state: Any) -> dict[str, jax.Array]:
    return {"bytes_sent": state.bytes_sent, "total_bytes_sent": state.total_bytes_sent}


def _fragments(sizes: list[int], count: int) -> list[list[int]]:
    """The leaf indices `0..len(sizes)-1` split, in order, into `count` non-empty runs whose
    largest total size is the smallest possible (a binary search on that size, each candidate
    filled greedily; `len(sizes) >= count`)."""

    def split(cap: int) -> list[list[int]]:
        groups: list[list[int]] = []
        current: list[int] = []
        load = 0
        for i, size in enumerate(sizes):
            # close the current run when the leaf does not fit, or when the leaves left are
            # just enough to give every run still to open one each
            needed_after = count - len(groups) - 1
            if current and (load + size > cap or len(sizes) - i <= needed_after):
                groups.append(current)
                current, load = [], 0
            current.append(i)
            load += size
        groups.append(current)
        return groups

    low, high = max(sizes), max(sum(sizes), 1)
    while low < high:
        mid = (low + high) // 2
        if len(split(mid)) <= count:
            high = mid
        else:
            low = mid + 1
    return split(low)


def _varying_axes(x: Any) -> frozenset:
    """The mesh axes over which `x` (an array or a `jax.ShapeDtypeStruct`) varies inside
    `shard_map` (its "vma" type); empty elsewhere, and under JAX versions without the notion."""
    typeof = getattr(jax, "typeof", None)
    for aval in (x,) if typeof is None else (x, typeof(x)):
        axes = getattr(aval, "vma", None)
        if axes is None:
            axes = getattr(getattr(aval, "manual_axis_type", None), "varying", None)
        if axes is not None:
            return frozenset(axes)
    return frozenset()


def _as_varying(x: Any, axes: frozenset) -> Any:
    """`x` marked as varying over `axes` too (a no-op where it already is)."""
    missing = tuple(sorted(axes - _varying_axes(x)))
    if not missing:
        return x
    pcast = getattr(jax.lax, "pcast", None)
    if pcast is not None:
        return pcast(x, missing, to="varying")
    pvary = getattr(jax.lax, "pvary", None)  # the name before `pcast`
    return x if pvary is None else pvary(x, missing)


def _joined_branches(branches: list[Any], operands: Any, closed_over: Any) -> list[Any]:
    """`branches` (of one `lax.switch` over `operands`) with each output leaf marked varying
    over every mesh axis any branch's output leaf (or the operand it replaces, all outputs have
    the operands' structure) varies over: under `shard_map` the branches must agree on these
    types, and a synchronising branch makes an anchor invariant (`pmean`) that another keeps
    varying, or the reverse. Where nothing varies (`closed_over`: what the branches read besides
    the operands; everything outside `shard_map`) the branches are returned as they are."""
    leaves, treedef = jax.tree.flatten(operands)
    targets = [_varying_axes(x) for x in leaves]
    if not any(targets) and not any(_varying_axes(x) for x in jax.tree.leaves(closed_over)):
        return branches
    for branch in branches:
        shapes = treedef.flatten_up_to(jax.eval_shape(branch, operands))
        targets = [t | _varying_axes(s) for t, s in zip(targets, shapes, strict=True)]
    if not any(targets):
        return branches

    def joined(branch):
        def run(operands):
            out = treedef.flatten_up_to(branch(operands))
            return treedef.unflatten([_as_varying(x, t) for x, t in zip(out, targets, strict=True)])

        return run

    return [joined(b) for b in branches]


def _check_dtype(who: str, dtype: Any) -> Any:
    if dtype is None or isinstance(dtype, QuantizedDtype):
        return dtype
    try:
        dt = jnp.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or not jnp.issubdtype(dt, jnp.floating):
        raise HyperparameterError(
            who,
            "pseudo_gradient_dtype",
            dtype,
            "None, a floating dtype or gradtx.quantized(...)",
            got=repr(dtype),
            note=(
                ", e.g. jnp.bfloat16 to halve the bytes of each all-reduce, or "
                "gradtx.quantized(bits=4) for 4-bit codes"
            ),
        )
    return dt


def _padded_length(n: int, replicas: int, unit: int) -> int:
    """The length of each replica's share of an `n`-value vector cut into `replicas` shares of
    whole `unit`s."""
    return max(-(-n // (replicas * unit)), 1) * unit


def _share_width(n: int, spec: QuantizedDtype, replicas: int) -> int:
    """The values in each replica's share of an `n`-value vector: whole blocks (an even count
    for 4-bit codes, two per byte)."""
    block = spec.block_size
    unit = block * 2 if spec.bits == 4 and block % 2 else block
    return _padded_length(n, replicas, unit)


def _coded_bytes(n: int, spec: QuantizedDtype, replicas: int) -> float:
    """The bytes one replica sends in `_quantized_mean` of an `n`-value vector: its whole
    encoded vector (`replicas` shares) and its encoded share of the mean, codes and float32
    scales."""
    width = _share_width(n, spec, replicas)
    share = width * spec.bits // 8 + -(-width // spec.block_size) * 4
    return float(share * (replicas + 1))


def _quantized_mean(
    vector: jax.Array, spec: QuantizedDtype, axis_name: Any, replicas: int
) -> jax.Array:
    """The replica mean of float32 `vector` (1-D, its length a multiple of the block size),
    with the values on the wire in `spec`'s signed codec: a two-shot all-reduce. Each replica
    encodes its vector cut into `replicas` shares (rows), sends share j to replica j
    (`all_to_all`), decodes the shares it received and averages them, encodes that mean and
    sends it to every replica (`all_gather`), which decode the whole mean. Two roundings;
    NaN / inf stay NaN (bytes sent: `_coded_bytes`)."""
    codec = spec.codec(True)
    block = spec.block_size
    width = _share_width(vector.shape[0], spec, replicas)
    rows = jnp.pad(vector, (0, replicas * width - vector.shape[0])).reshape(replicas, width)

    def encoded(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        q = _quantize.encode(x, block_size=block, signed=True, codec=codec)
        return q.codes, q.scale.reshape(x.shape[0], -1)

    def decoded(codes: jax.Array, scale: jax.Array) -> jax.Array:
        shape = (codes.shape[0], width)
        q = _quantize.QuantizedArray(codes, scale.reshape(-1), shape, block, True, codec)
        return _quantize.decode(q)

    codes, scale = encoded(rows)
    codes = jax.lax.all_to_all(codes, axis_name, 0, 0, tiled=True)
    scale = jax.lax.all_to_all(scale, axis_name, 0, 0, tiled=True)
    share = jnp.mean(decoded(codes, scale), axis=0, keepdims=True)
    codes, scale = encoded(share)
    codes = jax.lax.all_gather(codes, axis_name, axis=0, tiled=True)
    scale = jax.lax.all_gather(scale, axis_name, axis=0, tiled=True)
    return decoded(codes, scale).reshape(-1)[: vector.shape[0]]


@recorded
def diloco(
    inner: GradientTransformation,
    outer: GradientTransformation | None = None,
    *,
    sync_every: int,
    axis_name: str | tuple[str, ...],
    fragments: int = 1,
    pseudo_gradient_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""DiLoCo: `sync_every` local steps of `inner` per replica, then an outer step of `outer` on
    the replica-averaged pseudo-gradient.

    With :math:`\theta^{(0)}` the params at the last synchronisation (the anchor, kept in the
    state), each replica :math:`i` takes `inner` steps on its own gradients, with no
    communication; every :math:`H` = `sync_every` steps

    .. math::

      \Delta = \frac{1}{N} \sum_{i=1}^{N} \bigl(\theta^{(0)} - \theta_i\bigr), \qquad
      \theta^{(1)} = \theta^{(0)} + \mathrm{outer}(\Delta), \qquad
      \theta_i \leftarrow \theta^{(1)}

    (the mean is one `jax.lax.pmean` over `axis_name`; :math:`\theta_i` includes this step's
    inner update), and the anchor becomes :math:`\theta^{(1)}`. The emitted update is
    :math:`\theta^{(1)} - \theta_i` on a synchronising step and the inner update otherwise, so
    `gradtx.apply_updates` lands on the outer result. Both cases are branches of one
    `jax.lax.switch` (one compiled step, no retrace): a step that does not synchronise runs no
    collective. The inner state stays each replica's own; the outer state (identical across
    replicas) sees one step per synchronisation. With `outer = sgd(1.0)` and :math:`H = 1`,
    DiLoCo is data-parallel training of `inner` with averaged updates (for plain SGD: averaged
    gradients).

    Streaming DiLoCo (`fragments` :math:`F > 1`): the param leaves are split, in leaf order,
    into :math:`F` runs of balanced size; fragment :math:`f` synchronises on the steps
    :math:`n` (counted from 1) with :math:`n \bmod H = \lfloor f H / F \rfloor`, every :math:`H`
    steps each, so a step all-reduces at most one fragment (about :math:`1/F` of the bytes) and
    the fragments' outer states are separate. `pseudo_gradient_dtype` (e.g. `jnp.bfloat16`)
    casts :math:`\theta^{(0)} - \theta_i` before the all-reduce and back after it. A state codec
    (`gradtx.quantized(bits=4)`, `quantized(bits=8, block_size=256)`, `quantized(mapping=
    "sqrt")`) sends its signed codes and block scales instead, in a two-shot all-reduce: each
    replica encodes its pseudo-gradient cut into :math:`N` shares, an `all_to_all` gives replica
    :math:`j` every replica's share :math:`j`, which it decodes, averages and encodes again, and
    an `all_gather` brings every replica the whole encoded mean (two roundings, each within the
    codec's bound; NaN and inf arrive as NaN). The leaves of a fragment are concatenated, each
    padded to whole blocks; leaves under the spec's `min_size` go through a float32 `pmean`.

    Run the step under a mapping over the replicas that binds `axis_name`: `jax.shard_map` over
    a mesh axis (the params and the inner state with that axis, each replica keeping its own
    copy; the anchor, the outer state and the counters, identical on every replica, may be
    replicated with `P()`), `jax.pmap` or `jax.vmap(..., axis_name=...)`.

    `state.bytes_sent` counts the bytes each replica put into the all-reduce on the last step
    (the pseudo-gradient's size; a ring all-reduce moves about twice that over the links; with
    a codec: its codes and scales, :math:`N` shares out and its share of the mean back, each
    moved once), `state.total_bytes_sent` their sum; `gradtx.metrics` reports both. The step counter
    compares modulo :math:`H`, so a state restored under another `sync_every` goes on
    synchronising.

    Args:
      inner: the replicas' local optimizer (any gradtx or Optax transformation, e.g.
        `gradtx.adamw(...)`).
      outer: the optimizer of the outer step, fed the averaged pseudo-gradient as gradient;
        default `sgd(0.7, momentum=0.9, nesterov=True)`, the paper's outer Nesterov.
      sync_every: :math:`H`, the local steps between synchronisations, an integer >= 1.
      axis_name: the name of the mapped axis over the replicas (or a tuple of names).
      fragments: :math:`F`, the number of fragments synchronised in turn, an integer in
        [1, `sync_every`] and at most the number of param leaves (1: plain DiLoCo).
      pseudo_gradient_dtype: the dtype the pseudo-gradient is all-reduced in (None: float32,
        or float64 for float64 params), or a `gradtx.quantized(...)` spec (its signed codec,
        block size and `min_size`; small blocks suit communication, e.g. 128 or 256).

    Returns:
      A `GradientTransformation` with state `DiLoCoState(inner_state, outer_state, anchor,
      count, bytes_sent, total_bytes_sent)` (`outer_state` a tuple, one per fragment); it needs
      the params in `update` (a `ValueError` otherwise). Updates keep the gradients' dtype.

    Examples:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> tx = gradtx.diloco(gradtx.adamw(1e-2), sync_every=5, axis_name="replica")
      >>> params = {"w": jnp.ones((4, 3))}  # 4 replicas, each with its own copy
      >>> state = jax.vmap(tx.init)(params)
      >>> grads = {"w": jnp.arange(12.0).reshape(4, 3)}  # each replica's own gradients
      >>> def step(g, s, p):
      ...     u, s = tx.update(g, s, p)
      ...     return gradtx.apply_updates(p, u), s
      >>> for _ in range(5):
      ...     params, state = jax.vmap(step, axis_name="replica")(grads, state, params)
      >>> bool(jnp.all(params["w"] == params["w"][0]))  # synchronised after 5 steps
      True
      >>> int(state.total_bytes_sent[0])  # one float32 all-reduce of 3 values
      12

    Reference: Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language
    Models" (arXiv:2311.08105, 2023); Douillard et al., "Streaming DiLoCo with overlapping
    communication" (arXiv:2501.18512, 2025), whose fragments and reduced-precision
    pseudo-gradients this follows (the overlap of communication with the next steps and the
    mixing factor are not modelled: a fragment is synchronised within its step).
    """
    who = "diloco"
    inner = as_transformation(inner, who, "inner")
    if outer is None:
        outer = chain(trace(0.9, nesterov=True), scale_by_learning_rate(0.7))
    outer = as_transformation(outer, who, "outer")
    if not isinstance(sync_every, int | np.integer):
        raise HyperparameterError(
            who,
            "sync_every",
            sync_every,
            "a Python integer >= 1",
            got=repr(sync_every),
            note=" (it fixes the compiled schedule of synchronisations), e.g. sync_every=50",
        )
    check_int(who, "sync_every", sync_every, minimum=1)
    check_int(who, "fragments", fragments, minimum=1)
    period, count_fragments = int(sync_every), int(fragments)
    if count_fragments > period:
        raise HyperparameterError(
            who,
            "fragments",
            fragments,
            f"<= sync_every ({period})",
            note=(
                "; each fragment synchronises once per sync_every steps, at most one per step: "
                f"pass fragments <= {period} or a larger sync_every"
            ),
        )
    check_axis_name(who, axis_name)
    comm_dtype = _check_dtype(who, pseudo_gradient_dtype)
    comm_codec = comm_dtype if isinstance(comm_dtype, QuantizedDtype) else None
    offsets = [f * period // count_fragments for f in range(count_fragments)]
    inner_update = forward_extra_args(inner.update)
    outer_update = forward_extra_args(outer.update)

    def layout(params: Any) -> list[list[int]]:
        """The leaf indices of each fragment."""
        leaves = jax.tree.leaves(params)
        if count_fragments == 1:
            return [list(range(len(leaves)))]
        if len(leaves) < count_fragments:
            raise ValueError(
                f"{who}: fragments={count_fragments} but the params have only {len(leaves)} "
                f"leaves (a fragment is a run of whole leaves): pass fragments <= {len(leaves)}"
            )
        return _fragments([int(np.prod(np.shape(x))) for x in leaves], count_fragments)

    def keep_of(params: Any, members: list[int]) -> Any:
        treedef = jax.tree.structure(params)
        chosen = set(members)
        return treedef.unflatten([i in chosen for i in range(treedef.num_leaves)])

    def init(params):
        if _is_placeholder(params):
            outer_states = tuple(outer.init(params) for _ in range(count_fragments))
            return DiLoCoState(inner.init(params), outer_states, params, *_counters())
        with error_context(who):
            inner_state = inner.init(params)
            outer_states = tuple(
                outer.init(_pruned(params, keep_of(params, members))) for members in layout(params)
            )
        return DiLoCoState(inner_state, outer_states, copy_params(params), *_counters())

    def _counters():
        sent, total = (jnp.zeros((), jnp.float32) for _ in range(2))  # two buffers: donatable
        return zero_count(), sent, total

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, DiLoCoState)
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params, **{"state.anchor": state.anchor})
        if len(state.outer_state) != count_fragments:
            raise ValueError(
                f"{who}: the state has {len(state.outer_state)} outer states but fragments="
                f"{count_fragments}: init the state with the same fragments"
            )
        with error_context(who):
            inner_u, inner_state = inner_update(updates, state.inner_state, params, **extra_args)
        inner_u = cast_like(inner_u, updates)  # updates keep the gradients' dtype
        treedef = jax.tree.structure(params)
        p_leaves = treedef.flatten_up_to(params)
        groups = layout(params)
        # the all-reduce's dtype per leaf: `pseudo_gradient_dtype`, else float32 (or wider)
        wide = [jnp.promote_types(jnp.result_type(p), jnp.float32) for p in p_leaves]
        sent = [w if comm_codec is not None or comm_dtype is None else comm_dtype for w in wide]
        coded = [
            comm_codec is not None and _quantize.wants_quantized(comm_codec, p) for p in p_leaves
        ]
        replicas = jax.lax.axis_size(axis_name) if comm_codec is not None else 1

        def _averaged(deltas: dict[int, jax.Array]) -> dict[int, jax.Array]:
            """The replica means of one fragment's pseudo-gradients, in the wire format."""
            plain = [i for i in deltas if not coded[i]]
            reduced = jax.lax.pmean([deltas[i].astype(sent[i]) for i in plain], axis_name)
            means = dict(zip(plain, reduced, strict=True))
            quantized = [i for i in deltas if coded[i]]
            if quantized:
                assert comm_codec is not None
                block = comm_codec.block_size
                pieces = [deltas[i].astype(jnp.float32).reshape(-1) for i in quantized]
                lengths = [_padded_length(x.shape[0], 1, block) for x in pieces]
                stacked = jnp.concatenate(
                    [jnp.pad(x, (0, n - x.shape[0])) for x, n in zip(pieces, lengths, strict=True)]
                )
                mean = _quantized_mean(stacked, comm_codec, axis_name, replicas)
                start = 0
                for i, x, n in zip(quantized, pieces, lengths, strict=True):
                    means[i] = mean[start : start + x.shape[0]].reshape(jnp.shape(deltas[i]))
                    start += n
            return means

        def _fragment_bytes(group: list[int]) -> float:
            plain = sum(
                np.prod(np.shape(p_leaves[i])) * np.dtype(sent[i]).itemsize
                for i in group
                if not coded[i]
            )
            quantized = [i for i in group if coded[i]]
            if not quantized:
                return float(plain)
            assert comm_codec is not None
            block = comm_codec.block_size
            total = sum(
                _padded_length(int(np.prod(np.shape(p_leaves[i]))), 1, block) for i in quantized
            )
            return float(plain) + _coded_bytes(total, comm_codec, replicas)

        def sync(f: int):
            members = groups[f]
            keep = keep_of(params, members)

            def branch(operands):
                u_leaves, a_leaves, outer_states = operands
                deltas = {}
                for i in members:
                    p = jnp.asarray(p_leaves[i])
                    local = (p + u_leaves[i]).astype(p.dtype)  # what apply_updates would give
                    deltas[i] = widen(a_leaves[i]) - widen(local)
                averaged = _averaged(deltas)
                full = list(a_leaves)  # placeholders where the fragment has no leaf
                for i in members:
                    full[i] = averaged[i].astype(jnp.result_type(p_leaves[i]))
                anchor = treedef.unflatten(a_leaves)
                with error_context(who):
                    out, outer_state = outer_update(
                        _pruned(treedef.unflatten(full), keep),
                        outer_states[f],
                        _pruned(anchor, keep),
                    )
                out_leaves = treedef.flatten_up_to(
                    jax.tree.map(
                        lambda k, o: o if k else None, keep, out, is_leaf=lambda x: x is None
                    )
                )
                new_u, new_a = list(u_leaves), list(a_leaves)
                for i in members:
                    p = jnp.asarray(p_leaves[i])
                    target = (widen(a_leaves[i]) + widen(out_leaves[i])).astype(p.dtype)
                    new_u[i] = (widen(target) - widen(p)).astype(u_leaves[i].dtype)
                    new_a[i] = target.astype(a_leaves[i].dtype)
                states = (*outer_states[:f], outer_state, *outer_states[f + 1 :])
                return new_u, new_a, states

            return branch

        def keep_local(operands):
            return operands

        operands = (
            [jnp.asarray(u) for u in treedef.flatten_up_to(inner_u)],
            [jnp.asarray(a) for a in treedef.flatten_up_to(state.anchor)],
            tuple(state.outer_state),
        )
        # the step n = count + 1, without overflow at the saturated count
        phase = (state.count % period + 1) % period
        bytes_of = [0.0] + [_fragment_bytes(g) for g in groups]
        if period == 1:  # every step synchronises its one fragment: no branch
            which = jnp.int32(1)
            u_leaves, a_leaves, outer_states = sync(0)(operands)
        else:
            which = jnp.int32(0)
            for f, offset in enumerate(offsets):
                which = jnp.where(phase == offset, f + 1, which)
            branches = [keep_local] + [sync(f) for f in range(count_fragments)]
            branches = _joined_branches(branches, operands, p_leaves)
            u_leaves, a_leaves, outer_states = jax.lax.switch(which, branches, operands)
        # the counters keep the types they came with (under `shard_map`: varying or not)
        sent_now = _as_varying(
            jnp.asarray(bytes_of, jnp.float32)[which], _varying_axes(state.bytes_sent)
        )
        new_state = DiLoCoState(
            inner_state=inner_state,
            outer_state=tuple(outer_states),
            anchor=treedef.unflatten(a_leaves),
            count=safe_increment(state.count),
            bytes_sent=sent_now.astype(state.bytes_sent.dtype),
            total_bytes_sent=(state.total_bytes_sent + sent_now).astype(
                state.total_bytes_sent.dtype
            ),
        )
        new_updates = cast_like(treedef.unflatten(u_leaves), updates)
        return new_updates, new_state

    children = [((GetAttrKey("inner_state"),), inner)] + [
        ((GetAttrKey("outer_state"), SequenceKey(f)), outer) for f in range(count_fragments)
    ]
    return register(
        GradientTransformation(init, update), "wrapper", children=children, report=_report
    )


__all__ = ["DiLoCoState", "diloco"]
