"""Low-precision (bf16 / f16) parameters trained with the precision of a float32 master copy: a
per-value compensation residual (int8 or bf16) and / or stochastic rounding."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._base._checks import HyperparameterError, check_bool, check_one_of, expect_state
from .._base._numerics import key_data
from .._base._recipe import recorded
from .._base._typing import OptState, Seed
from ..core._transformation import (
    GradientTransformation,
    _apply_leaf,
    as_transformation,
    forward_extra_args,
    require_params,
)
from ..tree import assert_same_structure
from ._common import register_wrapper

RESIDUALS = ("int8", "bfloat16", None)

# The int8 code -128 stands for a NaN residual; the finite codes are [-127, 127].
_NAN_CODE = -128
# The smallest spacing the int8 code is scaled by: 2^-118, so that the scale and every decoded
# residual (down to 2^-118 / 254 > 2^-126) are normal float32 numbers, which no flush-to-zero
# mode of the hardware changes. It matters only for bf16 values below 2^-111 in magnitude (zero,
# the subnormals and the lowest normals), whose residual then has a coarser step than their
# spacing; float16's smallest spacing (2^-24) is far above it.
_MIN_SPACING_EXP = -118


class CompensationState(NamedTuple):
    """The state of `with_compensation`."""

    inner_state: OptState
    # Per parameter leaf: the rounding residual of a bf16 / f16 leaf (int8 codes or bf16
    # values, the parameter's shape); None for a float32 / float64 leaf, or for every leaf with
    # residual=None.
    residual: Any
    key: jax.Array | None  # raw PRNG key data (uint32) with stochastic rounding, else None


def _narrow(dtype: Any) -> bool:
    """Whether a parameter of `dtype` is compensated: a float type narrower than float32."""
    dtype = np.dtype(dtype)
    return jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize < 4


def _spacing(x: jax.Array, dtype: Any) -> jax.Array:
    """The spacing of `dtype`'s numbers above |x| (`x`: float32 values of `dtype`), a power of
    two as float32: 2^(e - mantissa bits) with e the exponent of x; the spacing of the smallest
    normals for zero and subnormals, and never below 2^-118 (`_MIN_SPACING_EXP`)."""
    info = jnp.finfo(dtype)
    bits = lax.bitcast_convert_type(x, jnp.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(jnp.int32) - 127
    k = jnp.maximum(jnp.maximum(exponent, info.minexp) - info.nmant, _MIN_SPACING_EXP)
    return lax.bitcast_convert_type(((k + 127) << 23).astype(jnp.uint32), jnp.float32)


def _int8_steps(stochastic: bool) -> int:
    # round to nearest leaves |r| <= spacing / 2, stochastic rounding |r| < spacing
    return 127 if stochastic else 254


def _encode(r: jax.Array, applied: jax.Array, kind: str, dtype: Any, stochastic: bool) -> Any:
    if kind == "bfloat16":
        return r.astype(jnp.bfloat16)
    steps = _int8_steps(stochastic)
    q = jnp.clip(jnp.round(r / _spacing(applied, dtype) * steps), -127, 127)
    return jnp.where(jnp.isnan(r), _NAN_CODE, q).astype(jnp.int8)


def _decode(residual: Any, p32: jax.Array, kind: str, dtype: Any, stochastic: bool) -> jax.Array:
    if kind == "bfloat16":
        return residual.astype(jnp.float32)
    steps = _int8_steps(stochastic)
    r = residual.astype(jnp.float32) / steps * _spacing(p32, dtype)
    return jnp.where(residual == _NAN_CODE, jnp.nan, r)


def _round_stochastic(x: jax.Array, dtype: Any, key: jax.Array) -> jax.Array:
    """`x` (float32) rounded to one of its two neighbours in `dtype`, the upper one with
    probability (x - lower) / (upper - lower): unbiased. Values `dtype` holds exactly, NaN and
    the values that round to +-inf (overflow stays visible) are rounded to nearest."""
    nearest = x.astype(dtype)
    n32 = nearest.astype(jnp.float32)
    up = n32 < x  # the other neighbour is above
    toward = jnp.where(up, jnp.inf, -jnp.inf).astype(dtype)
    other = jnp.nextafter(nearest, toward)
    o32 = other.astype(jnp.float32)
    lower, upper = jnp.where(up, n32, o32), jnp.where(up, o32, n32)
    frac = (x - lower) / (upper - lower)
    pick_upper = jax.random.uniform(key, x.shape, jnp.float32) < frac
    rounded = jnp.where(pick_upper == up, other, nearest)
    return jnp.where(jnp.isfinite(nearest) & (n32 != x), rounded, nearest)


@recorded
def with_compensation(
    tx: GradientTransformation,
    *,
    residual: str | None = "int8",
    stochastic_rounding: bool = False,
    key: Seed | None = None,
) -> GradientTransformation:
    r"""Train bf16 / float16 parameters with (nearly) the precision of a float32 master copy.

    For each bf16 / f16 parameter :math:`p` with residual :math:`r` (kept in the state), from the
    update :math:`u` of `tx` (in float32):

    .. math::

      e = p + r + u, \qquad p' = \mathrm{round}(e), \qquad r' = e - p'

    where :math:`\mathrm{round}` rounds to the parameter's dtype (to nearest, or stochastically
    with `stochastic_rounding=True`) and :math:`p'` is exactly what
    `gradtx.apply_updates(p, u')` gives for the emitted update :math:`u'` (computed by the same
    leaf function, so :math:`r'` is exact even where :math:`u'`, in the gradients' dtype, cannot
    hold :math:`\mathrm{round}(e) - p` exactly). So the small updates that plain bf16 params
    round away (any :math:`|u|` below half a spacing of :math:`p`: with bf16, a relative
    change below :math:`2^{-9}`) accumulate in :math:`r` until they move :math:`p`: the pair
    :math:`p + r` follows the float32 master trajectory. float32 / float64 (and non-float)
    leaves pass `tx`'s update through unchanged and keep no residual.

    Residuals: `"int8"` (1 byte per value, as FlashOptim's compressed master weights) stores
    :math:`q = \mathrm{round}(254\, r / s)` clipped to [-127, 127], decoded as :math:`q s / 254`,
    with :math:`s` the spacing of the parameter's dtype just above :math:`|p'|` (a power of
    two; :math:`|r| \le s/2` after rounding to nearest): about 8 more mantissa bits, a 16-bit
    master for bf16. With stochastic rounding :math:`|r| < s` and the code is
    :math:`\mathrm{round}(127\, r / s)`. For zero and the smallest bf16 values (below
    :math:`2^{-111}`) :math:`s` is :math:`2^{-118}`, so the arithmetic never meets a float32
    subnormal. `"bfloat16"` (2 bytes, Kahan-style compensated summation) stores :math:`r` in
    bf16. None keeps no residual (only with `stochastic_rounding=True`: unbiased rounding, as
    torchao's bf16 optimizers, at no memory cost). Stochastic rounding picks the upper
    neighbour of :math:`e` with probability :math:`(e - \text{lower}) / (\text{upper} -
    \text{lower})`, drawing from `key` (advanced by one split every step, kept in the state).

    Non-finite values stay visible: a NaN or inf update makes the parameter NaN / inf (never a
    silent zero), an inf parameter stays inf, and a NaN residual is kept (the int8 code -128)
    and makes the next value NaN. The int8 code holds at most half a spacing (one with
    stochastic rounding): in the rare step where the emitted update cannot carry
    :math:`\mathrm{round}(e) - p` (a bf16 update far larger than the parameter, a sign change
    that nearly cancels it) the part of the error beyond that is lost, as plain bf16 params
    would lose it; the bf16 residual keeps it.

    It wraps the whole optimizer and must be the last transformation before
    `gradtx.apply_updates`: a later one would change the updates it accounted for. `tx` sees
    the stored (bf16) parameters, and its moments default to their dtype: give it float32 (or
    `gradtx.quantized()`) moments, e.g. `adamw(lr, mu_dtype=jnp.float32, nu_dtype=jnp.float32)`,
    as bf16 second moments lose the small increments of their average just as bf16 params do.

    Args:
      tx: the optimizer (any gradient transformation, e.g. `gradtx.adamw(...)`).
      residual: `"int8"` (default), `"bfloat16"` or None (no residual; needs
        `stochastic_rounding=True`).
      stochastic_rounding: round :math:`e` stochastically instead of to nearest.
      key: the PRNG key of stochastic rounding, an integer seed or a `jax.random.key`;
        required with `stochastic_rounding=True`, refused without it.

    Returns:
      A `GradientTransformation` with state `CompensationState(inner_state, residual, key)`;
      it needs the params in `update` (a `ValueError` otherwise). Updates keep the dtype of the
      incoming gradients. `gradtx.state_bytes` reports the residual's bytes separately.

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> params = {"w": jnp.ones(3, jnp.bfloat16)}
      >>> tx = gradtx.with_compensation(gradtx.sgd(1e-3))
      >>> state = tx.init(params)
      >>> grads = {"w": jnp.ones(3, jnp.bfloat16)}
      >>> for _ in range(10):  # each step moves w by 1e-3: plain bf16 would stay at 1.0
      ...     updates, state = tx.update(grads, state, params)
      ...     params = gradtx.apply_updates(params, updates)
      >>> params["w"]
      Array([0.988281, 0.988281, 0.988281], dtype=bfloat16)
      >>> state.residual["w"].dtype
      dtype('int8')

    Reference: Kahan, "Further remarks on reducing truncation errors" (CACM 1965), compensated
    summation; FlashOptim (Databricks, 2026): master weights compressed to bf16 + an int8
    residual; Zamirai et al., "Revisiting BFloat16 Training" (arXiv:2010.06192, 2020) and
    torchao's bf16 stochastic rounding.
    """
    who = "with_compensation"
    tx = as_transformation(tx, who, "tx")
    check_one_of(who, "residual", residual, RESIDUALS)
    check_bool(who, "stochastic_rounding", stochastic_rounding)
    if residual is None and not stochastic_rounding:
        raise HyperparameterError(
            who,
            "residual",
            residual,
            '"int8" or "bfloat16" with round-to-nearest',
            note=(
                "; without a residual, rounding to nearest loses every update below half a "
                "spacing (plain bf16): pass residual='int8' or stochastic_rounding=True"
            ),
        )
    if stochastic_rounding:
        if key is None:
            raise HyperparameterError(
                who,
                "key",
                key,
                "a PRNG key or an integer seed with stochastic_rounding=True",
                note=", e.g. key=0 or key=jax.random.key(0)",
            )
        key_data(who, "key", key)  # validate now rather than at the first init
    elif key is not None:
        raise HyperparameterError(
            who,
            "key",
            key,
            "None without stochastic rounding",
            note="; pass stochastic_rounding=True to use it, or drop key",
        )
    inner_update = forward_extra_args(tx.update)

    def init(params):
        def leaf(p):
            if residual is None or not _narrow(p.dtype):
                return None
            return jnp.zeros(p.shape, jnp.int8 if residual == "int8" else jnp.bfloat16)

        return CompensationState(
            inner_state=tx.init(params),
            residual=jax.tree.map(leaf, params),
            key=key_data(who, "key", key) if stochastic_rounding else None,
        )

    def step(path, g, u, p, r, leaf_key):
        """The emitted update and the new residual of one compensated leaf."""
        p32 = p.astype(jnp.float32)
        master = (
            p32
            if residual is None
            else p32 + _decode(r, p32, residual, p.dtype, stochastic_rounding)
        )
        exact = master + u.astype(jnp.float32)
        if stochastic_rounding:
            target = _round_stochastic(exact, p.dtype, leaf_key)
        else:
            target = exact.astype(p.dtype)
        t32 = target.astype(jnp.float32)
        # an inf parameter that stays inf moves by 0, not by inf - inf = NaN
        delta = jnp.where(t32 == p32, 0.0, t32 - p32).astype(g.dtype)
        if residual is None:
            return delta, None
        applied = _apply_leaf(path, p, delta).astype(jnp.float32)
        new_r = jnp.where(applied == exact, 0.0, exact - applied)  # inf == inf: nothing left
        return delta, _encode(new_r, applied, residual, p.dtype, stochastic_rounding)

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, CompensationState)
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params)
        inner, inner_state = inner_update(updates, state.inner_state, params, **extra_args)
        treedef = jax.tree.structure(params)
        path_leaves = jax.tree_util.tree_leaves_with_path(params)
        grads = treedef.flatten_up_to(updates)
        inner_leaves = treedef.flatten_up_to(inner)
        residuals = treedef.flatten_up_to(state.residual)
        new_key = state.key
        leaf_keys: list[Any] = [None] * len(path_leaves)
        if stochastic_rounding:
            next_key, sample_key = jax.random.split(jax.random.wrap_key_data(state.key))
            leaf_keys = list(jax.random.split(sample_key, len(path_leaves)))
            new_key = jax.random.key_data(next_key)
        out, new_residuals = [], []
        for (path, p), g, u, r, k in zip(
            path_leaves, grads, inner_leaves, residuals, leaf_keys, strict=True
        ):
            if u is None or not _narrow(jnp.result_type(p)):
                out.append(u)
                new_residuals.append(r)
                continue
            delta, new_r = step(path, g, u, jnp.asarray(p), r, k)
            out.append(delta)
            new_residuals.append(new_r)
        new_state = CompensationState(
            inner_state=inner_state,
            residual=treedef.unflatten(new_residuals),
            key=new_key,
        )
        return treedef.unflatten(out), new_state

    return register_wrapper(GradientTransformation(init, update), tx)


__all__ = ["CompensationState", "with_compensation"]
