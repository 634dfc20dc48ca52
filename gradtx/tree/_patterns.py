"""The one pattern language on parameter paths, masks and prefix broadcasting (internal).

Everything that selects parameters by name goes through here: glob patterns on '/'-joined key
paths (`gradtx.tree.match`, `gradtx.tree.glob_matches`; the language is specified, with examples
that the tests check, in docs/patterns.md), ordered rules `pattern -> value` (`lr_multipliers`,
`scale_gradient_by`, `labels_by_pattern`), masks given as boolean trees, callables or patterns
(`resolve_mask`), and prefix trees spread over the params (`broadcast_prefix`). Selections are
resolved in Python, at trace time, into one Python value per leaf, so unselected leaves cost
nothing in the compiled step.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, cast

import jax
import numpy as np

from .._base._checks import did_you_mean
from .._base._typing import Mask, Params, PyTree
from ._paths import (
    _children,
    _is_tree_leaf,
    _kind,
    assert_same_structure,
    map_with_path,
    path_str,
    paths,
)

MaskOrFn: TypeAlias = Mask  # a mask with patterns (`gradtx.MaskOrFn` is Optax's, without)

NO_DEFAULT: Any = object()

# --------------------------------------------------------------------------------------------
# Globs: compiled to one regular expression over "/" + path (each component preceded by "/")
# --------------------------------------------------------------------------------------------

_ANY_COMPONENTS = "(?:/[^/]*)*"  # `**`: any number of whole components, including none
_STAR = "[^/]*"


def _class_regex(part: str, i: int) -> tuple[str, int] | None:
    """The bracket expression starting at `part[i] == "["`: (its regex, the index after it), or
    None when it is not closed (then the `[` is a literal)."""
    j = i + 1
    negate = j < len(part) and part[j] in "!^"
    if negate:
        j += 1
    start = j
    if j < len(part) and part[j] == "]":  # a `]` first is a member
        j += 1
    end = part.find("]", j)
    if end == -1:
        return None
    body = part[start:end]
    members, k = [], 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            low, high = body[k], body[k + 2]
            if low <= high:  # a reversed range matches nothing
                members.append(f"{re.escape(low)}-{re.escape(high)}")
            k += 3
        else:
            members.append(re.escape(body[k]))
            k += 1
    chars = "".join(members)
    if negate:
        return f"[^/{chars}]", end + 1
    return (f"[{chars}]" if chars else "(?!)"), end + 1


def _component_regex(part: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(part):
        c = part[i]
        if c == "*":
            if not out or out[-1] != _STAR:
                out.append(_STAR)
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and (found := _class_regex(part, i)) is not None:
            out.append(found[0])
            i = found[1]
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def _glob_regex(pattern: str) -> re.Pattern:
    pieces: list[str] = []
    for part in pattern.strip("/").split("/"):
        if part == "**":
            if not pieces or pieces[-1] != _ANY_COMPONENTS:  # `**/**` is `**`
                pieces.append(_ANY_COMPONENTS)
        else:
            pieces.append("/" + _component_regex(part))
    return re.compile("".join(pieces))


def glob_matches(pattern: str, path: str) -> bool:
    """Whether the '/'-joined `path` matches the glob `pattern` as a whole.

    `*` matches within one path component, `**` (a whole component) any number of components
    including none, `?` one character, `[abc]` / `[a-z]` one character of a set, `[!abc]` or
    `[^abc]` one character not in it. A leading `!` is not special here (see `match`). The full
    language, with examples: docs/patterns.md.

    Example:
      >>> import gradtx
      >>> gradtx.tree.glob_matches("encoder/**/bias", "encoder/layers/0/bias")
      True
    """
    return _glob_regex(pattern).fullmatch("/" + path) is not None


def _as_patterns(who: str, pattern: Any) -> list[str]:
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    if not patterns or not all(isinstance(p, str) for p in patterns):
        raise ValueError(f"{who}: pattern must be a glob string or a list of them, got {pattern!r}")
    return patterns


def _shown(all_paths: list[str]) -> list[str]:
    return all_paths[:40] + (["..."] if len(all_paths) > 40 else [])


def _no_match_error(who: str, pattern: str, what: str, all_paths: list[str]) -> ValueError:
    hint = " (pass strict=False to allow patterns that match nothing)" if what else ""
    negated = "!" if pattern.startswith("!") else ""
    close = did_you_mean(pattern, [negated + q for q in all_paths])
    if negated:
        hint = "; a negated pattern that matches nothing excludes nothing" + hint
    return ValueError(
        f"{who}: pattern {pattern!r}{what} matches no parameter{close}; "
        f"available paths: {_shown(all_paths)}{hint}"
    )


def _select(who: str, patterns: list[str], all_paths: list[str], strict: bool) -> list[bool]:
    """Per path: matched by a positive pattern (or there is none) and by no negated one. With
    `strict`, a pattern that matches no path raises, a negated one too (`"!**/biass"` excludes
    nothing: a typo that would silently select every leaf); checked on the same matches, so it
    costs nothing extra."""
    positive = [p for p in patterns if not p.startswith("!")]
    negative = [p for p in patterns if p.startswith("!")]
    hits = [[glob_matches(p, q) for q in all_paths] for p in positive]
    misses = [[glob_matches(p[1:], q) for q in all_paths] for p in negative]
    if strict:
        for p, h in zip(positive + negative, hits + misses, strict=True):
            if not any(h):
                raise _no_match_error(who, p, "", all_paths)
    return [
        (not positive or any(h[i] for h in hits)) and not any(m[i] for m in misses)
        for i in range(len(all_paths))
    ]


def match(pattern: str | Sequence[str], tree: PyTree, *, strict: bool = False) -> PyTree:
    """A boolean tree: True where a leaf's '/'-joined key path matches the glob `pattern`.

    Patterns match the whole path. `*` matches within one path component, `**` any number of
    components (including none), `?` one character, `[abc]` a character class (`[!abc]` or
    `[^abc]` its complement); a leading `!` negates. A list of patterns selects the leaves
    matched by any positive pattern and by no negated one (with only negated patterns,
    everything else is selected). The full language, with examples: docs/patterns.md.

    Examples: `"encoder/*/kernel"`, `"**/bias"` (any bias at any depth), `"!**/bias"` (all but
    biases), `["**", "!embed/**"]`.

    Args:
      pattern: a glob or a list of globs.
      tree: the tree whose leaves are matched (e.g. params).
      strict: raise a `ValueError` listing the available paths when a pattern matches no leaf
        (catches typos in parameter names), a negated one too (`"!**/biass"` would exclude
        nothing).

    Returns:
      A tree of Python bools with the structure of `tree` (None leaves stay None).
    """
    patterns = _as_patterns("match", pattern)
    selected = _select("match", patterns, paths(tree), strict)
    return jax.tree.structure(tree).unflatten(selected)


def resolve_rules(
    who: str,
    what: str,
    rules: Mapping[str, Any],
    tree: PyTree,
    *,
    default: Any = NO_DEFAULT,
    strict: bool = True,
) -> PyTree:
    """The value of the first glob pattern (in `rules`' order) matching each leaf's path.

    Raises:
      ValueError: naming `who`, when a leaf matches no pattern and there is no `default` (lists
        the unmatched paths), or, with `strict`, when a pattern matches no leaf or only leaves
        that earlier patterns already took (lists the available paths).
    """
    all_paths = paths(tree)
    values: list[Any] = [NO_DEFAULT] * len(all_paths)
    for pattern, value in rules.items():
        if not isinstance(pattern, str):
            raise ValueError(
                f"{who}: the keys of {what} must be glob patterns (strings), got {pattern!r}"
            )
        hits = [i for i, on in enumerate(_select(who, [pattern], all_paths, False)) if on]
        taken = [i for i in hits if values[i] is NO_DEFAULT]
        if (
            strict
            and pattern.startswith("!")
            and not any(_select(who, [pattern[1:]], all_paths, False))
        ):
            raise _no_match_error(who, pattern, f" in {what}", all_paths)
        if strict and not taken:
            if hits:
                raise ValueError(
                    f"{who}: pattern {pattern!r} in {what} only matches paths that earlier "
                    f"patterns already took ({_shown([all_paths[i] for i in hits])}); the first "
                    "matching pattern wins, so put the more specific pattern first (or pass "
                    "strict=False)"
                )
            raise _no_match_error(who, pattern, f" in {what}", all_paths)
        for i in taken:
            values[i] = value
    missing = [all_paths[i] for i, v in enumerate(values) if v is NO_DEFAULT]
    if missing and default is NO_DEFAULT:
        raise ValueError(
            f"{who}: no pattern in {what} matches {_shown(missing)}; add a pattern for them "
            f"(e.g. '**' last as a catch-all) or pass a default. Patterns: {list(rules)}"
        )
    values = [default if v is NO_DEFAULT else v for v in values]
    return jax.tree.structure(tree).unflatten(values)


# --------------------------------------------------------------------------------------------
# Prefix trees: one value for a whole subtree
# --------------------------------------------------------------------------------------------


def broadcast_prefix(
    prefix: Any, tree: PyTree, *, who: str = "broadcast_prefix", what: str = "prefix"
) -> PyTree:
    """A tree shaped like `tree` holding, at each leaf, the value of `prefix` above it.

    `prefix` has `tree`'s structure or is a prefix of it: each of its leaves stands for the whole
    subtree of `tree` below it (e.g. `{"encoder": False, "head": True}` for a mask, or
    `{"encoder": "adam", "head": "sgd"}` for labels). None leaves of `tree` stay None.

    Raises:
      ValueError: naming `who`, `what` (the prefix's role, e.g. "mask") and the first path where
        `prefix` is not a prefix of `tree`, with what each has there, e.g. ``multi_transform:
        labels must have the params' tree structure or be a prefix of it; they differ at 'head':
        labels has a dict with keys ['w'], params have a dict with keys ['b', 'w']``.

    Example:
      >>> import gradtx
      >>> gradtx.tree.broadcast_prefix({"a": 1, "b": 2}, {"a": {"x": 0.0, "y": 0.0}, "b": 0.0})
      {'a': {'x': 1, 'y': 1}, 'b': 2}
    """
    try:
        return jax.tree.map(
            lambda v, sub: jax.tree.map(lambda _: v, sub),
            prefix,
            tree,
            is_leaf=lambda x: x is None,
        )
    except ValueError:
        found = _prefix_difference(prefix, tree, ())
        where_ = f"'{path_str(found[0])}'" if found and found[0] else "the root"
        detail = f": {what} has {_kind(found[1])}, params have {_kind(found[2])}" if found else ""
        raise ValueError(
            f"{who}: {what} must have the params' tree structure or be a prefix of it; they "
            f"differ at {where_}{detail}"
        ) from None


def _prefix_difference(prefix: Any, tree: Any, path: tuple) -> tuple[tuple, Any, Any] | None:
    """The first place where `prefix` is not a prefix of `tree`: (path, prefix's node, tree's)."""
    if _is_tree_leaf(prefix):
        return None
    kids_p, kids_t = _children(prefix), _children(tree)
    same_kind = type(prefix) is type(tree) or (
        isinstance(prefix, Mapping) and isinstance(tree, Mapping)
    )
    if not same_kind or [k for k, _ in kids_p] != [k for k, _ in kids_t]:
        return path, prefix, tree
    for (key, a), (_, b) in zip(kids_p, kids_t, strict=True):
        found = _prefix_difference(a, b, (*path, key))
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------------------------------
# Masks
# --------------------------------------------------------------------------------------------


def _is_patterns(mask: Any) -> bool:
    return isinstance(mask, str) or (
        isinstance(mask, list | tuple) and bool(mask) and all(isinstance(m, str) for m in mask)
    )


def _as_bool(who: str, value: Any, path: str) -> bool:
    if isinstance(value, jax.core.Tracer):
        raise ValueError(
            f"{who}: the mask value at {path!r} is traced; a mask must be known at trace time "
            "(Python bools, or a function of the params' paths, shapes and dtypes)"
        )
    arr = np.asarray(value)
    if arr.dtype != np.bool_ or arr.ndim != 0:
        raise ValueError(
            f"{who}: mask leaves must be booleans, got {arr.dtype}{list(arr.shape)} at {path!r}"
        )
    return bool(arr)


def _is_bool_value(x: Any) -> bool:
    """A Python / NumPy bool, or a concrete 0-d boolean array (`jnp.array(True)`)."""
    if isinstance(x, bool | np.bool_):
        return True
    return (
        isinstance(x, np.ndarray | jax.Array)
        and not isinstance(x, jax.core.Tracer)
        and x.ndim == 0
        and x.dtype == np.bool_
    )


def _is_prefix_bool_tree(mask: Any) -> bool:
    return all(_is_bool_value(x) for x in jax.tree.leaves(mask))


def is_tree_not_function(value: Any, params: Params) -> bool:
    """Whether a callable `value` is meant as a tree (of mask values or labels), not as a function
    of the params: it is a pytree with leaves (an Equinox-like module defining `__call__`, not a
    plain function or `functools.partial` / `jax.tree_util.Partial`) whose structure is that of
    `params` or a prefix of it (Optax issue #913)."""
    if isinstance(value, functools.partial | jax.tree_util.Partial) or _is_tree_leaf(value):
        return False
    return bool(jax.tree.leaves(value)) and _prefix_difference(value, params, ()) is None


def resolve_mask_prefix(who: str, mask: MaskOrFn, params: Params, *, strict: bool = True) -> Any:
    """The mask as a tree of Python bools with `params`' structure or a prefix of it: a boolean
    prefix tree (as given, or as a callable returns it) keeps its shape, each bool standing for
    its whole subtree (a None in it is False); patterns and non-bool trees give one bool per leaf.

    What `masked` prunes by, as Optax's does (a False over a subtree masks it as one node);
    `resolve_mask` spreads it over the leaves. Arguments and errors as for `resolve_mask`.
    """
    if _is_patterns(mask):
        patterns = _as_patterns(who, cast(Sequence[str], mask))
        return jax.tree.structure(params).unflatten(_select(who, patterns, paths(params), strict))
    if callable(mask) and not is_tree_not_function(mask, params):
        mask = mask(params)
    if not _is_prefix_bool_tree(mask):
        assert_same_structure(who, params=params, mask=mask)
        return map_with_path(lambda path, m: _as_bool(who, m, path), mask)
    broadcast_prefix(mask, params, who=who, what="mask")  # errors name where it is no prefix
    return jax.tree.map(lambda m: m is not None and bool(m), mask, is_leaf=lambda x: x is None)


def resolve_mask(who: str, mask: MaskOrFn, params: Params, *, strict: bool = True) -> Any:
    """The mask as a tree of Python bools shaped like `params` (None leaves stay None).

    Transformations call it in `init` (where a pattern that matches nothing is reported) and in
    `update` (where the selection is needed; the check there costs nothing extra).

    Args:
      who: the transformation, for error messages.
      mask: boolean tree (or prefix; a 0-d boolean array counts as a bool), callable of params,
        or glob pattern(s). A callable pytree whose structure is a prefix of the params (an
        Equinox-like module) is a tree, not a function (see `is_tree_not_function`).
      params: the parameters (or updates) the mask refers to.
      strict: for patterns, a positive pattern that matches nothing raises a `ValueError` listing
        the available paths.
    """
    return spread_mask(resolve_mask_prefix(who, mask, params, strict=strict), params)


def spread_mask(prefix: Any, params: Params) -> Any:
    """A mask from `resolve_mask_prefix` spread over the leaves of `params` (None leaves stay
    None)."""
    spread = broadcast_prefix(prefix, params, what="mask")
    return jax.tree.map(lambda _, m: bool(m), params, spread)


__all__ = [
    "NO_DEFAULT",
    "MaskOrFn",
    "broadcast_prefix",
    "glob_matches",
    "is_tree_not_function",
    "match",
    "resolve_mask",
    "resolve_mask_prefix",
    "resolve_rules",
    "spread_mask",
]
