"""Optimizer-state checkpoints: `state_dict` / `load_state_dict`, `save` / `load`, `inspect_state`.

A state is addressed by stable, readable paths: the '/'-joined key paths of `gradtx.tree`
(`named_chain` names, NamedTuple field names, dict keys, sequence indices, then the parameter
path), e.g. `"adam/mu/encoder/dense/kernel"` for `named_chain(("adam", scale_by_adam()), ...)` or
`"0/mu/encoder/dense/kernel"` for a plain `chain`. None leaves and empty subtrees have no entry:
they come back from the template state, which supplies the structure on load.

Files use the safetensors layout (no pickle; bf16, int32, every float and integer type keep their
dtype) with a 64-bit checksum per tensor bound to its key (`_format.py`), and are written
atomically, every byte verified (`_io.py`). docs/checkpoint.md, "Guarantees", lists what is
promised and which tests prove it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax import tree_util as jtu

from .._base._checks import did_you_mean
from .._base._typing import OptState
from ..tree import path_str
from ._inspect import StateField, StateSummary, inspect_state
from ._io import CheckpointError, check_path, open_regular, read_header, read_tensors, write_file

__all__ = [
    "CheckpointError",
    "StateField",
    "StateSummary",
    "inspect_state",
    "load",
    "load_state_dict",
    "save",
    "state_dict",
]

_RESERVED = "__metadata__"
_BATCH_BYTES = 64 << 20


def _flatten(who: str, state: OptState) -> tuple[list[tuple[str, Any]], Any]:
    """(path, leaf) pairs in flattening order and the treedef; paths must be unique."""
    with_path, treedef = jtu.tree_flatten_with_path(state)
    items: list[tuple[str, Any]] = []
    seen: set[str] = set()
    for key_path, leaf in with_path:
        key = path_str(key_path)
        if key in seen or key == _RESERVED:
            raise CheckpointError(
                f"{who}: two leaves of the state have the path {key!r} (or it is reserved); "
                "rename the dict key that contains '/' or that repeats a sibling's name"
            )
        seen.add(key)
        items.append((key, leaf))
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


def _listing(title: str, keys: list[str], limit: int = 12) -> str:
    shown = ", ".join(repr(k) for k in keys[:limit])
    more = f", ... and {len(keys) - limit} more" if len(keys) > limit else ""
    return f"\n  {title} ({len(keys)}): [{shown}{more}]"


def _check_match(
    who: str,
    source: str,
    template: list[tuple[str, Any]],
    found: Mapping[str, tuple[tuple[int, ...], np.dtype]],
    strict: bool,
) -> None:
    """Raise a `CheckpointError` listing missing / unexpected / mismatched keys, if any."""
    tspecs = {key: _spec(leaf) for key, leaf in template}
    missing = [k for k in tspecs if k not in found]
    unexpected = [k for k in found if k not in tspecs]
    mismatched = [k for k in tspecs if k in found and found[k] != tspecs[k]]
    if not strict:
        abstract = [k for k, leaf in template if k in missing and not _is_concrete(leaf)]
        if not mismatched and not abstract:
            return
        missing, unexpected = abstract, []
    if not (missing or unexpected or mismatched):
        return
    first = next(k for k in [*tspecs, *unexpected] if k in {*missing, *mismatched, *unexpected})
    if first in mismatched:
        ours, theirs = _fmt_pair(tspecs[first], found[first])
        what = f"the template has {ours}, the {source} has {theirs}"
        if _fmt(tspecs[first]) == _fmt(found[first]):
            what += (
                " (load returns native byte order; convert the template with "
                "x.astype(x.dtype.newbyteorder('=')))"
            )
    elif first in missing:
        what = f"in the template, not in the {source}{did_you_mean(first, unexpected)}"
    else:
        what = f"in the {source}, not in the template{did_you_mean(first, missing)}"
    message = f"{who}: the {source} does not match the template state; first mismatch {first!r}: "
    message += what
    if mismatched:
        details = [f"{k}: {' vs '.join(_fmt_pair(tspecs[k], found[k]))}" for k in mismatched]
        message += _listing("shape/dtype mismatches (template vs " + source + ")", details)
    if missing:
        message += _listing(f"missing from the {source}", missing)
    if unexpected:
        message += _listing(f"unexpected in the {source}", unexpected)
    if missing and unexpected:
        message += (
            "\nThe structures differ (another optimizer, chain or wrapper?). With the same "
            "structure, hyperparameter values may change freely; strict=False keeps the "
            "template's value for missing keys and ignores unexpected ones."
        )
    raise CheckpointError(message)


def _is_concrete(leaf: Any) -> bool:
    return not isinstance(leaf, jax.ShapeDtypeStruct)


def state_dict(state: OptState) -> dict[str, np.ndarray]:
    """The state as a flat dict from stable, readable paths to host NumPy arrays.

    Keys are '/'-joined key paths (`"adam/mu/encoder/dense/kernel"`, `"0/count"`); values keep
    their dtypes (bf16, int32, ...); PRNG keys are stored as their raw key data. None leaves and
    empty subtrees have no entry (`load_state_dict` gets them from its template). On CPU the
    arrays may share memory with the state's buffers: treat them as read-only.

    Args:
      state: an optimizer state (any pytree of arrays), e.g. from `tx.init` or `tx.update`.

    Returns:
      A dict in flattening order, ready for `numpy.savez`, orbax, msgpack or a test.

    Example:
      >>> import gradtx, jax.numpy as jnp
      >>> state = gradtx.adam(1e-3).init({"w": jnp.zeros(3)})
      >>> sorted(gradtx.state_dict(state))  # scale_by_adam's state, then the learning rate's
      ['0/count', '0/mu/w', '0/nu/w', '1/count']
    """
    items, _ = _flatten("state_dict", state)
    return {key: _to_host("state_dict", key, leaf) for key, leaf in items}


def load_state_dict(
    template_state: OptState, state_dict: Mapping[str, Any], *, strict: bool = True
) -> OptState:
    """Rebuild a state from a flat dict (from `state_dict`), with the template's structure.

    Keys, shapes and dtypes are checked before anything is built; on a mismatch a
    `CheckpointError` (a `ValueError`) names the first mismatch and lists the missing,
    unexpected and mismatched keys. Dtypes must match exactly (nothing is cast silently). Each
    leaf comes back as the template's leaf kind: a `jax.Array` on the template's sharding (the
    template may be abstract, e.g. `jax.eval_shape(tx.init, params)`), a NumPy array or a
    Python scalar.

    Args:
      template_state: a state of the target structure, e.g. `tx.init(params)` of the
        (possibly re-configured) optimizer; hyperparameter values may differ from the saved one.
      state_dict: path -> array (NumPy, jax, or anything `numpy.asarray` accepts).
      strict: if False, keys missing from `state_dict` keep the template's value and
        unexpected keys are ignored (shapes and dtypes are still checked).

    Returns:
      The new state.
    """
    template, treedef = _flatten("load_state_dict", template_state)
    if not isinstance(state_dict, Mapping):
        raise CheckpointError(
            f"load_state_dict: state_dict must be a mapping from path to array, got "
            f"{type(state_dict).__name__}"
        )
    found = {str(k): _spec(v) for k, v in state_dict.items()}
    _check_match("load_state_dict", "state dict", template, found, strict)
    leaves = [
        _restore("load_state_dict", key, leaf, state_dict[key]) if key in state_dict else leaf
        for key, leaf in template
    ]
    return jtu.tree_unflatten(treedef, leaves)


def save(path: str | os.PathLike, state: OptState, *, fsync: bool = True) -> str:
    """Write `state` to one file, atomically: a crash never leaves a corrupt checkpoint at `path`.

    The file has the safetensors layout (`safetensors.numpy.load_file` can read it; no pickle)
    with the keys of `state_dict`, every dtype kept (bf16 included) and a 64-bit checksum per
    tensor. It is written to a hidden temporary file in the same folder
    (`.NAME.tmp-HOST-PID-RANDOM`), flushed to disk and renamed over `path`, so `path` holds
    either the previous checkpoint or the new one. Arrays are streamed one at a time: at most
    one extra leaf is held in host memory.
    Temporaries left by saves of `path` that were killed on this host are removed. Every byte
    is verified written (short writes are continued, the size is checked before the rename): a
    full disk raises `OSError` with the system's reason (`No space left on device`), removes the
    temporary file and leaves the previous checkpoint at `path` untouched.

    Args:
      path: the file to write (any name; `.safetensors` is a good extension).
      state: the optimizer state (concrete arrays; multi-host sharded states: use orbax).
      fsync: flush the file and its folder to disk before returning (durability across power
        loss; False is faster on slow disks and still atomic against process crashes).

    Returns:
      `path` as a string.

    Raises:
      OSError: the file could not be written (its message names `path` and the reason).
      CheckpointError: the state cannot be saved (abstract leaves, an unsupported dtype, two
        leaves with one path) or `path` holds a NUL byte.
    """
    path = os.fsdecode(path)
    check_path("save", path)
    items, _ = _flatten("save", state)
    specs = [(key, *_spec(leaf)) for key, leaf in items]
    for key, leaf in items:
        _check_concrete("save", key, leaf)

    def fetch(i: int) -> np.ndarray:
        if i + 1 < len(items):  # start the next device-to-host copy while this one is written
            nxt = items[i + 1][1]
            if isinstance(nxt, jax.Array) and not _is_key(nxt):
                nxt.copy_to_host_async()
        return _to_host("save", *items[i])

    write_file(path, specs, fetch, fsync=fsync)
    return path


def load(path: str | os.PathLike, template_state: OptState, *, strict: bool = True) -> OptState:
    """Read a state written by `save`, with the structure of `template_state`.

    The header is checked against the template first (keys, shapes, dtypes: a `CheckpointError`
    lists missing / unexpected / mismatched keys and names the first), then each tensor is read
    straight into its buffer and its checksum verified. A truncated, corrupt or foreign file
    raises a `CheckpointError` naming `path` and what is wrong (the field, for a malformed
    header); a tensor whose key was renamed or swapped in the header fails its checksum, which
    is bound to the key. Only regular files are opened (a FIFO or a device is refused, never
    waited on). Nothing is returned partially loaded. Memory: on CPU the arrays adopt the read
    buffers (no copy); elsewhere leaves are transferred in batches of up to 64 MB, so at most
    that much is held twice.

    Args:
      path: a file written by `gradtx.save`.
      template_state: a state of the target structure (e.g. `tx.init(params)`, or the abstract
        `jax.eval_shape(tx.init, params)` to avoid allocating it twice); its hyperparameters may
        differ from the saved run's. Leaves come back on the template's shardings.
      strict: if False, keys missing from the file keep the template's value and keys only in
        the file are ignored.

    Returns:
      The restored state.

    Raises:
      CheckpointError: the file is not a complete, intact gradtx checkpoint, or does not match
        the template (the message names `path` and the first problem).
      OSError: the file cannot be opened (e.g. `FileNotFoundError`, `PermissionError`).
    """
    path = os.fsdecode(path)
    check_path("load", path)
    who = f"load({path!r})"
    template, treedef = _flatten(who, template_state)
    by_key = dict(template)
    with open_regular(path) as f:
        entries, start = read_header(f, path)
        found = {e.key: (e.shape, e.dtype.newbyteorder("=")) for e in entries}
        _check_match(who, "checkpoint", template, found, strict)
        wanted = [e for e in entries if e.key in by_key]
        restored: dict[str, Any] = {}
        batch: list[tuple[str, np.ndarray]] = []  # leaves for one batched device_put
        batch_bytes = 0

        def flush() -> None:
            arrays = jax.device_put([arr for _, arr in batch])
            restored.update(zip([key for key, _ in batch], arrays, strict=True))
            batch.clear()

        for entry, arr in read_tensors(f, path, wanted, start):
            template_leaf = by_key[entry.key]
            if _default_placement(template_leaf):
                # One device_put per leaf costs ~0.5 ms of dispatch: batch them, up to 64 MB
                # (on CPU the device arrays adopt the aligned host buffers, so nothing is copied)
                batch.append((entry.key, arr))
                batch_bytes += arr.nbytes
                if batch_bytes >= _BATCH_BYTES:
                    flush()
                    batch_bytes = 0
            else:
                restored[entry.key] = _restore(who, entry.key, template_leaf, arr)
            del arr
        if batch:
            flush()
    leaves = [restored.get(key, leaf) for key, leaf in template]
    return jtu.tree_unflatten(treedef, leaves)
