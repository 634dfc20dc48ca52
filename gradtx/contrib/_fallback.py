"""The AdamW fallback of the matrix optimizers: the rule for the leaves that a matrix method leaves
out (vectors, scalars, embeddings, the leaves of other ranks).

One construction for Muon, NorMuon, Dion, Scion and MARS, with every choice explicit at the call
(Nesterov momentum, eps_root, the moment dtypes), so that their fallbacks can differ only where
their references do: Muon's follows its `nesterov` (as `optax.contrib.muon`), the others' are
plain AdamW (as their authors' code).
"""

from .._base._checks import alias_errors
from .._base._typing import ArrayLike, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._adam import scale_by_adam
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate


def adam_fallback(
    b1: ArrayLike,
    b2: ArrayLike,
    eps: ArrayLike,
    eps_root: ArrayLike,
    mu_dtype: MomentDType | None,
    nu_dtype: MomentDType | None,
    *,
    nesterov: bool,
) -> GradientTransformation:
    r"""The fallback's preconditioner, `scale_by_adam(b1, b2, eps, eps_root, nesterov=...)`:
    the first stage of `adamw_fallback`, for an optimizer that chains its stages itself (MARS
    puts the decays and learning rates of both halves after it, each once).

    Args:
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0, inside the square root.
      mu_dtype: dtype of the first moment (None: the params'), or a `gradtx.quantized()` spec.
      nu_dtype: dtype of the second moment (None: the params'), or a `gradtx.quantized()` spec.
      nesterov: Nesterov (NAdam) momentum.

    Returns:
      A `GradientTransformation` with state `ScaleByAdamState(count, mu, nu)`.
    """
    return scale_by_adam(
        b1, b2, eps, eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype, nesterov=nesterov
    )


@alias_errors(renamed={"weight_decay: rate": "weight_decay"}, name="adamw")
def adamw_fallback(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike,
    b2: ArrayLike,
    eps: ArrayLike,
    eps_root: ArrayLike,
    weight_decay: ScalarOrSchedule,
    mu_dtype: MomentDType | None,
    nu_dtype: MomentDType | None,
    *,
    nesterov: bool,
) -> GradientTransformation:
    r"""AdamW for the leaves a matrix optimizer leaves out.

    .. math::

      w_t = w_{t-1} - \eta_t \left( \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon}
        + \lambda w_{t-1} \right)

    `chain(adam_fallback(...), weight_decay(weight_decay), scale_by_learning_rate(learning_rate))`:
    `gradtx.adamw` with every option given (its state and its errors, which name `adamw`, are
    `adamw`'s). Its decay covers every leaf it gets; the caller's labels choose those leaves.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0, inside the square root.
      weight_decay: :math:`\lambda` >= 0, decoupled (multiplied by the learning rate).
      mu_dtype: dtype of the first moment (None: the params'), or a `gradtx.quantized()` spec.
      nu_dtype: dtype of the second moment (None: the params'), or a `gradtx.quantized()` spec.
      nesterov: Nesterov (NAdam) momentum.

    Returns:
      A `GradientTransformation` (its state: `adamw`'s).
    """
    return chain(
        adam_fallback(b1, b2, eps, eps_root, mu_dtype, nu_dtype, nesterov=nesterov),
        weight_decay_tx(weight_decay),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["adam_fallback", "adamw_fallback"]
