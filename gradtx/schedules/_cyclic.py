"""Cyclical schedules: triangular cyclical learning rates (CLR)."""

from __future__ import annotations

import jax.numpy as jnp

from .._base._checks import check_in_range, check_one_of
from .._base._recipe import recorded
from .._base._typing import ArrayLike
from ._common import NamedSchedule, check_steps, f32


@recorded(schedule=True)
def cyclic(
    init_value: ArrayLike,
    peak_value: ArrayLike,
    step_size_up: int,
    step_size_down: int | None = None,
    *,
    mode: str = "triangular",
    gamma: ArrayLike = 1.0,
) -> NamedSchedule:
    r"""Cyclical learning rate: a triangle wave between `init_value` and `peak_value`.

    With cycle length :math:`C = U + D`, cycle :math:`k = \lfloor t / C \rfloor` and
    :math:`x = t - kC`:

    .. math::

      v(t) = I + (P - I)\, \sigma(t) \begin{cases} x / U & x < U \\ 1 - (x - U)/D & x \ge U
      \end{cases}

    with the amplitude scale :math:`\sigma = 1` ("triangular"), :math:`2^{-k}` ("triangular2")
    or :math:`\gamma^{t}` ("exp_range"). With :math:`U = D = s` this is Smith's
    :math:`I + (P - I)\max(0, 1 - |t/s - 2c + 1|)`, :math:`c = \lfloor 1 + t/(2s) \rfloor`.

    Args:
      init_value: :math:`I`, the low end (`base_lr`).
      peak_value: :math:`P`, the high end (`max_lr`).
      step_size_up: :math:`U` >= 1, steps from low to high.
      step_size_down: :math:`D` >= 1, steps from high to low (default `step_size_up`).
      mode: "triangular", "triangular2" or "exp_range".
      gamma: :math:`\gamma` in (0, 1], the per-step amplitude decay of "exp_range".

    Returns:
      A schedule `step -> float32`.

    Reference: Smith, "Cyclical Learning Rates for Training Neural Networks" (WACV 2017);
    PyTorch `CyclicLR` (scale_mode per cycle for the triangular modes, per step for exp_range).
    """
    who = "cyclic"
    up = check_steps(who, "step_size_up", step_size_up, minimum=1)
    down = (
        up
        if step_size_down is None
        else check_steps(who, "step_size_down", step_size_down, minimum=1)
    )
    check_one_of(who, "mode", mode, ["triangular", "triangular2", "exp_range"])
    check_in_range(who, "gamma", gamma, 0.0, 1.0, low_open=True)
    length = up + down

    def fn(step):
        cycle = step // length
        x = (step - cycle * length).astype(jnp.float32)
        frac = jnp.where(x < up, x / up, 1.0 - (x - up) / down)
        if mode == "triangular2":
            frac = frac * 0.5 ** cycle.astype(jnp.float32)
        elif mode == "exp_range":
            frac = frac * f32(gamma) ** step.astype(jnp.float32)
        init = f32(init_value)
        return init + (f32(peak_value) - init) * frac

    return NamedSchedule(
        who,
        fn,
        init_value=init_value,
        peak_value=peak_value,
        step_size_up=up,
        step_size_down=down,
        mode=mode,
        gamma=gamma,
    )


__all__ = ["cyclic"]
