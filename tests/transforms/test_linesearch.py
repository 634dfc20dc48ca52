"""The zoom and backtracking line searches and `value_and_grad_from_state` against Optax.

Each search runs on full-batch problems the way Optax's docs show (the loop with
`value_and_grad_from_state`), ours and Optax's side by side in one jitted `lax.scan`; the step
sizes, the evaluation counts and the iterates must agree. The problems and the driver are shared
with test_lbfgs.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from optax._src import linesearch as optax_linesearch

import gradtx

# --------------------------------------------------------------------------------------------
# Problems and the full-batch driver (also used by test_lbfgs.py)
# --------------------------------------------------------------------------------------------

ROSENBROCK_START = {"x": jnp.array([-1.2, 1.0, -0.5, 0.8], jnp.float32)}


def rosenbrock(params: dict) -> jax.Array:
    """The extended Rosenbrock function; its minimum is 0 at all ones."""
    x = params["x"]
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def _quadratic_data(n: int = 8, condition: float = 1e3, seed: int = 0):
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    hessian = (q * np.logspace(0, np.log10(condition), n)) @ q.T
    return jnp.asarray(hessian, jnp.float32), rng.normal(size=n).astype(np.float32)


HESSIAN, QUADRATIC_MINIMUM = _quadratic_data()
QUADRATIC_START = {"a": jnp.zeros(5, jnp.float32), "b": jnp.zeros(3, jnp.float32)}


def quadratic(params: dict) -> jax.Array:
    """`0.5 (x - c)^T H (x - c)` with `x` the concatenated leaves; `H` has condition number 1e3
    and the minimum is 0 at `c` (so float32 resolves the values near it)."""
    d = jnp.concatenate([params["a"], params["b"]]) - QUADRATIC_MINIMUM
    return 0.5 * d @ HESSIAN @ d


PROBLEMS = {
    "rosenbrock": (rosenbrock, ROSENBROCK_START),
    "quadratic": (quadratic, QUADRATIC_START),
}


def full_batch_run(solver: Any, value_fn: Callable, params: Any, steps: int, api: Any, reuse=True):
    """`steps` iterations of Optax's documented full-batch loop with `api` (gradtx or optax);
    returns the stacked iterates and states. With `reuse`, the value and gradient come from
    `api.value_and_grad_from_state`, else from `jax.value_and_grad`."""
    if reuse:
        value_and_grad = api.value_and_grad_from_state(value_fn)
    else:
        plain = jax.value_and_grad(value_fn)
        value_and_grad = lambda p, state: plain(p)

    def body(carry, _):
        p, s = carry
        value, grad = value_and_grad(p, state=s)
        updates, s = solver.update(grad, s, p, value=value, grad=grad, value_fn=value_fn)
        p = api.apply_updates(p, updates)
        return (p, s), (p, s)

    return jax.lax.scan(body, (params, solver.init(params)), None, length=steps)[1]


def run_both(ours: Any, theirs: Any, value_fn: Callable, params: Any, steps: int, reuse=True):
    """Ours and Optax's full-batch runs, compiled together in one jitted function."""

    def both(p):
        return (
            full_batch_run(ours, value_fn, p, steps, gradtx, reuse),
            full_batch_run(theirs, value_fn, p, steps, optax, reuse),
        )

    return jax.tree.map(np.asarray, jax.jit(both)(params))


def assert_iterates_match(ours: Any, theirs: Any, rtol: float = 1e-5, atol: float = 1e-5):
    """Equal iterates, to float32 rounding: a gradient compiled in another XLA fusion can differ
    in its last bit (~1e-5 for Rosenbrock's gradients of ~1e2), which moves an iterate of
    order 1 by ~1e-6; the step sizes and evaluation counts must still agree exactly."""
    for step, (a, b) in enumerate(zip(_per_step(ours), _per_step(theirs), strict=True)):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=f"iteration {step}")


def _per_step(stacked: Any) -> list:
    steps = jax.tree.leaves(stacked)[0].shape[0]
    return [jax.tree.map(lambda x, i=i: x[i], stacked) for i in range(steps)]


# --------------------------------------------------------------------------------------------
# Step sizes against Optax (gradient-descent directions, so the searches work hard)
# --------------------------------------------------------------------------------------------

# (id, keyword arguments, problem): the zoom search's default on both problems, the rest on
# Rosenbrock (test_lbfgs.py runs both searches on both problems with L-BFGS directions).
ZOOM_CASES = [
    ("default-rosenbrock", {}, "rosenbrock"),
    ("default-quadratic", {}, "quadratic"),
    (
        "bounded_plain_armijo_one",
        {
            "max_learning_rate": 0.05,
            "approx_dec_rtol": None,
            "initial_guess_strategy": "one",
            "increase_factor": 3.0,
        },
        "rosenbrock",
    ),
    (
        "no_curvature_tol",
        {"curv_rtol": jnp.inf, "tol": 1e-6, "initial_guess_strategy": "one"},
        "rosenbrock",
    ),
]

BACKTRACKING_CASES = [
    ("default", {}, "rosenbrock"),
    (
        "store_grad",
        {"store_grad": True, "decrease_factor": 0.5, "increase_factor": 2.0},
        "rosenbrock",
    ),
    (
        "tolerances",
        {"atol": 1e-3, "rtol": 1e-4, "max_learning_rate": 0.5, "slope_rtol": 0.3},
        "rosenbrock",
    ),
]


def _compare_searches(ours_ls: Any, optax_ls: Any, problem: str, reuse: bool, steps: int = 25):
    value_fn, start = PROBLEMS[problem]
    ours = gradtx.chain(gradtx.scale(-1.0), ours_ls)
    theirs = optax.chain(optax.scale(-1.0), optax_ls)
    (our_params, our_states), (their_params, their_states) = run_both(
        ours, theirs, value_fn, start, steps, reuse
    )
    our_ls, their_ls = our_states[1], their_states[1]
    np.testing.assert_array_equal(
        our_ls.info.num_linesearch_steps, their_ls.info.num_linesearch_steps
    )
    np.testing.assert_allclose(our_ls.learning_rate, their_ls.learning_rate, rtol=1e-5)
    np.testing.assert_allclose(our_ls.info.decrease_error, their_ls.info.decrease_error, atol=1e-6)
    assert_iterates_match(our_params, their_params)
    # The searches did real work: several evaluations and different step sizes.
    assert our_ls.info.num_linesearch_steps.max() > 1
    assert len(np.unique(our_ls.learning_rate)) > 1
    return our_ls, their_ls, our_params


@pytest.mark.parametrize(("name", "kwargs", "problem"), ZOOM_CASES, ids=[c[0] for c in ZOOM_CASES])
def test_zoom_step_sizes_match_optax(name, kwargs, problem):
    ours, theirs, _ = _compare_searches(
        gradtx.scale_by_zoom_linesearch(max_linesearch_steps=15, **kwargs),
        optax.scale_by_zoom_linesearch(max_linesearch_steps=15, **kwargs),
        problem,
        reuse=True,
    )
    np.testing.assert_allclose(ours.info.curvature_error, theirs.info.curvature_error, atol=1e-6)


@pytest.mark.parametrize(
    ("name", "kwargs", "problem"), BACKTRACKING_CASES, ids=[c[0] for c in BACKTRACKING_CASES]
)
def test_backtracking_step_sizes_match_optax(name, kwargs, problem):
    value_fn = PROBLEMS[problem][0]
    ours, _, our_params = _compare_searches(
        gradtx.scale_by_backtracking_linesearch(max_backtracking_steps=20, **kwargs),
        optax.scale_by_backtracking_linesearch(max_backtracking_steps=20, **kwargs),
        problem,
        reuse=bool(kwargs.get("store_grad")),  # Optax stores no gradient otherwise
    )
    values, grads = jax.vmap(jax.value_and_grad(value_fn))(our_params)
    # The value at each new iterate is stored (as Optax's); the gradient with store_grad only.
    np.testing.assert_allclose(ours.value, values, rtol=1e-6)
    if kwargs.get("store_grad"):
        np.testing.assert_allclose(ours.grad["x"], grads["x"], rtol=1e-5, atol=1e-4)
    else:
        assert ours.grad is None


def test_data_arguments_reach_value_fn_like_optax():
    """Optax's stochastic example: `value_fn(params, x, y)` gets `x=`, `y=` from `update`."""

    def fn(params, x, y):
        return 0.5 * (x @ params - y) ** 2

    rng = np.random.default_rng(0)
    xs = jnp.asarray(rng.normal(size=(6, 3)), jnp.float32)
    ys = jnp.asarray(rng.normal(size=6), jnp.float32)

    def run(api, linesearch):
        solver = api.chain(api.sgd(learning_rate=1.0), linesearch)

        def body(carry, xy):
            params, state = carry
            value, grad = jax.value_and_grad(fn)(params, *xy)
            updates, state = solver.update(
                grad, state, params, value=value, grad=grad, value_fn=fn, x=xy[0], y=xy[1]
            )
            params = api.apply_updates(params, updates)
            return (params, state), params

        params = jnp.array([1.0, 2.0, 3.0])
        return jax.lax.scan(body, (params, solver.init(params)), (xs, ys))[1]

    for ours, theirs in [
        (gradtx.scale_by_backtracking_linesearch(15), optax.scale_by_backtracking_linesearch(15)),
        (gradtx.scale_by_zoom_linesearch(15), optax.scale_by_zoom_linesearch(15)),
    ]:
        both = jax.jit(lambda: (run(gradtx, ours), run(optax, theirs)))()
        np.testing.assert_allclose(*both, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("search", ["zoom", "backtracking"])
def test_no_step_where_the_objective_is_not_finite(search, capfd):
    """Every point tried is NaN: both searches take a step of 0, as Optax's do, and say so."""

    def fn(params):
        return jnp.where(jnp.all(params == 1.0), jnp.sum(params**2), jnp.nan)

    make = {
        "zoom": lambda api: api.scale_by_zoom_linesearch(5, verbose=api is gradtx),
        "backtracking": lambda api: api.scale_by_backtracking_linesearch(5, verbose=api is gradtx),
    }[search]
    params = jnp.ones(3)
    value, grad = jax.value_and_grad(fn)(params)
    results = []
    for api in (gradtx, optax):
        tx = make(api)
        updates, state = tx.update(
            -grad, tx.init(params), params, value=value, grad=grad, value_fn=fn
        )
        jax.effects_barrier()
        results.append((updates, state.learning_rate))
    (ours, our_lr), (theirs, their_lr) = results
    assert float(our_lr) == float(their_lr) == 0.0
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, np.zeros(3))
    assert f"scale_by_{search}_linesearch: no step size" in capfd.readouterr().out


def _sum_of_squares(params):
    return sum(jnp.sum(x**2) for x in jax.tree.leaves(params))


def test_value_and_grad_from_state_computes_then_reuses():
    params = {"w": jnp.array([1.0, -2.0]), "b": jnp.array(0.5)}
    tx = gradtx.chain(
        gradtx.scale(-0.1), gradtx.scale_by_backtracking_linesearch(10, store_grad=True)
    )
    state = tx.init(params)
    value_and_grad = gradtx.value_and_grad_from_state(_sum_of_squares)
    # Before the first step the stored value is +inf: both are computed.
    value, grad = value_and_grad(params, state=state)
    expected_value, expected_grad = jax.value_and_grad(_sum_of_squares)(params)
    assert float(value) == float(expected_value)
    np.testing.assert_array_equal(grad["w"], expected_grad["w"])
    # A finite stored value is returned with the stored gradient, without computing anything.
    marked = gradtx.tree.set(
        state, value=42.0, grad={"w": jnp.array([7.0, 8.0]), "b": jnp.array(9.0)}
    )
    value, grad = value_and_grad(params, state=marked)
    assert float(value) == 42.0
    np.testing.assert_array_equal(grad["w"], [7.0, 8.0])
    # After a real step, the stored value and gradient are those at the new parameters.
    updates, state = tx.update(
        grad, state, params, value=expected_value, grad=expected_grad, value_fn=_sum_of_squares
    )
    new_params = gradtx.apply_updates(params, updates)
    value, grad = value_and_grad(new_params, state=state)
    np.testing.assert_allclose(value, _sum_of_squares(new_params), rtol=1e-6)
    np.testing.assert_allclose(grad["w"], 2 * new_params["w"], rtol=1e-6)


def test_value_and_grad_from_state_passes_extra_arguments_when_computing():
    fn = lambda params, scale, *, shift: scale * jnp.sum((params - shift) ** 2)
    tx = gradtx.scale_by_backtracking_linesearch(5, store_grad=True)
    params = jnp.array([1.0, 2.0])
    value, grad = gradtx.value_and_grad_from_state(fn)(
        params, 3.0, state=tx.init(params), shift=1.0
    )
    assert float(value) == 3.0
    np.testing.assert_allclose(grad, [0.0, 6.0])


def test_value_and_grad_from_state_needs_one_line_search():
    params = jnp.ones(2)
    value_and_grad = gradtx.value_and_grad_from_state(_sum_of_squares)
    no_search = gradtx.lbfgs(linesearch=None)
    with pytest.raises(ValueError, match="value_and_grad_from_state: the state has no 'value'"):
        value_and_grad(params, state=no_search.init(params))
    two = gradtx.chain(
        gradtx.scale_by_zoom_linesearch(5), gradtx.scale_by_backtracking_linesearch(5)
    )
    with pytest.raises(ValueError, match=r"value_and_grad_from_state: .*ambiguous"):
        value_and_grad(params, state=two.init(params))
    with pytest.raises(KeyError, match=r"value_and_grad_from_state: .*ambiguous"):  # as Optax's
        value_and_grad(params, state=two.init(params))
    with pytest.raises(TypeError, match="value_fn must be callable"):
        gradtx.value_and_grad_from_state(3.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("search", ["zoom", "backtracking"])
def test_update_needs_the_objective_and_params(search):
    tx = {
        "zoom": gradtx.scale_by_zoom_linesearch(5),
        "backtracking": gradtx.scale_by_backtracking_linesearch(5),
    }[search]
    name = f"scale_by_{search}_linesearch"
    params = jnp.ones(2)
    state = tx.init(params)
    with pytest.raises(ValueError, match=f"{name} needs the objective: .*missing grad, value_fn"):
        tx.update(params, state, params, value=1.0)
    with pytest.raises(ValueError, match=f"{name} needs the current parameters"):
        tx.update(params, state, None, value=1.0, grad=params, value_fn=_sum_of_squares)


@pytest.mark.parametrize("search", ["zoom", "backtracking"])
def test_extra_arguments_value_fn_does_not_take_raise_like_optax(search):
    """Optax raises a TypeError (so a misspelt data argument is not dropped silently); gradtx
    ignored them before."""
    tx = {
        "zoom": gradtx.scale_by_zoom_linesearch(5),
        "backtracking": gradtx.scale_by_backtracking_linesearch(5),
    }[search]
    fn = lambda params, batch: jnp.sum(params * batch)
    params = jnp.array([1.0, 2.0])
    batch = jnp.ones(2)
    args = {"value": fn(params, batch), "grad": batch, "value_fn": fn, "batch": batch}
    tx.update(-batch, tx.init(params), params, **args)  # what value_fn takes is fine
    with pytest.raises(
        TypeError,
        match=rf"^Unexpected keyword arguments passed to `scale_by_{search}_linesearch.update`. "
        r"These arguments were not consumed by `value_fn`: \['bach', 'unused_arg'\]\. .*"
        r"it takes \['batch'\] by keyword",
    ):
        tx.update(-batch, tx.init(params), params, **args, bach=batch, unused_arg=42)


def test_value_fn_with_var_keywords_gets_every_extra_argument():
    """`value_fn(params, **kwargs)` takes every extra argument (Optax raises for them instead)."""
    seen = {}

    def fn(params, **kwargs):
        seen.update(kwargs)
        return jnp.sum(params**2) * kwargs["scale"]

    tx = gradtx.scale_by_zoom_linesearch(5)
    params = jnp.array([1.0, 2.0])
    value, grad = jax.value_and_grad(fn)(params, scale=1.0, other=0)
    tx.update(
        -grad, tx.init(params), params, value=value, grad=grad, value_fn=fn, scale=1.0, other=0
    )
    assert sorted(seen) == ["other", "scale"]


def test_backtracking_stores_the_value_and_no_gradient_without_store_grad():
    """Optax's state: the value at the accepted point always, the gradient only with store_grad
    (None otherwise, so value_and_grad_from_state refuses instead of returning zeros)."""
    params = jnp.zeros(2)
    fn = lambda w: jnp.sum((w - 1.0) ** 2)
    value, grad = jax.value_and_grad(fn)(params)
    for api in (gradtx, optax):
        tx = api.scale_by_backtracking_linesearch(max_backtracking_steps=5)
        state = tx.init(params)
        assert state.grad is None and bool(jnp.isinf(state.value))
        updates, state = jax.jit(functools.partial(tx.update, value_fn=fn))(
            -grad, state, params, value=value, grad=grad
        )
        assert state.grad is None
        np.testing.assert_allclose(state.value, fn(params + updates), rtol=1e-6)
    with pytest.raises(ValueError, match=r"no 'grad' .*store_grad=True"):
        gradtx.value_and_grad_from_state(fn)(params, state=state)


# Optax's diagnostic sentences (optax._src.linesearch.FLAG_*), which verbose=True prints.
_OPTAX_FLAGS = {
    name: getattr(optax_linesearch, f"FLAG_{name}")
    for name in [
        "INTERVAL_NOT_FOUND",
        "INTERVAL_TOO_SMALL",
        "CURVATURE_COND_NOT_SATISFIED",
        "NO_STEPSIZE_FOUND",
        "NOT_A_DESCENT_DIRECTION",
    ]
}


def _zoom_output(capfd, fn, w, u, **kwargs):
    tx = gradtx.scale_by_zoom_linesearch(verbose=True, **kwargs)
    value, grad = jax.value_and_grad(fn)(w)
    _, state = tx.update(u, tx.init(w), w, value=value, grad=grad, value_fn=fn)
    jax.effects_barrier()
    return state, capfd.readouterr().out


@pytest.mark.parametrize(
    ("case", "printed", "not_printed"),
    [
        ("ascent", ["NOT_A_DESCENT_DIRECTION", "NO_STEPSIZE_FOUND"], []),
        (
            "small_max",
            ["INTERVAL_NOT_FOUND", "CURVATURE_COND_NOT_SATISFIED"],
            ["NO_STEPSIZE_FOUND"],
        ),
        ("flat", ["INTERVAL_TOO_SMALL"], ["NOT_A_DESCENT_DIRECTION"]),
        ("few_steps", [], ["NOT_A_DESCENT_DIRECTION", "INTERVAL_NOT_FOUND"]),
        ("success", [], list(_OPTAX_FLAGS)),
    ],
)
def test_zoom_verbose_prints_optax_diagnostics(capfd, case, printed, not_printed):
    """The cases of Optax's test_failure_* tests: gradtx's summary, then Optax's sentences."""
    square = lambda w: jnp.dot(w, w)
    flat = lambda x: jnp.exp(-1 / x**2)
    e0 = jnp.array([1.0, 0.0])
    w, fn, u, kwargs = {
        "ascent": (60 * e0, square, e0, {"max_linesearch_steps": 18, "curv_rtol": 0.5}),
        "small_max": (
            -60 * e0,
            square,
            e0,
            {"max_linesearch_steps": 10, "curv_rtol": 0.5, "max_learning_rate": 10.0},
        ),
        "flat": (jnp.asarray(-0.2), flat, -jax.grad(flat)(-0.2), {"max_linesearch_steps": 30}),
        "few_steps": (-60 * e0, square, e0, {"max_linesearch_steps": 5, "curv_rtol": 0.5}),
        "success": (-60 * e0, square, e0, {"max_linesearch_steps": 30, "curv_rtol": 0.5}),
    }[case]
    state, out = _zoom_output(capfd, fn, w, u, **kwargs)
    for name in printed:
        assert _OPTAX_FLAGS[name] in out, (name, out)
    for name in not_printed:
        assert _OPTAX_FLAGS[name] not in out, (name, out)
    if case == "success":
        assert out == ""
    elif case == "small_max":
        assert float(state.learning_rate) == 10.0
        assert "scale_by_zoom_linesearch: the step size reached max_learning_rate (10.0)" in out
    else:
        assert "scale_by_zoom_linesearch: no step size met both conditions" in out


INVALID = [
    (gradtx.scale_by_zoom_linesearch, {"max_linesearch_steps": 0}, "max_linesearch_steps", "0"),
    (gradtx.scale_by_zoom_linesearch, {"max_linesearch_steps": 2.5}, "max_linesearch_steps", "2.5"),
    (gradtx.scale_by_zoom_linesearch, {"max_learning_rate": 0.0}, "max_learning_rate", "0.0"),
    (gradtx.scale_by_zoom_linesearch, {"tol": -1.0}, "tol", "-1.0"),
    (gradtx.scale_by_zoom_linesearch, {"increase_factor": 0.0}, "increase_factor", "0.0"),
    (gradtx.scale_by_zoom_linesearch, {"slope_rtol": 1.0}, "slope_rtol", "1.0"),
    (gradtx.scale_by_zoom_linesearch, {"curv_rtol": 0.0}, "curv_rtol", "0.0"),
    (gradtx.scale_by_zoom_linesearch, {"approx_dec_rtol": -1e-6}, "approx_dec_rtol", "-1e-06"),
    (gradtx.scale_by_zoom_linesearch, {"stepsize_precision": -1.0}, "stepsize_precision", "-1.0"),
    (
        gradtx.scale_by_zoom_linesearch,
        {"initial_guess_strategy": "once"},
        "initial_guess_strategy",
        "'once'",
    ),
    (
        gradtx.scale_by_backtracking_linesearch,
        {"max_backtracking_steps": -1},
        "max_backtracking_steps",
        "-1",
    ),
    (gradtx.scale_by_backtracking_linesearch, {"slope_rtol": -0.1}, "slope_rtol", "-0.1"),
    (gradtx.scale_by_backtracking_linesearch, {"decrease_factor": 1.0}, "decrease_factor", "1.0"),
    (gradtx.scale_by_backtracking_linesearch, {"increase_factor": -1.0}, "increase_factor", "-1.0"),
    (
        gradtx.scale_by_backtracking_linesearch,
        {"max_learning_rate": -1.0},
        "max_learning_rate",
        "-1.0",
    ),
    (gradtx.scale_by_backtracking_linesearch, {"atol": -1.0}, "atol", "-1.0"),
    (gradtx.scale_by_backtracking_linesearch, {"rtol": -1.0}, "rtol", "-1.0"),
    (gradtx.scale_by_backtracking_linesearch, {"store_grad": "yes"}, "store_grad", "'yes'"),
    (gradtx.scale_by_zoom_linesearch, {"verbose": 1}, "verbose", "1"),
]


@pytest.mark.parametrize(
    ("factory", "kwargs", "name", "shown"),
    INVALID,
    ids=[f"{f.__name__}-{n}" for f, _, n, _ in INVALID],
)
def test_invalid_hyperparameters_raise_at_construction(factory, kwargs, name, shown):
    first = "max_linesearch_steps" if factory is gradtx.scale_by_zoom_linesearch else None
    args = {first or "max_backtracking_steps": 5, **kwargs}
    with pytest.raises(ValueError, match=rf"^{factory.__name__}: {name} must .*, got {shown}"):
        factory(**args)


def test_state_layout_does_not_depend_on_hyperparameter_values():
    params = {"w": jnp.ones(3), "b": jnp.zeros([])}
    zooms = [
        gradtx.scale_by_zoom_linesearch(5),
        gradtx.scale_by_zoom_linesearch(
            30, max_learning_rate=2.0, approx_dec_rtol=None, initial_guess_strategy="one"
        ),
    ]
    backtrackings = [  # store_grad decides whether a gradient is kept at all, as in Optax
        gradtx.scale_by_backtracking_linesearch(5, store_grad=True),
        gradtx.scale_by_backtracking_linesearch(9, decrease_factor=0.5, store_grad=True),
    ]
    for group, state_type, optax_type in [
        (zooms, gradtx.ScaleByZoomLinesearchState, optax.ScaleByZoomLinesearchState),
        (
            backtrackings,
            gradtx.ScaleByBacktrackingLinesearchState,
            optax.ScaleByBacktrackingLinesearchState,
        ),
    ]:
        states = [tx.init(params) for tx in group]
        assert all(isinstance(s, state_type) for s in states)
        assert state_type._fields == optax_type._fields
        assert jax.tree.structure(states[0]) == jax.tree.structure(states[1])
        assert [x.dtype for x in jax.tree.leaves(states[0])] == [
            x.dtype for x in jax.tree.leaves(states[1])
        ]


def test_low_precision_parameters_keep_their_dtypes():
    """bf16 parameters: bf16 updates and gradients, float32 step sizes and values."""
    params = {"w": jnp.array([1.0, -2.0, 0.5], jnp.bfloat16), "b": jnp.array(0.25, jnp.bfloat16)}
    solvers = [
        gradtx.lbfgs(memory_size=3),
        gradtx.lbfgs(
            memory_size=3, linesearch=gradtx.scale_by_backtracking_linesearch(10, store_grad=True)
        ),
    ]

    runs = jax.jit(lambda p: [full_batch_run(tx, _sum_of_squares, p, 3, gradtx) for tx in solvers])(
        params
    )
    for it, state in runs:
        assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(it))
        search = state[2]
        assert search.learning_rate.dtype == search.value.dtype == jnp.float32
        assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(search.grad))
        assert float(_sum_of_squares(jax.tree.map(lambda x: x[-1], it))) < 1e-2


# --------------------------------------------------------------------------------------------
# Complex parameters: the slopes are Re<grad, u>, with the imaginary parts and the conjugate
# --------------------------------------------------------------------------------------------


def test_real_vdot_counts_imaginary_parts():
    """The line searches' inner product (`tree.vdot` once cast complex leaves to float32 first,
    dropping the imaginary parts; it is now Optax's complex `vdot`, and the searches use the
    real part, `real_vdot`)."""
    from gradtx.tree._math import real_vdot

    x = {"a": jnp.array([1 + 2j, -0.5j], jnp.complex64), "b": jnp.array([3.0], jnp.float32)}
    y = {"a": jnp.array([2 - 1j, 4 + 1j], jnp.complex64), "b": jnp.array([0.5], jnp.float32)}
    got = real_vdot(x, y)
    want = np.real(np.vdot(np.asarray(x["a"]), np.asarray(y["a"]))) + 1.5
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(float(got), want, rtol=1e-6)
    np.testing.assert_allclose(float(real_vdot(x["a"], x["a"])), 1 + 4 + 0.25, rtol=1e-6)
    z = jnp.array([1 + 1e-3j], jnp.complex128) if jax.config.read("jax_enable_x64") else None
    if z is not None:  # complex128 accumulates in float64
        assert real_vdot(z, z).dtype == jnp.float64


def _complex_objective(z):
    return jnp.sum(jnp.abs(z - jnp.array([0.5 - 1j, 2j])) ** 3)


@pytest.mark.parametrize("search", ["zoom", "backtracking"])
def test_complex_parameters_take_the_step_of_the_real_equivalent(search):
    """One search along -Re/Im-gradient from a complex point picks the same step size as on the
    same function of (Re z, Im z); the gradient the zoom search stores is `jax.grad`'s (the
    conjugate for complex `z`), as Optax's."""
    if search == "zoom":
        make = lambda: gradtx.scale_by_zoom_linesearch(10, initial_guess_strategy="one")
    else:
        make = lambda: gradtx.scale_by_backtracking_linesearch(10, store_grad=True)
    real_objective = lambda x: _complex_objective(x[0] + 1j * x[1])

    def one_step(value_fn, params, conj):
        tx = make()
        value, grad = jax.value_and_grad(value_fn)(params)
        grad = jnp.conj(grad) if conj else grad  # the ascent direction
        updates, state = tx.update(
            -grad, tx.init(params), params, value=value, grad=grad, value_fn=value_fn
        )
        return updates, state

    z = jnp.array([1 + 1j, -0.5 + 0.25j], jnp.complex64)
    z_updates, z_state = jax.jit(lambda p: one_step(_complex_objective, p, True))(z)
    x = jnp.stack([z.real, z.imag])
    x_updates, x_state = jax.jit(lambda p: one_step(real_objective, p, False))(x)
    assert float(z_state.learning_rate) != 1.0  # the search had work to do
    np.testing.assert_allclose(
        float(z_state.learning_rate), float(x_state.learning_rate), rtol=1e-5
    )
    np.testing.assert_allclose(
        np.asarray(z_updates), np.asarray(x_updates[0] + 1j * x_updates[1]), rtol=1e-5
    )
    x_grad = np.asarray(x_state.grad)
    np.testing.assert_allclose(np.asarray(z_state.grad), x_grad[0] - 1j * x_grad[1], rtol=1e-5)
