"""What each leaf of an optimizer state *is*: its role, the key `gradtx.migrate` matches on.

A state is a tree of containers: a `chain`'s tuple, a `named_chain`'s dict, the state objects
of transformations (NamedTuples, dataclasses: nodes whose children are attributes) and, inside
those, trees shaped like the parameters. A leaf's role is

- `kind`: the class name of the state object that holds it (`"ScaleByAdamState"`),
- `labels`: the names on the way to that object that tell sub-states apart: `named_chain`
  names, `multi_transform` labels, and the fields of states that hold several sub-states by name
  (`LABELLED`, e.g. SAM's `opt_state` / `adv_state`),
- `field`: the field of that object (`"mu"`),
- `param`: the parameter path below the field (`"encoder/kernel"`, `""` for a scalar),

and nothing positional: the index in a `chain` and the field through which a wrapper holds its
inner state (`TRANSPARENT`: `inner_state`, ...) are left out, so adding a clip to a chain or
wrapping it in `accumulate_k_steps` changes no role of the leaves that were there. An 8-bit
buffer (`QuantizedArray`) is one value, whatever its parts.

Roles come from a live state (its classes) or from a checkpoint file, whose header records
the containers outside the state objects and the class names (`structure_of`, written by
`gradtx.save`; `skeleton` rebuilds a tree from it).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax import tree_util as jtu

from ..state._lowbit import CODECS, FOUR_BIT
from ..state._quantize import QuantizedArray
from ..tree import path_str
from ._format import CheckpointError

# Fields through which a wrapper holds the state of the one transformation it wraps: not part
# of any role (wrapping or unwrapping changes nothing below them).
TRANSPARENT = frozenset({"inner_state", "inner_opt_state", "base_optimizer_state"})
# Fields that hold sub-states told apart by their name: the name is a label.
LABELLED = frozenset(
    {"inner_states", "opt_state", "adv_state", "measure_states", "hessian_fn_state"}
)

_QUANTIZED = re.compile(
    r"QuantizedArray\(block_size=(\d+), signed=(True|False)"
    r"(?:, codec=(\w+))?(?:, shape=([\dx]*))?\)"
)


@dataclasses.dataclass(frozen=True)
class Role:
    """One value of a state: where it is (`key`, its `state_dict` path; `instance`, the path of
    the state object holding it), what it is (`kind`, `labels`, `field`, `param`) and the value
    itself (an array, a `QuantizedArray` or a `jax.ShapeDtypeStruct`)."""

    key: str
    instance: str
    kind: str
    labels: tuple[str, ...]
    field: str
    param: str
    value: Any = dataclasses.field(compare=False, repr=False)
    # the field counts the run's steps (its state class's `RUN_STEP`; known of a live state)
    run_step: bool = dataclasses.field(default=False, compare=False, repr=False)

    @property
    def token(self) -> tuple[str, tuple[str, ...]]:
        """What an instance is matched on: its class name and labels."""
        return self.kind, self.labels

    @property
    def slot(self) -> tuple[str, str]:
        """What a value is matched on inside a matched instance."""
        return self.field, self.param

    @property
    def name(self) -> str:
        """The role as text: `ScaleByAdamState.mu[encoder/kernel]` (labels first, if any)."""
        labels = "".join(f"{label}:" for label in self.labels)
        what = f"{self.kind}.{self.field}" if self.field else self.kind or "leaf"
        return f"{labels}{what}" + (f"[{self.param}]" if self.param else "")

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in np.shape(self.value))


def _kind(node: Any, keys: list[Any]) -> str:
    """'record', 'seq', 'dict' or 'other' for a container whose child keys are `keys`."""
    if keys and all(isinstance(k, jtu.GetAttrKey) for k in keys):
        return "record"
    if isinstance(node, _Seq):
        return "seq"
    if isinstance(node, Mapping) or (keys and all(isinstance(k, jtu.DictKey) for k in keys)):
        return "dict"
    return "seq"


def _children(node: Any) -> list[tuple[Any, Any]]:
    if node is None or isinstance(node, QuantizedArray):
        return []
    if isinstance(node, _Record):
        return [(jtu.GetAttrKey(k), v) for k, v in node.fields.items()]
    if isinstance(node, _Seq):
        return [(jtu.SequenceKey(int(k)), v) for k, v in sorted(node.items(), key=_index)]
    if jtu.treedef_is_leaf(jax.tree.structure(node)):
        return []
    flat, _ = jtu.tree_flatten_with_path(node, is_leaf=lambda y: y is not node)
    return [(kp[0], child) for kp, child in flat]


def _empty(node: Any) -> bool:
    """None or an empty container: no value (a file has no entry for it)."""
    return not isinstance(node, QuantizedArray) and jax.tree.structure(node).num_leaves == 0


def _class_name(node: Any) -> str:
    return node.kind if isinstance(node, _Record) else type(node).__name__


def roles(state: Any) -> list[Role]:
    """Every value of `state` (a live state, or a `skeleton` of a file) with its role, in
    flattening order (a `QuantizedArray` once, at its first part)."""
    out: list[Role] = []

    def inside(
        node: Any,
        path: tuple,
        instance: tuple,
        kind: str,
        labels: tuple,
        field: str,
        below: tuple,
        run_step: bool = False,
    ) -> None:
        if isinstance(node, QuantizedArray) or not _children(node):
            if _empty(node):
                return
            where = (path_str(path), path_str(instance), kind, labels, field, path_str(below))
            out.append(Role(*where, node, run_step=run_step and not below))
            return
        for key, child in _children(node):
            inside(child, (*path, key), instance, kind, labels, field, (*below, key), run_step)

    def outside(node: Any, path: tuple, labels: tuple) -> None:
        children = _children(node)
        if not children:
            if not _empty(node):
                inside(node, path, path[:-1], "", labels, "", path[-1:])
            return
        keys = [k for k, _ in children]
        kind = _kind(node, keys)
        for key, child in children:
            name = key.name if isinstance(key, jtu.GetAttrKey) else ""
            if kind == "record" and name in TRANSPARENT:
                outside(child, (*path, key), labels)
            elif kind == "record" and name in LABELLED:
                outside(child, (*path, key), (*labels, name))
            elif kind == "record":
                run_step = getattr(type(node), "RUN_STEP", None) == name
                inside(child, (*path, key), path, _class_name(node), labels, name, (), run_step)
            elif kind == "dict":
                outside(child, (*path, key), (*labels, path_str((key,))))
            else:
                outside(child, (*path, key), labels)

    outside(state, (), ())
    return out


def quantized_kind(node: QuantizedArray) -> str:
    """How a file's header names a quantized buffer's layout: block size, code, codec (the
    dynamic 8-bit codec, the only one before others existed, is not named) and, for 4-bit
    codes (whose last axis is halved), the shape they stand for (`3x40x33`)."""
    codec = "" if node.codec == "dynamic" else f", codec={node.codec}"
    if node.codec in FOUR_BIT:
        codec += ", shape=" + "x".join(str(d) for d in node.shape)
    return f"QuantizedArray(block_size={node.block_size}, signed={node.signed}{codec})"


def quantized_kinds(structure: str) -> dict[str, tuple[int, bool, str, tuple[int, ...] | None]]:
    """`{path: (block_size, signed, codec, shape or None)}` of the quantized buffers a header's
    structure names."""
    out = {}
    for path, kind in json.loads(structure).items():
        m = _QUANTIZED.fullmatch(kind) if isinstance(kind, str) else None
        if m:
            shape = None
            if m.group(4) is not None:
                shape = tuple(int(d) for d in m.group(4).split("x") if d)
            out[path] = (int(m.group(1)), m.group(2) == "True", m.group(3) or "dynamic", shape)
    return out


def structure_of(state: Any) -> str:
    """The containers of `state` that a file's flat keys do not show, as JSON for its header:
    `{path: "seq" | "dict" | class name}` for every container outside the state objects, the
    class names of the state objects, and each `QuantizedArray` with its block size and code."""
    found: dict[str, str] = {}

    def walk(node: Any, path: tuple, within: bool) -> None:
        if isinstance(node, QuantizedArray):
            found[path_str(path)] = quantized_kind(node)
            return
        children = _children(node)
        if not children:
            return
        kind = _kind(node, [k for k, _ in children])
        if not within:
            found[path_str(path)] = _class_name(node) if kind == "record" else kind
        for key, child in children:
            name = key.name if isinstance(key, jtu.GetAttrKey) else None
            enters = kind == "record" and name not in TRANSPARENT | LABELLED
            walk(child, (*path, key), within or enters)

    walk(state, (), False)
    return json.dumps(found, separators=(",", ":"), sort_keys=True)


class _Record:
    """A state object rebuilt from a file: its class name and fields (never instantiated as
    the real class: the file names it, the code that defined it may be gone)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.fields: dict[str, Any] = {}


class _Seq(dict):
    """A sequence rebuilt from a file, by index (the indices of its empty entries are absent)."""


def skeleton(flat: Mapping[str, np.ndarray], structure: str, source: str) -> Any:
    """A tree with the roles of the state a file holds: `flat` (key -> array) nested along the
    containers `structure` (from `structure_of`) names; state objects become `_Record`s."""
    try:
        kinds = json.loads(structure)
        if not isinstance(kinds, dict) or not all(isinstance(v, str) for v in kinds.values()):
            raise ValueError("not an object of strings")
    except ValueError as e:
        raise CheckpointError(
            f"{source}: the header's state structure is unreadable ({e})"
        ) from None
    root: dict[str, Any] = {}
    quantized = quantized_kinds(structure)
    for key, arr in flat.items():
        parts = key.split("/") if key else []
        node = root
        for i, part in enumerate(parts[:-1]):
            node = node.setdefault(part, {})
            if "/".join(parts[: i + 1]) in quantized:
                break
        node[parts[-1] if parts else ""] = arr

    def build(node: Any, path: str) -> Any:
        if path in quantized:
            block_size, signed, codec, shape = quantized[path]
            codes, scale = node.get("codes"), node.get("scale")
            if codes is None or scale is None:
                raise CheckpointError(
                    f"{source}: the quantized buffer {path!r} lacks its codes or scale"
                )
            if codec not in CODECS:
                raise CheckpointError(
                    f"{source}: the quantized buffer {path!r} has codec {codec!r}, which this "
                    f"gradtx does not know ({', '.join(CODECS)}); upgrade gradtx"
                )
            shape = codes.shape if shape is None else shape
            return QuantizedArray(codes, scale, shape, block_size, signed, codec)
        if not isinstance(node, dict):
            return node
        kind = kinds.get(path)
        children = {k: build(v, f"{path}/{k}" if path else k) for k, v in node.items()}
        if kind == "seq":
            return _Seq(children)
        if kind in (None, "dict"):
            return children
        record = _Record(kind)
        record.fields = children
        return record

    return build(root, "")


def _index(item: tuple[str, Any]) -> int:
    return int(item[0]) if item[0].isdigit() else -1


# `multi_transform`'s field of labelled sub-states: its labels name them, the field adds nothing.
_UNNAMED_LABELS = frozenset({"inner_states"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def short_kind(kind: str) -> str:
    """A state class's name as a key part: `ScaleByAdamState` -> `adam`,
    `InjectHyperparamsState` -> `inject_hyperparams`."""
    name = kind.removesuffix("State") or kind
    name = name.removeprefix("ScaleBy") or name
    return _CAMEL.sub("_", name).lower()


def short_keys(state: Any, paths: list[str]) -> list[str]:
    """The short key of each of `paths` (the `state_dict(..., keys="paths")` keys of `state`,
    in order): the state object's kind, its labels, its field and the parameter path
    (`adam/mu/dense/kernel`, `inject_hyperparams/hyperparams/learning_rate`,
    `a/adam/mu/dense/kernel` under `multi_transform` label `a`), nothing positional. Kinds that
    occur more than once are numbered in flattening order (`adam.0`, `adam.1`). A value outside
    any state object keeps its path; if two short keys would coincide, every key is its path."""
    found = roles(state)
    bases: dict[str, str] = {}  # instance path -> its name, in flattening order
    for role in found:
        if role.kind and role.instance not in bases:
            labels = [label for label in role.labels if label not in _UNNAMED_LABELS]
            kind = short_kind(role.kind)
            bases[role.instance] = "/".join(labels if labels[-1:] == [kind] else [*labels, kind])
    total: dict[str, int] = {}
    for base in bases.values():
        total[base] = total.get(base, 0) + 1
    seen: dict[str, int] = {}
    names: dict[str, str] = {}
    for instance, base in bases.items():
        if total[base] > 1:
            names[instance] = f"{base}.{seen.get(base, 0)}"
            seen[base] = seen.get(base, 0) + 1
        else:
            names[instance] = base
    short: dict[str, str] = {}
    for role in found:
        key = role.key
        if role.kind:
            key = "/".join(part for part in (names[role.instance], role.field, role.param) if part)
        if isinstance(role.value, QuantizedArray):
            short[f"{role.key}/codes"], short[f"{role.key}/scale"] = f"{key}/codes", f"{key}/scale"
        else:
            short[role.key] = key
    out = [short.get(path, path) for path in paths]
    return out if len(set(out)) == len(out) else list(paths)


Token = tuple[str, tuple[str, ...]]


def _align(old: list[Token], new: list[Token]) -> list[tuple[int, int]]:
    """The earliest longest common subsequence of two token lists, as index pairs."""
    n, m = len(old), len(new)
    best = np.zeros((n + 1, m + 1), dtype=np.int64)
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            if old[i] == new[j]:
                best[i, j] = best[i + 1, j + 1] + 1
            else:
                best[i, j] = max(best[i + 1, j], best[i, j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if old[i] == new[j] and best[i, j] == best[i + 1, j + 1] + 1:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif best[i + 1, j] >= best[i, j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def match_instances(
    old: list[tuple[str, Token]], new: list[tuple[str, Token]], source: str
) -> dict[str, str]:
    """new instance path -> old instance path, for state objects given as (path, token) in
    flattening order.

    By role first: a token (class name and labels) that both lists hold equally often pairs
    its instances in order, so a state object whose class occurs once on each side is matched
    wherever it sits (two distinct stateful transformations may swap places). A token one side
    holds more often than the other is placed by its position among the other state objects
    (the longest common subsequence of the two lists); where that position does not decide
    (the earliest and the latest alignments differ, e.g. one of two traces removed), the match
    is refused rather than guessed.
    """
    otok, ntok = [t for _, t in old], [t for _, t in new]
    pairs: list[tuple[int, int]] = []
    aligned: tuple[list[tuple[int, int]], list[tuple[int, int]]] | None = None
    for token in dict.fromkeys(ntok):
        olds = [i for i, t in enumerate(otok) if t == token]
        news = [j for j, t in enumerate(ntok) if t == token]
        if not olds or len(olds) == len(news):
            pairs.extend(zip(olds, news, strict=False))
            continue
        if aligned is None:
            first = _align(otok, ntok)
            last = [
                (len(otok) - 1 - i, len(ntok) - 1 - j) for i, j in _align(otok[::-1], ntok[::-1])
            ]
            aligned = (first, last)
        early, late = ([(i, j) for i, j in a if otok[i] == token] for a in aligned)
        if sorted(early) != sorted(late) or len(early) != min(len(olds), len(news)):
            kind = "".join(f"{label}:" for label in token[1]) + (token[0] or "leaf")
            raise CheckpointError(
                f"migrate: the {source} holds {len(olds)} {kind} states "
                f"({[old[i][0] for i in olds][:4]}), the new optimizer {len(news)} "
                f"({[new[j][0] for j in news][:4]}): which old one is which new one is "
                "ambiguous; give the transformations distinct names with "
                "gradtx.named_chain, or migrate the parts separately"
            )
        pairs.extend(early)
    return {new[j][0]: old[i][0] for i, j in pairs}
