"""`state_bytes`: the memory an optimizer state holds, in total and per parameter value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from .._base._typing import OptState, Params
from ..wrappers._compensation import CompensationState
from ._inspect import _human, _layout


@dataclass(frozen=True)
class StateBytes:
    """What `state_bytes` returns; `print(...)` shows it as a few lines.

    Attributes:
      total: bytes of every array of the state.
      residual: bytes of the compensation residuals (`with_compensation`), part of `total`.
      optimizer: `total - residual`: the moments, counters, keys, ...
      parameters: the number of parameter values (None when no params were given).
      per_parameter: `total / parameters` (None without params, or with no parameter value).
      residual_per_parameter: `residual / parameters` (likewise).
      optimizer_per_parameter: `optimizer / parameters` (likewise).
    """

    total: int
    residual: int
    optimizer: int
    parameters: int | None = None
    per_parameter: float | None = None
    residual_per_parameter: float | None = None
    optimizer_per_parameter: float | None = None

    def __str__(self) -> str:
        def line(name: str, n: int, per: float | None) -> str:
            text = f"{name}: {_human(n)}"
            return text if per is None else f"{text}, {per:.4g} per parameter value"

        head = "optimizer state"
        if self.parameters is not None:
            head += f" for {self.parameters:,} parameter values"
        return "\n".join(
            (
                head,
                "  " + line("total", self.total, self.per_parameter),
                "  " + line("optimizer", self.optimizer, self.optimizer_per_parameter),
                "  " + line("residual", self.residual, self.residual_per_parameter),
            )
        )


def _bytes(tree: Any) -> int:
    return sum(_layout(leaf)[2] for leaf in jax.tree.leaves(tree))


def _residual_bytes(tree: Any) -> int:
    """Bytes of the `residual` fields of the `CompensationState`s in `tree` (nested ones too)."""
    found = jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, CompensationState))
    return sum(
        _bytes(node.residual) + _residual_bytes(node.inner_state)
        for node in found
        if isinstance(node, CompensationState)
    )


def state_bytes(state: OptState, params: Params | None = None) -> StateBytes:
    """The bytes an optimizer state holds: in total, in compensation residuals, per parameter.

    Every array of the state counts with its real size: an 8-bit state
    (`gradtx.quantized()`) by its codes and scales, a bf16 moment by 2 bytes a value, a PRNG
    key by its key data, a counter by its 4 bytes. The residuals of `gradtx.with_compensation`
    (what stands in for a float32 master copy of bf16 params) are reported apart from the rest.
    Sizes are logical (the whole array, however it is sharded; see
    `gradtx.bytes_per_device` for one device's share). Works on abstract states too
    (`jax.eval_shape(tx.init, params)`: nothing is allocated).

    Args:
      state: an optimizer state (any pytree of arrays or `jax.ShapeDtypeStruct`s).
      params: the parameters (arrays or `jax.ShapeDtypeStruct`s), to count the parameter
        values; None leaves the per-parameter numbers None.

    Returns:
      A `StateBytes(total, residual, optimizer, parameters, per_parameter,
      residual_per_parameter, optimizer_per_parameter)`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> params = {"w": jnp.zeros(1000)}
      >>> report = gradtx.state_bytes(gradtx.adam(1e-3).init(params), params)
      >>> report.total, report.per_parameter  # mu and nu in float32, and two int32 counts
      (8008, 8.008)
      >>> print(report)
      optimizer state for 1,000 parameter values
        total: 8,008 bytes (7.8 KiB), 8.008 per parameter value
        optimizer: 8,008 bytes (7.8 KiB), 8.008 per parameter value
        residual: 0 bytes, 0 per parameter value
    """
    total = _bytes(state)
    residual = _residual_bytes(state)
    optimizer = total - residual
    if params is None:
        return StateBytes(total, residual, optimizer)
    count = sum(int(np.prod(np.shape(leaf), dtype=np.int64)) for leaf in jax.tree.leaves(params))
    if count == 0:
        return StateBytes(total, residual, optimizer, 0)
    return StateBytes(
        total, residual, optimizer, count, total / count, residual / count, optimizer / count
    )
