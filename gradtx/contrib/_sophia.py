"""Sophia: clipped, diagonally preconditioned momentum with an occasional Hessian estimate."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import alias_errors, check_int, check_positive
from .._base._numerics import bias_correction, cond, key_data, widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Mask, OptState, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain, forward_extra_args
from ..state._quantize import MomentDType
from ..transforms._building_blocks import ema, into_buffer, require_params
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._rule import decay, rule, slot
from ..transforms._scaling import scale_by_learning_rate
from ..tree import assert_same_structure, size


class HutchinsonState(NamedTuple):
    """State of `hutchinson_estimator_diag_hessian`."""

    key: jax.Array  # raw PRNG key data (uint32), as `jax.random.key_data` returns it


class SophiaState(NamedTuple):
    """State of `scale_by_sophia` (Optax's fields)."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # momentum, dtype mu_dtype or the params'
    nu: Updates  # EMA of the Hessian diagonal estimates, the params' dtype
    hessian_fn_state: OptState  # the state of the Hessian diagonal estimator


@recorded
def hutchinson_estimator_diag_hessian(random_seed: Any = None) -> GradientTransformation:
    r"""Estimate the diagonal of the Hessian of `obj_fn` at the params (Hutchinson).

    .. math::  \widehat{\mathrm{diag}(H)} = z \odot (H z), \qquad z_i \in \{-1, +1\}
      \text{ uniformly}

    Unbiased, with high variance. :math:`Hz` is a Hessian-vector product (forward over
    reverse). Call `update(grads, state, params, obj_fn=loss_of_params)`; the returned
    "updates" are the estimate. Each call draws fresh signs from the key in the state. The
    random stream is Optax's for the same key.

    Args:
      random_seed: an integer seed or a PRNG key (`jax.random.key(0)`, or a legacy
        `jax.random.PRNGKey(0)`); None means `jax.random.PRNGKey(0)`, Optax's default.

    Returns:
      A `GradientTransformation` with state `HutchinsonState(key)`; it needs the params and
      `obj_fn`.

    Reference: Hutchinson, "A stochastic estimator of the trace of the influence matrix for
    Laplacian smoothing splines" (1989); as in `optax.contrib.hutchinson_estimator_diag_hessian`.
    """
    who = "hutchinson_estimator_diag_hessian"
    seed = 0 if random_seed is None else random_seed
    key0 = key_data(who, "random_seed", seed)

    def init(params):
        del params
        return HutchinsonState(key=jnp.array(key0))  # a fresh buffer: states may be donated

    def update(updates, state, params=None, *, obj_fn=None, **extra_args):
        del updates, extra_args
        params = require_params(who, params)
        if obj_fn is None:
            raise ValueError(
                f"{who} needs the objective: call update(grads, state, params, obj_fn=f), "
                "where f(params) returns the scalar loss"
            )
        key, subkey = jax.random.split(jax.random.wrap_key_data(state.key))
        leaves, treedef = jax.tree.flatten(params)
        keys = jax.random.split(subkey, len(leaves))
        signs = [
            jax.random.rademacher(k, jnp.shape(x), jnp.float32).astype(jnp.result_type(x))
            for k, x in zip(keys, leaves, strict=True)
        ]
        signs_tree = jax.tree.unflatten(treedef, signs)
        hvp = jax.jvp(jax.grad(obj_fn), (params,), (signs_tree,))[1]
        estimate = jax.tree.map(lambda h, z: h * z, hvp, signs_tree)
        return estimate, HutchinsonState(key=jax.random.key_data(key))

    return GradientTransformation(init, update)


@recorded
def scale_by_sophia(
    b1: ArrayLike = 0.965,
    b2: ArrayLike = 0.99,
    eps: ArrayLike = 1e-8,
    gamma: ArrayLike = 0.01,
    clip_threshold: ArrayLike | None = 1.0,
    update_interval: int = 10,
    hessian_diagonal_fn: GradientTransformation | None = None,
    mu_dtype: MomentDType | None = None,
    verbose: bool = False,
    print_win_rate_every_n_steps: int = 0,
) -> GradientTransformation:
    r"""Rescale updates by Sophia: bias-corrected momentum over a clipped Hessian diagonal.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      u_t = \mathrm{clip}\!\left(\frac{m_t / (1-\beta_1^t)}{\max(\gamma h_{t-1}, \epsilon)},
        \pm \rho\right), \\
      h_t = \begin{cases} \beta_2 h_{t-1} + (1-\beta_2) \hat h_t & t - 1 \equiv 0
        \pmod{k} \\ h_{t-1} & \text{else} \end{cases}

    :math:`\hat h_t` is `hessian_diagonal_fn`'s estimate (it gets the gradients, the params and
    any extra arguments of `update`, e.g. `obj_fn=`), :math:`k` = `update_interval`,
    :math:`\rho` = `clip_threshold` (None: no clipping). Matches
    `optax.contrib.scale_by_sophia` (whose module Optax does not export).

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the momentum.
      b2: :math:`\beta_2` in [0, 1), decay of the Hessian estimate (applied every k steps).
      eps: :math:`\epsilon` > 0, floor of the denominator.
      gamma: :math:`\gamma` > 0, the scale of the Hessian diagonal.
      clip_threshold: :math:`\rho` > 0, or None for no clipping.
      update_interval: k >= 1, steps between Hessian estimates.
      hessian_diagonal_fn: the estimator (default `hutchinson_estimator_diag_hessian()`, which
        needs `obj_fn=`); any transformation whose "updates" are a diagonal estimate.
      mu_dtype: dtype of the momentum buffer (default: the params' dtype), or a
        `gradtx.quantized()` spec for 8-bit storage.
      verbose: print the fraction of unclipped coordinates ("win rate") every
        `print_win_rate_every_n_steps` steps.
      print_win_rate_every_n_steps: >= 0; 0 never prints.

    Returns:
      A `GradientTransformation` with state `SophiaState(count, mu, nu, hessian_fn_state)`; it
      needs the params.

    Reference: Liu et al., "Sophia: A Scalable Stochastic Second-order Optimizer for Language
    Model Pre-training" (ICLR 2024), arXiv:2305.14342.
    """
    who = "scale_by_sophia"
    tx = _sophia(
        b1=b1, b2=b2, eps=eps, gamma=gamma, clip_threshold=clip_threshold, mu_dtype=mu_dtype
    )
    check_int(who, "update_interval", update_interval, minimum=1)
    check_int(who, "print_win_rate_every_n_steps", print_win_rate_every_n_steps, minimum=0)
    hess = (
        hutchinson_estimator_diag_hessian() if hessian_diagonal_fn is None else hessian_diagonal_fn
    )
    if not (callable(getattr(hess, "init", None)) and callable(getattr(hess, "update", None))):
        raise TypeError(
            f"{who}: hessian_diagonal_fn must be a GradientTransformation, got "
            f"{type(hess).__name__}"
        )
    hess_update = forward_extra_args(hess.update)

    def init(params):
        return tx.init(params)._replace(hessian_fn_state=hess.init(params))

    def update(updates, state, params=None, **extra_args):
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params)
        new_updates, new_state = tx.update(updates, state)  # count, mu; h_{t-1} as it was
        if verbose and clip_threshold is not None and print_win_rate_every_n_steps > 0:
            unclipped = sum(
                jnp.sum(jnp.abs(u) < clip_threshold) for u in jax.tree.leaves(new_updates)
            )
            win_rate = unclipped / max(size(new_updates), 1)
            jax.lax.cond(
                new_state.count % print_win_rate_every_n_steps == 0,
                lambda: jax.debug.print("Sophia optimizer win rate: {}", win_rate),
                lambda: None,
            )
        grads = updates

        def estimate(hess_state, nu):
            diag, hess_state = hess_update(grads, hess_state, params, **extra_args)
            nu = jax.tree.map(lambda d, h: into_buffer(ema(b2, widen(d), h), h), diag, nu)
            return hess_state, nu

        hessian_fn_state, nu = cond(
            state.count % update_interval == 0,
            estimate,
            lambda hs, n: (hs, n),
            state.hessian_fn_state,
            state.nu,
        )
        return new_updates, new_state._replace(nu=nu, hessian_fn_state=hessian_fn_state)

    return GradientTransformation(init, update)


def _positive(who: str, name: str, value: Any) -> None:
    if value is not None:  # clip_threshold: None, no clipping
        check_positive(who, name, value)


@rule(
    "scale_by_sophia",
    SophiaState,
    slots={"mu": slot(dtype="mu_dtype"), "nu": slot()},
    checks={
        "b1": decay,
        "b2": decay,
        "eps": _positive,
        "gamma": _positive,
        "clip_threshold": _positive,
    },
    fields=lambda hp: {"hessian_fn_state": None},  # the estimator's, from the params (init)
)
def _sophia(t, *, b1, b2, eps, gamma, clip_threshold):
    """The momentum step of one leaf over the Hessian estimate `nu`, which `scale_by_sophia`
    updates after it every `update_interval` steps."""
    del b2
    c1 = bias_correction(b1, t)

    def leaf(g, s):
        m = s.keep("mu", ema(b1, g, s.mu))
        u = (m / c1) / jnp.maximum(gamma * widen(s.nu), eps)
        if clip_threshold is not None:
            bound = jnp.asarray(clip_threshold)
            u = jnp.clip(u, -bound, bound)
        return u

    return leaf


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def sophia(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.965,
    b2: ArrayLike = 0.99,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 1e-4,
    weight_decay_mask: Mask | None = None,
    gamma: ArrayLike = 0.01,
    clip_threshold: ArrayLike | None = 1.0,
    update_interval: int = 10,
    hessian_diagonal_fn: GradientTransformation | None = None,
    mu_dtype: MomentDType | None = None,
    verbose: bool = False,
    print_win_rate_every_n_steps: int = 0,
) -> GradientTransformation:
    r"""Sophia: a light second-order optimizer (clipped momentum over a Hessian diagonal EMA).

    .. math::

      w_t = w_{t-1} - \eta_t \left( \mathrm{clip}\!\left(\frac{\hat m_t}
        {\max(\gamma h_{t-1}, \epsilon)}, \pm\rho\right) + \lambda w_{t-1} \right)

    with :math:`\hat m, h` from `scale_by_sophia`. With the default Hutchinson estimator, pass
    the loss as a function of the params: `update(grads, state, params, obj_fn=lambda p:
    loss(p, batch))`; any other extra argument goes to `hessian_diagonal_fn` too.
    `chain(scale_by_sophia(...), weight_decay(weight_decay, weight_decay_mask),
    scale_by_learning_rate(learning_rate))`. Matches `optax.contrib.sophia`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1) (effectively :math:`1 - (1-\beta_2)/k` per step).
      eps: :math:`\epsilon` > 0.
      weight_decay: :math:`\lambda` >= 0, decoupled weight decay.
      weight_decay_mask: which parameters decay (a boolean tree, a callable or glob patterns).
      gamma: :math:`\gamma` > 0.
      clip_threshold: :math:`\rho` > 0, or None for no clipping.
      update_interval: k >= 1, steps between Hessian estimates.
      hessian_diagonal_fn: the estimator (default `hutchinson_estimator_diag_hessian()`).
      mu_dtype: dtype of the momentum buffer (default: the params' dtype), or a
        `gradtx.quantized()` spec for 8-bit storage.
      verbose: print the win rate every `print_win_rate_every_n_steps` steps.
      print_win_rate_every_n_steps: >= 0; 0 never prints.

    Returns:
      A `GradientTransformation` (it needs the params).

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> loss = lambda p: jnp.sum(p["w"] ** 4)
      >>> tx = gradtx.contrib.sophia(1e-2)
      >>> params = {"w": jnp.ones(3)}
      >>> grads = jax.grad(loss)(params)
      >>> updates, state = tx.update(grads, tx.init(params), params, obj_fn=loss)

    Reference: Liu et al., "Sophia: A Scalable Stochastic Second-order Optimizer for Language
    Model Pre-training" (ICLR 2024), arXiv:2305.14342.
    """
    return chain(
        scale_by_sophia(
            b1,
            b2,
            eps,
            gamma,
            clip_threshold,
            update_interval,
            hessian_diagonal_fn,
            mu_dtype,
            verbose,
            print_win_rate_every_n_steps,
        ),
        weight_decay_tx(weight_decay, weight_decay_mask),
        scale_by_learning_rate(learning_rate),
    )


__all__ = [
    "HutchinsonState",
    "SophiaState",
    "hutchinson_estimator_diag_hessian",
    "scale_by_sophia",
    "sophia",
]
