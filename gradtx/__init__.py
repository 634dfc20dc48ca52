"""gradtx: composable, functional gradient transformations (optimizers) for JAX.

The public API, re-exported explicitly. No logic lives here.
"""

from . import config as config
from . import contrib as contrib
from . import health as health
from . import microbatching as microbatching
from . import nnabla as nnabla
from . import projections as projections
from . import returnn as returnn
from . import schedules as schedules
from . import tree as tree

# -- numerics and linear algebra: Optax's top-level helpers ----------------------------------------
from ._base._linalg import global_norm as global_norm
from ._base._linalg import matrix_inverse_pth_root as matrix_inverse_pth_root
from ._base._linalg import multi_normal as multi_normal
from ._base._linalg import nnls as nnls
from ._base._linalg import power_iteration as power_iteration
from ._base._numerics import safe_increment as safe_increment
from ._base._numerics import safe_int32_increment as safe_int32_increment
from ._base._numerics import safe_norm as safe_norm
from ._base._numerics import safe_root_mean_squares as safe_root_mean_squares

# -- types: Optax's names --------------------------------------------------------------------------
from ._base._typing import MaskOrFn as MaskOrFn
from ._base._typing import OptState as OptState
from ._base._typing import Params as Params
from ._base._typing import ScalarOrSchedule as ScalarOrSchedule
from ._base._typing import Schedule as Schedule
from ._base._typing import Updates as Updates
from ._base._version import __version__ as __version__

# -- checkpoints: state_dict, save, load, inspect --------------------------------------------------
from .checkpoint import CheckpointError as CheckpointError
from .checkpoint import Migration as Migration
from .checkpoint import MigrationReport as MigrationReport
from .checkpoint import StateBytes as StateBytes
from .checkpoint import StateSummary as StateSummary
from .checkpoint import from_optax_state as from_optax_state
from .checkpoint import from_torch_state_dict as from_torch_state_dict
from .checkpoint import inspect_state as inspect_state
from .checkpoint import load as load
from .checkpoint import load_state_dict as load_state_dict
from .checkpoint import migrate as migrate
from .checkpoint import save as save
from .checkpoint import state_bytes as state_bytes
from .checkpoint import state_dict as state_dict
from .checkpoint import to_torch_state_dict as to_torch_state_dict
from .checkpoint import torch_names as torch_names

# -- config: registry, from_config / to_config -----------------------------------------------------
from .config import ConfigError as ConfigError
from .config import available as available
from .config import from_config as from_config
from .config import get_optimizer as get_optimizer
from .config import register as register
from .config import to_config as to_config

# -- core protocol ---------------------------------------------------------------------------------
from .core import EmptyState as EmptyState
from .core import GradientTransformation as GradientTransformation
from .core import GradientTransformationExtraArgs as GradientTransformationExtraArgs
from .core import HyperparameterError as HyperparameterError
from .core import MissingValueError as MissingValueError
from .core import TransformInitFn as TransformInitFn
from .core import TransformUpdateExtraArgsFn as TransformUpdateExtraArgsFn
from .core import TransformUpdateFn as TransformUpdateFn
from .core import apply_updates as apply_updates
from .core import chain as chain
from .core import identity as identity
from .core import incremental_update as incremental_update
from .core import init_empty_state as init_empty_state
from .core import named_chain as named_chain
from .core import stateless as stateless
from .core import stateless_with_tree_map as stateless_with_tree_map
from .core import with_extra_args_support as with_extra_args_support

# -- interoperability with Optax -------------------------------------------------------------------
from .core._interop import as_optax as as_optax

# -- the jitted step -------------------------------------------------------------------------------
from .core._step import jit_step as jit_step

# -- distributed: state shardings, ZeRO-1 ----------------------------------------------------------
from .distributed import LeafSharding as LeafSharding
from .distributed import abstract_state as abstract_state
from .distributed import bytes_per_device as bytes_per_device
from .distributed import explain_state_sharding as explain_state_sharding
from .distributed import hlo_collectives as hlo_collectives
from .distributed import init_sharded as init_sharded
from .distributed import load_sharded as load_sharded
from .distributed import save_sharded as save_sharded
from .distributed import state_sharding as state_sharding

# -- training health: metrics, spike skipping, locating NaNs ---------------------------------------
from .health import MetricsLogger as MetricsLogger
from .health import WithMetricsState as WithMetricsState
from .health import format_metrics as format_metrics
from .health import log_every as log_every
from .health import metrics as metrics
from .health import to_scalars as to_scalars
from .health import with_metrics as with_metrics

# -- microbatching: Optax's microbatch -------------------------------------------------------------
from .microbatching import microbatch as microbatch

# -- nnabla's config dialect -----------------------------------------------------------------------
from .nnabla import from_nnabla as from_nnabla

# -- optimizers (aliases: chains of primitives) ----------------------------------------------------
from .optimizers import adabelief as adabelief
from .optimizers import adabound as adabound
from .optimizers import adadelta as adadelta
from .optimizers import adafactor as adafactor
from .optimizers import adagrad as adagrad
from .optimizers import adam as adam
from .optimizers import adamax as adamax
from .optimizers import adamaxw as adamaxw
from .optimizers import adamw as adamw
from .optimizers import adan as adan
from .optimizers import amsbound as amsbound
from .optimizers import amsgrad as amsgrad
from .optimizers import demo_momentum as demo_momentum
from .optimizers import eve as eve
from .optimizers import fromage as fromage
from .optimizers import grad_variance_scaled as grad_variance_scaled
from .optimizers import lamb as lamb
from .optimizers import lars as lars
from .optimizers import lbfgs as lbfgs
from .optimizers import lion as lion
from .optimizers import nadam as nadam
from .optimizers import nadamw as nadamw
from .optimizers import neural_optimizer1 as neural_optimizer1
from .optimizers import noisy_sgd as noisy_sgd
from .optimizers import normalized_sgd as normalized_sgd
from .optimizers import novograd as novograd
from .optimizers import optimistic_adam as optimistic_adam
from .optimizers import optimistic_adam_v2 as optimistic_adam_v2
from .optimizers import optimistic_gradient_descent as optimistic_gradient_descent
from .optimizers import polyak_sgd as polyak_sgd
from .optimizers import radam as radam
from .optimizers import rmsprop as rmsprop
from .optimizers import rmsprop_graves as rmsprop_graves
from .optimizers import rprop as rprop
from .optimizers import sgd as sgd
from .optimizers import sgdw as sgdw
from .optimizers import sign_sgd as sign_sgd
from .optimizers import signum as signum
from .optimizers import sm3 as sm3
from .optimizers import yogi as yogi

# -- RETURNN's config dialect ----------------------------------------------------------------------
from .returnn import from_returnn as from_returnn

# -- schedules: Optax-named aliases (the full set lives in gradtx.schedules) -----------------------
from .schedules import constant_schedule as constant_schedule
from .schedules import cosine_decay_schedule as cosine_decay_schedule
from .schedules import cosine_onecycle_schedule as cosine_onecycle_schedule
from .schedules import exponential_decay as exponential_decay
from .schedules import join_schedules as join_schedules
from .schedules import linear_onecycle_schedule as linear_onecycle_schedule
from .schedules import linear_schedule as linear_schedule
from .schedules import piecewise_constant_schedule as piecewise_constant_schedule
from .schedules import piecewise_interpolate_schedule as piecewise_interpolate_schedule
from .schedules import polynomial_schedule as polynomial_schedule
from .schedules import sgdr_schedule as sgdr_schedule
from .schedules import warmup_constant_schedule as warmup_constant_schedule
from .schedules import warmup_cosine_decay_schedule as warmup_cosine_decay_schedule
from .schedules import warmup_exponential_decay_schedule as warmup_exponential_decay_schedule

# -- quantized (8-bit) optimizer states ------------------------------------------------------------
from .state._quantize import QuantizedArray as QuantizedArray
from .state._quantize import QuantizedDtype as QuantizedDtype
from .state._quantize import quantized as quantized

# -- primitives ------------------------------------------------------------------------------------
from .transforms import AdaptiveGradClipState as AdaptiveGradClipState
from .transforms import AddDecayedWeightsState as AddDecayedWeightsState
from .transforms import AddNoiseState as AddNoiseState
from .transforms import BacktrackingLinesearchInfo as BacktrackingLinesearchInfo
from .transforms import ClipByGlobalNormState as ClipByGlobalNormState
from .transforms import ClipByHistoryState as ClipByHistoryState
from .transforms import ClipState as ClipState
from .transforms import ElementwiseState as ElementwiseState
from .transforms import FactoredState as FactoredState
from .transforms import MonitorState as MonitorState
from .transforms import NewbobState as NewbobState
from .transforms import NonNegativeParamsState as NonNegativeParamsState
from .transforms import ReduceLROnPlateauState as ReduceLROnPlateauState
from .transforms import ReduceOnPlateauState as ReduceOnPlateauState
from .transforms import ScaleByAdaDeltaState as ScaleByAdaDeltaState
from .transforms import ScaleByAdadeltaState as ScaleByAdadeltaState
from .transforms import ScaleByAdamState as ScaleByAdamState
from .transforms import ScaleByAdanState as ScaleByAdanState
from .transforms import ScaleByAmsgradState as ScaleByAmsgradState
from .transforms import ScaleByBacktrackingLinesearchState as ScaleByBacktrackingLinesearchState
from .transforms import ScaleByBeliefState as ScaleByBeliefState
from .transforms import ScaleByDemoState as ScaleByDemoState
from .transforms import ScaleByDistanceOverGradientsState as ScaleByDistanceOverGradientsState
from .transforms import ScaleByEveState as ScaleByEveState
from .transforms import ScaleByLarsTrustRatioState as ScaleByLarsTrustRatioState
from .transforms import ScaleByLBFGSState as ScaleByLBFGSState
from .transforms import ScaleByLionState as ScaleByLionState
from .transforms import ScaleByNovogradState as ScaleByNovogradState
from .transforms import ScaleByOptimisticGradientState as ScaleByOptimisticGradientState
from .transforms import ScaleByRmsState as ScaleByRmsState
from .transforms import ScaleByRmsWithCountState as ScaleByRmsWithCountState
from .transforms import ScaleByRpropState as ScaleByRpropState
from .transforms import ScaleByRssState as ScaleByRssState
from .transforms import ScaleByRStdDevState as ScaleByRStdDevState
from .transforms import ScaleByRStdDevWithCountState as ScaleByRStdDevWithCountState
from .transforms import ScaleByScheduleState as ScaleByScheduleState
from .transforms import ScaleBySM3State as ScaleBySM3State
from .transforms import ScaleByStddevState as ScaleByStddevState
from .transforms import ScaleByTrustRatioState as ScaleByTrustRatioState
from .transforms import ScaleByZoomLinesearchState as ScaleByZoomLinesearchState
from .transforms import ScaleState as ScaleState
from .transforms import SnapshotState as SnapshotState
from .transforms import TraceState as TraceState
from .transforms import WeightDecayState as WeightDecayState
from .transforms import ZeroNansState as ZeroNansState
from .transforms import ZoomLinesearchInfo as ZoomLinesearchInfo
from .transforms import adaptive_grad_clip as adaptive_grad_clip
from .transforms import add_decayed_weights as add_decayed_weights
from .transforms import add_noise as add_noise
from .transforms import bound_lr as bound_lr
from .transforms import centralize as centralize
from .transforms import clip as clip
from .transforms import clip_by_block_rms as clip_by_block_rms
from .transforms import clip_by_global_norm as clip_by_global_norm
from .transforms import clip_by_history as clip_by_history
from .transforms import clip_by_norm as clip_by_norm
from .transforms import elementwise as elementwise
from .transforms import flatten as flatten
from .transforms import keep_params_nonnegative as keep_params_nonnegative
from .transforms import monitor as monitor
from .transforms import newbob as newbob
from .transforms import normalize as normalize
from .transforms import normalize_by_update_norm as normalize_by_update_norm
from .transforms import per_example_global_norm_clip as per_example_global_norm_clip
from .transforms import per_example_layer_norm_clip as per_example_layer_norm_clip
from .transforms import reduce_on_plateau as reduce_on_plateau
from .transforms import rule as rule
from .transforms import scale as scale
from .transforms import scale_by_adadelta as scale_by_adadelta
from .transforms import scale_by_adam as scale_by_adam
from .transforms import scale_by_adam_eps_hat as scale_by_adam_eps_hat
from .transforms import scale_by_adamax as scale_by_adamax
from .transforms import scale_by_adan as scale_by_adan
from .transforms import scale_by_amsgrad as scale_by_amsgrad
from .transforms import scale_by_backtracking_linesearch as scale_by_backtracking_linesearch
from .transforms import scale_by_belief as scale_by_belief
from .transforms import scale_by_demo as scale_by_demo
from .transforms import scale_by_distance_over_gradients as scale_by_distance_over_gradients
from .transforms import scale_by_eve as scale_by_eve
from .transforms import scale_by_factored_rms as scale_by_factored_rms
from .transforms import scale_by_grad_variance as scale_by_grad_variance
from .transforms import scale_by_lamb_trust_ratio as scale_by_lamb_trust_ratio
from .transforms import scale_by_lars_trust_ratio as scale_by_lars_trust_ratio
from .transforms import scale_by_lbfgs as scale_by_lbfgs
from .transforms import scale_by_learning_rate as scale_by_learning_rate
from .transforms import (
    scale_by_learning_rate_and_shrink as scale_by_learning_rate_and_shrink,
)
from .transforms import scale_by_lion as scale_by_lion
from .transforms import scale_by_novograd as scale_by_novograd
from .transforms import scale_by_optimistic_gradient as scale_by_optimistic_gradient
from .transforms import scale_by_param_block_norm as scale_by_param_block_norm
from .transforms import scale_by_param_block_rms as scale_by_param_block_rms
from .transforms import scale_by_polyak as scale_by_polyak
from .transforms import scale_by_radam as scale_by_radam
from .transforms import scale_by_rms as scale_by_rms
from .transforms import scale_by_rprop as scale_by_rprop
from .transforms import scale_by_rss as scale_by_rss
from .transforms import scale_by_schedule as scale_by_schedule
from .transforms import scale_by_sign as scale_by_sign
from .transforms import scale_by_sign_agreement as scale_by_sign_agreement
from .transforms import scale_by_sm3 as scale_by_sm3
from .transforms import scale_by_stddev as scale_by_stddev
from .transforms import scale_by_trust_ratio as scale_by_trust_ratio
from .transforms import scale_by_yogi as scale_by_yogi
from .transforms import scale_by_zoom_linesearch as scale_by_zoom_linesearch
from .transforms import scale_gradient as scale_gradient
from .transforms import set_to_zero as set_to_zero
from .transforms import slot as slot
from .transforms import snapshot as snapshot
from .transforms import trace as trace
from .transforms import trace_with_lr as trace_with_lr
from .transforms import value_and_grad_from_state as value_and_grad_from_state
from .transforms import weight_decay as weight_decay
from .transforms import weight_decay_by_lr_ratio as weight_decay_by_lr_ratio
from .transforms import zero_nans as zero_nans
from .tree import NonfiniteLocation as NonfiniteLocation

# -- tree moments: Optax's top-level names for gradtx.tree functions -------------------------------
from .tree import bias_correction as bias_correction
from .tree import first_nonfinite as first_nonfinite
from .tree import map_params as tree_map_params
from .tree import update_infinity_moment as update_infinity_moment
from .tree import update_moment as update_moment
from .tree import update_moment_per_elem_norm as update_moment_per_elem_norm

# -- wrappers (transformations of transformations) -------------------------------------------------
from .wrappers import AccumulateState as AccumulateState
from .wrappers import ApplyEvery as ApplyEvery
from .wrappers import ApplyEveryState as ApplyEveryState
from .wrappers import ApplyIfFiniteLocatedState as ApplyIfFiniteLocatedState
from .wrappers import ApplyIfFiniteState as ApplyIfFiniteState
from .wrappers import CompensationState as CompensationState
from .wrappers import ConditionallyMaskState as ConditionallyMaskState
from .wrappers import ConditionallyTransformState as ConditionallyTransformState
from .wrappers import ConditionFn as ConditionFn
from .wrappers import DiLoCoState as DiLoCoState
from .wrappers import EmaParamsState as EmaParamsState
from .wrappers import EmaState as EmaState
from .wrappers import InjectHyperparamsState as InjectHyperparamsState
from .wrappers import InjectStatefulHyperparamsState as InjectStatefulHyperparamsState
from .wrappers import LabelsByPattern as LabelsByPattern
from .wrappers import LookaheadParams as LookaheadParams
from .wrappers import LookaheadState as LookaheadState
from .wrappers import MaskedNode as MaskedNode
from .wrappers import MaskedState as MaskedState
from .wrappers import MultiSteps as MultiSteps
from .wrappers import MultiStepsState as MultiStepsState
from .wrappers import MultiTransformState as MultiTransformState
from .wrappers import PartitionState as PartitionState
from .wrappers import PopulationState as PopulationState
from .wrappers import ShouldSkipUpdateFunction as ShouldSkipUpdateFunction
from .wrappers import SkipOnSpikesState as SkipOnSpikesState
from .wrappers import StatefulSchedule as StatefulSchedule
from .wrappers import WrappedSchedule as WrappedSchedule
from .wrappers import WrappedScheduleState as WrappedScheduleState
from .wrappers import accumulate_k_steps as accumulate_k_steps
from .wrappers import apply_every as apply_every
from .wrappers import apply_if_finite as apply_if_finite
from .wrappers import box as box
from .wrappers import conditionally_mask as conditionally_mask
from .wrappers import conditionally_transform as conditionally_transform
from .wrappers import diloco as diloco
from .wrappers import ema as ema
from .wrappers import ema_params as ema_params
from .wrappers import freeze as freeze
from .wrappers import hyperparameter_names as hyperparameter_names
from .wrappers import hyperparameters as hyperparameters
from .wrappers import inject_hyperparams as inject_hyperparams
from .wrappers import inject_stateful_hyperparams as inject_stateful_hyperparams
from .wrappers import l2_ball as l2_ball
from .wrappers import labels_by_pattern as labels_by_pattern
from .wrappers import lookahead as lookahead
from .wrappers import lr_multipliers as lr_multipliers
from .wrappers import masked as masked
from .wrappers import measure_with_ema as measure_with_ema
from .wrappers import multi_transform as multi_transform
from .wrappers import non_negative as non_negative
from .wrappers import partition as partition
from .wrappers import periodic_update as periodic_update
from .wrappers import population as population
from .wrappers import population_exploit_explore as population_exploit_explore
from .wrappers import population_hyperparameters as population_hyperparameters
from .wrappers import population_member as population_member
from .wrappers import project as project
from .wrappers import scale_gradient_by as scale_gradient_by
from .wrappers import selective_transform as selective_transform
from .wrappers import skip_large_updates as skip_large_updates
from .wrappers import skip_not_finite as skip_not_finite
from .wrappers import skip_on_spikes as skip_on_spikes
from .wrappers import sweep as sweep
from .wrappers import with_compensation as with_compensation
from .wrappers import with_hyperparameters as with_hyperparameters
