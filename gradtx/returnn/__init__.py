"""gradtx.returnn: RETURNN's conventions for algorithms that also exist in standard form.

`gradtx.returnn.nadam` is RETURNN's `NadamOptimizer` (TF1 contrib's Nadam, not Dozat's NAdam of
`gradtx.nadam`) and `gradtx.returnn.amsgrad` its `AMSGradOptimizer`. RETURNN's algorithms with a
name of their own (`normalized_sgd`, `neural_optimizer1`, `grad_variance_scaled`) are at the top
level. `from_returnn` builds an optimizer from RETURNN's optimizer options. The public API,
re-exported explicitly; no logic here.
"""

from ._config import from_returnn as from_returnn
from ._solvers import amsgrad as amsgrad
from ._solvers import nadam as nadam

__all__ = ["amsgrad", "from_returnn", "nadam"]
