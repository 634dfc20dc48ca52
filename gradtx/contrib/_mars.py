"""MARS: a variance-reduced gradient estimate (scaled stochastic recursive momentum), clipped,
then preconditioned by AdamW or Lion."""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import alias_errors, check_non_negative, check_one_of
from .._base._numerics import abs_sq, bias_correction, widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, MaskOrFn, Params, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._building_blocks import ema
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._rule import decay, non_negative, rule, slot
from ..transforms._scaling import scale_by_learning_rate
from ..tree._patterns import resolve_mask
from ..wrappers._partition import multi_transform
from ._fallback import adam_fallback

MARS_TYPES = ("adamw", "lion")


class ScaleByMarsState(NamedTuple):
    """State of `scale_by_mars`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # EMA of the clipped corrected gradient c_t, dtype mu_dtype or the params'
    nu: Updates  # EMA of |c_t|^2 (stays 0 with mars_type="lion"), dtype nu_dtype or the params'
    prev_grad: Updates  # the previous step's gradient g_{t-1} (0 before the first), params' dtype


def _unit_clipped(c: jax.Array) -> jax.Array:
    """`c / max(||c||_2, 1)` for one leaf; the norm is taken of `c / max|c|` (times `max|c|`),
    so that it neither overflows for huge gradients nor underflows for tiny ones."""
    peak = jnp.max(jnp.abs(c)) if c.size else jnp.zeros([], jnp.real(c).dtype)
    nonzero = peak > 0
    safe_peak = jnp.where(nonzero, peak, 1.0)
    norm = jnp.where(nonzero, safe_peak * jnp.sqrt(jnp.sum(abs_sq(c / safe_peak))), 0.0)
    return c / jnp.maximum(norm, 1.0)


@recorded
def scale_by_mars(
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.99,
    gamma: ArrayLike = 0.025,
    eps: ArrayLike = 1e-8,
    mu_dtype: MomentDType | None = None,
    *,
    mars_type: str = "adamw",
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Rescale updates by MARS: a variance-reduced gradient, clipped to unit norm per leaf,
    preconditioned by Adam (or Lion's sign).

    .. math::

      c_t = g_t + \gamma \frac{\beta_1}{1-\beta_1} (g_t - g_{t-1}), \qquad
      \tilde c_t = c_t / \max(\lVert c_t \rVert_2, 1), \\
      m_t = \beta_1 m_{t-1} + (1-\beta_1) \tilde c_t, \qquad
      v_t = \beta_2 v_{t-1} + (1-\beta_2) \tilde c_t^2, \\
      u_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t)} + \epsilon}
      \ \text{("adamw")}, \qquad u_t = \mathrm{sign}(m_t) \ \text{("lion")}

    This is the approximate MARS of the paper and of its authors' code (`is_approx=True`):
    :math:`g_{t-1}` is the gradient received at the previous step (kept in the state), not a
    second gradient of the current batch at the previous parameters, so one gradient per step
    suffices. Before the first step :math:`g_0 = 0` (both the authors' code and
    `pytorch_optimizer` start from a zero last gradient), so
    :math:`c_1 = (1 + \gamma\beta_1/(1-\beta_1))\, g_1` before the clip. The norm in the clip
    is that of each leaf (each parameter tensor), as in both implementations. With "lion"
    :math:`v_t` is not updated (it stays 0), so the state has the same layout for both types.
    Every leaf gets MARS; `mars` sends the vectors and scalars to AdamW.

    Numbers: :math:`\epsilon` is added to the bias-corrected root, as in the paper and the
    authors' code; `pytorch_optimizer.MARS` (4.1.0) instead divides by
    :math:`(\sqrt{v_t + 10^{-15}} + \epsilon)/\sqrt{1-\beta_2^t}`, which differs where
    :math:`v_t` is tiny. The clip's norm is computed without overflow (a huge gradient gives a
    unit-norm :math:`\tilde c_t`, not 0).

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment (also in the correction's weight).
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      gamma: :math:`\gamma` >= 0, strength of the gradient correction (0: Adam / Lion on the
        clipped gradient).
      eps: :math:`\epsilon` >= 0 added to the denominator.
      mu_dtype: dtype of :math:`m` (default: the params'); a `gradtx.quantized()` spec stores it
        in 8 bits.
      mars_type: "adamw" or "lion", the preconditioner.
      nu_dtype: dtype of :math:`v` (default: the params'), or a `gradtx.quantized()` spec.

    Returns:
      A `GradientTransformation` with state `ScaleByMarsState(count, mu, nu, prev_grad)`.

    Reference: Yuan et al., "MARS: Unleashing the Power of Variance Reduction for Training Large
    Models" (2024), arXiv:2411.10438, Algorithms 2 and 3 (MARS-AdamW, MARS-Lion).
    """
    return _mars(
        b1=b1,
        b2=b2,
        gamma=gamma,
        eps=eps,
        mars_type=mars_type,
        mu_dtype=mu_dtype,
        nu_dtype=nu_dtype,
    )


@rule(
    "scale_by_mars",
    ScaleByMarsState,
    slots={
        "mu": slot(dtype="mu_dtype"),
        "nu": slot(dtype="nu_dtype", signed=False),
        "prev_grad": slot(),
    },
    checks={
        "b1": decay,
        "b2": decay,
        "gamma": non_negative,
        "eps": non_negative,
        "mars_type": lambda who, name, value: check_one_of(who, name, value, MARS_TYPES),
    },
    elementwise=False,  # the clip divides by the norm of the leaf
)
def _mars(t, *, b1, b2, gamma, eps, mars_type):
    c1, c2 = bias_correction(b1, t), bias_correction(b2, t)
    weight = gamma * b1 / (1 - jnp.asarray(b1, jnp.float32))

    def leaf(g, s):
        c = _unit_clipped(g + weight * (g - widen(s.prev_grad)))
        m = s.keep("mu", ema(b1, c, s.mu))
        if mars_type == "lion":
            u = jnp.sign(m)  # the second moment is not kept: it stays 0
        else:
            v = s.keep("nu", ema(b2, abs_sq(c), s.nu))
            u = (m / c1) / (jnp.sqrt(v / c2) + eps)
        s.keep("prev_grad", g)
        return u

    return leaf


def _uses_mars(x: Any, optimize_1d: bool) -> bool:
    """The 1-D rule: MARS for leaves of rank >= 2 (every leaf with `optimize_1d`)."""
    return optimize_1d or len(np.shape(x)) >= 2


def _labels(optimize_1d: bool) -> Callable[[Params], Any]:
    return lambda params: jax.tree.map(
        lambda x: "mars" if _uses_mars(x, optimize_1d) else "adam", params
    )


def _decay_mask(mask: MaskOrFn | None, optimize_1d: bool, mars_leaves: bool) -> Callable:
    """The leaves of one half (MARS or AdamW) that `mask` selects, resolved on the whole tree
    (so that a pattern has to match some parameter, not some parameter of each half)."""

    def select(params):
        chosen = (
            jax.tree.map(lambda _: True, params)
            if mask is None
            else resolve_mask("mars", mask, params)
        )
        return jax.tree.map(
            lambda x, m: bool(m) and _uses_mars(x, optimize_1d) == mars_leaves, params, chosen
        )

    return select


@alias_errors(renamed={"scale_by_adam: b1": "adam_b1", "scale_by_adam: b2": "adam_b2"})
def mars(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.99,
    gamma: ArrayLike = 0.025,
    eps: ArrayLike = 1e-8,
    mu_dtype: MomentDType | None = None,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn | None = None,
    *,
    mars_type: str = "adamw",
    optimize_1d: bool = False,
    adam_b1: ArrayLike = 0.9,
    adam_b2: ArrayLike = 0.95,
    adam_weight_decay: ScalarOrSchedule = 0.1,
    adam_learning_rate: ScalarOrSchedule | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""MARS: AdamW (or Lion) on a clipped, variance-reduced gradient for the matrices, AdamW
    for the vectors and scalars.

    .. math::

      W_t = W_{t-1} - \eta_t \big(u_t + \lambda W_{t-1}\big) \ \text{(leaves of rank} \ge 2),
      \qquad
      w_t = w_{t-1} - \eta'_t \Big(\frac{\hat m'_t}{\sqrt{\hat v'_t} + \epsilon}
      + \lambda' w_{t-1}\Big) \ \text{(the rest)}

    with :math:`u_t` of `scale_by_mars`: `chain(multi_transform({"mars": scale_by_mars(...),
    "adam": scale_by_adam(adam_b1, adam_b2, eps)}, labels), weight_decay(weight_decay, mask and
    MARS leaves), weight_decay(adam_weight_decay, mask and AdamW leaves),
    multi_transform({"mars": scale_by_learning_rate(learning_rate), "adam":
    scale_by_learning_rate(adam_learning_rate)}, labels))`, i.e. AdamW for the leaves of rank
    < 2.

    The 1-D rule (the reference's `optimize_1d=False`): leaves of rank 0 and 1 (biases, norm
    scales) get plain AdamW on the raw gradient with their own :math:`\beta'` (0.9, 0.95) and
    decay :math:`\lambda'` = 0.1, as in the authors' code and `pytorch_optimizer`; with
    `optimize_1d=True` every leaf gets MARS, with `learning_rate` and `weight_decay`. Rank
    :math:`\ge 2` is MARS as in `pytorch_optimizer` (the authors' code sends only rank 2 to
    MARS, so a conv kernel would go to AdamW there). `adam_learning_rate` (None: the same
    `learning_rate`) stands for the reference's `lr_1d`; the reference scales it by the ratio of
    the group's current to its initial learning rate, here it is a float or its own schedule.

    Args:
      learning_rate: :math:`\eta` >= 0 (float or schedule) of the MARS leaves; the paper's and
        the reference's default is 3e-3.
      b1: :math:`\beta_1` in [0, 1) of MARS.
      b2: :math:`\beta_2` in [0, 1) of MARS.
      gamma: :math:`\gamma` >= 0, strength of the gradient correction.
      eps: :math:`\epsilon` >= 0, for MARS and for AdamW.
      mu_dtype: dtype of the first moments (MARS's and AdamW's), or a `gradtx.quantized()` spec.
      weight_decay: :math:`\lambda` >= 0, decoupled decay of the MARS leaves (scaled by
        :math:`\eta_t`).
      mask: which parameters decay, in both halves (boolean tree or prefix, callable, or glob
        patterns); None: all.
      mars_type: "adamw" or "lion" (see `scale_by_mars`).
      optimize_1d: MARS for the leaves of rank < 2 too (instead of AdamW).
      adam_b1: AdamW's :math:`\beta'_1` in [0, 1) for the leaves of rank < 2.
      adam_b2: AdamW's :math:`\beta'_2` in [0, 1) for the leaves of rank < 2.
      adam_weight_decay: AdamW's decoupled :math:`\lambda'` >= 0 for the leaves of rank < 2.
      adam_learning_rate: AdamW's :math:`\eta'`; None uses `learning_rate`.
      nu_dtype: dtype of the second moments (MARS's and AdamW's), or a `gradtx.quantized()` spec.

    Returns:
      A `GradientTransformation`; its state is a chain of the moments (a `MultiTransformState`
      with "mars" and "adam"), the two decays and the learning rates.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.contrib.mars(3e-3)
      >>> params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
      >>> grads = {"w": jnp.ones((4, 3)), "b": jnp.ones(3)}
      >>> updates, state = tx.update(grads, tx.init(params), params)

    Reference: Yuan et al., "MARS: Unleashing the Power of Variance Reduction for Training Large
    Models" (2024), arXiv:2411.10438; the authors' code (github.com/AGI-Arena/MARS) and
    `pytorch_optimizer.MARS` (4.1.0), whose defaults these are.
    """
    if adam_learning_rate is None:
        adam_learning_rate = learning_rate
    # Each of these is taken by two transformations' `learning_rate` / `rate`: checked here, so
    # that the error names the alias's argument.
    for name, value in (
        ("learning_rate", learning_rate),
        ("adam_learning_rate", adam_learning_rate),
        ("weight_decay", weight_decay),
        ("adam_weight_decay", adam_weight_decay),
    ):
        check_non_negative("mars", name, value, finite=True)
    labels = _labels(optimize_1d)
    return chain(
        multi_transform(
            {
                "mars": scale_by_mars(
                    b1, b2, gamma, eps, mu_dtype, mars_type=mars_type, nu_dtype=nu_dtype
                ),
                # the reference's AdamW: no Nesterov, no eps_root
                "adam": adam_fallback(
                    adam_b1, adam_b2, eps, 0.0, mu_dtype, nu_dtype, nesterov=False
                ),
            },
            labels,
        ),
        weight_decay_tx(weight_decay, _decay_mask(mask, optimize_1d, True)),
        weight_decay_tx(adam_weight_decay, _decay_mask(mask, optimize_1d, False)),
        multi_transform(
            {
                "mars": scale_by_learning_rate(learning_rate),
                "adam": scale_by_learning_rate(adam_learning_rate),
            },
            labels,
        ),
    )


__all__ = ["ScaleByMarsState", "mars", "scale_by_mars"]
