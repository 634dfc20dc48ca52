r"""Block-wise dynamic 8-bit quantization of optimizer state buffers (internal codec).

A buffer is cut into blocks of about `block_size` values: along its last axis when that has a
divisor in [block_size / 2, block_size] (blocks follow the rows, and a block's scale reaches its
values by a plain broadcast), else `block_size` consecutive values of the flattened buffer (the
last block may be short). Each block stores its largest finite magnitude :math:`A_b` as a float32
*scale*, and each value :math:`x` the 8-bit code :math:`c` of the entry of a fixed table
:math:`T` nearest to :math:`x / A_b`; decoding gives :math:`T[c]\,A_b`. The codes keep the
buffer's shape (so a sharded parameter's moments are sharded the same way), the scales are a
vector with one entry per block.

The table is the *dynamic* (non-linear) data type of Dettmers et al.: a value
:math:`10^{-e} f` with a decimal exponent :math:`e` and a linear fraction :math:`f`, where smaller
exponents get fewer fraction steps, so small and large magnitudes both keep a bounded relative
error. Per decade :math:`10^{d-6} [0.1, 1]` the table holds the midpoints of :math:`2^d` (signed)
or :math:`2^{d+1}` (unsigned) equal steps, plus 0 and 1. Changes from the paper's tables:

- one code is not a number, so that a NaN or an infinity in a buffer stays visible (decodes to
  NaN) instead of poisoning the block's scale; finite values never become non-finite
  (:math:`|T| \le 1`);
- signed (`int8`, first moments): 0, :math:`\pm 1` and decades 1..6 of each sign (127 values per
  sign, symmetric), code :math:`c \in [-127, 127]` with `sign(c) = sign(value)`, -128 = NaN;
- unsigned (`uint8`, second moments): 0, 1, one value in decade 0 and decades 1..6 (255 values),
  codes 0..254 in increasing order, 255 = NaN. It stores :math:`\sqrt{v}`, not :math:`v`
  (decoded values are squared), which squares the code's dynamic range (12 decades of
  :math:`v`), and a positive value never rounds to 0: Adam-type rules divide by
  :math:`\sqrt{v}`, and a second moment rounded to 0 under a non-zero first moment gives a step
  of :math:`m/\epsilon` (seen as NaN after 200 steps of an 8-bit Adam without these two rules).

Rounding is to the nearest table entry, so the error of a value is at most half the gap between
the two entries around :math:`x / A_b`, times :math:`A_b`: at most :math:`0.45 \cdot 10^{d-6} /
2^{d}` in decade :math:`d` of the signed code (0.7% of :math:`A_b` near 1), half that for the
unsigned one (on :math:`\sqrt{v}`). Encoding is arithmetic only (`log10`, `exp`, `round`,
`min`/`max`, `sign`: no search, no compare or select, which XLA:CPU runs slowly); a leaf holding
a NaN or an infinity is encoded by an exact compare-based path instead. Decoding looks each code
up in the 256 values that the same arithmetic gives.

Reference: Dettmers, Lewis, Shleifer, Zettlemoyer, "8-bit Optimizers via Block-wise
Quantization" (ICLR 2022); Li et al., "Memory Efficient Optimizers with 4-bit States" (NeurIPS
2023) for the zero-point problem of the second moment.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np

from .._base._typing import DType
from . import _lowbit
from ._blocks import (
    _block_absmax,
    _per_value,
    _scale_factors,
)

DEFAULT_BLOCK_SIZE = 2048  # the paper's
DEFAULT_MIN_SIZE = 4096  # smaller leaves stay in full precision (bitsandbytes' min_8bit_size)


def _decade_values(count: int, decade: int) -> list[float]:
    edges = np.linspace(0.1, 1.0, count + 1)
    return list(10.0 ** (decade - 6) * (edges[:-1] + edges[1:]) / 2.0)


def _build_table(signed: bool) -> np.ndarray:
    """The finite table entries in increasing order (255 of them)."""
    if signed:
        positive = [v for d in range(1, 7) for v in _decade_values(2**d, d)] + [1.0]
        values = [-v for v in positive] + [0.0] + positive
    else:
        values = [0.0, *_decade_values(1, 0)]
        values += [v for d in range(1, 7) for v in _decade_values(2 ** (d + 1), d)] + [1.0]
    table = np.array(sorted(values), np.float64)
    assert table.size == 255
    assert np.all(np.diff(table) > 0)
    return table.astype(np.float32)


SIGNED_TABLE = _build_table(True)  # code c in [-127, 127] <-> SIGNED_TABLE[c + 127]
UNSIGNED_TABLE = _build_table(False)  # code c in [0, 254] <-> UNSIGNED_TABLE[c]
SIGNED_NAN_CODE = -128
UNSIGNED_NAN_CODE = 255


def _thresholds(table: np.ndarray) -> np.ndarray:
    return ((table[:-1].astype(np.float64) + table[1:]) / 2.0).astype(np.float32)


def decode_table(signed: bool) -> np.ndarray:
    """The 256 decoded values indexed by the code's byte (`code + 128` signed, `code` unsigned),
    NaN at the NaN code."""
    if signed:
        return np.concatenate([[np.nan], SIGNED_TABLE]).astype(np.float32)
    return np.concatenate([UNSIGNED_TABLE, [np.nan]]).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class QuantizedDtype:
    """The storage spec of a quantized state buffer: pass it as `mu_dtype` / `nu_dtype` /
    `accumulator_dtype`. See `gradtx.quantized`."""

    block_size: int = DEFAULT_BLOCK_SIZE
    min_size: int = DEFAULT_MIN_SIZE
    signed: bool | None = None  # None: by role (first moments signed, second moments unsigned)
    pack_leaves: bool = True  # one encode for all leaves of a buffer, not one per leaf
    bits: int = 8
    mapping: str = "dynamic"  # 8 bits: "dynamic" or "sqrt"; 4 bits: "paper"

    def codec(self, signed: bool) -> str:
        """The codec of a buffer of this spec and role (`signed`: a first moment)."""
        if self.bits == 4:
            return "dynamic4" if signed else "linear4"
        return "sqrt8" if self.mapping == "sqrt" else "dynamic"

    def __repr__(self) -> str:
        extra = (
            ""
            if self.bits == 8 and self.mapping == "dynamic"
            else (f", bits={self.bits}, mapping={self.mapping!r}")
        )
        return (
            f"quantized(block_size={self.block_size}, min_size={self.min_size}, "
            f"signed={self.signed}, pack_leaves={self.pack_leaves}{extra})"
        )


MomentDType: TypeAlias = DType | QuantizedDtype
"""How a moment buffer is stored: a dtype (`jnp.bfloat16`, `"float32"`) or a storage spec such as
`gradtx.quantized()` (8-bit codes and block scales); a config gives a dtype name."""


def quantized(
    block_size: int | None = None,
    *,
    bits: int = 8,
    mapping: str | None = None,
    min_size: int = DEFAULT_MIN_SIZE,
    signed: bool | None = None,
    pack_leaves: bool = True,
) -> QuantizedDtype:
    r"""Block-wise 8-bit or 4-bit storage for optimizer state buffers (8-bit / 4-bit Adam, Lion,
    momentum).

    Use it where a moment dtype is accepted: `adam(lr, mu_dtype=quantized(),
    nu_dtype=quantized())`, `lion(lr, mu_dtype=quantized())`, `sgd(lr, momentum=0.9,
    accumulator_dtype=quantized())`, and every rule of the moment engine (adamw, adamax, amsgrad,
    yogi, radam, adabelief, eve, `bound_lr`, and `scale_by_adam` inside a LAMB chain). A parameter
    leaf with at least `min_size` real floating-point values gets a `QuantizedArray`: an 8-bit
    code per value (`int8` for first moments, `uint8` for second moments, which stores
    :math:`\sqrt v`) and a float32 scale (the largest finite magnitude) per block of about
    `block_size` values (along the last axis when it has a divisor in [block_size / 2,
    block_size], else consecutive values), :math:`\hat x = T[c]\,A_b`, with the dynamic
    (non-linear) code table :math:`T` of Dettmers et al. (see `gradtx/_quantize.py`). Smaller
    leaves stay float32. The rules compute in float32 and read the moments as stored, so the
    state alone determines the next update. The codes and scales are ordinary arrays in the
    state, so checkpoints store them bit-exactly; the codes keep the parameter's shape, so
    `state_sharding` gives them its spec. A NaN or an infinity in a moment decodes to NaN (it
    stays visible downstream); finite values stay finite.

    About 2 bytes per parameter for Adam's two moments (2.004 on a 16M-value leaf at the default
    block size), against 8 in float32 and 4 in bfloat16. A plain integer dtype
    (`mu_dtype=jnp.int8`) is rejected: it would truncate the moments.

    Other codecs (`gradtx/state/_lowbit.py`):

    - `mapping="sqrt"` (8 bits): the square-root companding map, :math:`\hat x =
      \mathrm{sign}(c)\,(c/127)^2 A_b` (second moments: :math:`\sqrt v = (c/254)^2 A_b`), blocks
      of 256: arithmetic only (no table, no `log` / `exp`), so the step costs less.
    - `bits=4`: two codes per byte (Li et al., "Memory Efficient Optimizers with 4-bit States").
      First moments: the 4-bit dynamic-exponent map (0, 0.0325, 0.0775, 0.2125, 0.4375, 0.6625,
      0.8875, 1 of the block's largest magnitude), blocks of 128. Second moments: a zero-free
      linear map, :math:`\hat v = (k+1)/15 \cdot n`, normalised rank-1 on matrices where rows
      and columns need fewer scales than blocks (:math:`(R + C) \cdot 128 \le R C`, e.g. from
      256 x 256; :math:`n_{ij} = \min(R_i, C_j)`, the largest value of row :math:`i` and of
      column :math:`j` of each matrix of the last two axes) and per block of 128 elsewhere.
      At most 1.0625 bytes per parameter for Adam's two moments (1.035 on large matrices).

    Every codec keeps NaN and infinity visible (they decode to NaN) and finite values finite;
    `gradtx.migrate` converts between float32, bf16 and every codec, and
    `gradtx.inspect_state` shows each buffer's decoded size and its error bound. Only the
    dynamic 8-bit codec packs leaves (`pack_leaves`); the others step leaf by leaf.

    Args:
      block_size: values per block, an int >= 16 (default: 2048 for the dynamic 8-bit codec, the
        paper's; 256 for `mapping="sqrt"`; 128 for 4 bits).
      bits: 8 (default) or 4.
      mapping: the 8-bit map, `"dynamic"` (default: the table of Dettmers et al.) or `"sqrt"`
        (square-root companding); 4 bits take the paper's maps (None or `"paper"`).
      min_size: leaves with fewer values stay float32, an int >= 0 (default 4096).
      signed: force the signed (True) or unsigned (False) code; None picks by role (first
        moments signed, non-negative second moments unsigned). The unsigned code clips
        negative values to 0.
      pack_leaves: step the quantized leaves of a moment rule together (default): their
        gradients and moments are stacked into one matrix per block width, so the compiled
        step holds one encoder, one decoder and one NaN/inf `lax.cond` per buffer instead of
        one per leaf (Adam on 200 leaves: ~17 s of CPU to build instead of ~72 s; float32
        Adam ~1 s; what still grows with the leaves is cutting the results back into each
        leaf's codes, scales and update). Codes, scales and decoded moments are bit-identical
        either way. The costs: the gradients and old codes are copied into the stacks and the
        results cut back out (a few more bytes moved per value), and under sharded `jit`
        stacking leaves of different shardings makes XLA gather them (the results and their
        shardings stay correct): pass False for states sharded across devices (ZeRO / FSDP).
        Packing needs both moments' specs to allow it (the Adam family) and applies to
        `lion`'s momentum and `sgd`'s momentum (`trace`) too. A tree with a single quantized
        leaf is not stacked.

    Returns:
      A `QuantizedDtype` spec.

    Reference: Dettmers et al., "8-bit Optimizers via Block-wise Quantization" (ICLR 2022).

    Example::

      tx = gradtx.adam(1e-3, mu_dtype=gradtx.quantized(), nu_dtype=gradtx.quantized())
    """
    if bits not in (8, 4) or isinstance(bits, bool):
        raise ValueError(f"quantized: bits must be 8 or 4, got {bits!r}")
    mappings = ("dynamic", "sqrt") if bits == 8 else ("paper",)
    mapping = mappings[0] if mapping is None else mapping
    if mapping not in mappings:
        raise ValueError(
            f"quantized: mapping must be one of {mappings} for {bits} bits, got {mapping!r}"
            + ("; 4-bit states use the paper's maps (pass mapping=None)" if bits == 4 else "")
        )
    if block_size is None:
        block_size = DEFAULT_BLOCK_SIZE if mapping == "dynamic" else 256 if bits == 8 else 128
    for name, value, low in (("block_size", block_size, 16), ("min_size", min_size, 0)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
            raise ValueError(f"quantized: {name} must be an integer >= {low}, got {value!r}")
    if signed is not None and not isinstance(signed, bool):
        raise ValueError(f"quantized: signed must be True, False or None, got {signed!r}")
    if not isinstance(pack_leaves, bool):
        raise ValueError(f"quantized: pack_leaves must be True or False, got {pack_leaves!r}")
    return QuantizedDtype(int(block_size), int(min_size), signed, pack_leaves, int(bits), mapping)


def is_quantized_dtype(dtype: Any) -> bool:
    return isinstance(dtype, QuantizedDtype)


@jax.tree_util.register_pytree_with_keys_class
class QuantizedArray:
    """A quantized buffer standing for a float32 array of `shape`: `codes` (8-bit codes in
    `shape`: int8 for the signed code, uint8 for the unsigned one; 4-bit codes two per uint8,
    the last axis halved) and `scale` (float32: one per block of `block_size` values, or the
    row then the column maxima of a rank-1 normalised 4-bit second moment). Both are ordinary
    arrays (pytree children); `shape`, `block_size`, `signed` and `codec` (`"dynamic"`, the
    table codec of `gradtx.quantized()`; `"sqrt8"`, `"dynamic4"`, `"linear4"`: see
    `_lowbit`) are static."""

    __slots__ = ("block_size", "codec", "codes", "scale", "shape", "signed")

    def __init__(
        self,
        codes: Any,
        scale: Any,
        shape: tuple[int, ...],
        block_size: int,
        signed: bool,
        codec: str = "dynamic",
    ):
        self.codes = codes
        self.scale = scale
        self.shape = tuple(shape)
        self.block_size = int(block_size)
        self.signed = bool(signed)
        self.codec = codec

    @property
    def bits(self) -> int:
        return 4 if self.codec in _lowbit.FOUR_BIT else 8

    @property
    def storage(self) -> str:
        """How the buffer is stored, in words: `"8-bit"`, `"8-bit sqrt"` or `"4-bit"`."""
        return {"dynamic": "8-bit", "sqrt8": "8-bit sqrt"}.get(self.codec, "4-bit")

    @property
    def dtype(self) -> jnp.dtype:
        """The dtype the buffer decodes to."""
        return jnp.dtype(jnp.float32)

    def tree_flatten_with_keys(self):
        keys = jax.tree_util.GetAttrKey
        children = ((keys("codes"), self.codes), (keys("scale"), self.scale))
        return children, (self.shape, self.block_size, self.signed, self.codec)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], children[1], *aux)

    def __repr__(self) -> str:
        code = "int8" if self.signed and self.bits == 8 else "uint8"
        codec = "" if self.codec == "dynamic" else f", codec={self.codec!r}"
        return (
            f"QuantizedArray(shape={self.shape}, codes={code}, block_size={self.block_size}{codec})"
        )


def is_quantized(x: Any) -> bool:
    return isinstance(x, QuantizedArray)


def wants_quantized(spec: QuantizedDtype, leaf: Any) -> bool:
    """Whether a parameter leaf gets a quantized buffer under `spec` (by its shape and dtype)."""
    dtype = jnp.dtype(getattr(leaf, "dtype", jnp.result_type(leaf)))
    size = math.prod(np.shape(leaf))
    return bool(jnp.issubdtype(dtype, jnp.floating)) and size >= max(spec.min_size, 1)


def _magnitudes(signed: bool) -> np.ndarray:
    """The non-negative table entries in increasing order: signed 0..127 (code = sign * index),
    unsigned 0..254 (code = index)."""
    return SIGNED_TABLE[127:] if signed else UNSIGNED_TABLE


def _magnitude_of(k: jax.Array, signed: bool) -> jax.Array:
    """The magnitude of entry `k` (float, 0 <= k <= top), with arithmetic only.

    XLA:CPU runs an elementwise compare or select ~10x slower than a multiply-add (measured:
    one `where` over 16M values 44 ms, a `maximum` 4 ms), so the decade is a `log2` of the index
    and the special entries come from `min`/`max`: no compare, no select, no gather."""
    if signed:  # decade d = 1..6 holds entries 2^d - 1 ... 2^(d+1) - 2
        d = jnp.floor(jnp.log2(k + 1.0) + 1e-3)
        n = jnp.exp2(d)
        start = n - 1.0
    else:  # decade 0 holds entry 1; decade d = 1..6 holds 2^(d+1) - 2 ... 2^(d+2) - 3
        d = jnp.floor(jnp.log2(k + 2.0) + 1e-3) - 1.0
        first = jnp.minimum(d, 1.0)  # 0 in decade 0, else 1
        n = jnp.maximum(jnp.exp2(d + 1.0) * first, 1.0)
        start = n - 2.0 * first
    value = _exp10(d - 6.0) * (0.1 + 0.9 * (k - start + 0.5) / n)
    # entry 0 is 0.0 (the formula's d = 0 value times 0); the top entry is 1.0 (its d = 7 value
    # exceeds 1)
    return jnp.minimum(value * jnp.minimum(k, 1.0), 1.0)


def _exp10(x: jax.Array) -> jax.Array:
    return jnp.exp(x * np.float32(np.log(10.0)))


def _nearest_fast(y: jax.Array, signed: bool) -> jax.Array:
    """Index (float) of the magnitude nearest to finite `y` in [0, 1], with arithmetic only:
    the decade from `log10`, the entry within it from the linear fraction, then the nearest of
    that entry and its two neighbours (at a decade's ends the neighbour is in the next or the
    previous decade, or it is 0 or 1). Indicators are `min`/`max` of integers: no compares."""
    lowest = 1.0 if signed else 0.0
    d = jnp.clip(jnp.floor(jnp.log10(jnp.maximum(y, 1e-30))) + 7.0, lowest, 6.0)
    # n (entries in the decade) and n_prev (in the one below) are powers of two: dividing by
    # them is multiplying by their inverses (`inv_n`, `inv_prev`), exactly. Written so because
    # XLA:CPU keeps a division by a `maximum(...)` a division: the unsigned code took 2-3x the
    # signed one's time for that.
    if signed:
        n, inv_n = jnp.exp2(d), jnp.exp2(-d)
        start = n - 1.0
        inv_prev = 2.0 * inv_n
    else:
        first = jnp.minimum(d, 1.0)  # 0 in decade 0 (one entry), else 1
        e = (d + 1.0) * first
        n, inv_n = jnp.exp2(e), jnp.exp2(-e)
        start = n - 2.0 * first
        # decade 0 has one entry, so n_prev = 1 in decade 1 (else n / 2); in decade 0 it is
        # unused (`above_lowest` is 0 there)
        inv_prev = 2.0 * inv_n + 0.5 * jnp.maximum(1.0 - jnp.abs(d - 1.0), 0.0)
    u = _exp10(d - 6.0)
    step = u * 0.9 * inv_n
    t = y * _exp10(6.0 - d)  # y within its decade: in [0.1, 1)
    j = jnp.clip(jnp.round((t - 0.1) * (n / np.float32(0.9)) - 0.5), 0.0, n - 1.0)
    v = u * 0.1 + (j + 0.5) * step
    at_first = jnp.maximum(1.0 - j, 0.0)  # j == 0
    at_last = jnp.maximum(j - n + 2.0, 0.0)  # j == n - 1
    above_lowest = jnp.minimum(d - lowest, 1.0)
    at_top = jnp.maximum(d - 5.0, 0.0)  # d == 6: the next entry is 1.0
    prev_last = u * 0.1 * (1.0 - 0.45 * inv_prev) * above_lowest  # 0.0 below the lowest decade
    next_first = (1.0 - at_top) * (u * 10.0) * (0.1 + 0.45 * (0.5 * inv_n)) + at_top
    below = (1.0 - at_first) * (v - step) + at_first * prev_last
    above = (1.0 - at_last) * (v + step) + at_last * next_first
    dist = jnp.abs(y - v)
    closer_below = jnp.maximum(jnp.sign(dist - jnp.abs(y - below)), 0.0)
    closer_above = jnp.maximum(jnp.sign(dist - jnp.abs(y - above)), 0.0)
    return start + j - closer_below + closer_above


def _fast_codes(y: jax.Array, signed: bool) -> jax.Array:
    """The codes of finite `y` = value / scale in [-1, 1] (up to rounding), arithmetic only."""
    k = _nearest_fast(jnp.minimum(jnp.abs(y), 1.0), signed)
    if signed:
        return (k * jnp.sign(y)).astype(jnp.int8)
    # a positive second moment never rounds to 0: the update divides by its root
    return jnp.maximum(k, jnp.sign(y)).astype(jnp.uint8)


def _codes(
    x: jax.Array, pre: jax.Array, inv: jax.Array, signed: bool, finite: jax.Array | None = None
) -> jax.Array:
    """The codes of `x` given each value's block factors (`_scale_factors`, broadcast to `x`);
    with a `finite` mask, the NaN code where it is False (the exact path)."""
    y = x * pre * inv
    if finite is None:
        return _fast_codes(y, signed)
    codes = _fast_codes(jnp.where(finite, y, 0.0), signed)
    nan_code = SIGNED_NAN_CODE if signed else UNSIGNED_NAN_CODE
    return jnp.where(finite, codes, jnp.asarray(nan_code, codes.dtype))


def encode(x: Any, *, block_size: int, signed: bool, codec: str = "dynamic") -> QuantizedArray:
    r"""Quantize `x` (any real float array) block by block. The codes have `x`'s shape; block `b`
    holds values `b * block_size` ... of `x` in row-major order. The unsigned code stores
    :math:`\sqrt{\max(x, 0)}` (see `decode`). Another `codec` than the dynamic table: see
    `_lowbit`.

    A leaf with a NaN or an infinity anywhere takes a slower exact path (under `lax.cond`), which
    codes those values as NaN and leaves the rest of their blocks as if they were 0."""
    x = jnp.asarray(x).astype(jnp.float32)
    shape = tuple(x.shape)
    if codec != "dynamic":
        codes, scale = _lowbit.encode(x, block_size=block_size, signed=signed, codec=codec)
        return QuantizedArray(codes, scale, shape, block_size, signed, codec)
    if not signed:
        x = jnp.sqrt(jnp.maximum(x, 0.0))  # NaN stays NaN, +inf stays +inf
    raw = _block_absmax(x, block_size)  # NaN or inf for a block holding one
    fast, exact = _encode_branches(shape, block_size, signed)
    codes, scale = jax.lax.cond(jnp.isfinite(jnp.sum(raw)), fast, exact, x, raw)
    return QuantizedArray(codes, scale, shape, block_size, signed)


@functools.cache
def _encode_branches(shape: tuple[int, ...], block_size: int, signed: bool) -> tuple:
    """`encode`'s two branches `(x, raw block maxima) -> (codes, scale)`, one pair per static
    layout: the same functions each call, so that an eager `encode` reuses its compiled `cond`
    (branches closing over `x` would be new functions, and a new compilation, every call)."""

    def codes_with(x, scale, finite=None):
        pre, inv = _scale_factors(scale)
        pre, inv = _per_value(pre, shape, block_size), _per_value(inv, shape, block_size)
        return _codes(x, pre, inv, signed, finite)

    def fast(x, raw):
        return codes_with(x, raw), raw

    def exact(x, raw):  # the same codes for the finite values, the NaN code for the others
        finite = jnp.isfinite(x)
        scale = _block_absmax(jnp.where(finite, x, 0.0), block_size)
        return codes_with(x, scale, finite), scale

    return fast, exact


def _values(codes: jax.Array, signed: bool) -> jax.Array:
    """`T[c]` (before the scale; unsigned: before squaring), NaN at the NaN code, with
    arithmetic only (see `_magnitude_of`)."""
    c = codes.astype(jnp.float32)
    if signed:
        mag, sign = jnp.abs(c), jnp.sign(c)
        # sqrt(127.5 - |c|) * 0 is 0, and NaN at the NaN code (|c| = 128)
        nan = jnp.sqrt(127.5 - mag) * 0.0
        return _magnitude_of(jnp.minimum(mag, 127.0), True) * sign + nan
    nan = jnp.sqrt(254.5 - c) * 0.0
    return _magnitude_of(jnp.minimum(c, 254.0), False) + nan


@functools.cache
def _value_table(signed: bool, platform: str) -> np.ndarray:
    """`_values` of all 256 codes, indexed by the code's byte (`code + 128` signed), computed
    once per backend by the same arithmetic (so a lookup equals computing it)."""
    del platform  # part of the cache key
    codes = np.arange(-128, 128) if signed else np.arange(256)
    with jax.ensure_compile_time_eval():
        dtype = jnp.int8 if signed else jnp.uint8
        return np.asarray(jax.jit(_values, static_argnums=1)(jnp.asarray(codes, dtype), signed))


def _decoded(codes: jax.Array, scale: jax.Array, signed: bool) -> jax.Array:
    """`T[c] * scale` (squared for the unsigned code), NaN at the NaN code; `scale` broadcast to
    `codes`. `T[c]` is a lookup in a 256-entry table (`_value_table`): on XLA:CPU half the time
    of computing it per value (16M codes: 24 ms against 46), with the same bits."""
    table = jnp.asarray(_value_table(signed, jax.default_backend()))
    index = codes.astype(jnp.int32) + 128 if signed else codes.astype(jnp.int32)
    value = jnp.take(table, index, mode="clip") * scale
    return value * value if not signed else value


def decode(q: QuantizedArray) -> jax.Array:
    """The float32 array `q` stands for: :math:`T[c] A_b`, squared for the unsigned code; NaN
    at the NaN code (another codec: `_lowbit.decode`)."""
    if q.codec != "dynamic":
        return _lowbit.decode(q.codes, q.scale, q.shape, q.block_size, q.signed, q.codec)
    return _decoded(q.codes, _per_value(q.scale, q.shape, q.block_size), q.signed)


#: `encode`, `decode` and `error_bound` as compiled programs (one per shape and codec), for code
#: outside a step (migrate, inspect_state), where the op-by-op codec would dispatch dozens of
#: small operations.
encode_compiled = jax.jit(encode, static_argnames=("block_size", "signed", "codec"))
decode_compiled = jax.jit(lambda q: decode(q))


def error_bound(q: QuantizedArray) -> jax.Array:
    r"""The largest `|decode(encode(x)) - x|` of each value of buffer `q` (in `q.shape`): half the
    widest gap between the codec's levels, times each value's scale (`_lowbit.error_bound`;
    the dynamic table's widest gap is at its top, and its unsigned code's bound on
    :math:`\sqrt v` is carried to :math:`v`)."""
    if q.codec != "dynamic":
        return _lowbit.error_bound(q.scale, q.shape, q.block_size, q.signed, q.codec)
    table = SIGNED_TABLE if q.signed else UNSIGNED_TABLE
    half = float(np.max(np.diff(table.astype(np.float64))) / 2.0)
    scale = _per_value(q.scale, q.shape, q.block_size)
    return half * scale if q.signed else (2.0 * half + half * half) * scale * scale


error_bound_compiled = jax.jit(lambda q: jnp.max(error_bound(q)))


def zeros(leaf: Any, spec: QuantizedDtype, signed: bool, fill_value: Any = 0.0) -> QuantizedArray:
    """A quantized buffer for parameter leaf `leaf` (array or `ShapeDtypeStruct`) holding
    `fill_value` everywhere."""
    shape = tuple(leaf.shape) if hasattr(leaf, "shape") else tuple(np.shape(leaf))
    codec = spec.codec(signed)
    value = None
    if not isinstance(fill_value, jax.core.Tracer) and np.ndim(fill_value) == 0:
        with np.errstate(over="ignore"):  # a value beyond float32 becomes inf, as in encode
            value = np.float32(fill_value)
    if value is None or not (value == 0 or np.finfo(np.float32).tiny <= abs(value) < np.inf):
        # traced, not a scalar, non-finite or denormal (which the CPU flushes in a block's
        # maximum): encoded as a whole
        full = jnp.full(shape, fill_value, jnp.float32)
        return encode(full, block_size=spec.block_size, signed=signed, codec=codec)
    # Every block (row, column) of a constant holds the same code and scale: those of a small
    # array of it, through one small compiled encoder (encoding the whole leaf op by op took
    # seconds).
    code, scale = _constant_code(value, block_size=spec.block_size, signed=signed, codec=codec)
    codes = jnp.full(_lowbit.code_shape(shape, codec), code, code.dtype)
    n = _lowbit.num_scales(shape, spec.block_size, codec)
    return QuantizedArray(
        codes, jnp.full((n,), scale, jnp.float32), shape, spec.block_size, signed, codec
    )


@functools.partial(jax.jit, static_argnames=("block_size", "signed", "codec"))
def _constant_code(value: jax.Array, *, block_size: int, signed: bool, codec: str) -> tuple:
    """`(code, scale)` of every block of an array filled with `value`: those of a two-value
    array (two, so that a 4-bit byte holds the code in both nibbles)."""
    q = encode(
        jnp.full((2,), value, jnp.float32), block_size=block_size, signed=signed, codec=codec
    )
    return q.codes[0], q.scale[0]


def state_buffer(leaf: Any, dtype: Any, *, signed: bool, fill_value: Any = 0.0) -> Any:
    """A state buffer for parameter leaf `leaf`: quantized under a `QuantizedDtype` spec (float32
    for leaves too small or not real), else a plain array of `dtype` (None: the leaf's)."""
    if is_quantized_dtype(dtype):
        if wants_quantized(dtype, leaf):
            spec_signed = signed if dtype.signed is None else dtype.signed
            return zeros(leaf, dtype, spec_signed, fill_value)
        leaf_dtype = jnp.dtype(getattr(leaf, "dtype", jnp.result_type(leaf)))
        dtype = jnp.float32 if jnp.issubdtype(leaf_dtype, jnp.floating) else leaf_dtype
    sharding = getattr(leaf, "sharding", None) if isinstance(leaf, jax.ShapeDtypeStruct) else None
    shape = tuple(leaf.shape) if hasattr(leaf, "shape") else np.shape(leaf)
    out_dtype = dtype or getattr(leaf, "dtype", jnp.result_type(leaf))
    if sharding is not None:
        return jnp.full(shape, fill_value, out_dtype, device=sharding)
    return jnp.full(shape, fill_value, out_dtype)


def buffers_like(tree: Any, dtype: Any, *, signed: bool, fill_value: Any = 0.0) -> Any:
    """`state_buffer` for every leaf of a params tree."""
    return jax.tree.map(
        lambda x: state_buffer(x, dtype, signed=signed, fill_value=fill_value), tree
    )


def as_leaves(tree: Any) -> Any:
    """`tree` with each `QuantizedArray` replaced by a `ShapeDtypeStruct` leaf (for structure
    checks against the params)."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype) if is_quantized(x) else x,
        tree,
        is_leaf=is_quantized,
    )


__all__ = ["MomentDType", "QuantizedArray", "QuantizedDtype", "decode", "encode", "quantized"]
