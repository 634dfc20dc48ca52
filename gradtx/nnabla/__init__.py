"""gradtx.nnabla: nnabla's conventions for algorithms that also exist in standard form.

`gradtx.nnabla.adam` is nnabla's `Adam` (ε before the bias corrections), `gradtx.adam` is Optax's;
likewise `adamw`, `amsgrad`, `lamb`, `adabelief`, `momentum` (`Momentum` / `Nesterov`) and `lars`.
Algorithms with a name of their own (`sgdw`, `rmsprop_graves`, `adabound`, `amsbound`, `eve`) are
at the top level. `from_nnabla` builds an optimizer from nnabla's optimizer configuration. The
public API, re-exported explicitly; no logic here.
"""

from ..optimizers._nnabla import adabelief as adabelief
from ..optimizers._nnabla import adam as adam
from ..optimizers._nnabla import adamw as adamw
from ..optimizers._nnabla import amsgrad as amsgrad
from ..optimizers._nnabla import lamb as lamb
from ..optimizers._nnabla import lars as lars
from ..optimizers._nnabla import momentum as momentum
from ._config import from_nnabla as from_nnabla

__all__ = ["adabelief", "adam", "adamw", "amsgrad", "from_nnabla", "lamb", "lars", "momentum"]
