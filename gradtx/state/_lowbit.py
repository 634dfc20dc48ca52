r"""The arithmetic codecs of quantized state buffers: companded 8-bit and 4-bit (internal).

Each codec maps a float32 buffer to integer codes and float32 scales, and back. All of them
round to the nearest level, keep a NaN or an infinity visible (one code decodes to NaN; finite
values stay finite) and compute their scales afresh from the value they store. `_quantize`
holds `QuantizedArray` and the dynamic-table 8-bit codec; this module the others:

- `"sqrt8"`: 8-bit, blocks as the dynamic codec's (`_blocks`), the square-root (power 2)
  companding map. Signed (first moments): code :math:`c \in [-127, 127]` stands for
  :math:`\mathrm{sign}(c)\,(c/127)^2 A_b`, -128 is NaN. Unsigned (second moments): it stores
  :math:`r = \sqrt v` like the dynamic codec, code :math:`c \in [0, 254]` stands for
  :math:`r = (c/254)^2 A_b` (so :math:`v = (c/254)^4 A_b^2`), 255 is NaN, and a positive value
  never rounds to 0. No table, no transcendental: a `sqrt` to encode, products to decode.
- `"dynamic4"`: 4-bit signed, the dynamic-exponent map of Li et al. for first moments: the
  magnitudes 0, 0.0325, 0.0775 (decade :math:`10^{-1}`), 0.2125, 0.4375, 0.6625, 0.8875
  (decade 1) and 1, times the block's largest magnitude; blocks of 128 by default. Code
  :math:`c \in [-7, 7]` is stored as the nibble :math:`c + 8`; nibble 0 is NaN.
- `"linear4"`: 4-bit unsigned, for second moments: the zero-free linear map
  :math:`v = (k + 1) / 15 \cdot n`, :math:`k \in [0, 14]` (nibble 15 is NaN). On a leaf of two
  or more dimensions whose matrices are large enough that rows and columns need fewer scales
  than blocks (`rank1`: :math:`(R + C) B \le R C`, from about 256 x 256 at blocks of 128) the
  normaliser is rank-1 (Li et al.): :math:`n_{ij} = \min(R_i, C_j)` with :math:`R` the largest
  value of each row (last axis) and :math:`C` of each column, per matrix of the last two axes
  (leading axes are batch axes); the scales hold :math:`R` then :math:`C`. Elsewhere (vectors,
  small matrices) it is the block's largest value. Zero is no level: a second moment never
  decodes to 0 under a non-zero normaliser, so Adam never divides a first moment by
  :math:`\epsilon` alone.

4-bit codes are packed two per byte along the last axis (`uint8`, the low nibble first; an odd
last axis gets one padding nibble), so a buffer of shape `(..., n)` has codes of shape
`(..., ceil(n / 2))`.

Scales come from the new value itself (a block maximum, or row and column maxima): the new
moment is written out once (`optimization_barrier`) and the maxima read from it, which XLA:CPU
runs ~1.7x faster than recomputing the moment inside the reduction (benchmarks/README.md,
"Training state in 4 bits").

References: Li, Chen, Zhu, "Memory Efficient Optimizers with 4-bit States" (NeurIPS 2023);
Dettmers et al., "8-bit Optimizers via Block-wise Quantization" (ICLR 2022).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._blocks import _num_blocks, _per_value, _row_block, _scale_factors

CODECS = ("dynamic", "sqrt8", "dynamic4", "linear4")
FOUR_BIT = ("dynamic4", "linear4")

DYNAMIC4_MAGNITUDES = np.array(
    [0.0, 0.0325, 0.0775, 0.2125, 0.4375, 0.6625, 0.8875, 1.0], np.float32
)
_DYNAMIC4_THRESHOLDS = (DYNAMIC4_MAGNITUDES[:-1] + DYNAMIC4_MAGNITUDES[1:]) / 2.0


def rank1(shape: tuple[int, ...], codec: str, block_size: int) -> bool:
    r"""Whether a `codec` buffer of `shape` has row and column scales (else block scales): a
    `linear4` buffer of two or more dimensions whose matrices hold fewer scales that way than
    in blocks, :math:`(R + C) \cdot B \le R C` (a 2048 x 2048 matrix: 0.004 bytes of scale
    per value against 0.031; a 64 x 64 one would need 0.125 and takes blocks)."""
    if codec != "linear4" or len(shape) < 2:
        return False
    r, c = shape[-2], shape[-1]
    return (r + c) * block_size <= r * c


def code_shape(shape: tuple[int, ...], codec: str) -> tuple[int, ...]:
    """The shape of the codes of a buffer of `shape`: its own, halved along the last axis for
    the 4-bit codecs."""
    if codec in FOUR_BIT and shape:
        return (*shape[:-1], -(-shape[-1] // 2))
    return tuple(shape)


def num_scales(shape: tuple[int, ...], block_size: int, codec: str) -> int:
    if rank1(shape, codec, block_size):
        return math.prod(shape[:-2]) * (shape[-2] + shape[-1])
    return _num_blocks(tuple(shape), block_size)


def code_dtype(codec: str, signed: bool) -> Any:
    if codec in FOUR_BIT:
        return jnp.uint8
    return jnp.int8 if signed else jnp.uint8


# --------------------------------------------------------------------------------------------
# Scales
# --------------------------------------------------------------------------------------------


def _magnitude(x: jax.Array) -> jax.Array:
    """`|x|` with NaN as +inf, for `max` reductions: XLA:CPU's reductions of 4096 values or more
    drop a NaN (`jnp.max` of `[nan, 1, ...]` gives 1), and a scale that hides a NaN would let
    the fast path code it as a number; +inf survives every reduction."""
    return jnp.where(jnp.isnan(x), jnp.inf, jnp.abs(x))


def _rank1_maxima(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`(R, C)`: the largest magnitude of each row and each column of every matrix of the last
    two axes (inf where a NaN or an inf is)."""
    mag = _magnitude(x)
    return jnp.max(mag, axis=-1), jnp.max(mag, axis=-2)


def _block_max(x: jax.Array, block_size: int) -> jax.Array:
    """Largest magnitude of each block of `x` (the layout of `_blocks`), by a `max` reduction
    of the written-out value (unlike `_blocks._block_absmax`, which halves inside the
    producer's fusion: with the value written out first, the reduction is the faster); inf
    where a block holds a NaN or an inf."""
    shape = tuple(x.shape)
    mag = _magnitude(x)
    b = _row_block(shape, block_size)
    if b:
        return jnp.max(mag.reshape(-1, b), axis=1)
    mag = mag.reshape(-1)
    whole = mag.size // block_size
    parts = []
    if whole:
        parts.append(jnp.max(mag[: whole * block_size].reshape(whole, block_size), axis=1))
    if mag.size % block_size or not mag.size:
        parts.append(jnp.max(mag[whole * block_size :], initial=0.0)[None])
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts)


def _scales(x: jax.Array, block_size: int, codec: str) -> jax.Array:
    """The scale vector of stored value `x` (`x` already non-negative for unsigned codes)."""
    if rank1(tuple(x.shape), codec, block_size):
        rows, cols = _rank1_maxima(x)
        return jnp.concatenate([rows.reshape(-1), cols.reshape(-1)])
    return _block_max(x, block_size)


def _normaliser(scale: jax.Array, shape: tuple[int, ...], block_size: int, codec: str):
    """Each value's normaliser in `shape`: its block's scale, or :math:`\\min(R_i, C_j)`."""
    if rank1(shape, codec, block_size):
        batch = shape[:-2]
        rows_n = math.prod(batch) * shape[-2]
        rows = scale[:rows_n].reshape(*batch, shape[-2], 1)
        cols = scale[rows_n:].reshape(*batch, 1, shape[-1])
        return jnp.minimum(rows, cols)
    return _per_value(scale, shape, block_size)


def _rank1_inverse(scale: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    r"""Each value's :math:`1 / \min(R_i, C_j)` = :math:`\max(1 / R_i, 1 / C_j)`: inverses of
    the row and column maxima (0 for a 0, whose row or column holds only zeros), so the
    per-value work is a `max` and a product, not a division. Every maximum of a matrix is
    first multiplied by one power of two, `2^-64` where the matrix's largest exceeds `2^100`,
    so that no inverse is a subnormal that the CPU flushes to 0; the same factor goes on the
    values (`_scale_factors` does this per block)."""
    batch = shape[:-2]
    rows_n = math.prod(batch) * shape[-2]
    rows = scale[:rows_n].reshape(*batch, shape[-2], 1)
    cols = scale[rows_n:].reshape(*batch, 1, shape[-1])
    top = jnp.max(rows, axis=(-2, -1), keepdims=True)
    pre = jnp.where(top > 2.0**100, jnp.float32(2.0**-64), jnp.float32(1.0))
    inv_rows = jnp.where(rows > 0, 1.0 / jnp.where(rows > 0, rows * pre, 1.0), 0.0)
    inv_cols = jnp.where(cols > 0, 1.0 / jnp.where(cols > 0, cols * pre, 1.0), 0.0)
    return pre * jnp.maximum(inv_rows, inv_cols)


# --------------------------------------------------------------------------------------------
# Level arithmetic: `y` (value over its normaliser, finite) -> code, code -> level
# --------------------------------------------------------------------------------------------


_HUGE = np.float32(2.0**60)


def _above(a: jax.Array, t: Any) -> jax.Array:
    """1.0 where `a > t`, else 0.0, for `a` and `t` in [0, 1] with `t` a normal number: any
    difference is then at least 2^-60, so the scaled difference clipped to [0, 1] is 0 or 1.
    `min` / `max` rather than a compare or `sign`, which XLA:CPU lowers to selects that take
    several times as long (the 4-bit encoder was ~3x slower with them)."""
    return jnp.clip((a - t) * _HUGE, 0.0, 1.0)


def _levels(y: jax.Array, codec: str, signed: bool) -> jax.Array:
    """The code (as float32) of finite `y` in [-1, 1]; for the 4-bit codecs, the nibble."""
    a = jnp.minimum(jnp.abs(y), 1.0)
    if codec == "sqrt8":
        if signed:
            return jnp.copysign(jnp.round(127.0 * jnp.sqrt(a)), y)
        # a positive second moment never rounds to 0: the update divides by its root
        return jnp.maximum(jnp.round(254.0 * jnp.sqrt(a)), _above(a, 0.0))
    if codec == "dynamic4":
        # how many midpoints lie below `a` (the nearest magnitude): the three below 0.2125 one
        # by one, the evenly spaced ones between 0.2125 and 0.8875 by rounding, and 0.94375
        t = _DYNAMIC4_THRESHOLDS
        k = _above(a, t[0]) + _above(a, t[1]) + _above(a, t[2]) + _above(a, t[6])
        k = k + jnp.clip(jnp.round((a - np.float32(0.2125)) * np.float32(1 / 0.225)), 0.0, 3.0)
        return jnp.copysign(k, y) + 8.0
    # linear4: the nearest of (k + 1) / 15, k = 0..14 (0 rounds up to the first level)
    return jnp.clip(jnp.round(15.0 * a) - 1.0, 0.0, 14.0)


def _nan_code(codec: str, signed: bool) -> float:
    if codec == "sqrt8":
        return -128.0 if signed else 255.0
    return 0.0 if codec == "dynamic4" else 15.0


def _dynamic4_level(c: jax.Array) -> jax.Array:
    """The level of nibble `c` (code `c - 8`), NaN at nibble 0, with arithmetic only: the
    magnitude is piecewise linear in the code's magnitude `k`, 1 less a sum of clipped ramps
    counted from the top (so the top level is exactly 1 and a block's largest value decodes to
    its scale; the others are within 1e-7 of `DYNAMIC4_MAGNITUDES`, and 0 is 0). No gather:
    a lookup per value takes XLA:CPU longer than these few `min` / `max`."""
    code = c - 8.0
    k = jnp.abs(code)
    m = DYNAMIC4_MAGNITUDES
    level = jnp.ones_like(k)
    for start, width in ((6, 1), (3, 3), (2, 1), (1, 1), (0, 1)):
        step = (m[start + width] - m[start]) / width
        level = level - np.float32(step) * jnp.clip(start + width - k, 0.0, float(width))
    level = level * jnp.minimum(k, 1.0)
    return jnp.copysign(level, code) + jnp.sqrt(c - 0.5) * 0.0


def _level_values(c: jax.Array, codec: str, signed: bool) -> jax.Array:
    """The level of float code `c` (before the normaliser; unsigned `sqrt8`: before squaring),
    NaN at the NaN code (`sqrt` of a negative number, times 0)."""
    if codec == "sqrt8":
        if signed:
            t = c / 127.0
            return t * jnp.abs(t) + jnp.sqrt(127.5 - jnp.abs(c)) * 0.0
        t = jnp.minimum(c, 254.0) / 254.0
        return t * t + jnp.sqrt(254.5 - c) * 0.0
    if codec == "dynamic4":
        return _dynamic4_level(c)
    return (jnp.minimum(c, 14.0) + 1.0) / 15.0 + jnp.sqrt(14.5 - c) * 0.0


# --------------------------------------------------------------------------------------------
# Nibble packing
# --------------------------------------------------------------------------------------------


def _pack_nibbles(k: jax.Array) -> jax.Array:
    """`uint8` nibbles (0..15) -> two per byte along the last axis: byte `j` holds value `j`
    (low nibble) and value `j + h` (high nibble), `h = ceil(n / 2)`; an odd axis pads the last
    high nibble with 0. Two contiguous halves rather than adjacent pairs: XLA:CPU runs the
    halves as one vectorised pass, where pairs take a strided gather and a scatter."""
    if k.ndim == 0:
        k = k.reshape(1)
    n = k.shape[-1]
    h = -(-n // 2)
    lo, hi = k[..., :h], k[..., h:]
    if n % 2:
        hi = jnp.concatenate([hi, jnp.zeros((*k.shape[:-1], 1), k.dtype)], axis=-1)
    return jnp.bitwise_or(lo, jnp.left_shift(hi, jnp.uint8(4)))


def _unpack_nibbles(codes: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """The float nibbles of packed `codes` (`_pack_nibbles`), in `shape`."""
    lo = jnp.bitwise_and(codes, jnp.uint8(15))
    hi = jnp.right_shift(codes, jnp.uint8(4))
    n = shape[-1] if shape else 1
    both = jnp.concatenate([lo, hi[..., : n - lo.shape[-1]]], axis=-1)
    return both.reshape(shape).astype(jnp.float32)


# --------------------------------------------------------------------------------------------
# Encode / decode
# --------------------------------------------------------------------------------------------


def _stored(x: jax.Array, codec: str, signed: bool) -> jax.Array:
    """What the codes hold: the value, or :math:`\\sqrt{\\max(v, 0)}` (unsigned `sqrt8`), or
    :math:`\\max(v, 0)` (`linear4`)."""
    if signed:
        return x
    x = jnp.maximum(x, 0.0)  # NaN stays NaN
    return jnp.sqrt(x) if codec == "sqrt8" else x


def encode(x: Any, *, block_size: int, signed: bool, codec: str) -> tuple[jax.Array, jax.Array]:
    """`(codes, scales)` of float array `x` under `codec`. A leaf with a NaN or an infinity
    takes an exact path (under `lax.cond`) that codes those values as NaN and scales the rest of
    their blocks (rows, columns) as if they were 0."""
    x = jnp.asarray(x).astype(jnp.float32)
    shape = tuple(x.shape)
    # written out once: the maxima and the codes read it (see the module docstring)
    s = jax.lax.optimization_barrier(_stored(x, codec, signed))
    raw = _scales(s, block_size, codec)  # inf where a block holds a NaN or an inf

    def codes_with(scale, finite=None):
        if rank1(shape, codec, block_size):
            y = s * _rank1_inverse(scale, shape)
        else:
            pre, inv = _scale_factors(scale)
            y = s * _per_value(pre, shape, block_size) * _per_value(inv, shape, block_size)
        if finite is not None:
            y = jnp.where(finite, y, 0.0)
        k = _levels(y, codec, signed)
        if finite is not None:
            k = jnp.where(finite, k, _nan_code(codec, signed))
        # one byte per code leaving `cond` (a float code would be written out at 4 bytes per
        # value and read back); 4-bit codes are packed after it: packing in the kernel that
        # computes the levels took XLA:CPU ~5x as long as the two kernels
        return k.astype(jnp.uint8 if codec in FOUR_BIT else code_dtype(codec, signed))

    def fast(_):
        return codes_with(raw), raw

    def exact(_):
        finite = jnp.isfinite(s)
        scale = _scales(jnp.where(finite, s, 0.0), block_size, codec)
        return codes_with(scale, finite), scale

    codes, scale = jax.lax.cond(jnp.isfinite(jnp.sum(raw)), fast, exact, None)
    return (_pack_nibbles(codes) if codec in FOUR_BIT else codes), scale


def decode(
    codes: jax.Array,
    scale: jax.Array,
    shape: tuple[int, ...],
    block_size: int,
    signed: bool,
    codec: str,
) -> jax.Array:
    """The float32 array that `(codes, scale)` stand for, NaN at the NaN code."""
    if codec in FOUR_BIT:
        c = _unpack_nibbles(codes, shape)
    else:
        c = codes.astype(jnp.float32)
    level = _level_values(c, codec, signed)
    value = level * _normaliser(scale, shape, block_size, codec)
    if codec == "sqrt8" and not signed:
        return value * value
    return value


def error_bound(
    scale: jax.Array, shape: tuple[int, ...], block_size: int, signed: bool, codec: str
) -> jax.Array:
    """The largest `|decode(encode(x)) - x|` of each value of a buffer with these scales: half
    the widest gap between the codec's levels times the normaliser (for `linear4` the first
    level, 1/15, which is also what a 0 decodes to; for the unsigned `sqrt8` code the bound on
    :math:`\\sqrt v` carried to :math:`v`)."""
    n = _normaliser(scale, shape, block_size, codec)
    if codec == "sqrt8":
        top = 127.0 if signed else 254.0
        half = 0.5 * (1.0 - ((top - 1.0) / top) ** 2)
        return half * n if signed else (2.0 * half + half * half) * n * n
    if codec == "dynamic4":
        return float(np.max(np.diff(DYNAMIC4_MAGNITUDES)) / 2.0) * n
    return n / 15.0
