"""L-BFGS: a quasi-Newton direction, scaled by a learning rate or a line search."""

from .._base._checks import alias_errors
from .._base._typing import ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain, identity
from ..transforms._lbfgs import scale_by_lbfgs
from ..transforms._linesearch_zoom import scale_by_zoom_linesearch
from ..transforms._scaling import scale, scale_by_learning_rate


@alias_errors(
    renamed={
        "scale_by_lbfgs: memory_size": "memory_size",
        "scale_by_lbfgs: scale_init_precond": "scale_init_precond",
    }
)
def lbfgs(
    learning_rate: ScalarOrSchedule | None = None,
    memory_size: int = 10,
    scale_init_precond: bool = True,
    linesearch: GradientTransformation | None = scale_by_zoom_linesearch(  # noqa: B008
        max_linesearch_steps=20, initial_guess_strategy="one"
    ),
) -> GradientTransformation:
    r"""L-BFGS: the limited-memory BFGS direction, with a zoom line search by default.

    .. math::  w_{k+1} = w_k - \eta_k P_k \nabla f(w_k)

    where :math:`P_k` is the L-BFGS inverse-Hessian approximation built from the last
    `memory_size` differences of parameters and gradients (`scale_by_lbfgs`) and
    :math:`\eta_k` comes from the line search (times `learning_rate`, when given). This is
    `chain(scale_by_lbfgs(memory_size, scale_init_precond), scale(-1) or
    scale_by_learning_rate(learning_rate), linesearch or identity())`.

    With a line search, `update` takes the objective as well (see `scale_by_zoom_linesearch`):
    `update(grad, state, params, value=value, grad=grad, value_fn=f)`; on a full-batch problem
    `value_and_grad_from_state(f)` reuses the value and gradient the search computed at the new
    point (the example below). Without one (`linesearch=None`), it is a plain
    `update(grads, state, params)` and the step is `learning_rate` (1 when None).

    Args:
      learning_rate: a float >= 0 or a schedule `count -> lr` scaling the direction; None for
        a scale of 1 (the line search picks the step).
      memory_size: the number of (parameter, gradient) difference pairs kept, >= 1.
      scale_init_precond: start the inverse Hessian from a scaled identity (see
        `scale_by_lbfgs`).
      linesearch: the line search chained last (`scale_by_zoom_linesearch` or
        `scale_by_backtracking_linesearch`), or None. The default is
        `scale_by_zoom_linesearch(max_linesearch_steps=20, initial_guess_strategy="one")`.

    Returns:
      A `GradientTransformation` whose state is the tuple of the three inner states.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> def f(w): return jnp.sum((w - 1.0) ** 2 * jnp.array([1.0, 10.0, 100.0]))
      >>> solver = gradtx.lbfgs()
      >>> params = jnp.zeros(3)
      >>> state = solver.init(params)
      >>> value_and_grad = gradtx.value_and_grad_from_state(f)
      >>> @jax.jit
      ... def step(params, state):
      ...     value, grad = value_and_grad(params, state=state)
      ...     updates, state = solver.update(
      ...         grad, state, params, value=value, grad=grad, value_fn=f)
      ...     return gradtx.apply_updates(params, updates), state
      >>> for _ in range(10):
      ...     params, state = step(params, state)
      >>> bool(jnp.allclose(params, 1.0, atol=1e-4))
      True

    Reference: Nocedal & Wright, "Numerical Optimization" (1999), Algorithms 7.4, 7.5; Liu &
    Nocedal (1989). Matches `optax.lbfgs` (0.2.8).
    """
    if learning_rate is None:
        step = scale(-1.0)
    else:
        step = scale_by_learning_rate(learning_rate)
    return chain(
        scale_by_lbfgs(memory_size=memory_size, scale_init_precond=scale_init_precond),
        step,
        identity() if linesearch is None else linesearch,
    )


__all__ = ["lbfgs"]
