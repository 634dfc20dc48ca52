"""Parameter averaging: an EMA of the parameters, and Lookahead's slow weights."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_bool, check_in_range, check_int, error_context, expect_state
from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, OptState, Params
from ..core._transformation import GradientTransformation, as_transformation, forward_extra_args
from ..transforms._building_blocks import (
    bias_correction,
    copy_params,
    require_params,
    safe_increment,
    widen,
    zero_count,
)
from ..transforms._building_blocks import ema as _ema
from ..tree import assert_same_structure, map_split, zeros_like
from ._common import register_wrapper


class EmaParamsState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating: steps averaged so far
    ema: Params  # the moving average of the parameters (debiased when debias=True)


@recorded
def ema_params(
    decay: ArrayLike, *, debias: bool = True, dtype: DType | None = None
) -> GradientTransformation:
    r"""Keep an exponential moving average of the parameters in the state; updates pass through.

    With :math:`w_t` the parameters after this step's update (`params + updates`):

    .. math::

      \bar w_t = \beta \bar w_{t-1} + (1-\beta) w_t, \quad \bar w_0 = 0, \qquad
      \text{ema}_t = \bar w_t / (1 - \beta^t) \ \text{(debias)} \ \text{or} \ \bar w_t

    The debiased average is stored directly (updated as
    :math:`\text{ema}_t = \text{ema}_{t-1} + \frac{1-\beta}{1-\beta^t}(w_t - \text{ema}_{t-1})`),
    so `gradtx.tree.get(state, "ema")` is ready to evaluate with; after the first step it equals
    the parameters. Both forms are one EMA, :math:`\text{ema}_t = \delta_t\, \text{ema}_{t-1} +
    (1-\delta_t) w_t`, with :math:`\delta_t = 1 - \frac{1-\beta}{1-\beta^t}` (debias) or
    :math:`\beta`, computed in float32 or wider. Place it last in a chain, where `updates` are
    the final parameter changes.

    Args:
      decay: :math:`\beta` in [0, 1).
      debias: divide by :math:`1-\beta^t` (Adam-style), so early averages are not pulled to 0.
      dtype: dtype of the average (default: the params' dtype; float32 helps for bf16 params).

    Returns:
      A `GradientTransformation` with state `EmaParamsState(count, ema)`; it needs `params`.

    Reference: Polyak averaging / "EMA of weights"; `optax.ema` applied to the parameter sequence.
    """
    who = "ema_params"
    check_in_range(who, "decay", decay, 0.0, 1.0, high_open=True)

    def init(params):
        return EmaParamsState(count=zero_count(), ema=zeros_like(params, dtype))

    def update(updates, state, params=None, **extra_args):
        del extra_args
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params, **{"state.ema": state.ema})
        count = safe_increment(state.count)
        beta = jnp.asarray(decay, jnp.float32)
        # the debiased average kept directly: the weight of the new parameters is
        # (1 - beta) / (1 - beta^t), exactly 1 at the first step
        delta = 1.0 - (1.0 - beta) / bias_correction(beta, count) if debias else beta

        def leaf(e, p, u):
            p = jnp.asarray(p)
            new_p = widen((p + u).astype(p.dtype))
            return _ema(delta, new_p, widen(e)).astype(e.dtype)

        ema = jax.tree.map(leaf, state.ema, params, updates)
        return updates, EmaParamsState(count=count, ema=ema)

    return GradientTransformation(init, update)


class LookaheadState(NamedTuple):
    steps_since_sync: jax.Array  # int32: fast steps since the last sync (< sync_period)
    slow: Params  # the slow weights (the parameters to evaluate with); () for LookaheadParams
    inner_state: OptState  # the fast optimizer's state

    @property
    def fast_state(self) -> OptState:
        """The fast optimizer's state, under Optax's field name (`inner_state`)."""
        return self.inner_state


class LookaheadParams(NamedTuple):
    """Fast and slow parameters in one tree, for `lookahead` as Optax uses it.

    Compute the gradients with `params.fast`; evaluate with `params.slow`. `lookahead` then
    returns updates as a `LookaheadParams` too, for both, and keeps no slow copy in its state.
    """

    fast: Params
    slow: Params

    @classmethod
    def init_synced(cls, params: Params) -> LookaheadParams:
        """Fast and slow parameters that start equal (both are `params`)."""
        return cls(fast=params, slow=params)


@recorded
def lookahead(
    tx: GradientTransformation,
    sync_period: int,
    slow_step_size: ArrayLike,
    reset_state: bool = False,
) -> GradientTransformation:
    r"""Lookahead: `tx` takes fast steps; every `sync_period` steps the slow weights move toward
    the fast ones and the parameters are reset to them.

    .. math::

      \theta_{t} = \theta_{t-1} + \mathrm{tx}(g_t); \quad \text{every } k \text{ steps:} \quad
      \phi \leftarrow \phi + \alpha (\theta_t - \phi), \quad \theta_t \leftarrow \phi

    Two forms, chosen by the params given to `init` and `update`:

    - plain parameters: the params you pass are the fast weights, the slow weights :math:`\phi`
      live in the state (`gradtx.tree.get(state, "slow")`, initialised from the params given to
      `init`). On a sync step the returned update takes the params exactly to the new slow
      weights, so right after a sync the params *are* the slow weights.
    - `LookaheadParams(fast, slow)` (Optax's form; `LookaheadParams.init_synced(params)`): the
      gradients are those of `params.fast`, the updates are a `LookaheadParams` moving both
      (the slow ones only on sync steps), and the state keeps no slow copy (`slow` is `()`).
      A state from `init` on plain params works too (its slow copy is then left unused).

    Args:
      tx: the fast optimizer.
      sync_period: :math:`k`, fast steps per synchronisation, an int >= 1. A state restored
        under a smaller `sync_period` that has taken `sync_period - 1` or more fast steps since
        its last synchronisation synchronises on the next step.
      slow_step_size: :math:`\alpha` in [0, 1].
      reset_state: re-initialise the fast optimizer's state after each synchronisation.

    Returns:
      A `GradientTransformation` with state `LookaheadState(steps_since_sync, slow, inner_state)`
      (`state.fast_state` reads `inner_state` under Optax's name); it needs `params`.

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.lookahead(gradtx.sgd(1.0), sync_period=2, slow_step_size=0.5)
      >>> params = {"w": jnp.zeros(1)}
      >>> state = tx.init(params)
      >>> for _ in range(2):  # two fast steps of -1, then the slow weights move halfway
      ...     updates, state = tx.update({"w": jnp.ones(1)}, state, params)
      ...     params = gradtx.apply_updates(params, updates)
      >>> params["w"]
      Array([-1.], dtype=float32)
      >>> both = gradtx.wrappers.LookaheadParams.init_synced({"w": jnp.zeros(1)})
      >>> state = tx.init(both)
      >>> for _ in range(2):
      ...     updates, state = tx.update({"w": jnp.ones(1)}, state, both)
      ...     both = gradtx.apply_updates(both, updates)
      >>> both.fast["w"], both.slow["w"]
      (Array([-1.], dtype=float32), Array([-1.], dtype=float32))

    Reference: Zhang et al., "Lookahead Optimizer: k steps forward, 1 step back" (NeurIPS 2019);
    matches `optax.lookahead` (with `LookaheadParams`: the same updates; Optax's state is
    `LookaheadState(fast_state, steps_since_sync)`).
    """
    who = "lookahead"
    tx = as_transformation(tx, who, "tx")
    check_int(who, "sync_period", sync_period, minimum=1)
    check_in_range(who, "slow_step_size", slow_step_size, 0.0, 1.0)
    check_bool(who, "reset_state", reset_state)
    inner_update = forward_extra_args(tx.update)

    def init(params):
        if isinstance(params, LookaheadParams):
            return LookaheadState(
                steps_since_sync=zero_count(), slow=(), inner_state=tx.init(params.fast)
            )
        return LookaheadState(
            steps_since_sync=zero_count(),
            slow=copy_params(params),
            inner_state=tx.init(params),
        )

    def reset(inner_state, fast_params, sync):
        if not reset_state:
            return inner_state
        fresh = tx.init(fast_params)
        return jax.tree.map(lambda a, b: jnp.where(sync, a, b), fresh, inner_state)

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, LookaheadState)
        params = require_params(who, params)
        # `>=`: a state restored under a smaller sync_period synchronises at once
        sync = state.steps_since_sync >= sync_period - 1
        steps = jnp.where(sync, 0, state.steps_since_sync + 1).astype(state.steps_since_sync.dtype)
        if isinstance(params, LookaheadParams):
            return _update_pair(updates, state, params, sync, steps, **extra_args)
        if isinstance(state.slow, tuple) and not state.slow and jax.tree.leaves(params):
            raise ValueError(
                f"{who}: the state was made by init on LookaheadParams; pass "
                "LookaheadParams(fast, slow) as params to update too"
            )
        assert_same_structure(who, updates=updates, params=params, **{"state.slow": state.slow})
        with error_context(who):
            fast_updates, inner_state = inner_update(
                updates, state.inner_state, params, **extra_args
            )

        def leaf(p, u, s):
            p = jnp.asarray(p)
            fast = (p + u).astype(p.dtype)
            new_slow = (s + slow_step_size * (fast - s)).astype(s.dtype)
            slow = jnp.where(sync, new_slow, s)
            out = jnp.where(sync, (new_slow - p).astype(u.dtype), u)
            return out, slow

        new_updates, slow = map_split(leaf, 2, params, fast_updates, state.slow)
        inner_state = reset(inner_state, params, sync)
        return new_updates, LookaheadState(
            steps_since_sync=steps, slow=slow, inner_state=inner_state
        )

    def _update_pair(updates, state, params, sync, steps, **extra_args):
        # Optax's form: with d = fast + u - slow, a sync step moves slow by alpha d and fast by
        # u - (1 - alpha) d, i.e. both onto the new slow weights; other steps move fast by u.
        assert_same_structure(
            who, updates=updates, **{"params.fast": params.fast, "params.slow": params.slow}
        )
        with error_context(who):
            fast_updates, inner_state = inner_update(
                updates, state.inner_state, params.fast, **extra_args
            )

        def leaf(f, u, s):
            f, s = jnp.asarray(f), jnp.asarray(s)
            diff = f + u - s
            slow_u = jnp.where(sync, slow_step_size * diff, jnp.zeros_like(diff))
            fast_u = jnp.where(sync, u - (1 - slow_step_size) * diff, u)
            return fast_u.astype(jnp.result_type(u)), slow_u.astype(s.dtype)

        fast_u, slow_u = map_split(leaf, 2, params.fast, fast_updates, params.slow)
        inner_state = reset(inner_state, params.fast, sync)
        return LookaheadParams(fast=fast_u, slow=slow_u), LookaheadState(
            steps_since_sync=steps, slow=state.slow, inner_state=inner_state
        )

    return register_wrapper(GradientTransformation(init, update), tx)


__all__ = ["EmaParamsState", "LookaheadParams", "LookaheadState", "ema_params", "lookahead"]
