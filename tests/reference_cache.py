"""Comparisons against Optax with the reference run computed once per configuration.

`compare_transformations` reruns the reference for every parametrization (eager and jit); here the
reference (run eagerly) is cached by an id, so checking a transformation eagerly and under
`jax.jit` costs one reference run. The two sides follow their own trajectories: each applies its
own updates to its own copy of the parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .helpers import assert_trees_close, grad_sequence, mixed_params, run

_REFERENCE_UPDATES: dict[tuple, list] = {}


def _params(dtype: Any) -> Any:
    return mixed_params() if dtype is None else mixed_params(dtype=dtype)


def reference_updates(
    key: str, make_reference: Callable[[], Any], *, steps: int, grad_scale: float, dtype: Any
) -> list:
    """The updates of `make_reference()` over the standard gradient sequence, cached by `key`
    within the module that defines `make_reference`."""
    cache_key = (make_reference.__module__, key, steps, grad_scale, str(dtype))
    if cache_key not in _REFERENCE_UPDATES:
        params = _params(dtype)
        grads = grad_sequence(params, steps, scale=grad_scale)
        # Eagerly: once JAX's per-op caches are warm this is cheaper than compiling a step.
        _REFERENCE_UPDATES[cache_key], _, _ = run(make_reference(), params, grads, jit=False)
    return _REFERENCE_UPDATES[cache_key]


def assert_matches_reference(
    key: str,
    tx: Any,
    make_reference: Callable[[], Any],
    *,
    jit: bool,
    steps: int = 100,
    rtol: float = 1e-5,
    atol: float = 1e-7,
    grad_scale: float = 1.0,
    dtype: Any = None,
) -> None:
    """`tx` gives the updates of the reference at every one of `steps` steps on `mixed_params()`."""
    params = _params(dtype)
    grads = grad_sequence(params, steps, scale=grad_scale)
    ours, _, _ = run(tx, params, grads, jit=jit)
    expected = reference_updates(
        key, make_reference, steps=steps, grad_scale=grad_scale, dtype=dtype
    )
    assert len(ours) == len(expected) == steps
    for i, (u, e) in enumerate(zip(ours, expected, strict=True)):
        assert_trees_close(u, e, rtol, atol, msg=f"{key}: step {i}")


def with_modes(cases: list[tuple], eager: set[str], jit: set[str] | None = None) -> list:
    """`pytest.param(*case, use_jit)` for the cases whose id is in `eager` (run eagerly) and in
    `jit` (run under `jax.jit`; default: every case).

    Each primitive's base configuration runs eagerly and its variants under jit, so that every
    primitive is checked both ways without compiling every configuration twice.
    """
    import pytest

    ids = [c[0] for c in cases]
    jit = set(ids) if jit is None else jit
    unknown = (eager | jit) - set(ids)
    assert not unknown, f"ids not in the cases: {unknown}"
    missing = set(ids) - eager - jit
    assert not missing, f"cases that would never run: {missing}"
    out = []
    for case in cases:
        for use_jit in (False, True):
            if case[0] in (jit if use_jit else eager):
                out.append(
                    pytest.param(*case, use_jit, id=f"{'jit' if use_jit else 'eager'}-{case[0]}")
                )
    return out
