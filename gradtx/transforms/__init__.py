"""Gradient transformation primitives, grouped by concept (one module per family).

The public API of the primitives, re-exported explicitly (as `optax.transforms` does);
`gradtx` re-exports every name. No logic here.
"""

from ._adam import ScaleByAdamState as ScaleByAdamState
from ._adam import ScaleByAmsgradState as ScaleByAmsgradState
from ._adam import scale_by_adam as scale_by_adam
from ._adam import scale_by_adam_eps_hat as scale_by_adam_eps_hat
from ._adam import scale_by_adamax as scale_by_adamax
from ._adam import scale_by_amsgrad as scale_by_amsgrad
from ._adam_variants import ScaleByBeliefState as ScaleByBeliefState
from ._adam_variants import ScaleByNovogradState as ScaleByNovogradState
from ._adam_variants import scale_by_belief as scale_by_belief
from ._adam_variants import scale_by_novograd as scale_by_novograd
from ._adam_variants import scale_by_radam as scale_by_radam
from ._adam_variants import scale_by_yogi as scale_by_yogi
from ._adan import ScaleByAdanState as ScaleByAdanState
from ._adan import scale_by_adan as scale_by_adan
from ._adaptive import ScaleByAdadeltaState as ScaleByAdadeltaState
from ._adaptive import ScaleByRmsState as ScaleByRmsState
from ._adaptive import ScaleByRssState as ScaleByRssState
from ._adaptive import ScaleByStddevState as ScaleByStddevState
from ._adaptive import scale_by_adadelta as scale_by_adadelta
from ._adaptive import scale_by_grad_variance as scale_by_grad_variance
from ._adaptive import scale_by_rms as scale_by_rms
from ._adaptive import scale_by_rss as scale_by_rss
from ._adaptive import scale_by_stddev as scale_by_stddev
from ._bounded import bound_lr as bound_lr
from ._clip_history import ClipByHistoryState as ClipByHistoryState
from ._clip_history import clip_by_history as clip_by_history
from ._clipping import adaptive_grad_clip as adaptive_grad_clip
from ._clipping import clip as clip
from ._clipping import clip_by_block_rms as clip_by_block_rms
from ._clipping import clip_by_global_norm as clip_by_global_norm
from ._clipping import clip_by_norm as clip_by_norm
from ._clipping import unitwise_clip as unitwise_clip
from ._clipping import unitwise_norm as unitwise_norm
from ._constraining import NonNegativeParamsState as NonNegativeParamsState
from ._constraining import keep_params_nonnegative as keep_params_nonnegative
from ._decay import WeightDecayState as WeightDecayState
from ._decay import weight_decay as weight_decay
from ._decay import weight_decay_by_lr_ratio as weight_decay_by_lr_ratio
from ._decayed_weights import add_decayed_weights as add_decayed_weights
from ._demo import ScaleByDemoState as ScaleByDemoState
from ._demo import scale_by_demo as scale_by_demo
from ._distance import ScaleByDistanceOverGradientsState as ScaleByDistanceOverGradientsState
from ._distance import scale_by_distance_over_gradients as scale_by_distance_over_gradients
from ._elementwise import ElementwiseState as ElementwiseState
from ._elementwise import elementwise as elementwise
from ._eve import ScaleByEveState as ScaleByEveState
from ._eve import scale_by_eve as scale_by_eve
from ._factored import FactoredState as FactoredState
from ._factored import scale_by_factored_rms as scale_by_factored_rms
from ._flatten import flatten as flatten
from ._fromage import (
    scale_by_learning_rate_and_shrink as scale_by_learning_rate_and_shrink,
)
from ._gradient_ops import AddNoiseState as AddNoiseState
from ._gradient_ops import add_noise as add_noise
from ._gradient_ops import centralize as centralize
from ._lbfgs import ScaleByLBFGSState as ScaleByLBFGSState
from ._lbfgs import scale_by_lbfgs as scale_by_lbfgs
from ._linesearch import value_and_grad_from_state as value_and_grad_from_state
from ._linesearch_backtracking import BacktrackingLinesearchInfo as BacktrackingLinesearchInfo
from ._linesearch_backtracking import (
    ScaleByBacktrackingLinesearchState as ScaleByBacktrackingLinesearchState,
)
from ._linesearch_backtracking import (
    scale_by_backtracking_linesearch as scale_by_backtracking_linesearch,
)
from ._linesearch_zoom import ScaleByZoomLinesearchState as ScaleByZoomLinesearchState
from ._linesearch_zoom import ZoomLinesearchInfo as ZoomLinesearchInfo
from ._linesearch_zoom import scale_by_zoom_linesearch as scale_by_zoom_linesearch
from ._momentum import TraceState as TraceState
from ._momentum import trace as trace
from ._momentum import trace_with_lr as trace_with_lr
from ._monitoring import MonitorState as MonitorState
from ._monitoring import SnapshotState as SnapshotState
from ._monitoring import monitor as monitor
from ._monitoring import snapshot as snapshot
from ._newbob import NewbobState as NewbobState
from ._newbob import newbob as newbob
from ._normalize import normalize_by_update_norm as normalize_by_update_norm
from ._optax_state_names import AdaptiveGradClipState as AdaptiveGradClipState
from ._optax_state_names import AddDecayedWeightsState as AddDecayedWeightsState
from ._optax_state_names import ClipByGlobalNormState as ClipByGlobalNormState
from ._optax_state_names import ClipState as ClipState
from ._optax_state_names import ScaleByAdaDeltaState as ScaleByAdaDeltaState
from ._optax_state_names import ScaleByRmsWithCountState as ScaleByRmsWithCountState
from ._optax_state_names import ScaleByRStdDevState as ScaleByRStdDevState
from ._optax_state_names import ScaleByRStdDevWithCountState as ScaleByRStdDevWithCountState
from ._optax_state_names import ScaleByTrustRatioState as ScaleByTrustRatioState
from ._optax_state_names import ScaleState as ScaleState
from ._optimistic import ScaleByOptimisticGradientState as ScaleByOptimisticGradientState
from ._optimistic import scale_by_optimistic_gradient as scale_by_optimistic_gradient
from ._per_example import per_example_global_norm_clip as per_example_global_norm_clip
from ._per_example import per_example_layer_norm_clip as per_example_layer_norm_clip
from ._plateau import ReduceLROnPlateauState as ReduceLROnPlateauState
from ._plateau import ReduceOnPlateauState as ReduceOnPlateauState
from ._plateau import reduce_on_plateau as reduce_on_plateau
from ._polyak import scale_by_polyak as scale_by_polyak
from ._rprop import ScaleByRpropState as ScaleByRpropState
from ._rprop import scale_by_rprop as scale_by_rprop
from ._rule import rule as rule
from ._rule import slot as slot
from ._scale_gradient import scale_gradient as scale_gradient
from ._scaling import ScaleByScheduleState as ScaleByScheduleState
from ._scaling import normalize as normalize
from ._scaling import scale as scale
from ._scaling import scale_by_learning_rate as scale_by_learning_rate
from ._scaling import scale_by_schedule as scale_by_schedule
from ._sign import ScaleByLionState as ScaleByLionState
from ._sign import scale_by_lion as scale_by_lion
from ._sign import scale_by_sign as scale_by_sign
from ._sign import scale_by_sign_agreement as scale_by_sign_agreement
from ._sm3 import ScaleBySM3State as ScaleBySM3State
from ._sm3 import scale_by_sm3 as scale_by_sm3
from ._trust_ratio import ScaleByLarsTrustRatioState as ScaleByLarsTrustRatioState
from ._trust_ratio import scale_by_lamb_trust_ratio as scale_by_lamb_trust_ratio
from ._trust_ratio import scale_by_lars_trust_ratio as scale_by_lars_trust_ratio
from ._trust_ratio import scale_by_param_block_norm as scale_by_param_block_norm
from ._trust_ratio import scale_by_param_block_rms as scale_by_param_block_rms
from ._trust_ratio import scale_by_trust_ratio as scale_by_trust_ratio
from ._zero import ZeroNansState as ZeroNansState
from ._zero import set_to_zero as set_to_zero
from ._zero import zero_nans as zero_nans

__all__ = [
    "AdaptiveGradClipState",
    "AddDecayedWeightsState",
    "AddNoiseState",
    "BacktrackingLinesearchInfo",
    "ClipByGlobalNormState",
    "ClipByHistoryState",
    "ClipState",
    "ElementwiseState",
    "FactoredState",
    "MonitorState",
    "NewbobState",
    "NonNegativeParamsState",
    "ReduceLROnPlateauState",
    "ReduceOnPlateauState",
    "ScaleByAdaDeltaState",
    "ScaleByAdadeltaState",
    "ScaleByAdamState",
    "ScaleByAdanState",
    "ScaleByAmsgradState",
    "ScaleByBacktrackingLinesearchState",
    "ScaleByBeliefState",
    "ScaleByDemoState",
    "ScaleByDistanceOverGradientsState",
    "ScaleByEveState",
    "ScaleByLBFGSState",
    "ScaleByLarsTrustRatioState",
    "ScaleByLionState",
    "ScaleByNovogradState",
    "ScaleByOptimisticGradientState",
    "ScaleByRStdDevState",
    "ScaleByRStdDevWithCountState",
    "ScaleByRmsState",
    "ScaleByRmsWithCountState",
    "ScaleByRpropState",
    "ScaleByRssState",
    "ScaleBySM3State",
    "ScaleByScheduleState",
    "ScaleByStddevState",
    "ScaleByTrustRatioState",
    "ScaleByZoomLinesearchState",
    "ScaleState",
    "SnapshotState",
    "TraceState",
    "WeightDecayState",
    "ZeroNansState",
    "ZoomLinesearchInfo",
    "adaptive_grad_clip",
    "add_decayed_weights",
    "add_noise",
    "bound_lr",
    "centralize",
    "clip",
    "clip_by_block_rms",
    "clip_by_global_norm",
    "clip_by_history",
    "clip_by_norm",
    "elementwise",
    "flatten",
    "keep_params_nonnegative",
    "monitor",
    "newbob",
    "normalize",
    "normalize_by_update_norm",
    "per_example_global_norm_clip",
    "per_example_layer_norm_clip",
    "reduce_on_plateau",
    "scale",
    "scale_by_adadelta",
    "scale_by_adam",
    "scale_by_adam_eps_hat",
    "scale_by_adamax",
    "scale_by_adan",
    "scale_by_amsgrad",
    "scale_by_backtracking_linesearch",
    "scale_by_belief",
    "scale_by_demo",
    "scale_by_distance_over_gradients",
    "scale_by_eve",
    "scale_by_factored_rms",
    "scale_by_grad_variance",
    "scale_by_lamb_trust_ratio",
    "scale_by_lars_trust_ratio",
    "scale_by_lbfgs",
    "scale_by_learning_rate",
    "scale_by_learning_rate_and_shrink",
    "scale_by_lion",
    "scale_by_novograd",
    "scale_by_optimistic_gradient",
    "scale_by_param_block_norm",
    "scale_by_param_block_rms",
    "scale_by_polyak",
    "scale_by_radam",
    "scale_by_rms",
    "scale_by_rprop",
    "scale_by_rss",
    "scale_by_schedule",
    "scale_by_sign",
    "scale_by_sign_agreement",
    "scale_by_sm3",
    "scale_by_stddev",
    "scale_by_trust_ratio",
    "scale_by_yogi",
    "scale_by_zoom_linesearch",
    "scale_gradient",
    "set_to_zero",
    "snapshot",
    "trace",
    "trace_with_lr",
    "unitwise_clip",
    "unitwise_norm",
    "value_and_grad_from_state",
    "weight_decay",
    "weight_decay_by_lr_ratio",
    "zero_nans",
]
