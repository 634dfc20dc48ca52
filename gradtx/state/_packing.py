"""Packed 8-bit states: many leaves of one moment buffer through one codec (internal).

Every leaf's blocks are consecutive runs of its row-major values: `_row_block` values each, or
`block_size` values with a short last block. So a leaf is a matrix of one block per row (the
short last block padded), and the leaves whose blocks have the same width stack into one
matrix. The codec then runs once per width on the stack, under one NaN/inf `lax.cond` for
all of them: the per-value arithmetic is the per-leaf path's, operation for operation, and
the padding is zeroed before the block maxima, so codes, scales and decoded values are
bit-identical to `encode` / `decode` leaf by leaf (a leaf sent down the exact path only
because another leaf holds a NaN gets the same codes there: that path differs only at
non-finite values).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._blocks import _blocks, _halving_max, _row_block, _scale_factors
from ._quantize import QuantizedArray, _codes, _decoded


def _rows(shape: tuple[int, ...], block_size: int) -> tuple[int, int]:
    """`(width, rows)`: a leaf of `shape` as one block per row."""
    n = math.prod(shape)
    b = _row_block(shape, block_size)
    return (b, n // b) if b else (block_size, _blocks(n, block_size))


def _from_rows(m: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    flat = m.reshape(-1)
    n = math.prod(shape)
    return (flat[:n] if flat.size != n else flat).reshape(shape)


@dataclasses.dataclass(frozen=True)
class Packing:
    """How leaves of `shapes` stack into one matrix per block width: `groups` holds, per width,
    `(leaf index, first row, rows)` for each of its leaves. Elementwise arithmetic on the
    stacked matrices is the per-leaf arithmetic; `unpack` gives back each leaf's part."""

    shapes: tuple[tuple[int, ...], ...]
    block_size: int
    groups: tuple[tuple[int, tuple[tuple[int, int, int], ...]], ...]

    @classmethod
    def of(cls, shapes: list[tuple[int, ...]], block_size: int) -> Packing:
        groups: dict[int, list[tuple[int, int, int]]] = {}
        offsets: dict[int, int] = {}
        for i, shape in enumerate(shapes):
            width, rows = _rows(shape, block_size)
            groups.setdefault(width, []).append((i, offsets.get(width, 0), rows))
            offsets[width] = offsets.get(width, 0) + rows
        packed = tuple((w, tuple(members)) for w, members in sorted(groups.items()))
        return cls(tuple(tuple(s) for s in shapes), block_size, packed)

    def pack(self, xs: list[Any]) -> list[jax.Array]:
        """The stacked matrices of per-leaf arrays `xs` (padding: zeros). One flat
        concatenation per width (the pads are operands of it), which XLA makes one kernel."""
        mats = []
        for width, members in self.groups:
            parts = []
            for i, _, rows in members:
                flat = xs[i].reshape(-1)
                parts.append(flat)
                if rows * width != flat.size:
                    parts.append(jnp.zeros(rows * width - flat.size, flat.dtype))
            total = sum(rows for _, _, rows in members)
            mats.append(jnp.concatenate(parts).reshape(total, width))
        return mats

    def _cut(self, mats: list[jax.Array]) -> list[Any]:
        """Each leaf's rows of the stacked `mats` (codes, values) or vectors (scales)."""
        out: list[Any] = [None] * len(self.shapes)
        for (_, members), m in zip(self.groups, mats, strict=True):
            for i, start, rows in members:
                out[i] = m[start : start + rows]
        return out

    def unpack(self, mats: list[jax.Array]) -> list[jax.Array]:
        """Each leaf's part of the stacked matrices `mats`, in its shape."""
        parts = self._cut(mats)
        return [_from_rows(p, shape) for p, shape in zip(parts, self.shapes, strict=True)]

    def _valid(self, k: int) -> jax.Array | None:
        """1.0 at the real values of group `k`, 0.0 at its padding (None: no padding), with
        arithmetic only (`clip(length - column, 0, 1)`)."""
        width, members = self.groups[k]
        lengths = np.full(sum(rows for _, _, rows in members), width, np.float32)
        for i, start, rows in members:
            lengths[start + rows - 1] = math.prod(self.shapes[i]) - (rows - 1) * width
        if np.all(lengths == width):
            return None
        column = jax.lax.broadcasted_iota(jnp.float32, (lengths.size, width), 1)
        return jnp.clip(jnp.asarray(lengths)[:, None] - column, 0.0, 1.0)

    def encode(self, mats: list[jax.Array], signed: bool) -> list[tuple[jax.Array, jax.Array]]:
        """`(codes, scales)` of each stacked matrix: `encode`'s codec, one `lax.cond` for all."""
        xs = []
        for k, m in enumerate(mats):
            valid = self._valid(k)
            m = m.astype(jnp.float32) if valid is None else m.astype(jnp.float32) * valid
            xs.append(m if signed else jnp.sqrt(jnp.maximum(m, 0.0)))
        raws = [_halving_max(jnp.abs(x)) for x in xs]

        def fast(_):
            out = []
            for x, raw in zip(xs, raws, strict=True):
                pre, inv = _scale_factors(raw)
                out.append((_codes(x, pre[:, None], inv[:, None], signed), raw))
            return out

        def exact(_):
            out = []
            for x in xs:
                finite = jnp.isfinite(x)
                scale = _halving_max(jnp.abs(jnp.where(finite, x, 0.0)))
                pre, inv = _scale_factors(scale)
                out.append((_codes(x, pre[:, None], inv[:, None], signed, finite), scale))
            return out

        finite = jnp.all(jnp.stack([jnp.isfinite(jnp.sum(raw)) for raw in raws]))
        return jax.lax.cond(finite, fast, exact, None)

    def decode(self, packed: list[tuple[jax.Array, jax.Array]], signed: bool) -> list[jax.Array]:
        """The float32 matrices that stacked `(codes, scales)` stand for (`decode`'s values)."""
        return [_decoded(codes, scale[:, None], signed) for codes, scale in packed]

    def buffers(
        self, packed: list[tuple[jax.Array, jax.Array]], signed: bool
    ) -> list[QuantizedArray]:
        """Each leaf's `QuantizedArray` (its codes and scales) cut from stacked ones."""
        codes = self._cut([c for c, _ in packed])
        scales = self._cut([s for _, s in packed])
        return [
            QuantizedArray(_from_rows(c, shape), s, shape, self.block_size, signed)
            for c, s, shape in zip(codes, scales, self.shapes, strict=True)
        ]

    def read(self, qs: list[QuantizedArray]) -> list[jax.Array]:
        """The float32 stacked matrices that per-leaf buffers `qs` (laid out as `self`) hold."""
        return self.decode(self.stack(qs), qs[0].signed)

    def store(
        self, mats: list[jax.Array], qs: list[QuantizedArray]
    ) -> tuple[list[QuantizedArray], list[jax.Array]]:
        """`(new buffers, values)`: stacked `mats` encoded once as the new values of per-leaf
        buffers `qs` (their code), cut into each leaf's buffer, and the float32 stacked
        matrices they now hold (packed `_numerics.stored`)."""
        signed = qs[0].signed
        packed = self.encode(mats, signed)
        return self.buffers(packed, signed), self.decode(packed, signed)

    def stack(self, qs: list[QuantizedArray]) -> list[tuple[jax.Array, jax.Array]]:
        """Stacked `(codes, scales)` of per-leaf buffers `qs` (laid out as `self`)."""
        codes = self.pack([q.codes for q in qs])
        scales = [
            jnp.concatenate([qs[i].scale for i, _, _ in members]) for _, members in self.groups
        ]
        return list(zip(codes, scales, strict=True))
