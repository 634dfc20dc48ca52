"""Schedule-free learning: interpolation and averaging in place of momentum and a decaying
schedule (a wrapper of a momentum-free base optimizer, and its SGD and AdamW forms)."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.tree_util import GetAttrKey

from .._base._checks import (
    alias_errors,
    check_in_range,
    check_int,
    check_non_negative,
    check_scalar,
)
from .._base._introspect import register
from .._base._numerics import last_used, safe_increment, value_at, widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, OptState, Params, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain, forward_extra_args, require_params
from ..optimizers._sgd import sgd
from ..schedules import warmup_constant_schedule
from ..transforms._adaptive import scale_by_rms
from ..transforms._building_blocks import copy_params, scalar_dtype
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ..tree import assert_same_structure, map_split


class ScheduleFreeState(NamedTuple):
    """State of `schedule_free` (Optax's fields and order)."""

    b1: jax.Array  # beta_1 (float32), read by `schedule_free_eval_params`
    weight_sum: jax.Array  # sum of the averaging weights, float32
    step_count: jax.Array  # int32, saturating; starts at 1
    max_lr: jax.Array  # largest learning rate so far, float32
    base_optimizer_state: OptState
    z: Params  # the base optimizer's iterate, dtype `state_dtype` or the params'


def check_transformation(who: str, tx: Any) -> Any:
    """`tx` if it has callable `init` and `update` (a gradtx or Optax transformation)."""
    if callable(getattr(tx, "init", None)) and callable(getattr(tx, "update", None)):
        return tx
    hint = " (did you pass a factory instead of calling it?)" if callable(tx) else ""
    raise TypeError(
        f"{who}: base_optimizer must be a GradientTransformation, got {type(tx).__name__}{hint}"
    )


def _find_state(state: Any) -> ScheduleFreeState:
    if isinstance(state, ScheduleFreeState):
        return state
    found = [
        s
        for s in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, ScheduleFreeState))
        if isinstance(s, ScheduleFreeState)
    ]
    if len(found) != 1:
        raise ValueError(
            "schedule_free_eval_params: state must be (or hold exactly one) ScheduleFreeState, "
            f"the state of schedule_free; found {len(found)} in a {type(state).__name__}"
        )
    return found[0]


def schedule_free_eval_params(state: OptState, params: Params) -> Params:
    r"""The parameters to evaluate (test or validation loss) a schedule-free run at.

    .. math::  x_t = \frac{y_t - (1 - \beta_1) z_t}{\beta_1}

    where :math:`y_t` are the training params (where gradients are taken) and :math:`z_t` the
    base optimizer's iterate kept in the state.

    Args:
      state: the state of `schedule_free` (or of an alias built on it), or a state that holds
        exactly one such state (e.g. a chain with `schedule_free` in it).
      params: the current training params :math:`y_t`.

    Returns:
      :math:`x_t`, with the params' structure and dtypes.

    Reference: Defazio et al., "The Road Less Scheduled" (NeurIPS 2024). Matches
    `optax.contrib.schedule_free_eval_params` (Optax 0.2.8), which accepts only the
    `ScheduleFreeState` itself.
    """
    sf = _find_state(state)
    b1 = widen(sf.b1)
    return jax.tree.map(
        lambda y, z: ((widen(y) - (1.0 - b1) * widen(z)) / b1).astype(jnp.asarray(y).dtype),
        params,
        sf.z,
    )


@recorded
def schedule_free(
    base_optimizer: GradientTransformation,
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    weight_lr_power: ArrayLike = 2.0,
    state_dtype: DType | None = None,
) -> GradientTransformation:
    r"""Make `base_optimizer` schedule-free: its iterates :math:`z_t` are averaged into
    :math:`x_t`, and gradients are taken at an interpolation :math:`y_t` of the two.

    .. math::

      z_{t+1} &= z_t + u^{base}_t(\nabla f(y_t)), \qquad
      c_{t+1} = \frac{\gamma_{\max,t}^{p}}{\sum_{k \le t} \gamma_{\max,k}^{p}}, \\
      x_{t+1} &= (1 - c_{t+1})\, x_t + c_{t+1} z_{t+1}, \qquad
      y_{t+1} = \beta_1 x_{t+1} + (1 - \beta_1) z_{t+1}

    where :math:`\gamma_{\max,t}` is the largest learning rate so far and :math:`p` is
    `weight_lr_power`. The params are :math:`y_t` (the update is :math:`y_{t+1} - y_t`);
    :math:`x_t` is recomputed from :math:`y_t` and :math:`z_t`, and is what to evaluate at: see
    `schedule_free_eval_params`. Switch off the base optimizer's momentum (e.g. Adam with
    `b1=0`): the interpolation replaces it. A wrapper, not a chain: it rewrites the params'
    trajectory. Extra arguments of `update` (e.g. `value=loss`) reach the base optimizer.

    Args:
      base_optimizer: the momentum-free transformation that moves :math:`z`.
      learning_rate: the learning rate (or schedule, with warmup but without decay) given to
        the base optimizer; it weights the average (the schedule is called with the step count
        starting at 1, as in Optax).
      b1: :math:`\beta_1` in (0, 1], the interpolation weight.
      weight_lr_power: :math:`p` >= 0, down-weights the averaging of early (warmup) iterates.
      state_dtype: dtype of :math:`z` (default: the params' dtypes).

    Returns:
      A `GradientTransformation` with state `ScheduleFreeState`; `update` needs `params`.
      `gradtx.metrics` reports its `learning_rate` (the value the latest update used) and what
      the base optimizer reports.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> f = lambda x: jnp.sum(x**2)
      >>> tx = gradtx.contrib.schedule_free(gradtx.sgd(0.1), learning_rate=0.1)
      >>> y = jnp.array([1.0, 2.0, 3.0])
      >>> state = tx.init(y)
      >>> for _ in range(20):
      ...     updates, state = tx.update(jax.grad(f)(y), state, y)
      ...     y = gradtx.apply_updates(y, updates)
      >>> x = gradtx.contrib.schedule_free_eval_params(state, y)
      >>> bool(f(x) < 1e-2)
      True

    Reference: Defazio et al., "The Road Less Scheduled" (NeurIPS 2024). Matches
    `optax.contrib.schedule_free` (Optax 0.2.8), with the scalar statistics in float32 for
    low-precision params (Optax keeps them in the lowest params dtype).
    """
    who = "schedule_free"
    base = check_transformation(who, base_optimizer)
    check_non_negative(who, "learning_rate", learning_rate)
    check_in_range(who, "b1", b1, 0.0, 1.0, low_open=True)
    check_non_negative(who, "weight_lr_power", weight_lr_power)
    base_update = forward_extra_args(base.update)

    def init(params):
        dtype = scalar_dtype(params)
        return ScheduleFreeState(
            b1=jnp.asarray(b1, dtype),
            weight_sum=jnp.zeros([], dtype),
            step_count=jnp.ones([], jnp.int32),
            max_lr=jnp.zeros([], dtype),
            base_optimizer_state=base.init(params),
            z=copy_params(params, state_dtype),
        )

    def update(updates, state, params=None, **extra_args):
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params)
        dtype = state.max_lr.dtype
        lr = jnp.asarray(value_at(learning_rate, state.step_count), dtype)
        max_lr = jnp.maximum(state.max_lr, lr)
        weight = max_lr**weight_lr_power
        total = state.weight_sum + weight
        # 0 / 0 (a zero learning rate so far, e.g. at the start of a warmup) gives weight 0;
        # a NaN learning rate stays NaN.
        ck = jnp.where(
            jnp.isnan(weight) | jnp.isnan(total),
            jnp.nan,
            jnp.nan_to_num(weight / total, nan=0.0, posinf=jnp.inf),
        ).astype(dtype)

        base_updates, base_state = base_update(
            updates, state.base_optimizer_state, params, **extra_args
        )

        def leaf(y, z_old, u):
            z_new = (widen(z_old) + widen(u)).astype(z_old.dtype)
            x_prev = (widen(y) - (1.0 - b1) * widen(z_old)) / b1
            x = (1.0 - ck) * x_prev + ck * widen(z_new)
            y_new = b1 * x + (1.0 - b1) * widen(z_new)
            return (y_new - widen(y)).astype(jnp.asarray(y).dtype), z_new

        new_updates, z = map_split(leaf, 2, params, state.z, base_updates)
        new_state = ScheduleFreeState(
            b1=state.b1,
            weight_sum=total,
            step_count=safe_increment(state.step_count),
            max_lr=max_lr,
            base_optimizer_state=base_state,
            z=z,
        )
        return new_updates, new_state

    # for `gradtx.metrics`: the learning rate the latest update used (the step count starts at
    # 1), and what the base optimizer reports
    def report(state):
        return {"learning_rate": last_used(learning_rate, state.step_count, start=1, who=who)}

    return register(
        GradientTransformation(init, update),
        "wrapper",
        children=[((GetAttrKey("base_optimizer_state"),), base)],
        report=report,
    )


def _warmed_up(learning_rate: ScalarOrSchedule, warmup_steps: int | None) -> ScalarOrSchedule:
    check_scalar("schedule_free", "learning_rate", learning_rate)  # a warm-up would broadcast it
    if warmup_steps is None:
        return learning_rate
    if callable(learning_rate):
        raise ValueError(
            "schedule_free: warmup_steps ramps up to a number learning_rate, got a schedule; "
            "give the schedule its own warm-up (gradtx.schedules.warmup) or pass a number"
        )
    return warmup_constant_schedule(
        init_value=0.0, peak_value=learning_rate, warmup_steps=warmup_steps
    )


def _check_warmup(who: str, warmup_steps: int | None) -> None:
    if warmup_steps is not None:
        check_int(who, "warmup_steps", warmup_steps, minimum=1)


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def schedule_free_sgd(
    learning_rate: ScalarOrSchedule = 1.0,
    warmup_steps: int | None = None,
    b1: ArrayLike = 0.9,
    weight_decay: ArrayLike | None = None,
    weight_lr_power: ArrayLike = 2.0,
    state_dtype: DType | None = None,
) -> GradientTransformation:
    r"""Schedule-free SGD.

    .. math::

      z_{t+1} = z_t - \gamma_t (\nabla f(y_t) + \lambda y_t), \qquad
      x_{t+1} = (1 - c_{t+1}) x_t + c_{t+1} z_{t+1}, \qquad
      y_{t+1} = \beta_1 x_{t+1} + (1 - \beta_1) z_{t+1}

    `schedule_free(chain(weight_decay(weight_decay), sgd(lr)) or sgd(lr), lr, b1,
    weight_lr_power, state_dtype)` with `lr` a linear warmup to `learning_rate` over
    `warmup_steps` when given. Evaluate at `schedule_free_eval_params(state, params)`.

    Args:
      learning_rate: :math:`\gamma` >= 0, the SGD learning rate (the peak, with a warmup), or a
        schedule (without `warmup_steps`).
      warmup_steps: length (>= 1) of a linear warmup from 0, or None.
      b1: :math:`\beta_1` in (0, 1].
      weight_decay: :math:`\lambda` >= 0 added to the gradient (so multiplied by the learning
        rate), or None.
      weight_lr_power: >= 0, down-weights the averaging during warmup.
      state_dtype: dtype of :math:`z` (default: the params' dtypes).

    Returns:
      A `GradientTransformation` with state `ScheduleFreeState`; `update` needs `params`.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> f = lambda x: jnp.sum(x**2)
      >>> tx = gradtx.contrib.schedule_free_sgd(0.1)
      >>> y = jnp.array([1.0, 2.0, 3.0])
      >>> state = tx.init(y)
      >>> for _ in range(20):
      ...     updates, state = tx.update(jax.grad(f)(y), state, y)
      ...     y = gradtx.apply_updates(y, updates)
      >>> bool(f(gradtx.contrib.schedule_free_eval_params(state, y)) < 1e-2)
      True

    Reference: Defazio et al., "The Road Less Scheduled" (NeurIPS 2024). Matches
    `optax.contrib.schedule_free_sgd` (Optax 0.2.8).
    """
    _check_warmup("schedule_free_sgd", warmup_steps)
    lr = _warmed_up(learning_rate, warmup_steps)
    optimizer = sgd(lr)
    if weight_decay is not None:
        optimizer = chain(weight_decay_tx(weight_decay), optimizer)
    return schedule_free(
        optimizer, lr, b1=b1, weight_lr_power=weight_lr_power, state_dtype=state_dtype
    )


@alias_errors(renamed={"weight_decay: rate": "weight_decay", "scale_by_rms: decay": "b2"})
def schedule_free_adamw(
    learning_rate: ScalarOrSchedule = 0.0025,
    warmup_steps: int | None = None,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    weight_decay: ArrayLike = 0.0,
    weight_lr_power: ArrayLike = 2.0,
    state_dtype: DType | None = None,
) -> GradientTransformation:
    r"""Schedule-free AdamW: AdamW without momentum, made schedule-free.

    .. math::

      z_{t+1} = z_t - \gamma_t \Big(\frac{g_t}{\sqrt{\hat v_t} + \epsilon} + \lambda y_t\Big),
      \qquad \hat v_t = \frac{v_t}{1 - \beta_2^t}, \quad
      v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2

    with :math:`g_t = \nabla f(y_t)` and :math:`x, y` as in `schedule_free`.
    `schedule_free(chain(scale_by_rms(b2, eps, eps_in_sqrt=False, bias_correction=True),
    weight_decay(weight_decay), scale_by_learning_rate(lr)), lr, b1, weight_lr_power,
    state_dtype)`, `lr` warmed up over `warmup_steps` when given. Evaluate at
    `schedule_free_eval_params(state, params)`.

    Args:
      learning_rate: :math:`\gamma` >= 0 (the peak, with a warmup), or a schedule (without
        `warmup_steps`).
      warmup_steps: length (>= 1) of a linear warmup from 0, or None.
      b1: :math:`\beta_1` in (0, 1], the interpolation weight (Adam's momentum is off).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, outside the square root.
      weight_decay: :math:`\lambda` >= 0, decoupled (added after the preconditioner).
      weight_lr_power: >= 0, down-weights the averaging during warmup.
      state_dtype: dtype of :math:`z` (default: the params' dtypes).

    Returns:
      A `GradientTransformation` with state `ScheduleFreeState`; `update` needs `params`.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> f = lambda x: jnp.sum(x**2)
      >>> tx = gradtx.contrib.schedule_free_adamw(0.5)
      >>> y = jnp.array([1.0, 2.0, 3.0])
      >>> state = tx.init(y)
      >>> for _ in range(50):
      ...     updates, state = tx.update(jax.grad(f)(y), state, y)
      ...     y = gradtx.apply_updates(y, updates)
      >>> bool(f(gradtx.contrib.schedule_free_eval_params(state, y)) < 1.0)
      True

    Reference: Defazio et al., "The Road Less Scheduled" (NeurIPS 2024). Matches
    `optax.contrib.schedule_free_adamw` (Optax 0.2.8).
    """
    _check_warmup("schedule_free_adamw", warmup_steps)
    lr = _warmed_up(learning_rate, warmup_steps)
    optimizer = chain(
        scale_by_rms(b2, eps, eps_in_sqrt=False, bias_correction=True),
        weight_decay_tx(weight_decay),
        scale_by_learning_rate(lr),
    )
    return schedule_free(
        optimizer, lr, b1=b1, weight_lr_power=weight_lr_power, state_dtype=state_dtype
    )
