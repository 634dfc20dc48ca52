"""Cautious optimizers: keep only the coordinates where an update agrees with the gradient."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import alias_errors, check_non_negative, error_context
from .._base._numerics import safe_divide, widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Mask, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._adam import scale_by_adam
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ..wrappers._common import register_wrapper


class CautiousState(NamedTuple):
    """State of `cautious`: the wrapped transformation's state, unchanged."""

    inner_state: Any


def _cautious_leaf(u: Any, g: Any, offset: ArrayLike, descent: bool) -> Any:
    uw, gw = widen(u), widen(g)
    agreement = jnp.real(uw * jnp.conj(gw))  # Re(conj(g) u): the elementwise inner product
    keep = agreement < 0 if descent else agreement > 0
    mask = keep.astype(agreement.dtype)
    scale = safe_divide(jnp.asarray(mask.size, mask.dtype), jnp.sum(mask) + offset, positive=True)
    return (uw * (mask * scale)).astype(u.dtype)


@recorded
def cautious(
    tx: GradientTransformation, offset: ArrayLike = 1.0, *, descent: bool = True
) -> GradientTransformation:
    r"""Zero the coordinates of `tx`'s update whose sign disagrees with the gradient's, and
    rescale the kept ones by the inverse kept fraction, leaf by leaf.

    .. math::

      \phi_t = \mathbb{I}(-u_t \odot g_t > 0), \qquad
      \tilde u_t = \frac{d}{\mathrm{nnz}(\phi_t) + \xi}\; \phi_t \odot u_t

    with :math:`u_t` the update of `tx` for the gradient :math:`g_t`, :math:`d` the number of
    elements of the leaf and :math:`\xi` = `offset` (the paper's C-AdamW, Algorithm 2, and its
    code use :math:`\xi = 1`; its PyTorch one-liner, Algorithm 1, writes
    :math:`\phi_t / (\mathrm{mean}(\phi_t) + \epsilon)`, the same rule with
    :math:`\epsilon = \xi / d`). An all-zero gradient keeps nothing and gives a zero update
    (no division by zero, also with `offset=0`). Complex leaves use
    :math:`\mathrm{Re}(\bar g_t u_t)`.

    The sign convention: gradtx aliases return *descent* updates (already multiplied by
    :math:`-\eta`, added to the params), so with `descent=True` (the default) a coordinate is
    kept where the update points against the gradient, :math:`u_t g_t < 0`: `cautious(
    gradtx.adam(lr))` is C-Adam and `cautious(gradtx.lion(lr, weight_decay=0))` C-Lion. For a
    `scale_by_*` primitive, whose output has the gradient's sign, pass `descent=False` (kept
    where :math:`u_t g_t > 0`). The whole update of `tx` is masked, its weight decay included:
    the paper's C-AdamW masks only the Adam direction and decays every weight, which is
    `cautious_adamw` (and is `cautious(gradtx.adamw(lr, weight_decay=0))` without decay).

    Matches pytorch_optimizer's `cautious=True` option (`apply_cautious`:
    `mask * numel / (sum(mask) + 1)`, per tensor).

    Args:
      tx: the transformation to make cautious; it sees the same gradients, params and extra
        arguments, and its state is kept as `CautiousState.inner_state`.
      offset: :math:`\xi` >= 0, added to the number of kept coordinates.
      descent: whether `tx`'s updates are descent directions (gradtx aliases, optax aliases)
        rather than gradient-like (`scale_by_adam`, ...).

    Returns:
      A `GradientTransformation` with state `CautiousState(inner_state)`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> from gradtx.contrib._cautious import cautious
      >>> tx = cautious(gradtx.sgd(0.1, momentum=0.9))
      >>> params = {"w": jnp.zeros(2)}
      >>> state = tx.init(params)
      >>> _, state = tx.update({"w": jnp.array([1.0, 1.0])}, state, params)
      >>> updates, state = tx.update({"w": jnp.array([1.0, -0.5])}, state, params)
      >>> updates["w"]  # momentum 1.9 and 0.4: the second step, -0.04, would go uphill
      Array([-0.19, -0.  ], dtype=float32)

    Reference: Liang, Chen, Liu & Liu, "Cautious Optimizers: Improving Training with One Line
    of Code" (2024), arXiv:2411.16085.
    """
    who = "cautious"
    if not (callable(getattr(tx, "init", None)) and callable(getattr(tx, "update", None))):
        raise TypeError(f"{who}: tx must be a GradientTransformation, got {tx!r}")
    check_non_negative(who, "offset", offset)

    def init(params):
        with error_context(who):
            return CautiousState(inner_state=tx.init(params))

    def update(updates, state, params=None, **extra_args):
        with error_context(who):
            new_updates, inner_state = tx.update(updates, state.inner_state, params, **extra_args)
        new_updates = jax.tree.map(
            lambda u, g: _cautious_leaf(u, g, offset, descent), new_updates, updates
        )
        return new_updates, CautiousState(inner_state=inner_state)

    return register_wrapper(GradientTransformation(init, update), tx)


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def cautious_adamw(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: MomentDType | None = None,
    weight_decay: ScalarOrSchedule = 1e-4,
    mask: Mask | None = None,
    *,
    offset: ArrayLike = 1.0,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""C-AdamW: AdamW whose Adam direction is masked by its sign agreement with the gradient;
    the decoupled weight decay is not masked.

    .. math::

      u_t = \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon}, \qquad
      \phi_t = \mathbb{I}(u_t \odot g_t > 0), \\
      w_t = w_{t-1} - \eta_t \left( \frac{d}{\mathrm{nnz}(\phi_t) + \xi}\,
        \phi_t \odot u_t + \lambda w_{t-1} \right)

    `chain(cautious(scale_by_adam(...), offset, descent=False), weight_decay(weight_decay,
    mask), scale_by_learning_rate(learning_rate))`, with `adamw`'s arguments and defaults. The
    paper decays the weights after the masked step (:math:`w_t \leftarrow w_t - \eta_t\lambda
    w_t`); the decay here reads :math:`w_{t-1}`, as in `adamw`, Optax and the authors' code (a
    difference of order :math:`\eta^2\lambda`).

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0, inside the square root.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      weight_decay: :math:`\lambda` >= 0, a float or a schedule.
      mask: which parameters decay (a boolean tree, a callable or glob patterns); None: all.
      offset: :math:`\xi` >= 0, added to the number of kept coordinates (see `cautious`).
      nu_dtype: dtype of the second moment (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> from gradtx.contrib._cautious import cautious_adamw
      >>> tx = cautious_adamw(1e-3)
      >>> params = {"w": jnp.ones(3)}
      >>> updates, state = tx.update({"w": jnp.ones(3)}, tx.init(params), params)

    Reference: Liang, Chen, Liu & Liu, "Cautious Optimizers: Improving Training with One Line
    of Code" (2024), arXiv:2411.16085.
    """
    return chain(
        cautious(
            scale_by_adam(b1, b2, eps, eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype),
            offset,
            descent=False,
        ),
        weight_decay_tx(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["CautiousState", "cautious", "cautious_adamw"]
