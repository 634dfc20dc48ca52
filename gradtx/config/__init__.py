"""gradtx.config: optimizers from config files, a registry of factories, and back to configs.

`from_config` builds an optimizer from a dict, a YAML / JSON file or string (docs/config.md is
the schema); `to_config` writes a built one back out; `register`, `get_optimizer`,
`get_schedule` and `available` are the registry of names the configs use, filled from the
catalog (`_catalog`), each argument of the kind its annotation says (`_kinds`). The nnabla and
RETURNN dialects are `gradtx.nnabla.from_nnabla` and `gradtx.returnn.from_returnn`. The public
API, re-exported explicitly; no logic here.
"""

from ._errors import ConfigError as ConfigError
from ._from_config import ConfiguredOptimizer as ConfiguredOptimizer
from ._from_config import from_config as from_config
from ._from_config import load_config as load_config
from ._registry import available as available
from ._registry import get_optimizer as get_optimizer
from ._registry import get_schedule as get_schedule
from ._registry import register as register
from ._to_config import to_config as to_config

__all__ = [
    "ConfigError",
    "ConfiguredOptimizer",
    "available",
    "from_config",
    "get_optimizer",
    "get_schedule",
    "load_config",
    "register",
    "to_config",
]
