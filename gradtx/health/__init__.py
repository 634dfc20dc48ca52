"""Training health: metrics from every update (`metrics`, `with_metrics`) and getting them out
of a training loop (`log_every`). The public API, re-exported explicitly; no logic here.

The defences themselves live with their concepts: `skip_on_spikes` and `apply_if_finite` in
`gradtx.wrappers`, `clip_by_history` in `gradtx.transforms`, `first_nonfinite` in `gradtx.tree`.
"""

from ._logging import MetricsLogger as MetricsLogger
from ._logging import format_metrics as format_metrics
from ._logging import log_every as log_every
from ._logging import to_scalars as to_scalars
from ._metrics import WithMetricsState as WithMetricsState
from ._metrics import metrics as metrics
from ._metrics import with_metrics as with_metrics

__all__ = [
    "MetricsLogger",
    "WithMetricsState",
    "format_metrics",
    "log_every",
    "metrics",
    "to_scalars",
    "with_metrics",
]
