"""The core protocol: `GradientTransformation`, `chain`, `named_chain`, `identity`, `stateless`,
`apply_updates`, `incremental_update`, `jit_step`, interoperability with Optax and
`HyperparameterError`. The public API, re-exported explicitly; no logic here."""

from .._base._checks import HyperparameterError as HyperparameterError
from ._interop import as_optax as as_optax
from ._step import jit_step as jit_step
from ._transformation import EmptyState as EmptyState
from ._transformation import GradientTransformation as GradientTransformation
from ._transformation import GradientTransformationExtraArgs as GradientTransformationExtraArgs
from ._transformation import MissingValueError as MissingValueError
from ._transformation import TransformInitFn as TransformInitFn
from ._transformation import TransformUpdateExtraArgsFn as TransformUpdateExtraArgsFn
from ._transformation import TransformUpdateFn as TransformUpdateFn
from ._transformation import apply_updates as apply_updates
from ._transformation import chain as chain
from ._transformation import identity as identity
from ._transformation import incremental_update as incremental_update
from ._transformation import init_empty_state as init_empty_state
from ._transformation import named_chain as named_chain
from ._transformation import stateless as stateless
from ._transformation import stateless_with_tree_map as stateless_with_tree_map
from ._transformation import with_extra_args_support as with_extra_args_support

__all__ = [
    "EmptyState",
    "GradientTransformation",
    "GradientTransformationExtraArgs",
    "HyperparameterError",
    "MissingValueError",
    "TransformInitFn",
    "TransformUpdateExtraArgsFn",
    "TransformUpdateFn",
    "apply_updates",
    "as_optax",
    "chain",
    "identity",
    "incremental_update",
    "init_empty_state",
    "jit_step",
    "named_chain",
    "stateless",
    "stateless_with_tree_map",
    "with_extra_args_support",
]
