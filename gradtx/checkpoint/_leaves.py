"""The leaves of a state as a checkpoint sees them: unique '/'-joined paths, stored shapes and
dtypes (PRNG keys as raw key data), host copies, and leaves rebuilt like a template's (its kind,
sharding and weak type)."""

from __future__ import annotations

import sys
from typing import Any

import jax
import numpy as np

from .._base._checks import check_divides
from .._base._typing import OptState
from ..tree._paths import named_leaves
from ._format import CheckpointError

_RESERVED = "__metadata__"


def _flatten(who: str, state: OptState) -> tuple[list[tuple[str, Any]], Any]:
    """(path, leaf) pairs in flattening order and the treedef; paths must be unique."""
    items, treedef = named_leaves(who, state, error=CheckpointError)
    if any(key == _RESERVED for key, _ in items):
        raise CheckpointError(
            f"{who}: a leaf of the state has the path {_RESERVED!r}, which the file format "
            "reserves; rename that dict key"
        )
    return items, treedef


def _is_key(leaf: Any) -> bool:
    dtype = getattr(leaf, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _spec(leaf: Any) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of a leaf as it is stored (PRNG keys as their raw key data)."""
    if _is_key(leaf):
        data = jax.eval_shape(jax.random.key_data, leaf)
        return tuple(data.shape), np.dtype(data.dtype)
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        return tuple(int(d) for d in leaf.shape), np.dtype(leaf.dtype)
    arr = np.asarray(leaf)
    return arr.shape, arr.dtype


def _check_concrete(who: str, key: str, leaf: Any) -> None:
    if isinstance(leaf, jax.ShapeDtypeStruct | jax.core.Tracer):
        raise CheckpointError(
            f"{who}: {key!r} is abstract ({type(leaf).__name__}); save a concrete state, "
            "outside jax.jit"
        )


def _to_host(who: str, key: str, leaf: Any) -> np.ndarray:
    _check_concrete(who, key, leaf)
    if _is_key(leaf):
        leaf = jax.random.key_data(leaf)
    return np.asarray(leaf)


def _fmt(spec: tuple[tuple[int, ...], np.dtype]) -> str:
    return f"{spec[1].name}{list(spec[0])}"


def _byte_order(dtype: np.dtype) -> str:
    little = dtype.byteorder == "<" or (dtype.byteorder == "=" and sys.byteorder == "little")
    return "little-endian" if little else "big-endian"


def _fmt_pair(
    a: tuple[tuple[int, ...], np.dtype], b: tuple[tuple[int, ...], np.dtype]
) -> tuple[str, str]:
    """Two mismatched specs as text; when only their byte order differs, it is named (the
    names alone would read `float32[5]` twice)."""
    if _fmt(a) == _fmt(b):
        return f"{_fmt(a)} ({_byte_order(a[1])})", f"{_fmt(b)} ({_byte_order(b[1])})"
    return _fmt(a), _fmt(b)


def _restore(who: str, key: str, template: Any, value: Any) -> Any:
    """`value` (host or device array) as a leaf like `template`: a jax.Array on the template's
    sharding (weak type kept for scalars), a NumPy array, or a Python scalar."""
    if isinstance(template, jax.Array | jax.ShapeDtypeStruct):
        # An uncommitted template (default placement) gives an uncommitted leaf, so a jitted
        # step compiled for the original state is reused as is (no recompilation).
        committed = template.committed if isinstance(template, jax.Array) else True
        sharding = getattr(template, "sharding", None) if committed else None
        check_divides(who, key, tuple(np.shape(value)), sharding)
        if _is_key(template):
            if not isinstance(template, jax.Array):
                raise CheckpointError(
                    f"{who}: {key!r} is a PRNG key; pass a concrete template for it "
                    "(its key implementation is read from the template)"
                )
            impl = jax.random.key_impl(template)
            return jax.device_put(jax.random.wrap_key_data(value, impl=impl), sharding)
        if getattr(template, "weak_type", False) and np.ndim(value) == 0:
            weak = jax.numpy.asarray(np.asarray(value).item())
            if weak.dtype == template.dtype:
                return jax.device_put(weak, sharding)
        return jax.device_put(value, sharding)
    if isinstance(template, np.ndarray):
        return np.asarray(value)
    if isinstance(template, np.generic):
        return np.asarray(value)[()]
    if isinstance(template, bool | int | float | complex):
        return type(template)(np.asarray(value).item())
    return np.asarray(value)


def _default_placement(template: Any) -> bool:
    """Whether a template leaf restores as a plain array on the default device (uncommitted,
    not a PRNG key, not weakly typed)."""
    if _is_key(template) or getattr(template, "weak_type", False):
        return False
    if isinstance(template, jax.Array):
        return not template.committed
    return isinstance(template, jax.ShapeDtypeStruct) and template.sharding is None
