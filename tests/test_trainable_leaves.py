"""Parameter leaves an optimizer cannot train (integer, boolean, Python scalars) are named at
`init`; float, complex, abstract and absent leaves are accepted."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import gradtx


@pytest.mark.parametrize(
    ("params", "leaf", "what"),
    [
        ({"w": jnp.ones(3), "step": jnp.arange(3)}, "step", "dtype int32"),
        ({"w": jnp.ones(3), "mask": jnp.ones(3, bool)}, "mask", "dtype bool"),
        ({"layer": {"w": 1.0}}, "layer/w", "is a float"),
        ({"layers": [jnp.ones(2), 3]}, "layers/1", "is a int"),
    ],
)
@pytest.mark.parametrize("alias", ["adam", "sgd", "lion", "adafactor"])
def test_a_leaf_an_optimizer_cannot_train_is_named_at_init(alias, params, leaf, what):
    tx = getattr(gradtx, alias)(1e-3)
    with pytest.raises(TypeError) as info:
        tx.init(params)
    message = str(info.value)
    assert message.startswith(f"{alias}: the params leaf {leaf!r}")
    assert what in message


def test_float_complex_and_abstract_leaves_are_accepted():
    params = {
        "w": jnp.ones(3),
        "z": jnp.ones(2, jnp.complex64),
        "h": jnp.ones(2, jnp.bfloat16),
        "abstract": jax.ShapeDtypeStruct((2,), jnp.float32),
        "absent": None,
    }
    gradtx.adam(1e-3).init(params)
