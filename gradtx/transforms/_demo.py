"""DeMo (decoupled momentum): each replica keeps its own momentum and shares only the largest
DCT coefficients of each chunk of it."""

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import (
    HyperparameterError,
    check_axis_name,
    check_in_range,
    check_int,
    check_non_negative,
    expect_state,
)
from .._base._introspect import register
from .._base._numerics import safe_increment, value_at, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation
from ..state._buffers import check_float_dtype
from ..tree import assert_same_structure

_HIGHEST = jax.lax.Precision.HIGHEST


class ScaleByDemoState(NamedTuple):
    """State of `scale_by_demo`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # this replica's momentum, less what it has transmitted
    bytes_sent: jax.Array  # float32: index and value bytes this replica all-gathered last step
    total_bytes_sent: jax.Array  # float32: the same, summed over all steps


def _report(state: Any) -> dict[str, jax.Array]:
    return {"bytes_sent": state.bytes_sent, "total_bytes_sent": state.total_bytes_sent}


def chunk_size(n: int, target: int) -> int:
    """The largest divisor of `n` that is at most `target` (the reference code's
    `_get_smaller_split`): an axis of 100 in chunks of 64 is split into chunks of 50, a prime
    length into chunks of 1."""
    return max(d for d in range(1, min(n, target) + 1) if n % d == 0)


def dct_matrix(n: int) -> np.ndarray:
    """The orthonormal DCT-II matrix :math:`D` (float64, `n x n`): :math:`X = D x` is
    `scipy.fft.dct(x, norm="ortho")`, and :math:`x = D^\\top X` its inverse."""
    k = np.arange(n)[:, None]
    i = np.arange(n)[None, :]
    d = np.sqrt(2.0 / n) * np.cos(np.pi * (2 * i + 1) * k / (2 * n))
    d[0] /= np.sqrt(2.0)
    return d


def index_dtype(coefficients: int) -> np.dtype:
    """The narrowest unsigned integer dtype that holds indices `0..coefficients-1` (uint8,
    uint16, else int32): the indices all-gathered per coefficient."""
    for dtype in (np.uint8, np.uint16):
        if coefficients - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int32)


class _Layout(NamedTuple):
    """How one leaf is cut into tiles: viewed as `(batch, rows, cols)` (a 1-D leaf as one row,
    a scalar as 1 x 1, leading axes of a higher-rank leaf as the batch), each tile `r x c`."""

    batch: int
    rows: int
    cols: int
    r: int
    c: int

    @property
    def tiles(self) -> int:
        return self.batch * (self.rows // self.r) * (self.cols // self.c)

    @property
    def coefficients(self) -> int:
        return self.r * self.c


def _layout(shape: tuple[int, ...], chunk: int) -> _Layout:
    if len(shape) == 0:
        batch, rows, cols = 1, 1, 1
    elif len(shape) == 1:
        batch, rows, cols = 1, 1, shape[0]
    else:
        batch, rows, cols = math.prod(shape[:-2]), shape[-2], shape[-1]
    return _Layout(batch, rows, cols, chunk_size(rows, chunk), chunk_size(cols, chunk))


def _encode(x: jax.Array, lay: _Layout) -> jax.Array:
    """The 2-D DCT of every tile of `x`: `(tiles, r * c)`, the tiles in row-major order and the
    coefficients of a tile flattened row-major (the reference code's layout)."""
    x = x.reshape(lay.batch, lay.rows // lay.r, lay.r, lay.cols // lay.c, lay.c)
    dr = jnp.asarray(dct_matrix(lay.r), x.dtype)
    dc = jnp.asarray(dct_matrix(lay.c), x.dtype)
    coefficients = jnp.einsum("byhxw,ih,jw->byxij", x, dr, dc, precision=_HIGHEST)
    return coefficients.reshape(lay.tiles, lay.coefficients)


def _decode(coefficients: jax.Array, lay: _Layout, shape: tuple[int, ...]) -> jax.Array:
    """The inverse of `_encode`, back to the leaf's `shape`."""
    y = coefficients.reshape(lay.batch, lay.rows // lay.r, lay.cols // lay.c, lay.r, lay.c)
    dr = jnp.asarray(dct_matrix(lay.r), y.dtype)
    dc = jnp.asarray(dct_matrix(lay.c), y.dtype)
    x = jnp.einsum("byxij,ih,jw->byhxw", y, dr, dc, precision=_HIGHEST)
    return x.reshape(shape)


def _scatter(tiles: int, coefficients: int, idx: jax.Array, val: jax.Array) -> jax.Array:
    """Dense `(tiles, coefficients)` coefficients from sparse `(..., tiles, k)` indices and
    values, a coefficient sent by several replicas being their mean (the reference code's
    `scatter_reduce(..., reduce="mean", include_self=False)`; 0 where none sent it)."""
    k = idx.shape[-1]
    idx = idx.astype(jnp.int32).reshape(-1, tiles, k)
    val = val.reshape(-1, tiles, k)
    rows = jnp.arange(tiles)[None, :, None]
    total = jnp.zeros((tiles, coefficients), val.dtype).at[rows, idx].add(val)
    if idx.shape[0] == 1:  # one sender: every coefficient is sent at most once
        return total
    senders = jnp.zeros((tiles, coefficients), jnp.int32).at[rows, idx].add(1)
    return jnp.where(senders > 0, total / jnp.maximum(senders, 1).astype(val.dtype), 0)


def _check_dtype(who: str, dtype: Any) -> Any:
    """`mu_dtype`: None or a floating-point dtype (`check_float_dtype`'s errors: an integer or
    a quantized spec would round the momentum that the chunks' DCT reads)."""
    check_float_dtype(who, "mu_dtype", dtype)
    return None if dtype is None else jnp.dtype(dtype)


@recorded
def scale_by_demo(
    compression_decay: ArrayLike = 0.999,
    compression_topk: int = 32,
    compression_chunk: int = 64,
    *,
    axis_name: str | tuple[str, ...] | None = None,
    mu_dtype: DType | None = None,
    learning_rate: ScalarOrSchedule | None = None,
) -> GradientTransformation:
    r"""DeMo: keep the momentum on each replica, share only its largest DCT coefficients per
    chunk, and step by the sign of the replicas' shared part.

    Per parameter leaf, on replica :math:`i` with incoming update :math:`g_i`:

    .. math::

      m_i &\leftarrow \beta\, m_i + \eta_t\, g_i, \qquad
      s_i = \mathrm{top}_k\bigl(\mathrm{DCT}(m_i)\bigr), \qquad
      m_i \leftarrow m_i - \mathrm{IDCT}(s_i), \\
      u &= \mathrm{sign}\Bigl(\mathrm{IDCT}\bigl(\mathrm{mean}_i\, s_i\bigr)\Bigr)

    with :math:`\eta_t = 1` unless `learning_rate` is given (the reference code accumulates the
    learning-rate-scaled gradient, so that under a schedule each gradient keeps the weight of
    its own step's learning rate; `gradtx.demo_momentum` passes it).

    The DCT is the orthonormal DCT-II of each chunk: a 1-D leaf is cut into chunks of
    :math:`c` = `compression_chunk` entries, a 2-D leaf into :math:`c \times c` tiles (2-D DCT),
    the last two axes of a higher-rank leaf likewise (its leading axes a batch of tiles); an
    axis whose length :math:`c` does not divide takes its largest divisor below :math:`c`
    (100 in chunks of 50; a prime length in chunks of 1, sent whole). :math:`\mathrm{top}_k`
    keeps the :math:`k` = `compression_topk` coefficients of largest magnitude in each chunk
    (all of them in a chunk of fewer). The replicas all-gather their sparse (index, value)
    pairs over `axis_name` (`jax.lax.all_gather`); a coefficient sent by several replicas is the
    mean of their values, as in the reference code. Without `axis_name` nothing is gathered and
    :math:`u = \mathrm{sign}(\mathrm{IDCT}(s))`, the local transmitted part.

    The momentum is this replica's own (each replica's copy differs: under `jax.shard_map` give
    it the replica axis; the counters, equal on every replica, may be replicated with `P()`).
    The update is the same on every replica, but `jax.lax.all_gather` types its result as
    varying over `axis_name`, so under `jax.shard_map` return the updates (or the params they
    update) with the replica axis in `out_specs` too.

    `state.bytes_sent` counts the bytes this replica put into the all-gathers on the last step
    (per chunk :math:`k` indices, in the narrowest unsigned dtype that holds the chunk's last
    index: uint16 for 64 x 64 tiles, uint8 for chunks of 64; and :math:`k` values in the
    momentum's dtype; 0 without `axis_name`), `state.total_bytes_sent` their sum;
    `gradtx.metrics` reports both. With 64 x 64 tiles and :math:`k = 32`, a float32 leaf sends
    192 bytes per 16384 of its dense gradient: 85x fewer.

    Args:
      compression_decay: :math:`\beta` in [0, 1), the momentum's decay (the reference's name).
      compression_topk: :math:`k`, the coefficients sent per chunk, an integer >= 1.
      compression_chunk: :math:`c`, the chunk length along each chunked axis, an integer >= 1.
      axis_name: the name of the mapped axis over the replicas (or a tuple of names), bound by
        `jax.shard_map`, `jax.pmap` or `jax.vmap(..., axis_name=...)`; None: one process, no
        communication.
      mu_dtype: dtype of the momentum and of the values sent (default: the params' dtype).
      learning_rate: :math:`\eta` >= 0 (a float or a schedule `count -> lr`) scaling the
        gradient in the momentum, the reference code's convention; None: no scaling. It does
        not scale the update: follow with `scale_by_learning_rate`.

    Returns:
      A `GradientTransformation` with state `ScaleByDemoState(count, mu, bytes_sent,
      total_bytes_sent)` (`mu` the momentum); updates in :math:`\{-1, 0, 1\}`, in the
      gradients' dtype.

    Reference: Peng, Quesnelle, Kingma et al., "DeMo: Decoupled Momentum Optimization" (ICLR
    2026, arXiv:2411.19870); the authors' code, github.com/bloc97/DeMo (`demo.py`), whose chunking,
    coefficient layout and averaging this follows. `gradtx.demo_momentum` is the optimizer.
    """
    who = "scale_by_demo"
    check_in_range(who, "compression_decay", compression_decay, 0.0, 1.0, high_open=True)
    for name, value in (
        ("compression_topk", compression_topk),
        ("compression_chunk", compression_chunk),
    ):
        if not isinstance(value, int | np.integer) or isinstance(value, bool):
            raise HyperparameterError(
                who,
                name,
                value,
                "a Python integer >= 1",
                got=repr(value),
                note=" (it fixes the compiled shapes), e.g. compression_topk=32, "
                "compression_chunk=64",
            )
        check_int(who, name, value, minimum=1)
    topk, chunk = int(compression_topk), int(compression_chunk)
    check_axis_name(who, axis_name, optional=True)
    m_dtype = _check_dtype(who, mu_dtype)
    if learning_rate is not None:
        check_non_negative(who, "learning_rate", learning_rate, finite=True)

    def init(params):
        def zeros(p):  # an array or a `jax.ShapeDtypeStruct`
            p = p if hasattr(p, "dtype") else jnp.asarray(p)
            return jnp.zeros(p.shape, m_dtype or p.dtype)

        sent, total = (jnp.zeros((), jnp.float32) for _ in range(2))  # two buffers: donatable
        return ScaleByDemoState(zero_count(), jax.tree.map(zeros, params), sent, total)

    def leaf(g, m, lr):
        """(update, new momentum, bytes sent) of one leaf."""
        shape = jnp.shape(g)
        lay = _layout(shape, chunk)
        k = min(topk, lay.coefficients)
        full = widen(m) * compression_decay + (widen(g) if lr is None else lr * widen(g))
        coefficients = _encode(full, lay)
        _, idx = jax.lax.top_k(jnp.abs(coefficients), k)
        val = jnp.take_along_axis(coefficients, idx, axis=-1).astype(m.dtype)
        idx = idx.astype(index_dtype(lay.coefficients))
        local = _scatter(lay.tiles, lay.coefficients, idx, widen(val))
        new_m = (full - _decode(local, lay, shape)).astype(m.dtype)
        if axis_name is None:
            shared, sent = local, 0
        else:
            idx_all = jax.lax.all_gather(idx, axis_name)
            val_all = jax.lax.all_gather(val, axis_name)
            shared = _scatter(lay.tiles, lay.coefficients, idx_all, widen(val_all))
            sent = lay.tiles * k * (idx.dtype.itemsize + val.dtype.itemsize)
        update = jnp.sign(_decode(shared, lay, shape)).astype(jnp.result_type(g))
        return update, new_m, sent

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        expect_state(who, state, ScaleByDemoState)
        assert_same_structure(who, updates=updates, **{"state.mu": state.mu})
        treedef = jax.tree.structure(updates)
        g_leaves, m_leaves = treedef.flatten_up_to(updates), treedef.flatten_up_to(state.mu)
        lr = None
        if learning_rate is not None:
            lr = value_at(learning_rate, state.count, who=who, name="learning_rate")
        out = [leaf(jnp.asarray(g), m, lr) for g, m in zip(g_leaves, m_leaves, strict=True)]
        sent = float(sum(s for _, _, s in out))
        # the counters keep the type they came with (under `shard_map`: varying or not)
        sent_now = state.bytes_sent * 0 + jnp.float32(sent)
        new_state = ScaleByDemoState(
            count=safe_increment(state.count),
            mu=treedef.unflatten([m for _, m, _ in out]),
            bytes_sent=sent_now,
            total_bytes_sent=state.total_bytes_sent + jnp.float32(sent),
        )
        return treedef.unflatten([u for u, _, _ in out]), new_state

    return register(GradientTransformation(init, update), "leaf", report=_report)


__all__ = ["ScaleByDemoState", "scale_by_demo"]
