"""`migrate`: a state for another optimizer, built from an older state by what its leaves are.

The old state's values and the new template's are listed with their roles (`_roles.py`). The
state objects (one per stateful transformation or wrapper) are matched first, by class name and
labels wherever they sit (`_roles.match_instances`): a class held once on each side pairs
whatever the order, same-class objects pair in order, and where one side holds more of a class
their position among the other objects decides, or the migration refuses rather than guess (two
same-class objects, one of which was removed). Inside a matched pair, values are matched by
field and parameter path: a value found in both is carried over (converted to the new dtype or
8-bit code where they differ; a shape difference is an error naming both paths); a value only
the new state has starts as the template has it (fresh, reported), except a new wrapper's count
of the run's steps (the field its state class names `RUN_STEP`), which starts at the old run's
step; a value only the old one has is dropped (reported). Parameter paths that coincide
(`{"a/b": x, "a": {"b": y}}`) would match one parameter's values to the other's, so such states
are refused.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax import tree_util as jtu

from .._base._typing import OptState
from ..state._quantize import QuantizedArray, decode_compiled, encode_compiled
from ..tree import path_str
from ..tree._paths import named_leaves
from ._format import CheckpointError
from ._leaves import _is_key, _restore, _spec
from ._roles import Role, match_instances, roles, skeleton

_LIMIT = 12

_STEP_FIELDS = ("count", "gradient_step")  # as inspect_state reads the step


@dataclasses.dataclass(frozen=True)
class MigrationReport:
    """What `migrate` did with each value, by state path and role.

    Attributes:
      carried: (old path, new path) of every value copied as it was.
      converted: (old path, new path, what) of every value carried to another dtype or code
        (`what` is e.g. `"float32 -> bfloat16"`).
      fresh: (new path, role) of every value the old state lacks: it starts as `tx_new.init`
        made it (a new wrapper's counters at zero, a new moment at zero, ...), or at the old
        run's step where `continued` lists it.
      dropped: (old path, role) of every value the new optimizer has no place for.
      continued: (new path, step) of the fresh step counters set to the old run's step (a new
        wrapper's count of the run's steps, its state class's `RUN_STEP`).
    """

    carried: tuple[tuple[str, str], ...] = ()
    converted: tuple[tuple[str, str, str], ...] = ()
    fresh: tuple[tuple[str, str], ...] = ()
    dropped: tuple[tuple[str, str], ...] = ()
    continued: tuple[tuple[str, int], ...] = ()

    @property
    def complete(self) -> bool:
        """Whether every value was carried (nothing fresh, nothing dropped)."""
        return not self.fresh and not self.dropped

    def __str__(self) -> str:
        lines = [
            f"migrated: {len(self.carried)} carried, {len(self.converted)} converted, "
            f"{len(self.fresh)} fresh, {len(self.dropped)} dropped"
        ]
        steps = {path: f": {step}, the run's step" for path, step in self.continued}
        for title, rows in (
            ("converted", [f"{new} ({what})" for _, new, what in self.converted]),
            ("fresh", [f"{path} ({role}){steps.get(path, '')}" for path, role in self.fresh]),
            ("dropped", [f"{path} ({role})" for path, role in self.dropped]),
        ):
            if rows:
                more = f"\n    ... and {len(rows) - _LIMIT} more" if len(rows) > _LIMIT else ""
                lines.append(f"  {title}:\n    " + "\n    ".join(rows[:_LIMIT]) + more)
        return "\n".join(lines)


class Migration(NamedTuple):
    """What `migrate` returns: the new state and the report (`state, report = migrate(...)`)."""

    state: OptState
    report: MigrationReport


def _instances(values: Sequence[Role]) -> list[tuple[str, tuple[str, tuple[str, ...]]]]:
    """(instance path, token) of each state object, in order of first appearance."""
    seen: dict[str, tuple[str, tuple[str, ...]]] = {}
    for role in values:
        seen.setdefault(role.instance, role.token)
    return list(seen.items())


def _stored(value: Any) -> Any:
    """A value as host data: a key as its raw data, an 8-bit buffer with host parts."""
    if isinstance(value, QuantizedArray):
        return value
    if _is_key(value):
        return np.asarray(jax.random.key_data(value))
    return np.asarray(value)


def _raw_key(new: Role, old: Role, source: str) -> str:
    """Check that the typed key `old.value` may go to `new`, a value of raw key data (as
    `jax.random.key_data` gives it, e.g. gradtx's `AddNoiseState.rng_key`), which its
    transformation wraps back with JAX's default implementation: a key of another
    implementation would be read as another key, so it is refused. Returns the report's note."""
    default = jax.random.key_impl(jax.random.key(0))
    impl = jax.random.key_impl(old.value)
    if impl != default:
        raise CheckpointError(
            f"migrate: {old.key!r} of the {source} is a {impl} PRNG key ({old.value.dtype}), "
            f"but {new.key!r} of the new state ({new.name}) holds the raw data of a "
            f"{default} key (JAX's default implementation); run with that implementation "
            f"(jax.config.update('jax_default_prng_impl', '{impl}')) or start a new key there"
        )
    return f"{old.value.dtype} -> raw key data"


def _dtype_name(value: Any) -> str:
    if isinstance(value, QuantizedArray):
        return value.storage
    return np.dtype(value.dtype).name


def _castable(a: np.dtype, b: np.dtype) -> bool:
    kinds = {"f": "float", "V": "float", "c": "complex", "i": "int", "u": "int", "b": "bool"}
    fa = "float" if jax.dtypes.issubdtype(a, np.floating) else kinds.get(a.kind, a.kind)
    fb = "float" if jax.dtypes.issubdtype(b, np.floating) else kinds.get(b.kind, b.kind)
    return fa == fb or (fa == "float" and fb == "complex")


def _convert(new: Role, old: Role, source: str) -> tuple[Any, str | None]:
    """The old value as a leaf like the template's `new.value`, and what was converted."""
    template, value = new.value, _stored(old.value)
    if _is_key(template) or (not isinstance(template, QuantizedArray) and _is_key(old.value)):
        note = None if _is_key(template) else _raw_key(new, old, source)
        if _spec(value) != _spec(template):
            raise CheckpointError(
                f"migrate: {old.key!r} of the {source} and {new.key!r} of the new state "
                f"({new.name}) are not both PRNG keys of one shape"
            )
        return _restore("migrate", new.key, template, value), note
    if old.shape != new.shape:
        raise CheckpointError(
            f"migrate: {new.name} has shape {list(new.shape)} in the new state ({new.key!r}) "
            f"but {list(old.shape)} in the {source} ({old.key!r}); the parameters differ "
            "(another model?) or the role means something else there"
        )
    note = None
    if isinstance(template, QuantizedArray):
        same = (
            isinstance(value, QuantizedArray)
            and value.block_size == template.block_size
            and value.signed == template.signed
            and value.codec == template.codec
        )
        if not same:
            floats = decode_compiled(value) if isinstance(value, QuantizedArray) else value
            value = jax.device_get(
                encode_compiled(
                    np.asarray(floats, np.float32),
                    block_size=template.block_size,
                    signed=template.signed,
                    codec=template.codec,
                )
            )
            note = f"{_dtype_name(old.value)} -> {_dtype_name(template)}"
        codes = _restore("migrate", new.key + "/codes", template.codes, np.asarray(value.codes))
        scale = _restore("migrate", new.key + "/scale", template.scale, np.asarray(value.scale))
        return QuantizedArray(
            codes, scale, template.shape, template.block_size, template.signed, template.codec
        ), note
    if isinstance(value, QuantizedArray):
        value = np.asarray(decode_compiled(value))
        note = f"{_dtype_name(old.value)} -> "
    want = np.dtype(getattr(template, "dtype", np.asarray(template).dtype))
    if value.dtype != want:
        if not _castable(value.dtype, want):
            raise CheckpointError(
                f"migrate: {new.name} is {want.name} in the new state ({new.key!r}) but "
                f"{value.dtype.name} in the {source} ({old.key!r}): not a conversion migrate "
                "makes (only float <-> float / 8-bit and int <-> int)"
            )
        note = (note or f"{value.dtype.name} -> ") + want.name
        value = value.astype(want)
    elif note:
        note += want.name
    return _restore("migrate", new.key, template, value), note


def _unflatten_like(template: OptState, by_key: Mapping[str, Any]) -> OptState:
    """The template with the values at `by_key`'s paths replaced (an 8-bit buffer as one)."""
    with_path, treedef = jtu.tree_flatten_with_path(
        template, is_leaf=lambda x: isinstance(x, QuantizedArray)
    )
    leaves = [by_key.get(path_str(kp), leaf) for kp, leaf in with_path]
    return jtu.tree_unflatten(treedef, leaves)


def migrate_into(
    old_values: Sequence[Role],
    template: OptState,
    *,
    source: str = "old state",
    strict: bool = False,
    aliases: Mapping[str, str] | None = None,
    count: int | None = None,
    who: str = "migrate",
) -> Migration:
    """`template` (the new optimizer's state) with every value the old one has for the same
    role; see the module docstring for the rules. `aliases` renames old class names (another
    library's) to gradtx's; `count`, if given, is the value of every fresh scalar integer
    `count` field (the step count of a converted run, for the new chain's schedules) and the
    run's step; by default the run's step is the old state's (`run_step`). `who` names the
    caller in the refusal of a template whose paths coincide."""
    unique_paths(who, template)
    step = count if count is not None else run_step(old_values)
    if aliases:
        old_values = [dataclasses.replace(r, kind=aliases.get(r.kind, r.kind)) for r in old_values]
    new_values = roles(template)
    pairs = match_instances(_instances(old_values), _instances(new_values), source)
    old_by: dict[str, dict[tuple[str, str], Role]] = {}
    for role in old_values:
        old_by.setdefault(role.instance, {})[role.slot] = role
    new_by: dict[str, list[Role]] = {}
    for role in new_values:
        new_by.setdefault(role.instance, []).append(role)
    for new_instance, paired in pairs.items():
        old_params = {r.param for r in old_by[paired].values() if r.param}
        new_params = {r.param for r in new_by[new_instance] if r.param}
        if old_params and new_params and not old_params & new_params:
            first_new = next(r for r in new_by[new_instance] if r.param)
            first_old = next(r for r in old_by[paired].values() if r.param)
            raise CheckpointError(
                f"migrate: {first_new.kind} holds parameters {sorted(new_params)[:3]} in the new "
                f"state ({first_new.key!r}) but {sorted(old_params)[:3]} in the {source} "
                f"({first_old.key!r}): no parameter path in common (renamed parameters or "
                "another model); migrate maps values by parameter path and renames nothing"
            )
    carried, converted, fresh, continued = [], [], [], []
    used: set[str] = set()
    out: dict[str, Any] = {}
    for role in new_values:
        old_instance = pairs.get(role.instance)
        old = old_by.get(old_instance, {}).get(role.slot) if old_instance is not None else None
        if old is None:
            if isinstance(role.value, jax.ShapeDtypeStruct):
                raise CheckpointError(
                    f"migrate: {role.key!r} ({role.name}) is not in the {source} and the "
                    "template is abstract there; pass a concrete template (tx.init(params))"
                )
            fresh.append((role.key, role.name))
            # a wrapper state's field that counts the run's steps (its class's `RUN_STEP`)
            counts_steps = role.run_step
            if count is not None and role.field == "count":
                counts_steps = True
            if step is not None and counts_steps and _is_int_scalar(role.value):
                out[role.key] = _restore(
                    "migrate", role.key, role.value, np.asarray(step, np.dtype(role.value.dtype))
                )
                continued.append((role.key, step))
            continue
        used.add(old.key)
        out[role.key], note = _convert(role, old, source)
        if note:
            converted.append((old.key, role.key, note))
        else:
            carried.append((old.key, role.key))
    dropped = [(r.key, r.name) for r in old_values if r.key not in used]
    report = MigrationReport(
        tuple(carried), tuple(converted), tuple(fresh), tuple(dropped), tuple(continued)
    )
    if strict and not report.complete:
        raise CheckpointError(f"migrate(strict=True): not every value has a match\n{report}")
    return Migration(_unflatten_like(template, out), report)


def unique_paths(who: str, state: Any) -> None:
    """Refuse a state in which two values have one path (parameters `"a/b"` and `a` / `b`):
    values are matched by path, so one parameter's would go to the other. The check and its
    message are `state_dict`'s (`tree._paths.named_leaves`)."""
    named_leaves(who, state, error=CheckpointError)


def run_step(values: Sequence[Role]) -> int | None:
    """The run's step in a state's values, as `inspect_state` reads it: its outermost scalar
    integer `count` or `gradient_step` (None if it holds none, or only abstract ones)."""
    best: tuple[int, int] | None = None
    for role in values:
        if role.field in _STEP_FIELDS and not role.param and _is_int_scalar(role.value):
            if isinstance(role.value, jax.ShapeDtypeStruct):
                continue
            depth = role.key.count("/")
            if best is None or depth < best[0]:
                best = (depth, int(np.asarray(role.value)))
    return None if best is None else best[1]


def _is_int_scalar(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and np.shape(x) == () and jax.dtypes.issubdtype(dtype, np.integer)


def _is_path(x: Any) -> bool:
    return isinstance(x, str | os.PathLike)


def source_values(
    old: Any,
    read_file: Callable[[str], tuple[dict[str, np.ndarray], str | None]],
    load_file: Callable[[str, OptState], OptState],
    load_flat: Callable[[OptState, Mapping[str, Any]], OptState],
    old_template: Callable[[], OptState] | None,
) -> tuple[list[Role], str]:
    """The old state's values with their roles, and how to name it in messages."""
    if _is_path(old):
        path = os.fsdecode(old)
        source = f"checkpoint {path!r}"
        if old_template is not None:
            return roles(load_file(path, old_template())), source
        flat, structure = read_file(path)
        if structure is None:
            raise CheckpointError(
                f"migrate: {path!r} was written before gradtx recorded what each tensor is (its "
                "header has no 'structure'); pass old_tx= (the optimizer that wrote it)"
            )
        return roles(skeleton(flat, structure, source)), source
    if (
        isinstance(old, Mapping)
        and all(isinstance(k, str) for k in old)
        and not _looks_like_state(old)
    ):
        if old_template is None:
            raise CheckpointError(
                "migrate: a flat state dict (from gradtx.state_dict) does not say what each "
                "value is; pass old_tx= (the optimizer that made it), or pass the state itself"
            )
        return roles(load_flat(old_template(), old)), "state dict"
    unique_paths("migrate", old)
    return roles(old), "old state"


def _looks_like_state(d: Mapping[str, Any]) -> bool:
    """A dict state (a `named_chain`'s) rather than a flat state dict: its keys hold no '/'
    and some value is itself a container."""
    return any(not hasattr(v, "shape") and not np.isscalar(v) for v in d.values())


__all__ = ["Migration", "MigrationReport", "migrate_into", "source_values"]
