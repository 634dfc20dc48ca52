"""Bounded fuzzing of checkpoint headers and bytes: `load` raises a CheckpointError naming the
file or returns the saved state bit-exact (docs/checkpoint.md, "Guarantees")."""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradtx

from .checkpoint_helpers import (
    assert_bitwise_equal,
    join_header,
    split_header,
)

FUZZ = settings(
    derandomize=True,
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(["F32", "I32", "2", "1", "gradtx.optimizer_state", "0/count"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@st.composite
def _mutated_headers(draw, header: dict) -> bytes:
    header = copy.deepcopy(header)
    for _ in range(draw(st.integers(1, 3))):
        keys = list(header)
        kind = draw(st.sampled_from(["tensor", "field", "item", "meta", "drop", "add", "order"]))
        key = draw(st.sampled_from(keys)) if keys else None
        node = header.get(key) if key is not None else None
        if kind == "tensor" and key is not None:
            header[key] = draw(JSON)
        elif kind in ("field", "meta") and isinstance(node, dict) and node:
            if kind == "meta" and isinstance(header.get("__metadata__"), dict):
                node = header["__metadata__"]
            field = draw(st.sampled_from(sorted(node)))
            node[field] = draw(JSON)
        elif kind == "item" and isinstance(node, dict):
            for value in node.values():
                if isinstance(value, list) and value:
                    value[draw(st.integers(0, len(value) - 1))] = draw(JSON)
                    break
        elif kind == "drop" and key is not None:
            del header[key]
        elif kind == "add":
            header[draw(st.text(max_size=6))] = draw(JSON)
        elif kind == "order":  # the same entries in another order: still a valid file
            header = dict(draw(st.permutations(list(header.items()))))
    return json.dumps(header).encode()


@pytest.fixture(scope="module")
def fuzz_case(tmp_path_factory) -> tuple[Path, Any, Any, bytes]:
    """A real small checkpoint (NumPy leaves: no device transfers, so many loads are fast)."""
    rng = np.random.default_rng(0)
    state = {
        "mu": {"w": rng.normal(size=(3, 2)).astype(np.float32), "b": np.float32([1.5, -2])},
        "nu": {"w": rng.random(size=(3, 2)).astype(np.float32), "b": np.float32([0.25, 4])},
        "count": np.asarray(9, np.int32),
        "flag": np.asarray([True, False]),
    }
    template = jax.tree.map(np.zeros_like, state)
    folder = tmp_path_factory.mktemp("fuzz")
    raw = Path(gradtx.save(folder / "real.safetensors", state)).read_bytes()
    return folder / "fuzzed.safetensors", template, state, raw


def _loads_exactly_or_refuses(path: Path, template: Any, state: Any) -> None:
    try:
        restored = gradtx.load(path, template)
    except gradtx.CheckpointError as e:
        message = str(e)
    else:
        assert_bitwise_equal(restored, state)
        return
    assert str(path) in message


def test_fuzz_random_headers_raise_only_checkpoint_errors(fuzz_case):
    path, template, state, raw = fuzz_case
    header, data = split_header(raw)

    @FUZZ
    @given(
        st.one_of(
            _mutated_headers(header),
            JSON.map(lambda v: json.dumps(v).encode()),
            st.binary(max_size=40),
        )
    )
    def check(text: bytes) -> None:
        path.write_bytes(join_header(text, data))
        _loads_exactly_or_refuses(path, template, state)

    check()


def test_fuzz_random_byte_corruptions_raise_only_checkpoint_errors(fuzz_case):
    path, template, state, raw = fuzz_case
    header_end = 8 + struct.unpack("<Q", raw[:8])[0]
    position = st.one_of(st.integers(0, len(raw) - 1), st.integers(0, header_end - 1))

    @FUZZ
    @given(
        flips=st.lists(st.tuples(position, st.integers(1, 255)), min_size=1, max_size=4),
        cut=st.one_of(st.none(), st.integers(0, len(raw) + 3)),
    )
    def check(flips: list[tuple[int, int]], cut: int | None) -> None:
        damaged = bytearray(raw)
        for at, xor in flips:
            damaged[at] ^= xor
        if cut is not None:
            damaged = damaged[:cut] + b"\0" * max(0, cut - len(raw))
        path.write_bytes(bytes(damaged))
        _loads_exactly_or_refuses(path, template, state)

    check()
