"""gradtx.nnabla: nnabla's conventions for algorithms that also exist in standard form.

`gradtx.nnabla.adam` is nnabla's `Adam` (ε before the bias corrections), `gradtx.adam` is Optax's;
likewise `adamw`, `amsgrad`, `lamb`, `adabelief`, `momentum` (`Momentum` / `Nesterov`) and `lars`.
Algorithms with a name of their own (`sgdw`, `rmsprop_graves`, `adabound`, `amsbound`, `eve`) are
at the top level. `from_nnabla` builds an optimizer from nnabla's optimizer configuration. The
public API, re-exported explicitly; no logic here.
"""

from ._config import from_nnabla as from_nnabla
from ._solvers import adabelief as adabelief
from ._solvers import adam as adam
from ._solvers import adamw as adamw
from ._solvers import amsgrad as amsgrad
from ._solvers import lamb as lamb
from ._solvers import lars as lars
from ._solvers import momentum as momentum

__all__ = ["adabelief", "adam", "adamw", "amsgrad", "from_nnabla", "lamb", "lars", "momentum"]
