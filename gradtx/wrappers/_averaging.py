"""Parameter averaging: an EMA of the parameters, and Lookahead's slow weights."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_in_range, check_int, error_context
from .._base._typing import ArrayLike, OptState, Params
from ..core._transformation import GradientTransformation, _as_transformation, forward_extra_args
from ..transforms._tier import (
    bias_correction,
    copy_params,
    require_params,
    safe_increment,
    widen,
    zero_count,
    zeros_like_params,
)
from ..transforms._tier import ema as _ema
from ..tree import assert_same_structure, map_split


class EmaParamsState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating: steps averaged so far
    ema: Params  # the moving average of the parameters (debiased when debias=True)


def ema_params(
    decay: ArrayLike, *, debias: bool = True, dtype: Any = None
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
        return EmaParamsState(count=zero_count(), ema=zeros_like_params(params, dtype))

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
    steps_since_sync: jax.Array  # int32 in [0, sync_period)
    slow: Params  # the slow weights (the parameters to evaluate with)
    inner_state: OptState  # the fast optimizer's state


def lookahead(
    tx: GradientTransformation,
    sync_period: int,
    slow_step_size: ArrayLike,
    *,
    reset_state: bool = False,
) -> GradientTransformation:
    r"""Lookahead: `tx` takes fast steps; every `sync_period` steps the slow weights move toward
    the fast ones and the parameters are reset to them.

    .. math::

      \theta_{t} = \theta_{t-1} + \mathrm{tx}(g_t); \quad \text{every } k \text{ steps:} \quad
      \phi \leftarrow \phi + \alpha (\theta_t - \phi), \quad \theta_t \leftarrow \phi

    Works on plain parameters: the params you pass are the fast weights, the slow weights
    :math:`\phi` live in the state (`gradtx.tree.get(state, "slow")`, initialised from the params
    given to `init`). On a sync step the returned update takes the params exactly to the new slow
    weights, so right after a sync the params *are* the slow weights.

    Args:
      tx: the fast optimizer.
      sync_period: :math:`k`, fast steps per synchronisation, an int >= 1.
      slow_step_size: :math:`\alpha` in [0, 1].
      reset_state: re-initialise the fast optimizer's state after each synchronisation.

    Returns:
      A `GradientTransformation` with state `LookaheadState(steps_since_sync, slow, inner_state)`;
      it needs `params`.

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

    Reference: Zhang et al., "Lookahead Optimizer: k steps forward, 1 step back" (NeurIPS 2019);
    matches the fast weights of `optax.lookahead` without its `LookaheadParams` wrapper.
    """
    who = "lookahead"
    tx = _as_transformation(tx, who, "tx")
    check_int(who, "sync_period", sync_period, minimum=1)
    check_in_range(who, "slow_step_size", slow_step_size, 0.0, 1.0)
    inner_update = forward_extra_args(tx.update)

    def init(params):
        return LookaheadState(
            steps_since_sync=zero_count(),
            slow=copy_params(params),
            inner_state=tx.init(params),
        )

    def update(updates, state, params=None, **extra_args):
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params, **{"state.slow": state.slow})
        with error_context(who):
            fast_updates, inner_state = inner_update(
                updates, state.inner_state, params, **extra_args
            )
        sync = state.steps_since_sync == sync_period - 1

        def leaf(p, u, s):
            p = jnp.asarray(p)
            fast = (p + u).astype(p.dtype)
            new_slow = (s + slow_step_size * (fast - s)).astype(s.dtype)
            slow = jnp.where(sync, new_slow, s)
            out = jnp.where(sync, (new_slow - p).astype(u.dtype), u)
            return out, slow

        new_updates, slow = map_split(leaf, 2, params, fast_updates, state.slow)
        if reset_state:
            fresh = tx.init(params)
            inner_state = jax.tree.map(lambda a, b: jnp.where(sync, a, b), fresh, inner_state)
        steps = jnp.where(sync, 0, state.steps_since_sync + 1).astype(state.steps_since_sync.dtype)
        return new_updates, LookaheadState(
            steps_since_sync=steps, slow=slow, inner_state=inner_state
        )

    return GradientTransformation(init, update)


__all__ = ["EmaParamsState", "LookaheadState", "ema_params", "lookahead"]
