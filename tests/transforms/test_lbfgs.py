"""`scale_by_lbfgs` and the `lbfgs` alias against Optax: on random gradients of mixed pytrees,
and on full-batch problems (Rosenbrock, an ill-conditioned quadratic) with both line searches,
where the iterates must match Optax's and reach the minimum."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import mixed_params
from ..optax_reference import with_modes
from .test_linesearch import PROBLEMS, QUADRATIC_MINIMUM, assert_iterates_match, run_both


def _schedule(count):
    return 0.3 / (1.0 + 0.02 * jnp.asarray(count, jnp.float32))


def _mixed_quadratic():
    """A convex quadratic on the mixed pytree (curvatures in [0.5, 2]): L-BFGS needs gradients
    of one function (on unrelated random gradients Optax's own eager and jitted runs part after
    ~50 steps, as rounding noise dominates the curvature pairs)."""
    params = mixed_params(seed=3)
    rng = np.random.default_rng(4)
    curv = jax.tree.map(lambda x: jnp.asarray(rng.uniform(0.5, 2.0, x.shape), x.dtype), params)
    target = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), params)

    def loss(p):
        terms = jax.tree.map(lambda x, a, b: 0.5 * jnp.sum(a * (x - b) ** 2), p, curv, target)
        return sum(jax.tree.leaves(terms))

    return params, loss


def _trajectory(tx, api, params, loss, steps):
    """The iterates of `steps` plain steps `update(grad, state, params)`; traceable."""

    def body(carry, _):
        p, s = carry
        updates, s = tx.update(jax.grad(loss)(p), s, p)
        p = api.apply_updates(p, updates)
        return (p, s), p

    return jax.lax.scan(body, (params, tx.init(params)), None, length=steps)[1]


# (id, factory of `api`): ours and Optax's give the same iterates over 100 steps on the mixed
# pytree; step sizes below one keep the run away from float32's noise floor for most of them.
MATCHES_OPTAX = [
    (
        "scale_by_lbfgs",
        lambda api: api.chain(api.scale_by_lbfgs(), api.scale(-0.2)),
    ),
    (
        "scale_by_lbfgs_small_memory_unscaled",
        lambda api: api.chain(
            api.scale_by_lbfgs(memory_size=3, scale_init_precond=False), api.scale(-0.2)
        ),
    ),
    (
        "lbfgs_schedule_no_linesearch",
        lambda api: api.lbfgs(learning_rate=_schedule, memory_size=4, linesearch=None),
    ),
]


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("name", "make", "use_jit"),
    with_modes(MATCHES_OPTAX, eager={"scale_by_lbfgs"}, jit={c[0] for c in MATCHES_OPTAX[1:]}),
)
def test_matches_optax_on_the_mixed_pytree(name, make, use_jit):
    params, loss = _mixed_quadratic()
    steps = 100
    expected = jax.jit(lambda p: _trajectory(make(optax), optax, p, loss, steps))(params)
    if use_jit:
        got = jax.jit(lambda p: _trajectory(make(gradtx), gradtx, p, loss, steps))(params)
    else:
        tx, p, out, grad = make(gradtx), params, [], jax.jit(jax.grad(loss))
        state = tx.init(p)
        for _ in range(steps):
            updates, state = tx.update(grad(p), state, p)
            p = gradtx.apply_updates(p, updates)
            out.append(p)
        got = jax.tree.map(lambda *xs: jnp.stack(xs), *out)
    assert_iterates_match(got, expected, rtol=1e-5, atol=1e-6)
    # The run went somewhere: the loss fell by orders of magnitude.
    assert float(loss(jax.tree.map(lambda x: x[-1], got))) < 1e-6 * float(loss(params))


LINESEARCHES = {
    "zoom": (None, None),  # lbfgs's default: a zoom search starting from 1
    "backtracking": (
        gradtx.scale_by_backtracking_linesearch(max_backtracking_steps=30, store_grad=True),
        optax.scale_by_backtracking_linesearch(max_backtracking_steps=30, store_grad=True),
    ),
}


@pytest.mark.parametrize("search", ["zoom", "backtracking"])
@pytest.mark.parametrize("problem", ["rosenbrock", "quadratic"])
def test_full_batch_iterates_match_optax_and_reach_the_minimum(problem, search):
    value_fn, start = PROBLEMS[problem]
    ours_ls, optax_ls = LINESEARCHES[search]
    ours = gradtx.lbfgs() if ours_ls is None else gradtx.lbfgs(linesearch=ours_ls)
    theirs = optax.lbfgs() if optax_ls is None else optax.lbfgs(linesearch=optax_ls)
    (our_iterates, _), (their_iterates, _) = run_both(ours, theirs, value_fn, start, steps=60)
    assert_iterates_match(our_iterates, their_iterates)
    final = jax.tree.map(lambda x: x[-1], our_iterates)
    if problem == "rosenbrock":
        np.testing.assert_allclose(final["x"], np.ones(4), atol=1e-5)
    else:
        x = np.concatenate([final["a"], final["b"]])
        np.testing.assert_allclose(x, QUADRATIC_MINIMUM, atol=1e-5)


def test_state_is_optax_shaped_and_its_layout_does_not_depend_on_values():
    params = mixed_params()
    a = gradtx.scale_by_lbfgs(memory_size=3).init(params)
    b = gradtx.scale_by_lbfgs(memory_size=10, scale_init_precond=False).init(params)
    assert isinstance(a, gradtx.ScaleByLBFGSState)
    assert gradtx.ScaleByLBFGSState._fields == optax.ScaleByLBFGSState._fields
    assert jax.tree.structure(a) == jax.tree.structure(b)
    assert a.diff_params_memory["dense"]["kernel"].shape == (3, 3, 4)
    assert a.weights_memory.dtype == jnp.float32 and a.count.dtype == jnp.int32
    constant = gradtx.lbfgs(learning_rate=0.5, linesearch=None).init(params)
    scheduled = gradtx.lbfgs(learning_rate=_schedule, linesearch=None).init(params)
    assert jax.tree.structure(constant) == jax.tree.structure(scheduled)


def test_update_needs_params():
    tx = gradtx.scale_by_lbfgs()
    params = {"w": jnp.ones(2)}
    with pytest.raises(ValueError, match="scale_by_lbfgs needs the current parameters"):
        tx.update(params, tx.init(params))


INVALID = [
    (gradtx.scale_by_lbfgs, {"memory_size": 0}, "scale_by_lbfgs: memory_size must be >= 1, got 0"),
    (
        gradtx.scale_by_lbfgs,
        {"memory_size": 2.5},
        "scale_by_lbfgs: memory_size must be an integer, got 2.5",
    ),
    (
        gradtx.scale_by_lbfgs,
        {"scale_init_precond": "yes"},
        "scale_by_lbfgs: scale_init_precond must be True or False, got 'yes'",
    ),
    (gradtx.lbfgs, {"memory_size": -1}, "lbfgs: memory_size must be >= 1, got -1"),
    (
        gradtx.lbfgs,
        {"learning_rate": -0.1},
        "lbfgs: scale_by_learning_rate: learning_rate must be >= 0, got -0.1",
    ),
]


@pytest.mark.parametrize(
    ("factory", "kwargs", "message"),
    INVALID,
    ids=[f"{f.__name__}-{next(iter(k))}" for f, k, _ in INVALID],
)
def test_invalid_hyperparameters_raise_at_construction(factory, kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}".replace("(", r"\(").replace(".", r"\.")):
        factory(**kwargs)


def test_lbfgs_rejects_a_line_search_that_is_not_a_transformation():
    with pytest.raises(
        TypeError, match="lbfgs: chain: argument 2 must be a GradientTransformation"
    ):
        gradtx.lbfgs(linesearch=gradtx.scale_by_zoom_linesearch)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Complex parameters (Optax's test_lbfgs_complex): a real function of complex `z`, driven the
# way Optax's tests drive it, with the conjugated `jax.grad` (the ascent direction) passed as
# both the updates and `grad`.
# --------------------------------------------------------------------------------------------

_COMPLEX_MAT = jnp.array([[1, -2], [3, 4], [-4 + 2j, 5 - 3j], [-2 - 2j, 6]], jnp.complex64)
_COMPLEX_START = jnp.array([1 - 1j, 0 + 1j], jnp.complex64)


def _complex_loss(z):
    return jnp.sum(jnp.abs(_COMPLEX_MAT @ z) ** 1.5)


def _real_loss(x):  # the same function of (Re z, Im z) stacked
    return _complex_loss(x[0] + 1j * x[1])


def _conj_grad_run(solver, api, value_fn, params, *, steps=None, tol=1e-5, maxiter=500):
    """Optax's `_run_opt` loop: `steps` iterations (returns the iterates), or until the gradient
    norm is below `tol` (returns the final parameters and the iteration count)."""
    value_and_grad = jax.value_and_grad(value_fn)

    def step(p, s):
        value, grad = value_and_grad(p)
        grad = jax.tree.map(jnp.conj, grad)
        updates, s = solver.update(grad, s, p, value=value, grad=grad, value_fn=value_fn)
        return api.apply_updates(p, updates), s, grad

    if steps is not None:

        def body(carry, _):
            p, s, _ = step(*carry)
            return (p, s), p

        return jax.lax.scan(body, (params, solver.init(params)), None, length=steps)[1]

    def keep_going(carry):
        _, _, count, grad = carry
        return (gradtx.tree.norm(grad) >= tol) & (count < maxiter)

    def body(carry):
        p, s, count, _ = carry
        p, s, grad = step(p, s)
        return p, s, count + 1, grad

    start = (params, solver.init(params), 0, jax.grad(value_fn)(params))
    final, _, count, _ = jax.lax.while_loop(keep_going, body, start)
    return final, count


def test_complex_params_iterates_match_optax():
    # Before the fix the curvature pairs and slopes dropped the imaginary parts (and the zoom
    # search's slope at a trial point missed a conjugate): the iterates left Optax's at step 2.
    def both(z):
        return (
            _conj_grad_run(gradtx.lbfgs(), gradtx, _complex_loss, z, steps=20),
            _conj_grad_run(optax.lbfgs(), optax, _complex_loss, z, steps=20),
        )

    ours, theirs = jax.jit(both)(_COMPLEX_START)
    assert ours.dtype == jnp.complex64
    assert_iterates_match(np.asarray(ours), np.asarray(theirs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("search", ["zoom", "backtracking"])
def test_complex_params_converge_like_the_real_equivalent(search):
    # Optax: 43 (zoom) and 75 (backtracking) iterations; before the fix gradtx ran all 500 and
    # ended 2e-4...6e-2 away from the minimum at 0.
    def solver():
        if search == "zoom":
            return gradtx.lbfgs()
        return gradtx.lbfgs(
            linesearch=gradtx.scale_by_backtracking_linesearch(max_backtracking_steps=20)
        )

    def both(z):
        real_start = jnp.stack([z.real, z.imag])
        return (
            _conj_grad_run(solver(), gradtx, _complex_loss, z),
            _conj_grad_run(solver(), gradtx, _real_loss, real_start),
        )

    (z, z_count), (x, x_count) = jax.jit(both)(_COMPLEX_START)
    assert int(z_count) < 100, f"{int(z_count)} iterations"
    np.testing.assert_allclose(np.asarray(z), 0.0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(z), np.asarray(x[0] + 1j * x[1]), atol=1e-5)
    assert abs(int(z_count) - int(x_count)) <= 5
