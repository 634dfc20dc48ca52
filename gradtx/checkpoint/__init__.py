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

import logging
import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax import tree_util as jtu

from .._base._checks import did_you_mean
from .._base._typing import OptState
from ._inspect import StateField, StateSummary, inspect_state
from ._io import CheckpointError, check_path, open_regular, read_header, read_tensors, write_file
from ._leaves import (
    _check_concrete,
    _default_placement,
    _flatten,
    _fmt,
    _fmt_pair,
    _is_key,
    _restore,
    _spec,
    _to_host,
)
from ._memory import StateBytes, state_bytes
from ._migrate import Migration, MigrationReport, migrate_into, source_values
from ._optax_state import from_optax_state
from ._roles import Role, quantized_kinds, short_keys, structure_of
from ._torch import from_torch_state_dict, to_torch_state_dict
from ._torch_names import torch_names

__all__ = [
    "CheckpointError",
    "Migration",
    "MigrationReport",
    "StateBytes",
    "StateField",
    "StateSummary",
    "from_optax_state",
    "from_torch_state_dict",
    "inspect_state",
    "load",
    "load_state_dict",
    "migrate",
    "save",
    "state_bytes",
    "state_dict",
    "to_torch_state_dict",
    "torch_names",
]

_BATCH_BYTES = 64 << 20
_log = logging.getLogger("gradtx.checkpoint")


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


def state_dict(state: OptState, *, keys: str = "short") -> dict[str, np.ndarray]:
    """The state as a flat dict from stable, readable keys to host NumPy arrays.

    Keys (`keys="short"`, the default) name what a value is, with nothing positional: the
    state's kind, the labels that tell sub-states apart (`named_chain` names,
    `multi_transform` labels), its field and the parameter path: `"adam/mu/dense/kernel"`,
    `"adam/count"`, `"schedule/count"`, `"inject_hyperparams/hyperparams/learning_rate"`. A
    kind that occurs twice is numbered (`"adam.0/..."`, `"adam.1/..."`); a value outside any
    state object keeps its path. `keys="paths"` gives the full '/'-joined tree paths instead
    (`"0/mu/dense/kernel"`: the keys of earlier versions and of `gradtx.save`'s file);
    `load_state_dict` takes either. Values keep their dtypes (bf16, int32, ...); PRNG keys are
    stored as their raw key data. None leaves and empty subtrees have no entry
    (`load_state_dict` gets them from its template). On CPU the arrays may share memory with
    the state's buffers: treat them as read-only.

    Args:
      state: an optimizer state (any pytree of arrays), e.g. from `tx.init` or `tx.update`.
      keys: `"short"` (role keys) or `"paths"` (tree paths).

    Returns:
      A dict in flattening order, ready for `numpy.savez`, orbax, msgpack or a test.

    Example:
      >>> import gradtx, jax.numpy as jnp
      >>> state = gradtx.adam(1e-3).init({"w": jnp.zeros(3)})
      >>> list(gradtx.state_dict(state))  # scale_by_adam's state, then the learning rate's
      ['adam/count', 'adam/mu/w', 'adam/nu/w', 'schedule/count']
      >>> list(gradtx.state_dict(state, keys="paths"))
      ['0/count', '0/mu/w', '0/nu/w', '1/count']
    """
    items = _keyed("state_dict", state, keys)[0]
    return {key: _to_host("state_dict", key, leaf) for key, leaf in items}


_KEY_FORMS = ("short", "paths")


def _keyed(who: str, state: OptState, keys: str) -> tuple[list[tuple[str, Any]], Any]:
    """`_flatten`'s (key, leaf) pairs with the keys of form `keys` ("short" or "paths")."""
    if keys not in _KEY_FORMS:
        raise CheckpointError(
            f"{who}: keys must be one of {_KEY_FORMS}, got {keys!r}"
            + did_you_mean(str(keys), _KEY_FORMS)
        )
    items, treedef = _flatten(who, state)
    if keys == "short":
        names = short_keys(state, [key for key, _ in items])
        items = [(name, leaf) for name, (_, leaf) in zip(names, items, strict=True)]
    return items, treedef


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
      state_dict: key -> array (NumPy, jax, or anything `numpy.asarray` accepts), keyed as
        `state_dict` gives it: short keys or paths (`keys="paths"`, and dicts saved before
        short keys existed).
      strict: if False, keys missing from `state_dict` keep the template's value and
        unexpected keys are ignored (shapes and dtypes are still checked).

    Returns:
      The new state.
    """
    if not isinstance(state_dict, Mapping):
        raise CheckpointError(
            f"load_state_dict: state_dict must be a mapping from path to array, got "
            f"{type(state_dict).__name__}"
        )
    found = {str(k): _spec(v) for k, v in state_dict.items()}
    # the dict's keys are short or paths: the form that names more of them (short on a tie)
    forms = [_keyed("load_state_dict", template_state, form) for form in _KEY_FORMS]
    template, treedef = max(forms, key=lambda f: len(found.keys() & {k for k, _ in f[0]}))
    _check_match("load_state_dict", "state dict", template, found, strict)
    leaves = [
        _restore("load_state_dict", key, leaf, state_dict[key]) if key in state_dict else leaf
        for key, leaf in template
    ]
    return jtu.tree_unflatten(treedef, leaves)


def save(path: str | os.PathLike, state: OptState, *, fsync: bool = True) -> str:
    """Write `state` to one file, atomically: a crash never leaves a corrupt checkpoint at `path`.

    The file has the safetensors layout (`safetensors.numpy.load_file` can read it; no pickle)
    with the keys of `state_dict(state, keys="paths")` (the tree paths, from which the file's
    structure is rebuilt), every dtype kept (bf16 included) and a 64-bit checksum per tensor.
    It is written to a hidden temporary file in the same folder
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

    write_file(path, specs, fetch, fsync=fsync, structure=structure_of(state))
    return path


def _check_codecs(who: str, template_state: OptState, structure: str | None) -> None:
    """The file's quantized buffers have the template's codecs: codes of one codec read as
    another's would be other numbers (of the same shapes and dtypes, possibly)."""
    if structure is None:
        return
    try:
        kinds = quantized_kinds(structure)
    except ValueError:
        return  # an unreadable structure: `migrate` reports it where it needs it
    wanted = quantized_kinds(structure_of(template_state))
    for path, (block_size, signed, codec, _) in wanted.items():
        have = kinds.get(path)
        if have is not None and have[:3] != (block_size, signed, codec):
            raise CheckpointError(
                f"{who}: {path!r} holds {have[2]} codes (block size {have[0]}) but the template "
                f"stores {codec} codes (block size {block_size}) there; load(..., migrate=True) "
                "decodes and re-encodes them"
            )


def load(
    path: str | os.PathLike,
    template_state: OptState,
    *,
    strict: bool = True,
    migrate: bool = False,
) -> OptState:
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
      migrate: match the file's tensors to the template by what they are (parameter path and
        role), not by their paths: the file may come from another chain of the same optimizer
        (a clip or wrapper added or removed, moments in another dtype). See `gradtx.migrate`,
        which also returns the report; here it is logged (logger `gradtx.checkpoint`, level
        INFO) and `strict` is not used.

    Returns:
      The restored state.

    Raises:
      CheckpointError: the file is not a complete, intact gradtx checkpoint, or does not match
        the template (the message names `path` and the first problem).
      OSError: the file cannot be opened (e.g. `FileNotFoundError`, `PermissionError`).
    """
    path = os.fsdecode(path)
    check_path("load", path)
    if migrate:
        values, source = _source(path, None, None)
        result = migrate_into(values, template_state, source=source)
        _log.info("load(%r, migrate=True): %s", path, result.report)
        return result.state
    who = f"load({path!r})"
    template, treedef = _flatten(who, template_state)
    by_key = dict(template)
    with open_regular(path) as f:
        entries, start, structure = read_header(f, path)
        found = {e.key: (e.shape, e.dtype.newbyteorder("=")) for e in entries}
        _check_codecs(who, template_state, structure)
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


def _read_all(path: str) -> tuple[dict[str, np.ndarray], str | None]:
    """Every tensor of a checkpoint file (checksums verified) and its recorded structure."""
    check_path("migrate", path)
    with open_regular(path) as f:
        entries, start, structure = read_header(f, path)
        flat = {entry.key: arr for entry, arr in read_tensors(f, path, entries, start)}
    return flat, structure


def _source(old: Any, old_tx: Any, params: Any) -> tuple[list[Role], str]:
    template = None if old_tx is None else (lambda: jax.eval_shape(old_tx.init, params))
    return source_values(old, _read_all, load, load_state_dict, template)


def migrate(
    state_or_path: Any,
    tx_new: Any,
    params: Any,
    *,
    old_tx: Any = None,
    strict: bool = False,
) -> Migration:
    """Build `tx_new`'s state from an older state, matching each value by what it *is*.

    A value's role is the state class that holds it, its field and its parameter path
    (`ScaleByAdamState.mu[encoder/kernel]`), plus the names that tell sub-states apart
    (`named_chain` names, `multi_transform` labels), never its position in the chain. So the old
    state may come from another arrangement of the same optimizer: stateless transformations
    (clipping, weight decay, scaling) added or removed, the optimizer wrapped in or unwrapped
    from `accumulate_k_steps`, `apply_if_finite`, `skip_on_spikes`, `lookahead`,
    `inject_hyperparams`, masks, `multi_transform` (same labels), other schedules or
    hyperparameter values. Rules:

    - a value both states have is carried over; to another dtype where the new one differs
      (float32 <-> bfloat16 <-> `gradtx.quantized()` 8-bit, decoded and re-encoded; exact
      where the target can hold the value);
    - a value only the new optimizer has starts as `tx_new.init(params)` makes it (fresh): the
      state of a new wrapper (its counters at zero, `accumulate_k_steps`'s empty sum,
      `skip_on_spikes`'s empty window, `ema_params` / `lookahead` starting from `params`,
      `inject_hyperparams`'s hyperparameters at their initial values), a moment of a new
      transformation at zero; except that a new wrapper's count of the run's steps
      (`accumulate_k_steps`' `gradient_step`, the `count` of `skip_on_spikes` and
      `inject_hyperparams`, `conditionally_transform`'s `step`) starts at the old run's step
      (its outermost `count`, as `inspect_state` reads it), so `metrics` reports the run's
      step and the schedules a new `inject_hyperparams` drives go on from it
      (`report.continued` lists them);
    - a value only the old state has is dropped (e.g. a removed wrapper's counters);
    - both are listed in the report; a shape mismatch, a dtype migrate does not convert, a
      matched state with no parameter path in common, two parameters with one path (`"a/b"`
      next to `{"a": {"b": ...}}`, as `state_dict` refuses them), or an ambiguous match (two
      same-class states, one removed) is a `CheckpointError` naming both paths.

    Args:
      state_or_path: the old state (a gradtx or Optax state pytree), a file written by
        `gradtx.save` (files record what each tensor is; older files need `old_tx`), or a flat
        `gradtx.state_dict` (needs `old_tx`).
      tx_new: the optimizer to build the state for.
      params: the parameters (or `jax.ShapeDtypeStruct`s, if no value starts fresh from them),
        for `tx_new.init`.
      old_tx: the optimizer that made the old state; needed only for a flat state dict or a
        file written before files recorded their structure.
      strict: refuse (a `CheckpointError` with the report) unless every value is carried.

    Returns:
      `Migration(state, report)`: the new state (on the shardings `tx_new.init(params)` gives)
      and a `MigrationReport` (`print(report)` lists what was converted, fresh and dropped).

    Example:
      >>> import gradtx, jax.numpy as jnp
      >>> params = {"w": jnp.ones(3)}
      >>> state = gradtx.adam(1e-3).init(params)
      >>> tx_new = gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adam(1e-3))
      >>> new_state, report = gradtx.migrate(state, gradtx.accumulate_k_steps(tx_new, 4), params)
      >>> print(report)  # doctest: +NORMALIZE_WHITESPACE
      migrated: 4 carried, 0 converted, 3 fresh, 0 dropped
        fresh:
          micro_step (AccumulateState.micro_step)
          grad_sum/w (AccumulateState.grad_sum[w])
          gradient_step (AccumulateState.gradient_step): 0, the run's step
    """
    if state_or_path is None:
        raise CheckpointError(
            "migrate: state_or_path is None; pass the old state (a pytree), a file written by "
            "gradtx.save, or a flat gradtx.state_dict (with old_tx=)"
        )
    if params is None:
        raise CheckpointError(
            "migrate: params is None; pass the parameters (or jax.ShapeDtypeStructs of them, "
            "if no value of tx_new's state starts from them) for tx_new.init"
        )
    values, source = _source(state_or_path, old_tx, params)
    return migrate_into(values, tx_new.init(params), source=source, strict=strict)
