"""Shared by the config tests that check refused inputs: small config blocks, a check that a
call raises a ConfigError with a bounded message, and one update of a built optimizer."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from gradtx import config as gc

SGD = {"name": "sgd", "learning_rate": 0.1}
PARAMS = {"w": jnp.ones((2,), jnp.float32)}
LINEAR = {"name": "linear_schedule", "init_value": 1.0, "end_value": 0.0}


def config_error(call, *args, **kwargs) -> gc.ConfigError:
    with pytest.raises(gc.ConfigError) as info:
        call(*args, **kwargs)
    assert len(str(info.value)) < 2_000, str(info.value)[:200]
    return info.value


def one_update(tx) -> None:
    state = tx.init(PARAMS)
    tx.update(PARAMS, state, PARAMS)
