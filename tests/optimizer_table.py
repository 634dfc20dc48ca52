"""The shared table of optimizers: every entry gets every generic test (tests/test_generic.py).

Each family adds its cases in its own module under tests/cases/, listed in `_collect`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gradtx


@dataclass(frozen=True)
class OptCase:
    """One optimizer configuration for the generic tests.

    Attributes:
      name: test id.
      factory: the public factory (e.g. `gradtx.adam`); `factory(**kwargs)` is the optimizer.
        Wrapper tests reuse `factory` and `kwargs` (e.g. `inject_hyperparams(factory)(**kwargs)`).
      kwargs: hyperparameters for the generic tests.
      rosenbrock_kwargs: overrides of `kwargs` for the Rosenbrock test (the quadratic runs `kwargs`
        themselves, on the trajectory's compiled step: tests/compiled.py).
      quadratic_steps / quadratic_tol: the quadratic's loss must fall below
        `quadratic_tol * initial loss` within `quadratic_steps` steps.
      rosenbrock_steps / rosenbrock_tol: the Rosenbrock loss (4.0 at the start, (-1, 1)) must fall
        below `rosenbrock_tol` within `rosenbrock_steps` steps; None skips it, with the reason in
        `rosenbrock_skip`.
      low_precision: also run the bf16/f16 dtype tests.
      float32_noise: where a float32 run is checked against its float64 result (the sharded
        table), how many times the unsharded float32 run's own error the other may be off:
        2 (the two runs may err on opposite sides), more where an eigensolver or QR amplifies
        rounding by the inverse of an eigenvalue gap (the reason given in the case).
    """

    name: str
    factory: Callable[..., gradtx.GradientTransformation]
    kwargs: dict[str, Any] = field(default_factory=dict)
    rosenbrock_kwargs: dict[str, Any] = field(default_factory=dict)
    quadratic_steps: int = 500
    quadratic_tol: float = 1e-2
    rosenbrock_steps: int = 3000
    rosenbrock_tol: float | None = 1e-2
    rosenbrock_skip: str = ""
    low_precision: bool = True
    float32_noise: float = 2.0

    def make(self) -> gradtx.GradientTransformation:
        return self.factory(**self.kwargs)

    def make_rosenbrock(self) -> gradtx.GradientTransformation:
        return self.factory(**{**self.kwargs, **self.rosenbrock_kwargs})


def _collect() -> list[OptCase]:
    from .cases import (
        adam_and_sign,
        adaptive,
        contrib_methods,
        contrib_parameter_free,
        first_order,
        lbfgs,
        matrix_methods,
        nnabla_and_returnn,
        sgd,
    )

    families = (
        sgd,
        adaptive,
        adam_and_sign,
        nnabla_and_returnn,
        first_order,
        lbfgs,
        contrib_parameter_free,
        contrib_methods,
        matrix_methods,
    )
    cases = [case for family in families for case in family.CASES]
    names = [c.name for c in cases]
    duplicates = {n for n in names if names.count(n) > 1}
    assert not duplicates, f"duplicate case names in the optimizer table: {duplicates}"
    return cases


CASES: list[OptCase] = _collect()
