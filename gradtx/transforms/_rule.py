r"""One way to write an update rule: its slots, its hyperparameters and one leaf's arithmetic.

A rule is the arithmetic of one parameter leaf, declared with what it keeps (slots) and what it is
tuned by (hyperparameters). `rule` turns it into a factory of `GradientTransformation`s and does
the rest once: the state layout and step counter, construction-time checks, evaluating schedules,
dtype pinning and every storage codec (any float dtype, bf16, `gradtx.quantized()` 8-bit),
reading buffers as stored, packing the quantized leaves of an element-wise rule into one codec,
and the checks of the state it is given.

The rule's function is called once per step and returns the arithmetic of one leaf:

    fn(t, **hyperparameters) -> leaf(g, s) -> update

- `t`: the step number, an int32 scalar, 1 at the first update; the per-step scalars (bias
  corrections) are computed here, once, before any leaf;
- hyperparameters: as given to the factory, schedules evaluated at the step (`t - 1`);
- `g`: a gradient leaf, widened (float32; float64 and complex stay as they are); or, packed,
  many leaves stacked (an element-wise rule cannot tell);
- `s`: the leaf's slots. `s.mu` reads slot `mu` as stored (a quantized buffer decoded to
  float32, any other buffer in its own dtype, so that `decay * s.mu` rounds as the buffer does);
  `s.keep("mu", value)` makes `value` the slot's new value and returns it as stored, widened,
  which is what the update must read (for a bf16 or 8-bit buffer the rounded value); `s.param`
  is the parameter leaf, widened, for a rule declared with `uses_params`.

The update is cast to the gradient's dtype; a slot not kept keeps its buffer.

    @rule("scale_by_adam", ScaleByAdamState, slots=MOMENTS, checks=CHECKS)
    def _adam(t, *, b1, b2, eps, eps_root, nesterov):
        m_hat, c2 = bias_corrected_mu(b1, t, nesterov), bias_correction(b2, t)

        def leaf(g, s):
            m = s.keep("mu", ema(b1, g, s.mu))
            v = s.keep("nu", ema(b2, abs_sq(g), s.nu))
            return m_hat(m, g) / (jnp.sqrt(v / c2 + eps_root) + eps)

        return leaf

A rule keeps its moments with `s.keep` rather than returning them because the update must read
them as stored: a bf16 or 8-bit moment is rounded before Adam divides by it.

A rule whose state depends on an option (AMSGrad's running maximum) gives `state` and `slots` as
functions of the hyperparameters. A rule that also keeps per-step scalars (Eve's feedback) gives
`prologue(state, extra_args, t, hyperparameters) -> (extra keyword arguments of fn, new state
fields)`, once per step before `fn`; the extra keyword arguments go to `fn`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_in_range, check_non_negative, expect_state
from .._base._numerics import safe_increment, value_at, widen, zero_count
from .._base._typing import ArrayLike
from ..core._transformation import GradientTransformation, require_params
from ..state import _packing, _quantize
from ..state._buffers import (
    buffer_value,
    check_float_dtype,
    check_moment_dtype,
    into_buffer_and_value,
)
from ..state._quantize import QuantizedArray, as_leaves
from ..tree import assert_same_structure, full_like
from ._building_blocks import copy_params

Check = Callable[[str, str, Any], None]

_PARAMS = "params"  # a slot's `init`: a copy of the params


class Slot(NamedTuple):
    """One state buffer of a rule.

    Attributes:
      init: its initial value: a real scalar, the name of the hyperparameter that gives it, or
        "params": a copy of the params (COCOB's starting point), never quantized.
      dtype: the factory's keyword that chooses its dtype (e.g. "mu_dtype"); None: the params'.
        One keyword may govern several slots (AMSGrad's `nu` and `nu_max`).
      signed: the 8-bit code of a quantized buffer: signed (first moments) or unsigned (second
        moments, non-negative).
      per_leaf: one scalar per parameter leaf instead of one value per element (NovoGrad's
        norms); such a slot is never quantized, and its rule is not element-wise.
      quantizable: its dtype keyword also takes `gradtx.quantized()` (block-wise 8-bit). False
        for a buffer that 8-bit rounding would spoil at every step (a sum, a copy of the params).
    """

    init: ArrayLike | str = 0.0
    dtype: str | None = None
    signed: bool = True
    per_leaf: bool = False
    quantizable: bool = True


def slot(
    init: ArrayLike | str = 0.0,
    dtype: str | None = None,
    *,
    signed: bool = True,
    per_leaf: bool = False,
    quantizable: bool = True,
) -> Slot:
    """A rule's state buffer.

    Args:
      init: its initial value: a real scalar, the name of the hyperparameter that gives it, or
        "params" (a copy of the params).
      dtype: the factory's keyword that chooses its dtype (e.g. "mu_dtype"); None: the params'.
      signed: a quantized buffer's 8-bit code is signed (first moments) or not (second moments).
      per_leaf: one scalar per parameter leaf instead of one value per element.
      quantizable: its dtype keyword also takes `gradtx.quantized()`.

    Returns:
      A `Slot`, for `rule(..., slots={name: slot(...)})`.
    """
    copies = isinstance(init, str) and init == _PARAMS
    return Slot(init, dtype, signed, per_leaf, quantizable and not per_leaf and not copies)


def decay(who: str, name: str, value: Any) -> None:
    """A decay rate in [0, 1)."""
    check_in_range(who, name, value, 0.0, 1.0, high_open=True)


def non_negative(who: str, name: str, value: Any) -> None:
    """A value >= 0."""
    check_non_negative(who, name, value)


class LeafSlots:
    """A leaf's slots as a rule sees them (`s` in the module docstring): each slot an attribute,
    read as stored; `keep` writes one."""

    def __init__(self, buffers: dict[str, Any], param: Any = None, packing: Any = None) -> None:
        # `packing`: a `_packing.Packing` when `buffers` are the lists of quantized buffers of
        # leaves stepped together (`_packed`)
        self.param = param
        self.kept: dict[str, Any] = {}
        self._buffers = buffers
        self._packing = packing
        for name, buffer in buffers.items():
            if packing is not None:
                buffer = packing.read(buffer)[0]
            elif isinstance(buffer, QuantizedArray) or jnp.dtype(buffer.dtype).itemsize == 1:
                buffer = buffer_value(buffer)  # decoded, or a float8 buffer widened
            setattr(self, name, buffer)

    def __getattr__(self, name: str) -> Any:  # only for a name that is no slot
        raise AttributeError(
            f"this rule has no slot {name!r}; its slots are {sorted(self._buffers)}"
        )

    def keep(self, name: str, value: Any) -> Any:
        """Make `value` slot `name`'s new value; returns it as stored, widened."""
        buffer = self._buffers.get(name)
        if buffer is None:
            raise KeyError(f"this rule has no slot {name!r}; its slots are {sorted(self._buffers)}")
        if self._packing is not None:
            new, [value] = self._packing.store([value], buffer)
        elif isinstance(buffer, QuantizedArray):
            new, value = into_buffer_and_value(value, buffer)
        elif buffer.dtype == jnp.float16:  # not read back: see `state._buffers.as_read_back`
            value = value.astype(jnp.promote_types(value.dtype, jnp.float32))
            new = value.astype(buffer.dtype)
        else:  # the value as stored, widened (`_numerics.widen`)
            new = value.astype(buffer.dtype)
            value = widen(new)
        self.kept[name] = new
        setattr(self, name, value)
        return value


Layout = tuple[type, dict[str, Slot]]


class Rule:
    """A rule declared with `rule`: call it with the factory's keyword arguments (its
    hyperparameters and dtype keywords) for a `GradientTransformation`."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str,
        state: type | Callable[[dict[str, Any]], type],
        slots: Mapping[str, Slot] | Callable[[dict[str, Any]], Mapping[str, Slot]],
        checks: Mapping[str, Check],
        schedules: tuple[str, ...],
        uses_params: bool | Callable[[dict[str, Any]], bool],
        elementwise: bool,
        prologue: Callable[..., tuple[dict[str, Any], dict[str, Any]]] | None,
        fields: Callable[[dict[str, Any]], dict[str, Any]] | None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.state = state
        self.slots = slots
        self.checks = dict(checks)
        self.schedules = schedules
        self.uses_params = uses_params
        self.elementwise = elementwise
        self.prologue = prologue
        self.fields = fields
        self.__doc__ = fn.__doc__

    def layout(self, hyperparameters: dict[str, Any]) -> Layout:
        state = self.state if isinstance(self.state, type) else self.state(hyperparameters)
        slots = self.slots(hyperparameters) if callable(self.slots) else self.slots
        return state, dict(slots)

    def __call__(self, *, who: str | None = None, **kwargs: Any) -> GradientTransformation:
        who = who or self.name
        probe = self.layout(kwargs)[1]
        options = {s.dtype for s in probe.values() if s.dtype is not None}
        dtypes = {k: kwargs.pop(k, None) for k in sorted(options)}
        hp = kwargs
        for key, check in self.checks.items():
            check(who, key, hp[key])
        for option in sorted(options):
            governed = [s for s in probe.values() if s.dtype == option]
            if all(s.quantizable for s in governed):
                check_moment_dtype(who, option, dtypes[option])
            else:
                check_float_dtype(who, option, dtypes[option])
        return _transformation(self, who, hp, dtypes)


def rule(
    name: str,
    state: type | Callable[[dict[str, Any]], type],
    *,
    slots: Mapping[str, Slot] | Callable[[dict[str, Any]], Mapping[str, Slot]],
    checks: Mapping[str, Check] | None = None,
    schedules: tuple[str, ...] = (),
    uses_params: bool | Callable[[dict[str, Any]], bool] = False,
    elementwise: bool = True,
    prologue: Callable[..., tuple[dict[str, Any], dict[str, Any]]] | None = None,
    fields: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Callable[[Callable[..., Any]], Rule]:
    """Declare an update rule (see the module docstring).

    Args:
      name: the name errors use (the public factory's).
      state: the state's NamedTuple class: `count`, then the slots as fields (or one field
        `slots`, a dict of them), then any `fields`. Or a function of the hyperparameters. A
        first field `t` instead of `count` is the counter under Optax's name for simplified
        AdEMAMix; a state without either (Optax's layouts of rss, adadelta, rprop) gets no
        counter, and its rule `t=None`.
      slots: slot name -> `slot(...)`, in the order the rule keeps them; or a function of the
        hyperparameters.
      checks: hyperparameter name -> `check(who, name, value)`, run at construction.
      schedules: the hyperparameters that may be schedules `count -> value`, evaluated at the
        count before the step.
      uses_params: the rule reads `s.param` (`update` then needs `params`); or a function of the
        hyperparameters.
      elementwise: the rule's arithmetic is element by element (no reductions over a leaf), so
        the quantized leaves may be stepped stacked, with one codec for all.
      prologue: `(state, extra_args, t, hyperparameters) -> (extra keyword arguments of fn,
        new values of the state's other fields)`, once per step.
      fields: `hyperparameters -> {field: initial value}` of the state's other fields.

    Returns:
      A decorator: it turns `fn(t, **hyperparameters) -> leaf(g, s) -> update` into a `Rule`,
      which called with the hyperparameters and dtype keywords gives the transformation.

    Example (a decaying running maximum of each update's magnitude):

      >>> from typing import NamedTuple
      >>> import jax, jax.numpy as jnp, gradtx
      >>> class RunningMaxState(NamedTuple):
      ...     count: jax.Array
      ...     peak: dict
      >>> @gradtx.rule("scale_by_running_max", RunningMaxState,
      ...              slots={"peak": gradtx.slot(dtype="peak_dtype", signed=False)})
      ... def scale_by_running_max(t, *, decay, eps):
      ...     def leaf(g, s):
      ...         peak = s.keep("peak", jnp.maximum(decay * s.peak, jnp.abs(g)))
      ...         return g / (peak + eps)
      ...     return leaf
      >>> tx = scale_by_running_max(decay=0.9, eps=1e-8, peak_dtype=jnp.bfloat16)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([2.0, -0.5])}, state)
      >>> updates["w"]
      Array([ 1., -1.], dtype=float32)
      >>> state.peak["w"].dtype
      dtype(bfloat16)
    """

    def decorate(fn: Callable[..., Any]) -> Rule:
        return Rule(
            fn,
            name,
            state,
            slots,
            checks or {},
            schedules,
            uses_params,
            elementwise,
            prologue,
            fields,
        )

    return decorate


def _nested(state_cls: type, slots: Mapping[str, Slot]) -> bool:
    """Whether the state holds its slots in one dict field `slots` (`ElementwiseState`)."""
    fields = getattr(state_cls, "_fields", ())
    return "slots" in fields and "slots" not in slots


def _packs(dtype: Any) -> bool:
    """Whether a quantized spec lets its leaves be stepped stacked (`_packing`, the dynamic
    8-bit codec's)."""
    return bool(dtype.pack_leaves) and dtype.codec(True) == "dynamic"


def _transformation(
    r: Rule, who: str, hp: dict[str, Any], dtypes: dict[str, Any]
) -> GradientTransformation:
    state_cls, slots = r.layout(hp)
    names = list(slots)
    nested = _nested(state_cls, slots)
    fields = getattr(state_cls, "_fields", ())
    # the step counter: `count`, or `t` first (Optax's simplified AdEMAMix); Optax's rss,
    # adadelta and rprop keep none
    counter = "count" if "count" in fields else "t" if fields[:1] == ("t",) else None
    if r.schedules and counter is None:
        raise TypeError(f"{who}: a rule whose state has no count cannot evaluate schedules")
    uses_params = r.uses_params(hp) if callable(r.uses_params) else r.uses_params
    # the quantized leaves may be stepped stacked: an element-wise rule, every slot 8-bit
    pack = (
        r.elementwise
        and bool(names)
        and all(_quantize.is_quantized_dtype(dtypes.get(s.dtype or "")) for s in slots.values())
        and all(_packs(dtypes.get(s.dtype or "")) for s in slots.values())
    )
    prefix = "state.slots." if nested else "state."

    def initial(s: Slot) -> Any:
        return hp[s.init] if isinstance(s.init, str) else s.init

    def init(params):
        trees = {}
        for n, s in slots.items():
            dtype = dtypes.get(s.dtype) if s.dtype else None
            if isinstance(s.init, str) and s.init == _PARAMS:
                trees[n] = copy_params(params, dtype)
            elif s.per_leaf:
                trees[n] = jax.tree.map(
                    lambda p, s=s, d=dtype: jnp.full([], initial(s), d or p.dtype), params
                )
            elif _quantize.is_quantized_dtype(dtype):
                trees[n] = _quantize.buffers_like(
                    params, dtype, signed=s.signed, fill_value=initial(s)
                )
            else:
                trees[n] = full_like(params, initial(s), dtype)
        extra = r.fields(hp) if r.fields is not None else {}
        start = {counter: zero_count()} if counter else {}
        if nested:
            return state_cls(**start, slots=trees, **extra)
        return state_cls(**start, **trees, **extra)

    def update(updates, state, params=None, **extra_args):
        # Plain loops rather than comprehensions or helpers: this runs at every trace and every
        # eager step, so it stays one frame deep.
        if not isinstance(state, state_cls):
            expect_state(who, state, state_cls)
        trees = state.slots if nested else state._asdict()
        if nested and sorted(trees) != sorted(names):
            article = "an" if state_cls.__name__[0] in "AEIOU" else "a"
            raise ValueError(
                f"{who}: expected {article} {state_cls.__name__} with slots {names} (from this "
                f"transformation's init), got slots {sorted(trees)}"
            )
        treedef = jax.tree.structure(updates)
        gs = treedef.flatten_up_to(updates)
        bufs = {}
        for n in names:
            try:
                bufs[n] = treedef.flatten_up_to(trees[n])
            except (ValueError, TypeError):
                bufs[n] = None
            matched = bufs[n] is not None
            for b in bufs[n] or ():
                matched = matched and isinstance(b, QuantizedArray | jax.Array)
            if not matched:
                # another structure: the error names the first difference
                assert_same_structure(who, updates=updates, **{prefix + n: as_leaves(trees[n])})
                bufs[n] = treedef.flatten_up_to(trees[n])
        before: Any = getattr(state, counter) if counter else None
        count = safe_increment(before) if counter else None
        values = dict(hp)
        for k in r.schedules:
            values[k] = value_at(hp[k], before, who=who, name=k)
        extra: dict[str, Any] = {}
        new_fields: dict[str, Any] = {}
        if r.prologue is not None:
            extra, new_fields = r.prologue(state, extra_args, count, values)
        ps = None
        if uses_params:
            params = require_params(who, params)
            assert_same_structure(who, updates=updates, params=params)
            ps = treedef.flatten_up_to(params)

        call = r.fn(count, **values, **extra)

        out_u: list[Any] = [None] * len(gs)
        out_b = {}
        for n in names:
            out_b[n] = list(bufs[n])
        if pack:
            for group in _packed_groups(gs, list(bufs.values())):
                us, kept = _packed(call, gs, bufs, ps, group)
                for j, i in enumerate(group):
                    out_u[i] = us[j]
                    for n, new in kept.items():
                        out_b[n][i] = new[j]
        for i, g in enumerate(gs):
            if out_u[i] is not None:
                continue
            leaf_bufs = {}
            for n in names:
                leaf_bufs[n] = bufs[n][i]
            g = jnp.asarray(g)
            wide = g.astype(jnp.promote_types(g.dtype, jnp.float32))  # `_numerics.widen`
            view = LeafSlots(leaf_bufs, None if ps is None else widen(ps[i]))
            out_u[i] = jnp.asarray(call(wide, view)).astype(g.dtype)
            for n, new in view.kept.items():
                out_b[n][i] = new
        new_trees = {}
        for n in names:
            new_trees[n] = treedef.unflatten(out_b[n])
        stepped = {counter: count} if counter else {}
        if nested:
            new_state = state._replace(**stepped, slots=new_trees, **new_fields)
        else:
            new_state = state._replace(**stepped, **new_trees, **new_fields)
        return treedef.unflatten(out_u), new_state

    tx = GradientTransformation(init, update)
    return tx


def _packed_groups(gs: list[Any], buffers: list[list[Any]]) -> list[list[int]]:
    """The leaves that share one codec, grouped by block width (`_packing`): float32 (or
    narrower) gradients whose buffers are all quantized with one block size. A group of one
    leaf takes the per-leaf path."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, g in enumerate(gs):
        bufs = [b[i] for b in buffers]
        if (
            all(isinstance(b, QuantizedArray) and b.codec == "dynamic" for b in bufs)
            and len({b.block_size for b in bufs}) == 1
            and jnp.promote_types(g.dtype, jnp.float32) == jnp.float32
        ):
            size = bufs[0].block_size
            width, _ = _packing._rows(tuple(g.shape), size)
            groups.setdefault((size, width), []).append(i)
    packed = [i for key in sorted(groups) for i in groups[key]]
    if len(packed) < 2:  # a single leaf: the per-leaf path
        return []
    return [groups[key] for key in sorted(groups)]


def _packed(
    call: Callable[[Any, LeafSlots], Any],
    gs: list[Any],
    bufs: dict[str, list[Any]],
    ps: list[Any] | None,
    leaves: list[int],
) -> tuple[list[Any], dict[str, list[Any]]]:
    """The rule on the leaves `leaves` at once: their gradients and buffers stacked into one
    matrix (`_packing.Packing`; the leaves are all of one block width), each buffer decoded and
    encoded once for all of them, the update cut back into leaves. The rule is element-wise, so
    every value is the per-leaf path's: the codes, scales and decoded moments bit for bit; the
    update too, unless XLA rewrites the rule's arithmetic differently in the two programs (seen
    under sharded `jit`: 1 ulp)."""
    first = bufs[next(iter(bufs))][leaves[0]]
    layout = _packing.Packing.of([tuple(gs[i].shape) for i in leaves], first.block_size)
    [g] = layout.pack([widen(gs[i]) for i in leaves])
    param = None if ps is None else layout.pack([widen(jnp.asarray(ps[i])) for i in leaves])[0]
    view = LeafSlots({n: [b[i] for i in leaves] for n, b in bufs.items()}, param, layout)
    us = layout.unpack([jnp.broadcast_to(call(g, view), g.shape)])
    return [x.astype(gs[i].dtype) for i, x in zip(leaves, us, strict=True)], view.kept


__all__ = ["LeafSlots", "Rule", "Slot", "decay", "non_negative", "rule", "slot"]
