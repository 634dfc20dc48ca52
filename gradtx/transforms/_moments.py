r"""The moment engine: the one implementation of Adam-style moment bookkeeping.

Every Adam-like rule (adam, adamax, amsgrad, the ε-hat form of nnabla / TF1 / RETURNN, AdaBelief,
Yogi, RAdam, `bound_lr`, Eve) keeps a first moment :math:`m` and a second statistic :math:`v`
(optionally with its running maximum for AMSGrad) and differs only in

- how :math:`v` moves (`second_moment`, `belief_moment`, `yogi_moment`, `infinity_norm`), and
- how the update is formed from :math:`g, m_t, \bar v_t` (the rule's `leaf_step`).

`init_moments` and `step_moments` do the rest once: state layout, widening to float32, the
first-moment EMA, rounding the new moments to their buffers' dtypes *before* the update reads
them (`_numerics.as_stored`), the AMSGrad maximum, counters, dtype checks and the state-kind
check. Whether the state carries `nu_max` is decided by the transformation's own `amsgrad`
option; a state of the other kind is an error that names both.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_in_range, check_non_negative, concrete, expect_state
from .._base._numerics import abs_sq, bias_correction, safe_increment, widen, zero_count
from .._base._typing import ArrayLike, Params, Updates
from ..core._transformation import GradientTransformation
from ..state import _packing as _quantize_packing
from ..state import _quantize
from ..state._buffers import check_moment_dtype, read, stored
from ..tree import assert_same_structure
from ._tier import ema, moment_buffers

# A second-moment rule: (g, m_t, v_{t-1}) -> v_t, all widened except v_{t-1} (the buffer as
# stored, so that `decay * v` rounds in the buffer's dtype as Optax's does).
SecondMoment = Callable[[jax.Array, jax.Array, jax.Array], Any]
# The update of one leaf from the widened g, m_t and v_eff (v_t, or max(v_max, v_t)); elementwise,
# so that it gives the same values on several leaves stacked into one array (`_packed_step`).
LeafStep = Callable[[jax.Array, jax.Array, jax.Array], Any]


class ScaleByAdamState(NamedTuple):
    """State of `scale_by_adam` (and of adamax, yogi, radam, the ε-hat form and `bound_lr`)."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # first moment (EMA of g), dtype mu_dtype or the params'
    nu: Updates  # second statistic (EMA of |g|^2, or the infinity norm), dtype nu_dtype or params'


class ScaleByAmsgradState(NamedTuple):
    """State of the moment rules with `amsgrad=True` (and of `scale_by_amsgrad`)."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # first moment, dtype mu_dtype or the params'
    nu: Updates  # second moment, dtype nu_dtype or the params'
    nu_max: Updates  # running maximum of the second moment, dtype of nu


def check_moments(
    who: str, b1: ArrayLike, b2: ArrayLike, eps: ArrayLike, mu_dtype: Any, nu_dtype: Any
) -> None:
    """The shared construction-time checks: decays in [0, 1), eps >= 0, float moment dtypes (or
    `gradtx.quantized()` specs)."""
    check_in_range(who, "b1", b1, 0.0, 1.0, high_open=True)
    check_in_range(who, "b2", b2, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_moment_dtype(who, "mu_dtype", mu_dtype)
    check_moment_dtype(who, "nu_dtype", nu_dtype)


def second_moment(b2: ArrayLike) -> SecondMoment:
    r"""Adam's :math:`v_t = \beta_2 v_{t-1} + (1-\beta_2)|g_t|^2`."""
    return lambda g, m, v: ema(b2, abs_sq(g), v)


def belief_moment(b2: ArrayLike, eps_root: ArrayLike = 0.0) -> SecondMoment:
    r"""AdaBelief's :math:`s_t = \beta_2 s_{t-1} + (1-\beta_2)|g_t - m_t|^2 + \epsilon_{root}`."""
    return lambda g, m, v: ema(b2, abs_sq(g - m), v) + eps_root


def yogi_moment(b2: ArrayLike) -> SecondMoment:
    r"""Yogi's :math:`v_t = v_{t-1} - (1-\beta_2)\,\mathrm{sign}(v_{t-1} - |g_t|^2)\,|g_t|^2`."""

    def rule(g, m, v):
        g2, vw = abs_sq(g), widen(v)
        return vw - (1 - b2) * jnp.sign(vw - g2) * g2

    return rule


def infinity_norm(b2: ArrayLike, eps: ArrayLike) -> SecondMoment:
    r"""AdaMax's :math:`v_t = \max(|g_t| + \epsilon,\ \beta_2 v_{t-1})`."""
    return lambda g, m, v: jnp.maximum(jnp.abs(g) + eps, b2 * v)


def packs_leaves(dtype: Any) -> bool:
    """Whether the quantized leaves of a buffer of `dtype` may share one codec (`pack_leaves`
    of a `gradtx.quantized()` spec; other dtypes have no quantized leaves)."""
    return bool(getattr(dtype, "pack_leaves", True))


def init_moments(
    params: Params,
    *,
    amsgrad: bool,
    mu_dtype: Any,
    nu_dtype: Any,
    initial_value: ArrayLike = 0.0,
    state_cls: type = ScaleByAdamState,
    **extra_fields: Any,
) -> Any:
    """A fresh state: zero count, `mu` and `nu` filled with `initial_value` (and a zero `nu_max`
    with `amsgrad`, in a `ScaleByAmsgradState`). `state_cls` is the kind without AMSGrad, built
    with `extra_fields` besides `count`, `mu` and `nu` (Eve's scalars)."""
    count = zero_count()
    mu = moment_buffers(params, mu_dtype, fill_value=initial_value, signed=True)
    nu = moment_buffers(params, nu_dtype, fill_value=initial_value, signed=False)
    if amsgrad:
        nu_max = moment_buffers(params, nu_dtype, signed=False)
        return ScaleByAmsgradState(count=count, mu=mu, nu=nu, nu_max=nu_max)
    return state_cls(count=count, mu=mu, nu=nu, **extra_fields)


def step_moments(
    who: str,
    updates: Updates,
    state: Any,
    leaf_step: LeafStep,
    *,
    b1: ArrayLike,
    second: SecondMoment,
    amsgrad: bool = False,
    max_of: Callable[[jax.Array], Any] | None = None,
    state_cls: type = ScaleByAdamState,
    pack_mu: bool = True,
    pack_nu: bool = True,
) -> tuple[Updates, Any]:
    r"""One step of the moments in `state`; `leaf_step(g, m_t, v_eff)` gives each leaf's update.

    :math:`m_t` is the EMA of the gradient with `b1`; :math:`v_t` comes from `second`. `v_eff` is
    :math:`v_t`, or with `amsgrad` the running maximum :math:`\max(\bar v_{t-1}, f(v_t))` with
    :math:`f` = `max_of` (identity by default; Optax's AMSGrad takes the maximum of the
    bias-corrected :math:`v_t`). All values passed to `leaf_step` are widened and rounded as
    stored. Updates are cast to the gradients' dtypes, buffers keep theirs.

    With `pack_mu` and `pack_nu` (`gradtx.quantized(pack_leaves=...)`, the default) the leaves
    whose buffers are all quantized alike are stepped together (`_packed_step`): one encoder and
    one decoder per buffer for all of them, so the compiled step no longer grows a codec per
    leaf. Their stored moments are bit-identical to the per-leaf path's; `leaf_step` and
    `second` must be elementwise (all the engine's rules are).

    Returns:
      `(updates, new_state)`; `new_state` is `state` with `count`, `mu`, `nu` (and `nu_max`)
      replaced, so rules with extra fields (Eve) keep them.
    """
    expect_state(who, state, ScaleByAmsgradState if amsgrad else state_cls)
    assert_same_structure(who, updates=updates, **{"state.mu": _quantize.as_leaves(state.mu)})

    def leaf(g, m, v, *v_max):
        gw = widen(g)
        m_buf, m_new = stored(ema(b1, gw, read(m)), m)
        v_buf, v_new = stored(second(gw, m_new, read(v)), v)
        if amsgrad:
            candidate = v_new if max_of is None else max_of(v_new)
            max_buf, v_eff = stored(jnp.maximum(widen(read(v_max[0])), candidate), v_max[0])
        else:
            v_eff = v_new
        u = leaf_step(gw, m_new, v_eff)
        out = (u.astype(g.dtype), m_buf, v_buf)
        return (*out, max_buf) if amsgrad else out

    step_args = (b1, second, amsgrad, max_of)
    count = safe_increment(state.count)
    treedef = jax.tree.structure(updates)
    gs = treedef.flatten_up_to(updates)
    buffers = [treedef.flatten_up_to(state.mu), treedef.flatten_up_to(state.nu)]
    if amsgrad:
        buffers.append(treedef.flatten_up_to(state.nu_max))
    outs: list[Any] = [None] * len(gs)
    packed = _packable(gs, buffers) if pack_mu and pack_nu else []
    if len(packed) > 1:  # one codec for these leaves (a single leaf: the per-leaf path)
        stepped = _packed_step(gs, buffers, packed, leaf_step, step_args)
        for i, out in zip(packed, stepped, strict=True):
            outs[i] = out
    for i, g in enumerate(gs):
        if outs[i] is None:
            outs[i] = leaf(g, *(b[i] for b in buffers))
    columns = [treedef.unflatten([out[k] for out in outs]) for k in range(len(buffers) + 1)]
    new = {"count": count, "mu": columns[1], "nu": columns[2]}
    if amsgrad:
        new["nu_max"] = columns[3]
    return columns[0], state._replace(**new)


def _packable(gs: list[Any], buffers: list[list[Any]]) -> list[int]:
    """The leaves that can share one codec: float32 (or narrower) gradients, and every buffer
    of the leaf quantized with the same block size (so that all share the leaf's layout)."""
    out = []
    for i, g in enumerate(gs):
        bufs = [b[i] for b in buffers]
        if (
            all(_quantize.is_quantized(b) for b in bufs)
            and len({b.block_size for b in bufs}) == 1
            and jnp.promote_types(g.dtype, jnp.float32) == jnp.float32
        ):
            out.append(i)
    return out


def _packed_step(
    gs: list[Any],
    buffers: list[list[Any]],
    leaves: list[int],
    leaf_step: LeafStep,
    args: tuple[ArrayLike, SecondMoment, bool, Callable[[jax.Array], Any] | None],
) -> list[tuple]:
    """`step_moments`' per-leaf rule for the leaves `leaves` at once: their gradients and
    buffers stacked into one matrix per block width (`_quantize_packing.Packing`), each buffer
    encoded and decoded once for all of them, the update computed on the stack and cut back
    into leaves. The rule is elementwise, so every value is the per-leaf rule's: the codes, scales
    and decoded moments bit for bit; the update too, unless XLA rewrites the rule's arithmetic
    differently in the two programs (seen under sharded `jit`: a 1-ulp difference)."""
    b1, second, amsgrad, max_of = args
    bufs = [[b[i] for i in leaves] for b in buffers]
    layout = _quantize_packing.Packing.of(
        [tuple(gs[i].shape) for i in leaves], bufs[0][0].block_size
    )
    gws = layout.pack([widen(gs[i]) for i in leaves])
    m_in = [ema(b1, g, m) for g, m in zip(gws, layout.read(bufs[0]), strict=True)]
    m_bufs, m_new = layout.store(m_in, bufs[0])
    v_in = [second(g, m, v) for g, m, v in zip(gws, m_new, layout.read(bufs[1]), strict=True)]
    v_bufs, v_new = layout.store(v_in, bufs[1])
    columns = [m_bufs, v_bufs]
    if amsgrad:
        candidates = v_new if max_of is None else [max_of(v) for v in v_new]
        maxima = [
            jnp.maximum(old, c) for old, c in zip(layout.read(bufs[2]), candidates, strict=True)
        ]
        max_bufs, v_new = layout.store(maxima, bufs[2])
        columns.append(max_bufs)
    us = layout.unpack([leaf_step(g, m, v) for g, m, v in zip(gws, m_new, v_new, strict=True)])
    us = [u.astype(gs[i].dtype) for i, u in zip(leaves, us, strict=True)]
    return list(zip(us, *columns, strict=True))


# A rule with one state buffer: (g, m_{t-1}) -> (m_t before it is stored, finish), where
# `finish(m_t as stored)` gives the update; elementwise, so that it runs on stacked leaves.
BufferRule = Callable[[jax.Array, jax.Array], tuple[jax.Array, Callable[[jax.Array], jax.Array]]]


def step_buffer(
    rule: BufferRule, updates: Updates, buffer: Any, *, pack: bool = True
) -> tuple[Updates, Any]:
    """`(updates, new buffer)` of a one-buffer rule (Lion's momentum, `trace`'s 8-bit form):
    `rule` gets the widened gradient and the buffer as read (`_numerics.read`); the new value is
    stored like the old (`_numerics.stored`) and `finish` reads it back. With `pack`
    (`gradtx.quantized(pack_leaves=...)`) the quantized leaves share one codec as in
    `step_moments`, bit-identical to the per-leaf path. Updates keep the gradients' dtypes."""
    treedef = jax.tree.structure(updates)
    gs, ms = treedef.flatten_up_to(updates), treedef.flatten_up_to(buffer)
    outs: list[Any] = [None] * len(gs)
    packed = _packable(gs, [ms]) if pack else []
    if len(packed) > 1:  # one codec for these leaves (a single leaf: the per-leaf path)
        qs = [ms[i] for i in packed]
        layout = _quantize_packing.Packing.of(
            [tuple(gs[i].shape) for i in packed], qs[0].block_size
        )
        gws = layout.pack([widen(gs[i]) for i in packed])
        pairs = [rule(g, m) for g, m in zip(gws, layout.read(qs), strict=True)]
        bufs, values = layout.store([x for x, _ in pairs], qs)
        us = layout.unpack([finish(v) for (_, finish), v in zip(pairs, values, strict=True)])
        for i, u, b in zip(packed, us, bufs, strict=True):
            outs[i] = (u.astype(gs[i].dtype), b)
    for i, g in enumerate(gs):
        if outs[i] is None:
            x, finish = rule(widen(g), read(ms[i]))
            buf, value = stored(x, ms[i])
            outs[i] = (finish(value).astype(g.dtype), buf)
    return treedef.unflatten([o[0] for o in outs]), treedef.unflatten([o[1] for o in outs])


def moment_transformation(
    who: str,
    leaf_step_at: Callable[[jax.Array], LeafStep],
    *,
    b1: ArrayLike,
    second: SecondMoment,
    mu_dtype: Any,
    nu_dtype: Any,
    amsgrad: bool = False,
    max_of_at: Callable[[jax.Array], Callable[[jax.Array], Any] | None] | None = None,
    initial_value: ArrayLike = 0.0,
    state_cls: type = ScaleByAdamState,
) -> GradientTransformation:
    """A moment rule as a `GradientTransformation`: `init_moments` and `step_moments` with the
    rule's `leaf_step_at(t)` (and `max_of_at(t)` for AMSGrad), where `t` is the new step count
    (1 at the first update)."""

    def init(params):
        return init_moments(
            params,
            amsgrad=amsgrad,
            mu_dtype=mu_dtype,
            nu_dtype=nu_dtype,
            initial_value=initial_value,
            state_cls=state_cls,
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        count = safe_increment(state.count)
        return step_moments(
            who,
            updates,
            state,
            leaf_step_at(count),
            b1=b1,
            second=second,
            amsgrad=amsgrad,
            max_of=None if max_of_at is None else max_of_at(count),
            state_cls=state_cls,
            pack_mu=packs_leaves(mu_dtype),
            pack_nu=packs_leaves(nu_dtype),
        )

    return GradientTransformation(init, update)


def first_moment_estimate(
    b1: ArrayLike, count: jax.Array, nesterov: bool
) -> Callable[[jax.Array, jax.Array], Any]:
    r"""`(m_t, g_t) -> \hat m_t` at step `count`: :math:`m_t/(1-\beta_1^t)`, or with
    `nesterov` (NAdam, Dozat 2016) :math:`\beta_1 m_t/(1-\beta_1^{t+1}) + (1-\beta_1)
    g_t/(1-\beta_1^t)`. The corrections are float32 scalars."""
    c1 = bias_correction(b1, count)
    if not nesterov:
        return lambda m, g: m / c1
    c1_next = bias_correction(b1, safe_increment(count))
    return lambda m, g: b1 * (m / c1_next) + (1 - b1) * (g / c1)


def eps_hat_factor(b1: ArrayLike, b2: ArrayLike, count: jax.Array, enabled: bool) -> Any:
    r""":math:`\sqrt{1-\beta_2^t}/(1-\beta_1^t)` in float32 at step `count`, or 1: both bias
    corrections folded into the step size (Kingma & Ba's ε-hat form)."""
    if not enabled:
        return 1.0
    return jnp.sqrt(bias_correction(b2, count)) / bias_correction(b1, count)


def rectification(
    b2: ArrayLike, count: jax.Array, threshold: ArrayLike, *, precise: bool
) -> tuple[jax.Array, jax.Array]:
    r"""RAdam's `(adaptive, r_t)` at step `count`: adaptive where :math:`\rho_t` passes
    `threshold` (:math:`\ge` it when not `precise`, :math:`>` it when `precise`).

    .. math::

      \rho_\infty = \frac{2}{1-\beta_2} - 1, \quad
      \rho_t = \rho_\infty - \frac{2 t \beta_2^t}{1-\beta_2^t}, \quad
      r_t = \sqrt{\frac{(\rho_t-4)(\rho_t-2)\rho_\infty}{(\rho_\infty-4)(\rho_\infty-2)\rho_t}}

    :math:`\rho_t` is a small difference of large numbers for small :math:`t`. With `precise`,
    :math:`\beta_2^t` and :math:`1-\beta_2^t` come from :math:`\log\beta_2` (in float64 for a
    Python float) through `exp` / `expm1`, accurate to about 1e-6 at the first adaptive step.
    Without it they are float32 powers, which round as Optax's `scale_by_radam` does (about 1%
    off at t = 6), so that `scale_by_radam` matches Optax.
    """
    b2_value = concrete(b2)
    scalar = b2_value is not None and b2_value.ndim == 0
    rho_inf: Any = (
        2.0 / (1.0 - float(b2_value)) - 1.0  # type: ignore[arg-type]
        if scalar
        else 2.0 / (1.0 - jnp.asarray(b2, jnp.float32)) - 1.0
    )
    t = count.astype(jnp.float32)
    if precise:
        if scalar:
            log_b2: Any = math.log(float(b2_value)) if float(b2_value) > 0 else -jnp.inf  # type: ignore[arg-type]
        else:
            log_b2 = jnp.log(jnp.asarray(b2, jnp.float32))
        x = t * log_b2
        rho = rho_inf - 2.0 * t * jnp.exp(x) / -jnp.expm1(x)
        adaptive = rho > threshold
    else:
        b2t = jnp.asarray(b2, jnp.float32) ** t
        rho = rho_inf - 2.0 * t * b2t / (1.0 - b2t)
        adaptive = rho >= threshold
    rho_ok = jnp.where(adaptive, rho, rho_inf)  # keeps the unused branch free of NaN
    r = jnp.sqrt(
        (rho_ok - 4.0) * (rho_ok - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_ok)
    )
    return adaptive, r


__all__ = ["ScaleByAdamState", "ScaleByAmsgradState"]
