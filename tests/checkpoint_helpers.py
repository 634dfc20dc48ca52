"""Helpers shared by the checkpoint tests: bit-exact comparison, a trained Adam state, a saved
checkpoint of it, and the safetensors header split from (and joined to) the data."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import jax
import numpy as np

import gradtx
from gradtx.checkpoint import _io as io

from .helpers import mixed_params


def assert_bitwise_equal(actual: Any, expected: Any) -> None:
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        a, e = np.asarray(a), np.asarray(e)
        assert (a.dtype, a.shape) == (e.dtype, e.shape)
        assert a.tobytes() == e.tobytes()


def trained_adam(seed: int = 0) -> tuple[Any, Any]:
    """A template and a trained-looking Adam state (distinct mu and nu) of `mixed_params`."""
    tx = gradtx.adam(0.01)
    params = mixed_params(seed)
    state = tx.init(params)
    for i in range(2):
        grads = jax.tree.map(lambda p, i=i: p * (i + 1.5), params)
        _, state = tx.update(grads, state, params)
    return tx.init(params), state


def split_header(raw: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def join_header(header: Any, data: bytes) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if io._TMP_TAG in p.name]


def saved_adam_checkpoint(tmp_path_factory) -> tuple[Any, Any, bytes]:
    """A template, a trained Adam state and the bytes of its checkpoint (for a module fixture)."""
    template, state = trained_adam()
    path = gradtx.save(tmp_path_factory.mktemp("ckpt") / "adam.safetensors", state)
    return template, state, Path(path).read_bytes()
