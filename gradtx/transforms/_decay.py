"""Weight decay: adding `rate * param` to the updates."""

from typing import NamedTuple

import jax

from .._base._checks import check_non_negative, expect_state
from .._base._numerics import safe_increment, value_at, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, ScalarOrSchedule
from ..core._transformation import GradientTransformation, require_params, with_nones_of
from ..tree import assert_same_structure
from ..tree._patterns import MaskOrFn, resolve_mask
from ._scaling import lr_ratio


class WeightDecayState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating


@recorded
def weight_decay(rate: ScalarOrSchedule, mask: MaskOrFn | None = None) -> GradientTransformation:
    r"""Add the decayed parameters to the updates.

    .. math::  u_t = g_t + \lambda_t \, w_{t-1}

    Where it sits in a chain decides the kind of decay: *before* a preconditioner (e.g.
    `chain(weight_decay(1e-4), scale_by_adam(), scale_by_learning_rate(lr))`) it is coupled L2
    regularisation, whose decay is rescaled by the preconditioner; *after* it and before the
    learning rate it is decoupled weight decay as in AdamW (Loshchilov & Hutter, 2019), the form
    `optax.add_decayed_weights` gives.

    Args:
      rate: :math:`\lambda` >= 0, a float or a schedule `count -> rate`.
      mask: which parameters decay: a boolean tree (or prefix of the params tree), a callable
        `params -> boolean tree`, or a glob pattern / list of patterns on parameter paths, e.g.
        `"!**/bias"` (see `gradtx.tree.match`). None decays every parameter.

    Returns:
      A `GradientTransformation` with state `WeightDecayState(count)`; it needs `params`. A
      None in the updates stays None, whatever the params have there.
    """
    check_non_negative("weight_decay", "rate", rate, finite=True)

    def init(params):
        if mask is not None:  # a pattern that matches nothing is reported here, not at update
            resolve_mask("weight_decay", mask, params)
        return WeightDecayState(count=zero_count())

    def update(updates, state, params=None, **extra_args):
        del extra_args
        if not isinstance(state, WeightDecayState):
            expect_state("weight_decay", state, WeightDecayState)
        if params is None or jax.tree.structure(updates) != jax.tree.structure(params):
            # A None update stays None, whatever params has there (Optax's
            # `add_decayed_weights`); any other difference is an error naming it.
            params = with_nones_of(updates, require_params("weight_decay", params))
            assert_same_structure("weight_decay", updates=updates, params=params)
        lam = value_at(rate, state.count, who="weight_decay", name="rate")
        if mask is None:
            updates = jax.tree.map(lambda g, p: (g + lam * p).astype(g.dtype), updates, params)
        else:
            updates = jax.tree.map(
                lambda g, p, on: (g + lam * p).astype(g.dtype) if on else g,
                updates,
                params,
                resolve_mask("weight_decay", mask, params),
            )
        return updates, WeightDecayState(count=safe_increment(state.count))

    return GradientTransformation(init, update)


@recorded
def weight_decay_by_lr_ratio(
    rate: ScalarOrSchedule,
    learning_rate: ScalarOrSchedule,
    *,
    initial_learning_rate: ArrayLike | None = None,
    mask: MaskOrFn | None = None,
) -> GradientTransformation:
    r"""Add the parameters decayed in proportion to the learning rate's schedule.

    .. math::  u_t = g_t + \lambda_t \frac{\eta_t}{\eta_0} w_{t-1}

    Placed after a step that already contains the learning rate and before the sign flip, this is
    the decoupled decay of nnabla's `SgdW` and `AdamW`,
    :math:`w \mathrel{-}= (\eta_t/\eta_0) \lambda w` (Loshchilov & Hutter's schedule multiplier);
    see `sgdw`, `nnabla.adamw`. With a
    constant learning rate the factor is 1 and this is `weight_decay(rate, mask)`.

    Args:
      rate: :math:`\lambda` >= 0, a float or a schedule `count -> rate`.
      learning_rate: :math:`\eta_t`, the optimizer's learning rate (a float or a schedule).
      initial_learning_rate: :math:`\eta_0` > 0; default: the learning rate, or the schedule's
        value at step 0. Give it when the learning rate is changed between steps
        (`inject_hyperparams`, nnabla's `set_learning_rate`), as in `bound_lr`.
      mask: which parameters decay (boolean tree, callable or glob pattern(s)); None: all.

    Returns:
      A `GradientTransformation` with state `WeightDecayState(count)`; it needs `params`.

    Reference: nnabla `SgdW`, `AdamW` (`src/nbla/solver/generic/sgdw.cpp`, `adamw.cpp`);
    Loshchilov & Hutter, "Decoupled Weight Decay Regularization" (ICLR 2019).
    """
    who = "weight_decay_by_lr_ratio"
    check_non_negative(who, "rate", rate, finite=True)
    ratio = lr_ratio(who, learning_rate, initial_learning_rate)
    if not callable(learning_rate) and initial_learning_rate is None:
        return weight_decay(rate, mask)
    return weight_decay(
        lambda count: value_at(rate, count, who=who, name="weight_decay") * ratio(count), mask
    )


__all__ = ["WeightDecayState", "weight_decay", "weight_decay_by_lr_ratio"]
