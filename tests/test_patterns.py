"""The glob pattern language on parameter paths (docs/patterns.md), against independent matchers,
and pattern errors reported at `init` by every transformation that takes patterns."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gradtx
from gradtx import tree

from .helpers import mixed_params
from .test_tree import MIXED_PATHS

DOC = Path(__file__).parent.parent / "docs" / "patterns.md"

# --------------------------------------------------------------------------------------------
# The documented examples
# --------------------------------------------------------------------------------------------


def _doc_examples() -> list[tuple[str, str, bool]]:
    section = DOC.read_text().split("## Examples", 1)[1]
    rows = re.findall(r"^\| `([^`]*)` \| `([^`]*)` \| (yes|no) \|$", section, flags=re.MULTILINE)
    return [(p, q, m == "yes") for p, q, m in rows]


def test_the_docs_list_examples():
    assert len(_doc_examples()) >= 25


@pytest.mark.parametrize(("pattern", "path", "expected"), _doc_examples())
def test_documented_example(pattern, path, expected):
    assert tree.glob_matches(pattern, path) is expected


def test_the_python_blocks_in_the_docs_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert blocks
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), {})


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        # `**` after `**`, and `[^...]` as a negated class (not literally)
        ("**/**", "a", True),
        ("**/**", "a/b/c", True),
        ("a/**/**", "a/b/c", True),
        ("a/**/**", "b/c", False),
        ("**/**/c", "a/c", True),
        ("[^x]", "y", True),
        ("[^x]", "x", False),
        ("[^x]", "^", True),
        ("[^]]", "a", True),  # `]` first in a class is a member
        ("[^]]", "]", False),
        ("[!]]", "]", False),
        ("a/[^0-2]", "a/5", True),
        ("a/[^0-2]", "a/1", False),
        # neither form of negated class matches the separator
        ("a[^x]b", "a/b", False),
        ("*", "", True),  # the path of a single-leaf tree is one empty component
    ],
)
def test_edge_cases(pattern, path, expected):
    assert tree.glob_matches(pattern, path) is expected


def test_keys_containing_a_slash_are_split_like_any_path():
    params = {"a/b": jnp.ones(1), "c": {"d": jnp.ones(1)}}
    assert tree.paths(params) == ["a/b", "c/d"]
    assert jax.tree.leaves(tree.match("*/b", params)) == [True, False]


# --------------------------------------------------------------------------------------------
# Within one component: Python's fnmatch, plus `[^...]` as a negation
# --------------------------------------------------------------------------------------------

_PATTERN_CHARS = "ab-[]!*?\\"
_NAME_CHARS = "ab-[]!*?\\^"


@given(st.text(_PATTERN_CHARS, max_size=8), st.text(_NAME_CHARS, max_size=6))
def test_one_component_means_what_fnmatch_means(pattern, name):
    # fnmatch has no `**` component; two stars in a row inside a component are one star
    expected = fnmatch.fnmatchcase(name, pattern)
    assert tree.glob_matches(pattern, name) is expected


@given(st.text(_PATTERN_CHARS, max_size=8), st.text("ab-[]*?\\", max_size=6))
def test_caret_negates_like_bang(pattern, name):
    # Names without '!' or '^' cannot tell a literal '!' from a literal '^', so the two spellings
    # must agree everywhere.
    caret = pattern.replace("[!", "[^")
    assert tree.glob_matches(caret, name) is tree.glob_matches(pattern, name)


# --------------------------------------------------------------------------------------------
# Whole paths: a recursive backtracking matcher over path components
# --------------------------------------------------------------------------------------------


def _reference(pattern: list[str], path: list[str]) -> bool:
    """Whether the components `path` match the components `pattern` ('**' = any number of
    components, including none; anything else: one component, as `fnmatch.fnmatchcase`)."""
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return _reference(rest, path) or (bool(path) and _reference(pattern, path[1:]))
    return bool(path) and fnmatch.fnmatchcase(path[0], head) and _reference(rest, path[1:])


_classes = st.tuples(
    st.sampled_from(["", "!", "^"]), st.sampled_from(["a", "ab", "a-c", "x", "b-z", "]a", "a-"])
)
_token = st.one_of(
    st.sampled_from(["a", "b", "c", "x", "_", "*", "?", "**"]),
    _classes.map(lambda c: ("class", c)),
)


def _render(tokens, *, for_fnmatch: bool) -> str:
    out = []
    for t in tokens:
        if isinstance(t, tuple):
            neg, body = t[1]
            neg = "!" if (for_fnmatch and neg) else neg
            out.append(f"[{neg}{body}]")
        else:
            out.append(t)
    return "".join(out)


_component = st.one_of(st.just(["**"]), st.lists(_token, min_size=1, max_size=3))
_name = st.text("abcx_", min_size=1, max_size=3)


@given(
    st.lists(_component, min_size=1, max_size=5),
    st.lists(_name, min_size=1, max_size=5),
)
def test_paths_match_like_the_reference_matcher(components, names):
    ours = "/".join(_render(c, for_fnmatch=False) for c in components)
    ref = [_render(c, for_fnmatch=True) for c in components]
    assert tree.glob_matches(ours, "/".join(names)) is _reference(ref, names)


@given(
    st.lists(_component, min_size=1, max_size=4),
    st.lists(_name, min_size=1, max_size=4),
)
def test_a_path_matching_a_pattern_matches_every_prefix_extended_by_double_star(components, names):
    # `p/**` matches what `p` matches, and `**/p` too
    pattern = "/".join(_render(c, for_fnmatch=False) for c in components)
    path = "/".join(names)
    if tree.glob_matches(pattern, path):
        assert tree.glob_matches(pattern + "/**", path)
        assert tree.glob_matches("**/" + pattern, path)
        assert tree.glob_matches(pattern + "/**", path + "/deeper")


# --------------------------------------------------------------------------------------------
# `match` on a tree with every kind of node; lists with negations
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "selected"),
    [
        ("dense/kernel", ["dense/kernel"]),
        ("dense/*", ["dense/bias", "dense/kernel"]),
        ("**/bias", ["dense/bias"]),
        ("**", MIXED_PATHS),
        ("pair/**", ["pair/a", "pair/b/0", "pair/b/1"]),
        ("layers/**/w", ["layers/1/w"]),
        ("*/?", ["layers/0", "pair/a"]),
        ("pair/b/[01]", ["pair/b/0", "pair/b/1"]),
        ("!**/bias", ["dense/kernel", "layers/0", "layers/1/w", "pair/a", "pair/b/0", "pair/b/1"]),
        (["dense/*", "pair/a", "!**/kernel"], ["dense/bias", "pair/a"]),
        ("bias", []),  # patterns match whole paths
    ],
)
def test_match_globs(pattern, selected):
    params = mixed_params()
    mask = tree.match(pattern, params)
    assert jax.tree.structure(mask) == jax.tree.structure(params)
    got = [p for p, m in zip(tree.paths(params), jax.tree.leaves(mask), strict=True) if m]
    assert got == selected


def test_match_strict_lists_available_paths():
    with pytest.raises(
        ValueError, match=r"^match: pattern '\*\*/kernal' matches no parameter.*available paths"
    ):
        tree.match("**/kernal", mixed_params(), strict=True)
    with pytest.raises(ValueError, match="must be a glob string"):
        tree.match([], mixed_params())


# --------------------------------------------------------------------------------------------
# Lists with negations, on a tree
# --------------------------------------------------------------------------------------------

_TREE = {
    "enc": {"w": jnp.ones(1), "b": jnp.ones(1), "layers": [jnp.ones(1), {"w": jnp.ones(1)}]},
    "head": {"w": jnp.ones(1), "b": jnp.ones(1)},
    "scale": jnp.ones(1),
}
_PATHS = tree.paths(_TREE)
_SIMPLE = st.sampled_from(["**", "**/w", "**/b", "enc/**", "head/*", "*", "enc/layers/?", "*/w"])


@given(st.lists(st.tuples(st.booleans(), _SIMPLE), min_size=1, max_size=4))
def test_a_list_selects_positives_minus_negatives(items):
    patterns = [("!" if neg else "") + p for neg, p in items]
    positive = [p for neg, p in items if not neg]
    negative = [p for neg, p in items if neg]
    mask = tree.match(patterns, _TREE)
    got = dict(zip(_PATHS, jax.tree.leaves(mask), strict=True))
    for path in _PATHS:
        hit = any(_reference(p.split("/"), path.split("/")) for p in positive) or not positive
        miss = any(_reference(p.split("/"), path.split("/")) for p in negative)
        assert got[path] is (hit and not miss), path


# --------------------------------------------------------------------------------------------
# A pattern that matches nothing is reported at init, by every transformation taking patterns
# --------------------------------------------------------------------------------------------

_PARAMS = {"dense": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}}
_TYPO = "dense/kernal"

# name -> (the transformation, the name its error starts with)
_AT_INIT = {
    "weight_decay": (lambda: gradtx.weight_decay(0.1, mask=_TYPO), "weight_decay"),
    "adamw": (lambda: gradtx.adamw(0.1, mask=[_TYPO]), "adamw: weight_decay"),
    "scale_by_trust_ratio": (lambda: gradtx.scale_by_trust_ratio(mask=_TYPO), "scale_by_trust"),
    "masked": (lambda: gradtx.masked(gradtx.adam(0.1), _TYPO), "masked"),
    "freeze": (lambda: gradtx.freeze(_TYPO), "freeze"),
    "freeze_tx": (lambda: gradtx.freeze(_TYPO, tx=gradtx.adam(0.1)), "freeze"),
    "lr_multipliers": (lambda: gradtx.lr_multipliers({_TYPO: 0.5}), "lr_multipliers"),
    "lr_multipliers_tx": (
        lambda: gradtx.lr_multipliers({_TYPO: 0.5}, tx=gradtx.sgd(0.1)),
        "lr_multipliers",
    ),
    "scale_gradient_by": (lambda: gradtx.scale_gradient_by({_TYPO: 0.5}), "scale_gradient_by"),
}


@pytest.mark.parametrize("name", list(_AT_INIT))
def test_a_pattern_that_matches_nothing_raises_at_init(name):
    make, who = _AT_INIT[name]
    tx = make()
    with pytest.raises(ValueError, match=rf"^{who}.*'dense/kernal'.* matches no parameter"):
        tx.init(_PARAMS)
