"""Malformed checkpoint headers (wrong JSON types, bad shapes, offsets, dtypes, deep nesting,
duplicate keys) are CheckpointErrors naming the file and the field (docs/checkpoint.md)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import gradtx

from .checkpoint_helpers import (
    join_header,
    saved_adam_checkpoint,
    split_header,
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Any, Any, bytes]:
    return saved_adam_checkpoint(tmp_path_factory)


def _edit(change):
    def apply(header: dict) -> Any:
        header = copy.deepcopy(header)
        return change(header) or header

    return apply


MALFORMED = {
    "json-array": (lambda h: [1, 2], "not a JSON object"),
    "json-string": (lambda h: "header", "not a JSON object"),
    "no-metadata": (_edit(lambda h: h.pop("__metadata__") and None), "'__metadata__' is missing"),
    "metadata-list": (
        _edit(lambda h: h.update(__metadata__=[1])),
        "'__metadata__' is missing or not an object",
    ),
    "checksum-int": (_edit(lambda h: h["__metadata__"].update(sum64=5)), "field 'sum64'"),
    "checksum-short": (_edit(lambda h: h["__metadata__"].update(sum64="12,34")), "field 'sum64'"),
    "checksum-not-hex": (
        _edit(lambda h: h["__metadata__"].update(sum64=",".join(["0x" + "0" * 14] * 8))),
        "field 'sum64'",
    ),
    "version-int": (_edit(lambda h: h["__metadata__"].update(version=2)), "field 'version'"),
    "index-missing": (
        _edit(lambda h: h["__metadata__"].pop("index64") and None),
        "field 'index64'",
    ),
    "shape-infinity": (
        _edit(lambda h: h["0/mu/dense/bias"].update(shape=[float("inf")])),
        "field 'shape'",
    ),
    "shape-nan": (
        _edit(lambda h: h["0/mu/dense/bias"].update(shape=[float("nan")])),
        "field 'shape'",
    ),
    "shape-float": (_edit(lambda h: h["0/mu/dense/bias"].update(shape=[4.0])), "field 'shape'"),
    "shape-bool": (_edit(lambda h: h["0/count"].update(shape=[True])), "field 'shape'"),
    "shape-negative": (_edit(lambda h: h["0/mu/dense/bias"].update(shape=[-4])), "field 'shape'"),
    "shape-string": (_edit(lambda h: h["0/mu/dense/bias"].update(shape="4")), "field 'shape'"),
    "offset-infinity": (
        _edit(lambda h: h["0/mu/dense/bias"].update(data_offsets=[0, float("inf")])),
        "field 'data_offsets'",
    ),
    "offsets-three": (
        _edit(lambda h: h["0/mu/dense/bias"].update(data_offsets=[0, 1, 2])),
        "field 'data_offsets'",
    ),
    "offsets-overlap": (
        _edit(lambda h: h["0/count"].update(data_offsets=[4, 8])),
        "tensor '0/count'",
    ),
    "dtype-unknown": (_edit(lambda h: h["0/count"].update(dtype="Q99")), "field 'dtype'"),
    "dtype-list": (_edit(lambda h: h["0/count"].update(dtype=["I32"])), "field 'dtype'"),
    "info-string": (_edit(lambda h: h.update({"0/count": "I32"})), "tensor '0/count'"),
    "info-missing-field": (
        _edit(lambda h: h["0/count"].pop("shape") and None),
        "missing fields ['shape']",
    ),
    "info-extra-field": (
        _edit(lambda h: h["0/count"].update(stride=[1])),
        "unknown fields ['stride']",
    ),
}


@pytest.mark.parametrize(("edit", "field"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_headers_raise_checkpoint_errors_naming_the_file_and_field(
    saved, tmp_path, edit, field
):
    """Was: TypeError (an array header), AttributeError (a non-string checksum), OverflowError
    (Infinity in a shape or offset), or silently accepted (bools and floats as sizes)."""
    template, _, raw = saved
    header, data = split_header(raw)
    path = tmp_path / "bad.safetensors"
    path.write_bytes(join_header(edit(header), data))
    with pytest.raises(gradtx.CheckpointError) as info:
        gradtx.load(path, template)
    assert str(path) in str(info.value)
    assert field in str(info.value)


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested"),
        (b'{"__metadata__": ' * 50_000 + b"1" + b"}" * 50_000, "nested"),
        (b'{"a": 1, "a": 2}', "'a' twice"),
    ],
    ids=["deep-array", "deep-object", "duplicate-key"],
)
def test_deeply_nested_or_duplicated_json_is_a_checkpoint_error(tmp_path, text, what):
    """Was: RecursionError (deep nesting); a duplicated key silently kept the last value."""
    path = tmp_path / "bad.safetensors"
    path.write_bytes(join_header(text, b""))
    with pytest.raises(gradtx.CheckpointError, match=what) as info:
        gradtx.load(path, {"x": np.zeros(())})
    assert str(path) in str(info.value)
