"""Optax's names for the states of gradtx's primitives, so that code written against Optax's
state classes (`isinstance`, `optax.tree.get(state, "ScaleState")`) finds gradtx's.

Each name is the class gradtx's transformation returns. Where Optax's class has other fields,
gradtx's state keeps its own layout (docs/migration.md, "Where gradtx differs from Optax"):
the rms / stddev / decayed-weight states always carry a `count` (a schedule or bias correction
needs it, and a state's layout never depends on hyperparameter values).
"""

from ..core._transformation import EmptyState
from ._adaptive import ScaleByAdadeltaState, ScaleByRmsState, ScaleByStddevState
from ._decay import WeightDecayState

# Stateless in both libraries.
ClipState = EmptyState
ClipByGlobalNormState = EmptyState
AdaptiveGradClipState = EmptyState
ScaleState = EmptyState
ScaleByTrustRatioState = EmptyState

# Same fields as Optax's.
ScaleByAdaDeltaState = ScaleByAdadeltaState  # (e_g, e_x)
ScaleByRmsWithCountState = ScaleByRmsState  # (count, nu)
ScaleByRStdDevWithCountState = ScaleByStddevState  # (count, mu, nu)

# gradtx's states of these keep a `count` that Optax's lack (Optax: (mu, nu) and ()).
ScaleByRStdDevState = ScaleByStddevState
AddDecayedWeightsState = WeightDecayState

__all__ = [
    "AdaptiveGradClipState",
    "AddDecayedWeightsState",
    "ClipByGlobalNormState",
    "ClipState",
    "ScaleByAdaDeltaState",
    "ScaleByRStdDevState",
    "ScaleByRStdDevWithCountState",
    "ScaleByRmsWithCountState",
    "ScaleByTrustRatioState",
    "ScaleState",
]
