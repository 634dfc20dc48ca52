"""gradtx: composable, functional gradient transformations (optimizers) for JAX.

The public API, re-exported explicitly. No logic lives here.
"""

from . import tree as tree

# -- core protocol -----------------------------------------------------------------------------
from ._core import EmptyState as EmptyState
from ._core import GradientTransformation as GradientTransformation
from ._core import apply_updates as apply_updates
from ._core import chain as chain
from ._core import identity as identity
from ._core import named_chain as named_chain
from ._core import stateless as stateless

# -- optimizers: sgd ---------------------------------------------------------------------------
from .optimizers._sgd import sgd as sgd

# -- transforms: adam family -------------------------------------------------------------------
from .transforms._adam import ScaleByAdamState as ScaleByAdamState
from .transforms._adam import scale_by_adam as scale_by_adam

# -- transforms: weight decay ------------------------------------------------------------------
from .transforms._decay import WeightDecayState as WeightDecayState
from .transforms._decay import weight_decay as weight_decay

# -- transforms: momentum ----------------------------------------------------------------------
from .transforms._momentum import TraceState as TraceState
from .transforms._momentum import trace as trace

# -- transforms: scaling -----------------------------------------------------------------------
from .transforms._scaling import ScaleByScheduleState as ScaleByScheduleState
from .transforms._scaling import scale as scale
from .transforms._scaling import scale_by_learning_rate as scale_by_learning_rate
from .transforms._scaling import scale_by_schedule as scale_by_schedule

__version__ = "0.1.0"
