"""The core protocol: `GradientTransformation`, `chain`, `named_chain`, `identity`, `stateless`,
`apply_updates`, `jit_step`, interoperability with Optax and `HyperparameterError`. The public
API, re-exported explicitly; no logic here."""

from .._base._checks import HyperparameterError as HyperparameterError
from ._interop import as_optax as as_optax
from ._step import jit_step as jit_step
from ._transformation import EmptyState as EmptyState
from ._transformation import GradientTransformation as GradientTransformation
from ._transformation import apply_updates as apply_updates
from ._transformation import chain as chain
from ._transformation import identity as identity
from ._transformation import named_chain as named_chain
from ._transformation import stateless as stateless

__all__ = [
    "EmptyState",
    "GradientTransformation",
    "HyperparameterError",
    "apply_updates",
    "as_optax",
    "chain",
    "identity",
    "jit_step",
    "named_chain",
    "stateless",
]
