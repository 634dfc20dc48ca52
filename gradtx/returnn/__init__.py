"""gradtx.returnn: RETURNN's conventions for algorithms that also exist in standard form.

`gradtx.returnn.nadam` is RETURNN's `NadamOptimizer` (TF1 contrib's Nadam, not Dozat's NAdam of
`gradtx.nadam`) and `gradtx.returnn.amsgrad` its `AMSGradOptimizer`. RETURNN's algorithms with a
name of their own (`normalized_sgd`, `neural_optimizer1`, `grad_variance_scaled`) are at the top
level. `from_returnn` builds an optimizer from RETURNN's optimizer options. The public API,
re-exported explicitly; no logic here.
"""

from ..optimizers._returnn import amsgrad as amsgrad
from ..optimizers._returnn import nadam as nadam
from ._config import from_returnn as from_returnn

__all__ = ["amsgrad", "from_returnn", "nadam"]
