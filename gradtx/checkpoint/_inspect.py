"""`inspect_state`: what is inside an optimizer state, as data and as a readable table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jax import tree_util as jtu

from .._base._checks import did_you_mean
from .._base._typing import OptState
from ..health import metrics, to_scalars
from ..state._quantize import QuantizedArray, decode_compiled, error_bound_compiled
from ..tree import path_str
from ..tree._nonfinite import NonfiniteLocation
from ._roles import roles, short_keys

_COUNT_NAMES = ("count", "gradient_step")


@dataclass(frozen=True)
class StateField:
    """One array of a state: its path, shape, dtype, size in bytes, for one-element arrays that
    can be read on this host its value, its role (the state class, field and parameter path
    that `gradtx.migrate` matches on; `/codes` or `/scale` after it for an 8-bit buffer's
    parts) and its key in `gradtx.state_dict` (`adam/mu/dense/kernel`; `path` is the tree path,
    `0/mu/dense/kernel`, that `gradtx.tree` addresses)."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    value: float | int | bool | None = None
    role: str = ""  # what the value is: `ScaleByAdamState.mu[dense/kernel]` (see gradtx.migrate)
    key: str = ""  # its short key: `adam/mu/dense/kernel` (see gradtx.state_dict)


@dataclass(frozen=True)
class QuantizedBuffer:
    """A quantized (8-bit or 4-bit) buffer of a state as its decoded values: its key and role,
    its codec (`storage`: `"8-bit"`, `"8-bit sqrt"`, `"4-bit"`), the shape and bytes it stands
    for (float32) and holds (codes and scales), and, for a concrete buffer, the largest decoded
    magnitude and the largest error bound (`|decoded - stored value| <= error_bound`)."""

    key: str
    role: str
    storage: str
    shape: tuple[int, ...]
    nbytes: int
    decoded_nbytes: int
    max_abs: float | None = None
    error_bound: float | None = None


@dataclass(frozen=True)
class StateSummary:
    """What `inspect_state` returns; `print(summary)` shows it as a table.

    Attributes:
      fields: every array of the state, in flattening order.
      step: the current step count: the outermost integer `count` field (None if there is none).
      step_path: the path of that field (its short key in the table).
      hyperparams: the current value of every injected hyperparameter (`inject_hyperparams`),
        keyed by the wrapper's path and the name, e.g. `"learning_rate"` at the top level or
        `"opt/learning_rate"` inside `named_chain(("opt", ...))`.
      nonfinite: for every `NonfiniteLocation` in the state with a concrete value (e.g.
        `apply_if_finite(..., locate_nonfinite=True)`'s `first_nonfinite`), its path in the
        state -> the path of the non-finite leaf it names, or None when it names none.
      metrics: with the optimizer given (`inspect_state(state, tx)`), `gradtx.metrics(tx,
        state)` as host numbers: the current learning rate of every schedule and constant in
        the chain (no `inject_hyperparams` needed), the wrappers' counters, `with_metrics`'
        norms.
      quantized: every 8-bit or 4-bit buffer as its decoded values (`QuantizedBuffer`: the
        largest decoded magnitude and the codec's error bound).
    """

    fields: tuple[StateField, ...]
    step: int | None = None
    step_path: str | None = None
    hyperparams: dict[str, float] = field(default_factory=dict)
    nonfinite: dict[str, str | None] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    quantized: tuple[QuantizedBuffer, ...] = ()

    @property
    def total_bytes(self) -> int:
        """Memory held by the state's arrays, in bytes."""
        return sum(f.nbytes for f in self.fields)

    def hyperparam(self, name: str) -> float:
        """The current value of the hyperparameter `name`: a key of `hyperparams` (injected) or
        of `metrics` (with the optimizer given), or its last part when only one place has it,
        e.g. `hyperparam("learning_rate")`."""
        known = {**self.metrics, **self.hyperparams}
        known.pop("step", None)
        if name in known:
            return known[name]
        hits = [k for k in known if k.endswith("/" + name)]
        if len(hits) == 1:
            return known[hits[0]]
        if hits:
            raise KeyError(f"hyperparam: {name!r} is ambiguous, pick one of {hits}")
        names = list(known)
        last = sorted({k.rsplit("/", 1)[-1] for k in names})
        hint = (
            "none (pass the optimizer, inspect_state(state, tx), to see its schedules' values, "
            "or wrap it in gradtx.inject_hyperparams)"
        )
        raise KeyError(
            f"hyperparam: no hyperparameter {name!r}{did_you_mean(name, last)}; "
            f"the state has {names or hint}"
        )

    def table(self, max_rows: int | None = None) -> str:
        """The summary as a text table (at most `max_rows` field rows; None for all)."""
        rows = [
            (f.key or f.path, f.role, str(f.shape), f.dtype, f"{f.nbytes:,}", _fmt(f.value))
            for f in self.fields
        ]
        shown = rows if max_rows is None else rows[:max_rows]
        head = ("key", "role", "shape", "dtype", "bytes", "value")
        widths = [max([len(h), *(len(r[i]) for r in shown)]) for i, h in enumerate(head)]

        def line(cells: tuple[str, ...]) -> str:
            parts = [
                c.ljust(w) if i < 4 else c.rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ]
            return "  ".join(parts[:5]) + ("  " + cells[5] if cells[5] else "")

        out = [line(head), "  ".join("-" * w for w in widths[:5]) + "  -----"]
        out += [line(r) for r in shown]
        if len(shown) < len(rows):
            out.append(f"... {len(rows) - len(shown)} more fields (summary.table(None) shows all)")
        out.append(f"total: {len(rows)} arrays, {_human(self.total_bytes)}")
        if self.step is not None:
            keys: dict[str | None, str | None] = {f.path: f.key or f.path for f in self.fields}
            out.append(f"step: {self.step} (from {keys.get(self.step_path, self.step_path)!r})")
        for name, value in self.hyperparams.items():
            out.append(f"hyperparameter {name} = {value:.6g}")
        for name, value in self.metrics.items():
            if name != "step" and name not in self.hyperparams:
                out.append(f"{name} = {value:.6g}")
        for q in self.quantized:
            decoded = f"{q.storage} of {q.shape} float32 ({_human(q.decoded_nbytes)} decoded)"
            if q.max_abs is not None and q.error_bound is not None:
                decoded += f": max |value| {q.max_abs:.4g}, error <= {q.error_bound:.3g}"
            out.append(f"quantized {q.key}: {decoded}")
        counts = {f.path: f.value for f in self.fields}
        for where, leaf in self.nonfinite.items():
            at = f"first non-finite leaf (at {where!r})"
            if leaf is None:
                out.append(f"{at}: none")
                continue
            count = counts.get(f"{where}/count" if where else "count")
            noun = "value" if count == 1 else "values"
            out.append(f"{at}: {leaf!r}" + ("" if count is None else f", {count} {noun}"))
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table(max_rows=60)


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _human(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n:,} bytes" if unit == "bytes" else f"{n:,} bytes ({size:.1f} {unit})"
        size /= 1024
    raise AssertionError("unreachable")


def _scalar(leaf: Any) -> float | int | bool | None:
    """The value of a one-element leaf readable on this host, else None."""
    if isinstance(leaf, jax.ShapeDtypeStruct | jax.core.Tracer):
        return None
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
        return None
    if int(np.prod(np.shape(leaf))) != 1:
        return None
    dtype = getattr(leaf, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return None
    item = np.asarray(leaf).reshape(()).item()
    return item if isinstance(item, bool | int | float) else None


def _layout(leaf: Any) -> tuple[tuple[int, ...], str, int]:
    """Shape, dtype name and bytes of a leaf (arrays, abstract arrays, PRNG keys, scalars)."""
    if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
        leaf = np.asarray(leaf)
    shape = tuple(int(d) for d in leaf.shape)
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        data = jax.eval_shape(jax.random.key_data, leaf)
        nbytes = int(np.prod(data.shape, dtype=np.int64)) * np.dtype(data.dtype).itemsize
        return shape, str(leaf.dtype), nbytes
    dtype = np.dtype(leaf.dtype)
    return shape, dtype.name, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def _is_inject_state(node: Any) -> bool:
    fields = getattr(node, "_fields", None)
    return (
        isinstance(node, tuple)
        and fields is not None
        and {"count", "hyperparams", "inner_state"} <= set(fields)
        and isinstance(getattr(node, "hyperparams", None), dict)
    )


def _injected(state: Any, prefix: tuple, out: dict[str, float]) -> None:
    found, _ = jtu.tree_flatten_with_path(state, is_leaf=_is_inject_state)
    for key_path, node in found:
        if not _is_inject_state(node):
            continue
        where = path_str((*prefix, *key_path))
        for name, value in node.hyperparams.items():
            v = _scalar(value)
            if v is not None:
                out[f"{where}/{name}" if where else str(name)] = float(v)
        _injected(node.inner_state, (*prefix, *key_path, jtu.GetAttrKey("inner_state")), out)


def _is_location(node: Any) -> bool:
    return isinstance(node, NonfiniteLocation)


def _locations(state: Any) -> list[tuple[tuple, NonfiniteLocation]]:
    """(key path, location) of every `NonfiniteLocation` in `state`."""
    found = jtu.tree_flatten_with_path(state, is_leaf=_is_location)[0]
    return [(key_path, node) for key_path, node in found if _is_location(node)]


def _located(locations: list[tuple[tuple, NonfiniteLocation]]) -> dict[str, str | None]:
    """State path -> named leaf (or None) of every concrete, unbatched location."""
    out: dict[str, str | None] = {}
    for key_path, node in locations:
        if _scalar(node.index) is None:
            continue
        try:
            out[path_str(key_path)] = node.path
        except ValueError:  # an index out of range of its leaf paths: nothing to name
            continue
    return out


def _role_names(state: OptState) -> dict[str, str]:
    """Each leaf's path -> its role's name (an 8-bit buffer's parts: the role and the part)."""
    out = {}
    for role in roles(state):
        if isinstance(role.value, QuantizedArray):
            out[f"{role.key}/codes"] = f"{role.name}/codes"
            out[f"{role.key}/scale"] = f"{role.name}/scale"
        else:
            out[role.key] = role.name
    return out


def inspect_state(state: OptState, tx: Any = None) -> StateSummary:
    """A readable summary of an optimizer state: per field its path, shape, dtype and bytes, the
    current step count, the injected hyperparameters with their current values, and where the
    latest non-finite gradient was (`apply_if_finite(..., locate_nonfinite=True)`).

    `print(gradtx.inspect_state(state, tx))` shows a table; "what is my learning rate now" is
    `gradtx.inspect_state(state, tx).hyperparam("learning_rate")`: with the optimizer given, the
    summary holds `gradtx.metrics(tx, state)` (every schedule's current value, counters); without
    it, only what the state holds (a schedule's value is not in the state, only its step count;
    `inject_hyperparams` puts the values there). The
    state may be abstract (`jax.eval_shape(tx.init, params)`): then shapes and memory are
    reported without allocating anything, and no values. Named `inspect_state`, not `inspect`,
    so that `from gradtx import *` cannot shadow the standard library's `inspect` module.

    Args:
      state: an optimizer state (any pytree of arrays; gradtx's or Optax's).
      tx: the optimizer that made it (optional): adds `metrics` (see `gradtx.metrics`).

    Returns:
      A `StateSummary` (fields, step, step_path, hyperparams, nonfinite, metrics, total_bytes;
      `table()`).

    Example:
      >>> import gradtx, jax.numpy as jnp
      >>> tx = gradtx.inject_hyperparams(gradtx.adam)(learning_rate=1e-3)
      >>> gradtx.inspect_state(tx.init({"w": jnp.zeros(3)})).hyperparam("learning_rate")
      0.0010000000474974513
      >>> tx = gradtx.adamw(gradtx.schedules.linear_schedule(1.0, 0.0, 10))
      >>> state = tx.init({"w": jnp.zeros(3)})
      >>> for _ in range(3):
      ...     _, state = tx.update({"w": jnp.ones(3)}, state, {"w": jnp.zeros(3)})
      >>> round(gradtx.inspect_state(state, tx).hyperparam("learning_rate"), 6)
      0.8
    """
    fields = []
    step, step_path, step_depth = None, None, None
    locations = _locations(state)
    # a location's `count` counts NaNs, not steps
    not_steps = {path_str((*kp, jtu.GetAttrKey("count"))) for kp, _ in locations}
    role_of = _role_names(state)
    flat = [
        (path_str(key_path), key_path, leaf)
        for key_path, leaf in jtu.tree_flatten_with_path(state)[0]
    ]
    keys = short_keys(state, [path for path, _, _ in flat])
    for (path, key_path, leaf), key in zip(flat, keys, strict=True):
        shape, dtype, nbytes = _layout(leaf)
        value = _scalar(leaf)
        fields.append(StateField(path, shape, dtype, nbytes, value, role_of.get(path, ""), key))
        last = path.rsplit("/", 1)[-1]
        if (
            last in _COUNT_NAMES
            and path not in not_steps
            and shape == ()
            and np.issubdtype(np.dtype(dtype), np.integer)
            and (step_depth is None or len(key_path) < step_depth)
        ):
            step_depth, step_path = len(key_path), path
            step = None if value is None else int(value)
    hyperparams: dict[str, float] = {}
    _injected(state, (), hyperparams)
    values: dict[str, float] = {}
    if tx is not None and all(f.value is not None or f.shape != () for f in fields):
        values = to_scalars(metrics(tx, state))
    return StateSummary(
        tuple(fields),
        step,
        step_path,
        hyperparams,
        _located(locations),
        values,
        _quantized(state, {f.path: f.key for f in fields}),
    )


def _quantized(state: OptState, key_of: dict[str, str]) -> tuple[QuantizedBuffer, ...]:
    out = []
    for role in roles(state):
        q = role.value
        if not isinstance(q, QuantizedArray):
            continue
        key = key_of.get(f"{role.key}/codes", f"{role.key}/codes").rsplit("/", 1)[0]
        stored = sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in (q.codes, q.scale))
        max_abs = bound = None
        if not isinstance(q.codes, jax.ShapeDtypeStruct) and not isinstance(
            q.codes, jax.core.Tracer
        ):
            max_abs = float(np.max(np.abs(np.asarray(decode_compiled(q))))) if q.codes.size else 0.0
            bound = float(error_bound_compiled(q)) if q.codes.size else 0.0
        out.append(
            QuantizedBuffer(
                key,
                role.name,
                q.storage,
                q.shape,
                stored,
                4 * int(np.prod(q.shape)),
                max_abs,
                bound,
            )
        )
    return tuple(out)
