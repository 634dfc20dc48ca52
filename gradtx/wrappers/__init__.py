"""Transformations of transformations: accumulation, injection, partitioning, finiteness guards,
averaging and projections (one module per family).

The public API of the wrappers, re-exported explicitly; `gradtx` re-exports every name. No logic
here.
"""

from ._accumulate import AccumulateState as AccumulateState
from ._accumulate import MultiSteps as MultiSteps
from ._accumulate import MultiStepsState as MultiStepsState
from ._accumulate import ShouldSkipUpdateFunction as ShouldSkipUpdateFunction
from ._accumulate import accumulate_k_steps as accumulate_k_steps
from ._averaging import EmaParamsState as EmaParamsState
from ._averaging import LookaheadParams as LookaheadParams
from ._averaging import LookaheadState as LookaheadState
from ._averaging import ema_params as ema_params
from ._averaging import lookahead as lookahead
from ._compensation import CompensationState as CompensationState
from ._compensation import with_compensation as with_compensation
from ._conditional import ConditionallyMaskState as ConditionallyMaskState
from ._conditional import ConditionallyTransformState as ConditionallyTransformState
from ._conditional import ConditionFn as ConditionFn
from ._conditional import conditionally_mask as conditionally_mask
from ._conditional import conditionally_transform as conditionally_transform
from ._conditional import skip_large_updates as skip_large_updates
from ._conditional import skip_not_finite as skip_not_finite
from ._diloco import DiLoCoState as DiLoCoState
from ._diloco import diloco as diloco
from ._ema import EmaState as EmaState
from ._ema import ema as ema
from ._ema import measure_with_ema as measure_with_ema
from ._finite import ApplyIfFiniteLocatedState as ApplyIfFiniteLocatedState
from ._finite import ApplyIfFiniteState as ApplyIfFiniteState
from ._finite import apply_if_finite as apply_if_finite
from ._hyperparameters import hyperparameter_names as hyperparameter_names
from ._hyperparameters import hyperparameters as hyperparameters
from ._hyperparameters import with_hyperparameters as with_hyperparameters
from ._inject import InjectHyperparamsState as InjectHyperparamsState
from ._inject import inject_hyperparams as inject_hyperparams
from ._inject_stateful import InjectStatefulHyperparamsState as InjectStatefulHyperparamsState
from ._inject_stateful import StatefulSchedule as StatefulSchedule
from ._inject_stateful import WrappedSchedule as WrappedSchedule
from ._inject_stateful import WrappedScheduleState as WrappedScheduleState
from ._inject_stateful import inject_stateful_hyperparams as inject_stateful_hyperparams
from ._label_partition import partition as partition
from ._partition import LabelsByPattern as LabelsByPattern
from ._partition import MaskedNode as MaskedNode
from ._partition import MaskedState as MaskedState
from ._partition import MultiTransformState as MultiTransformState
from ._partition import PartitionState as PartitionState
from ._partition import freeze as freeze
from ._partition import labels_by_pattern as labels_by_pattern
from ._partition import lr_multipliers as lr_multipliers
from ._partition import masked as masked
from ._partition import multi_transform as multi_transform
from ._partition import scale_gradient_by as scale_gradient_by
from ._periodic import ApplyEvery as ApplyEvery
from ._periodic import ApplyEveryState as ApplyEveryState
from ._periodic import apply_every as apply_every
from ._periodic import periodic_update as periodic_update
from ._population import PopulationState as PopulationState
from ._population import population as population
from ._population import population_exploit_explore as population_exploit_explore
from ._population import population_hyperparameters as population_hyperparameters
from ._population import population_member as population_member
from ._population import sweep as sweep
from ._project import box as box
from ._project import l2_ball as l2_ball
from ._project import non_negative as non_negative
from ._project import project as project
from ._selective import selective_transform as selective_transform
from ._spikes import SkipOnSpikesState as SkipOnSpikesState
from ._spikes import skip_on_spikes as skip_on_spikes

__all__ = [
    "AccumulateState",
    "ApplyEvery",
    "ApplyEveryState",
    "ApplyIfFiniteLocatedState",
    "ApplyIfFiniteState",
    "CompensationState",
    "ConditionFn",
    "ConditionallyMaskState",
    "ConditionallyTransformState",
    "DiLoCoState",
    "EmaParamsState",
    "EmaState",
    "InjectHyperparamsState",
    "InjectStatefulHyperparamsState",
    "LabelsByPattern",
    "LookaheadParams",
    "LookaheadState",
    "MaskedNode",
    "MaskedState",
    "MultiSteps",
    "MultiStepsState",
    "MultiTransformState",
    "PartitionState",
    "PopulationState",
    "ShouldSkipUpdateFunction",
    "SkipOnSpikesState",
    "StatefulSchedule",
    "WrappedSchedule",
    "WrappedScheduleState",
    "accumulate_k_steps",
    "apply_every",
    "apply_if_finite",
    "box",
    "conditionally_mask",
    "conditionally_transform",
    "diloco",
    "ema",
    "ema_params",
    "freeze",
    "hyperparameter_names",
    "hyperparameters",
    "inject_hyperparams",
    "inject_stateful_hyperparams",
    "l2_ball",
    "labels_by_pattern",
    "lookahead",
    "lr_multipliers",
    "masked",
    "measure_with_ema",
    "multi_transform",
    "non_negative",
    "partition",
    "periodic_update",
    "population",
    "population_exploit_explore",
    "population_hyperparameters",
    "population_member",
    "project",
    "scale_gradient_by",
    "selective_transform",
    "skip_large_updates",
    "skip_not_finite",
    "skip_on_spikes",
    "sweep",
    "with_compensation",
    "with_hyperparameters",
]
