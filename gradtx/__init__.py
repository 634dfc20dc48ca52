"""gradtx: composable, functional gradient transformations (optimizers) for JAX.

The public API, re-exported explicitly. No logic lives here.
"""

from . import config as config
from . import contrib as contrib
from . import microbatching as microbatching
from . import nnabla as nnabla
from . import returnn as returnn
from . import schedules as schedules
from . import tree as tree

# -- core protocol ---------------------------------------------------------------------------------
from ._core import EmptyState as EmptyState
from ._core import GradientTransformation as GradientTransformation
from ._core import apply_updates as apply_updates
from ._core import chain as chain
from ._core import identity as identity
from ._core import named_chain as named_chain
from ._core import stateless as stateless

# -- interoperability with Optax -------------------------------------------------------------------
from ._interop import as_optax as as_optax

# -- quantized (8-bit) optimizer states ------------------------------------------------------------
from ._quantize import QuantizedArray as QuantizedArray
from ._quantize import QuantizedDtype as QuantizedDtype
from ._quantize import quantized as quantized

# -- the jitted step -------------------------------------------------------------------------------
from ._step import jit_step as jit_step

# -- checkpoints: state_dict, save, load, inspect --------------------------------------------------
from .checkpoint import CheckpointError as CheckpointError
from .checkpoint import StateSummary as StateSummary
from .checkpoint import inspect_state as inspect_state
from .checkpoint import load as load
from .checkpoint import load_state_dict as load_state_dict
from .checkpoint import save as save
from .checkpoint import state_dict as state_dict

# -- config: registry, from_config / to_config -----------------------------------------------------
from .config import ConfigError as ConfigError
from .config import available as available
from .config import from_config as from_config
from .config import get_optimizer as get_optimizer
from .config import register as register
from .config import to_config as to_config

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

# -- nnabla's config dialect -----------------------------------------------------------------------
from .nnabla import from_nnabla as from_nnabla

# -- optimizers (aliases: chains of primitives) ----------------------------------------------------
from .optimizers._adam import adam as adam
from .optimizers._adam import adamw as adamw
from .optimizers._adam import nadam as nadam
from .optimizers._adam import nadamw as nadamw
from .optimizers._adam_variants import adabelief as adabelief
from .optimizers._adam_variants import adamax as adamax
from .optimizers._adam_variants import adamaxw as adamaxw
from .optimizers._adam_variants import amsgrad as amsgrad
from .optimizers._adam_variants import novograd as novograd
from .optimizers._adam_variants import radam as radam
from .optimizers._adam_variants import yogi as yogi
from .optimizers._adan_sm3 import adan as adan
from .optimizers._adan_sm3 import sm3 as sm3
from .optimizers._adaptive import adadelta as adadelta
from .optimizers._adaptive import adafactor as adafactor
from .optimizers._adaptive import adagrad as adagrad
from .optimizers._adaptive import grad_variance_scaled as grad_variance_scaled
from .optimizers._adaptive import rmsprop as rmsprop
from .optimizers._adaptive import rmsprop_graves as rmsprop_graves
from .optimizers._bound import adabound as adabound
from .optimizers._bound import amsbound as amsbound
from .optimizers._eve import eve as eve
from .optimizers._large_batch import lamb as lamb
from .optimizers._large_batch import lars as lars
from .optimizers._lbfgs import lbfgs as lbfgs
from .optimizers._optimistic import optimistic_adam as optimistic_adam
from .optimizers._optimistic import optimistic_adam_v2 as optimistic_adam_v2
from .optimizers._optimistic import optimistic_gradient_descent as optimistic_gradient_descent
from .optimizers._sgd import normalized_sgd as normalized_sgd
from .optimizers._sgd import sgd as sgd
from .optimizers._sgd import sgdw as sgdw
from .optimizers._sgd_variants import fromage as fromage
from .optimizers._sgd_variants import noisy_sgd as noisy_sgd
from .optimizers._sgd_variants import polyak_sgd as polyak_sgd
from .optimizers._sgd_variants import rprop as rprop
from .optimizers._sgd_variants import signum as signum
from .optimizers._sign import lion as lion
from .optimizers._sign import neural_optimizer1 as neural_optimizer1
from .optimizers._sign import sign_sgd as sign_sgd

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

# -- primitives ------------------------------------------------------------------------------------
from .transforms._adam import scale_by_adam as scale_by_adam
from .transforms._adam import scale_by_adam_eps_hat as scale_by_adam_eps_hat
from .transforms._adam import scale_by_adamax as scale_by_adamax
from .transforms._adam import scale_by_amsgrad as scale_by_amsgrad
from .transforms._adam_variants import ScaleByBeliefState as ScaleByBeliefState
from .transforms._adam_variants import ScaleByNovogradState as ScaleByNovogradState
from .transforms._adam_variants import scale_by_belief as scale_by_belief
from .transforms._adam_variants import scale_by_novograd as scale_by_novograd
from .transforms._adam_variants import scale_by_radam as scale_by_radam
from .transforms._adam_variants import scale_by_yogi as scale_by_yogi
from .transforms._adan import ScaleByAdanState as ScaleByAdanState
from .transforms._adan import scale_by_adan as scale_by_adan
from .transforms._adaptive import ScaleByAdadeltaState as ScaleByAdadeltaState
from .transforms._adaptive import ScaleByRmsState as ScaleByRmsState
from .transforms._adaptive import ScaleByRssState as ScaleByRssState
from .transforms._adaptive import ScaleByStddevState as ScaleByStddevState
from .transforms._adaptive import scale_by_adadelta as scale_by_adadelta
from .transforms._adaptive import scale_by_grad_variance as scale_by_grad_variance
from .transforms._adaptive import scale_by_rms as scale_by_rms
from .transforms._adaptive import scale_by_rss as scale_by_rss
from .transforms._adaptive import scale_by_stddev as scale_by_stddev
from .transforms._bounded import bound_lr as bound_lr
from .transforms._clipping import adaptive_grad_clip as adaptive_grad_clip
from .transforms._clipping import clip as clip
from .transforms._clipping import clip_by_block_rms as clip_by_block_rms
from .transforms._clipping import clip_by_global_norm as clip_by_global_norm
from .transforms._clipping import clip_by_norm as clip_by_norm
from .transforms._decay import WeightDecayState as WeightDecayState
from .transforms._decay import weight_decay as weight_decay
from .transforms._decay import weight_decay_by_lr_ratio as weight_decay_by_lr_ratio
from .transforms._decayed_weights import add_decayed_weights as add_decayed_weights
from .transforms._distance import (
    ScaleByDistanceOverGradientsState as ScaleByDistanceOverGradientsState,
)
from .transforms._distance import (
    scale_by_distance_over_gradients as scale_by_distance_over_gradients,
)
from .transforms._elementwise import ElementwiseState as ElementwiseState
from .transforms._elementwise import elementwise as elementwise
from .transforms._eve import ScaleByEveState as ScaleByEveState
from .transforms._eve import scale_by_eve as scale_by_eve
from .transforms._factored import FactoredState as FactoredState
from .transforms._factored import scale_by_factored_rms as scale_by_factored_rms
from .transforms._gradient_ops import AddNoiseState as AddNoiseState
from .transforms._gradient_ops import add_noise as add_noise
from .transforms._gradient_ops import centralize as centralize
from .transforms._lbfgs import ScaleByLBFGSState as ScaleByLBFGSState
from .transforms._lbfgs import scale_by_lbfgs as scale_by_lbfgs
from .transforms._linesearch import value_and_grad_from_state as value_and_grad_from_state
from .transforms._linesearch_backtracking import (
    BacktrackingLinesearchInfo as BacktrackingLinesearchInfo,
)
from .transforms._linesearch_backtracking import (
    ScaleByBacktrackingLinesearchState as ScaleByBacktrackingLinesearchState,
)
from .transforms._linesearch_backtracking import (
    scale_by_backtracking_linesearch as scale_by_backtracking_linesearch,
)
from .transforms._linesearch_zoom import ScaleByZoomLinesearchState as ScaleByZoomLinesearchState
from .transforms._linesearch_zoom import ZoomLinesearchInfo as ZoomLinesearchInfo
from .transforms._linesearch_zoom import scale_by_zoom_linesearch as scale_by_zoom_linesearch
from .transforms._moments import ScaleByAdamState as ScaleByAdamState
from .transforms._moments import ScaleByAmsgradState as ScaleByAmsgradState
from .transforms._momentum import TraceState as TraceState
from .transforms._momentum import trace as trace
from .transforms._momentum import trace_with_lr as trace_with_lr
from .transforms._newbob import NewbobState as NewbobState
from .transforms._newbob import newbob as newbob
from .transforms._normalize import normalize_by_update_norm as normalize_by_update_norm
from .transforms._optimistic import ScaleByOptimisticGradientState as ScaleByOptimisticGradientState
from .transforms._optimistic import scale_by_optimistic_gradient as scale_by_optimistic_gradient
from .transforms._per_example import per_example_global_norm_clip as per_example_global_norm_clip
from .transforms._per_example import per_example_layer_norm_clip as per_example_layer_norm_clip
from .transforms._plateau import ReduceOnPlateauState as ReduceOnPlateauState
from .transforms._plateau import reduce_on_plateau as reduce_on_plateau
from .transforms._polyak import scale_by_polyak as scale_by_polyak
from .transforms._rprop import ScaleByRpropState as ScaleByRpropState
from .transforms._rprop import scale_by_rprop as scale_by_rprop
from .transforms._scaling import ScaleByScheduleState as ScaleByScheduleState
from .transforms._scaling import normalize as normalize
from .transforms._scaling import scale as scale
from .transforms._scaling import scale_by_learning_rate as scale_by_learning_rate
from .transforms._scaling import scale_by_schedule as scale_by_schedule
from .transforms._sign import ScaleByLionState as ScaleByLionState
from .transforms._sign import scale_by_lion as scale_by_lion
from .transforms._sign import scale_by_sign as scale_by_sign
from .transforms._sign import scale_by_sign_agreement as scale_by_sign_agreement
from .transforms._sm3 import ScaleBySM3State as ScaleBySM3State
from .transforms._sm3 import scale_by_sm3 as scale_by_sm3
from .transforms._trust_ratio import ScaleByLarsTrustRatioState as ScaleByLarsTrustRatioState
from .transforms._trust_ratio import scale_by_lamb_trust_ratio as scale_by_lamb_trust_ratio
from .transforms._trust_ratio import scale_by_lars_trust_ratio as scale_by_lars_trust_ratio
from .transforms._trust_ratio import scale_by_param_block_norm as scale_by_param_block_norm
from .transforms._trust_ratio import scale_by_param_block_rms as scale_by_param_block_rms
from .transforms._trust_ratio import scale_by_trust_ratio as scale_by_trust_ratio
from .transforms._zero import set_to_zero as set_to_zero

# -- wrappers (transformations of transformations) -------------------------------------------------
from .wrappers._accumulate import AccumulateState as AccumulateState
from .wrappers._accumulate import accumulate_k_steps as accumulate_k_steps
from .wrappers._averaging import EmaParamsState as EmaParamsState
from .wrappers._averaging import LookaheadState as LookaheadState
from .wrappers._averaging import ema_params as ema_params
from .wrappers._averaging import lookahead as lookahead
from .wrappers._conditional import ConditionallyMaskState as ConditionallyMaskState
from .wrappers._conditional import ConditionallyTransformState as ConditionallyTransformState
from .wrappers._conditional import conditionally_mask as conditionally_mask
from .wrappers._conditional import conditionally_transform as conditionally_transform
from .wrappers._conditional import skip_large_updates as skip_large_updates
from .wrappers._conditional import skip_not_finite as skip_not_finite
from .wrappers._ema import EmaState as EmaState
from .wrappers._ema import ema as ema
from .wrappers._ema import measure_with_ema as measure_with_ema
from .wrappers._finite import ApplyIfFiniteState as ApplyIfFiniteState
from .wrappers._finite import apply_if_finite as apply_if_finite
from .wrappers._finite import zero_nans as zero_nans
from .wrappers._inject import InjectHyperparamsState as InjectHyperparamsState
from .wrappers._inject import inject_hyperparams as inject_hyperparams
from .wrappers._label_partition import partition as partition
from .wrappers._partition import LabelsByPattern as LabelsByPattern
from .wrappers._partition import MaskedState as MaskedState
from .wrappers._partition import MultiTransformState as MultiTransformState
from .wrappers._partition import freeze as freeze
from .wrappers._partition import labels_by_pattern as labels_by_pattern
from .wrappers._partition import lr_multipliers as lr_multipliers
from .wrappers._partition import masked as masked
from .wrappers._partition import multi_transform as multi_transform
from .wrappers._partition import scale_gradient_by as scale_gradient_by
from .wrappers._periodic import ApplyEveryState as ApplyEveryState
from .wrappers._periodic import apply_every as apply_every
from .wrappers._periodic import periodic_update as periodic_update
from .wrappers._project import box as box
from .wrappers._project import l2_ball as l2_ball
from .wrappers._project import non_negative as non_negative
from .wrappers._project import project as project

__version__ = "0.1.0"
