"""Shared test helpers: mixed pytrees, step drivers, and comparisons against references.

A reference is either another transformation (usually Optax's) or a NumPy transcription of the
published rule: `make_ref()` returns a stateful callable
`ref(grads, params, **extra) -> updates`, where grads / params / updates are lists of float64
NumPy arrays (the non-None leaves, in flattening order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import gradtx

EAGER_STEPS = 5
"""Eager comparisons run at most this many steps: an eager step dispatches every operation on its
own (slow), and the jitted run of the same comparison covers the long horizon."""


def capped(steps: int, jit: bool) -> int:
    """`steps` under jit, at most `EAGER_STEPS` eagerly."""
    return steps if jit else min(steps, EAGER_STEPS)


class Pair(NamedTuple):
    a: Any
    b: Any


def mixed_params(seed: int = 0, dtype: Any = jnp.float32) -> dict:
    """A small pytree with dict / list / tuple / NamedTuple nesting, a scalar leaf, an empty
    subtree and None leaves."""
    rng = np.random.default_rng(seed)

    def leaf(*shape):
        return jnp.asarray(rng.normal(size=shape), dtype)

    return {
        "dense": {"kernel": leaf(3, 4), "bias": leaf(4)},
        "layers": [leaf(5), {"w": leaf(2, 3), "frozen": None}],
        "pair": Pair(a=leaf(1, 3), b=(leaf(), leaf(2, 2, 2))),
        "empty": {},
        "none": None,
    }


def kernel_mask(params: Any) -> dict:
    """A boolean mask tree for `mixed_params()`: a mix of selected and unselected leaves (None
    where the params have None)."""
    return {
        "dense": {"kernel": True, "bias": False},
        "layers": [False, {"w": True, "frozen": None}],
        "pair": type(params["pair"])(a=True, b=(False, True)),
        "empty": {},
        "none": None,
    }


def random_like(tree: Any, rng: np.random.Generator, scale: float = 1.0) -> Any:
    """A tree like `tree` with fresh normal values (same dtypes; None leaves stay None)."""
    return jax.tree.map(
        lambda x: jnp.asarray(scale * rng.normal(size=np.shape(x)), jnp.asarray(x).dtype), tree
    )


def grad_sequence(params: Any, steps: int, seed: int = 1, scale: float = 1.0) -> list:
    """`steps` random gradient trees shaped like `params`."""
    rng = np.random.default_rng(seed)
    return [random_like(params, rng, scale) for _ in range(steps)]


def _step_fn(tx: gradtx.GradientTransformation, jit: bool) -> Callable:
    def step(grads, state, params, extra):
        updates, state = tx.update(grads, state, params, **extra)
        return updates, state, gradtx.apply_updates(params, updates)

    return jax.jit(step) if jit else step


def run(
    tx: gradtx.GradientTransformation,
    params: Any,
    grads: Sequence[Any],
    *,
    jit: bool = True,
    extra_args: Sequence[dict] | None = None,
) -> tuple[list, Any, Any]:
    """Drive `tx` over `grads` (applying its updates); returns (updates per step, state, params)."""
    step = _step_fn(tx, jit)
    state = tx.init(params)
    out = []
    for i, g in enumerate(grads):
        extra = extra_args[i] if extra_args is not None else {}
        updates, state, params = step(g, state, params, extra)
        out.append(updates)
    return out, state, params


def assert_trees_close(actual: Any, expected: Any, rtol: float, atol: float, msg: str = "") -> None:
    """Leaf-wise `np.testing.assert_allclose` after checking the structures agree."""
    gradtx.tree.assert_same_structure("assert_trees_close", actual=actual, expected=expected)
    a_leaves, e_leaves = jax.tree.leaves(actual), jax.tree.leaves(expected)
    paths = gradtx.tree.paths(actual)
    for path, a, e in zip(paths, a_leaves, e_leaves, strict=True):
        np.testing.assert_allclose(
            np.asarray(a, np.float64),
            np.asarray(e, np.float64),
            rtol=rtol,
            atol=atol,
            err_msg=f"{msg} at {path}",
        )


def enable_x64(on: bool = True) -> Any:
    """`jax.enable_x64(on)`, a context manager (`jax.experimental.enable_x64` before jax 0.7,
    for the oldest-versions lane)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(on)
    from jax.experimental import disable_x64
    from jax.experimental import enable_x64 as enable

    return enable() if on else disable_x64()


def as_float64(tree: Any) -> Any:
    """Every floating leaf of `tree` as float64 (call inside `enable_x64(True)`)."""
    return jax.tree.map(
        lambda x: (
            jnp.asarray(x, jnp.float64) if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x
        ),
        tree,
    )


def float64_reference(run64: Callable[[], list], expected32: list) -> tuple[list, list]:
    """The reference's updates per step in float64 (`run64()`, called with x64 enabled and
    restored after) and, per step and leaf, how far its own float32 run (`expected32`) is from
    them: the rounding noise float32 arithmetic has on this rule here (Newton-Schulz matmuls,
    near-ties that switch a branch). Checking our float32 run against the float64 one, to twice
    that noise, says ours is no further from the exact result than the reference is (the two
    float32 runs may err on opposite sides, so their mutual gap can be twice the noise)."""
    with enable_x64(True):
        expected64 = jax.tree.map(lambda x: np.asarray(x, np.float64), run64())
    noise = [
        jax.tree.map(
            lambda a, b: float(np.max(np.abs(np.asarray(a, np.float64) - b), initial=0.0)), e32, e64
        )
        for e32, e64 in zip(expected32, expected64, strict=True)
    ]
    return expected64, noise


def assert_within_noise(
    actual: Any,
    expected64: Any,
    noise: Any,
    rtol: float,
    atol: float,
    msg: str = "",
    factor: float = 2.0,
) -> None:
    """`actual` (float32) against the reference's float64 result, each leaf to `factor` (two)
    times the reference's own float32 noise there (see `float64_reference`) or `atol`,
    whichever is larger."""
    gradtx.tree.assert_same_structure("assert_within_noise", actual=actual, expected=expected64)
    paths = gradtx.tree.paths(actual)
    for path, a, e, n in zip(
        paths,
        jax.tree.leaves(actual),
        jax.tree.leaves(expected64),
        jax.tree.leaves(noise),
        strict=True,
    ):
        np.testing.assert_allclose(
            np.asarray(a, np.float64),
            e,
            rtol=rtol,
            atol=max(atol, factor * n),
            err_msg=f"{msg} at {path} (against float64; the reference's float32 noise {n:.2g})",
        )


def compare_transformations(
    tx: gradtx.GradientTransformation,
    reference: Any,
    *,
    params: Any = None,
    steps: int = 100,
    rtol: float = 1e-5,
    atol: float = 1e-7,
    jit: bool = True,
    grad_scale: float = 1.0,
    extra_args: Sequence[dict] | None = None,
    seed: int = 1,
) -> None:
    """`tx` and `reference` (e.g. Optax's optimizer) give the same updates at every step.

    Both run on the same random gradients over `steps` steps (at most `EAGER_STEPS` with
    `jit=False`), each applying its own updates to its own copy of `params` (a mixed pytree by
    default).
    """
    steps = capped(steps, jit)
    params = mixed_params() if params is None else params
    grads = grad_sequence(params, steps, seed=seed, scale=grad_scale)
    ours, _, _ = run(tx, params, grads, jit=jit, extra_args=extra_args)
    ref_step = _step_fn(reference, jit)
    ref_state = reference.init(params)
    ref_params = params
    for i, (g, u) in enumerate(zip(grads, ours, strict=True)):
        extra = extra_args[i] if extra_args is not None else {}
        ref_u, ref_state, ref_params = ref_step(g, ref_state, ref_params, extra)
        assert_trees_close(u, ref_u, rtol, atol, msg=f"step {i}")


def assert_trees_bitwise_equal(actual: Any, expected: Any, what: str = "") -> None:
    """Same structure, and every leaf the same dtype, shape and bytes (PRNG keys by their key
    data); a mismatch names the leaf's path."""
    assert jax.tree.structure(actual) == jax.tree.structure(expected), what
    paths = gradtx.tree.paths(expected)
    for path, a, e in zip(paths, jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        if jax.dtypes.issubdtype(getattr(e, "dtype", np.float32), jax.dtypes.prng_key):
            assert a.dtype == e.dtype, f"{what} at {path!r}"
            a, e = jax.random.key_data(a), jax.random.key_data(e)
        a, e = np.asarray(a), np.asarray(e)
        assert (a.dtype, a.shape) == (e.dtype, e.shape), f"{what} at {path!r}"
        assert a.tobytes() == e.tobytes(), f"{what} at {path!r}: the bytes differ"


def leaves64(tree: Any) -> list[np.ndarray]:
    """The non-None leaves of `tree` as float64 NumPy arrays."""
    return [np.asarray(x, np.float64) for x in jax.tree.leaves(tree)]


def compare_to_numpy(
    tx: gradtx.GradientTransformation,
    make_ref: Callable[[], Callable[..., list]],
    *,
    params: Any = None,
    steps: int = 100,
    rtol: float = 1e-5,
    atol: float = 1e-7,
    jit: bool = True,
    grad_scale: float = 1.0,
    extra_args: Sequence[dict] | None = None,
    seed: int = 1,
) -> None:
    """`tx` gives the updates of a NumPy reference at every step.

    `steps` is capped at `EAGER_STEPS` with `jit=False`. `make_ref()` returns
    `ref(grads, params, **extra) -> updates` over lists of float64 leaves;
    it keeps its own state and its own parameters are advanced here with its updates.
    """
    steps = capped(steps, jit)
    params = mixed_params() if params is None else params
    grads = grad_sequence(params, steps, seed=seed, scale=grad_scale)
    ours, _, _ = run(tx, params, grads, jit=jit, extra_args=extra_args)
    ref = make_ref()
    ref_params = leaves64(params)
    for i, (g, u) in enumerate(zip(grads, ours, strict=True)):
        extra = extra_args[i] if extra_args is not None else {}
        ref_u = ref(leaves64(g), [p.copy() for p in ref_params], **extra)
        ours_leaves = leaves64(u)
        assert len(ours_leaves) == len(ref_u), "reference returned a different number of leaves"
        for j, (a, e) in enumerate(zip(ours_leaves, ref_u, strict=True)):
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"step {i}, leaf {j}")
        ref_params = [p + du for p, du in zip(ref_params, ref_u, strict=True)]


def state_dtypes(state: Any) -> list:
    """The dtype of every leaf of a state, in flattening order."""
    return [jnp.asarray(x).dtype for x in jax.tree.leaves(state)]
