"""Optimizer aliases: each is a short `chain(...)` of public primitives and nothing else.

One module per family; the public API re-exported explicitly (`gradtx` re-exports every name).
The seed systems' solver variants (`_nnabla`, `_returnn`) live here too and are public as
`gradtx.nnabla.*` / `gradtx.returnn.*`. No logic here.
"""

from ._adam import adam as adam
from ._adam import adamw as adamw
from ._adam import nadam as nadam
from ._adam import nadamw as nadamw
from ._adam_variants import adabelief as adabelief
from ._adam_variants import adamax as adamax
from ._adam_variants import adamaxw as adamaxw
from ._adam_variants import amsgrad as amsgrad
from ._adam_variants import novograd as novograd
from ._adam_variants import radam as radam
from ._adam_variants import yogi as yogi
from ._adan_sm3 import adan as adan
from ._adan_sm3 import sm3 as sm3
from ._adaptive import adadelta as adadelta
from ._adaptive import adafactor as adafactor
from ._adaptive import adagrad as adagrad
from ._adaptive import grad_variance_scaled as grad_variance_scaled
from ._adaptive import rmsprop as rmsprop
from ._adaptive import rmsprop_graves as rmsprop_graves
from ._bound import adabound as adabound
from ._bound import amsbound as amsbound
from ._demo import demo_momentum as demo_momentum
from ._eve import eve as eve
from ._large_batch import lamb as lamb
from ._large_batch import lars as lars
from ._lbfgs import lbfgs as lbfgs
from ._optimistic import optimistic_adam as optimistic_adam
from ._optimistic import optimistic_adam_v2 as optimistic_adam_v2
from ._optimistic import optimistic_gradient_descent as optimistic_gradient_descent
from ._sgd import normalized_sgd as normalized_sgd
from ._sgd import sgd as sgd
from ._sgd import sgdw as sgdw
from ._sgd_variants import fromage as fromage
from ._sgd_variants import noisy_sgd as noisy_sgd
from ._sgd_variants import polyak_sgd as polyak_sgd
from ._sgd_variants import rprop as rprop
from ._sgd_variants import signum as signum
from ._sign import lion as lion
from ._sign import neural_optimizer1 as neural_optimizer1
from ._sign import sign_sgd as sign_sgd

__all__ = [
    "adabelief",
    "adabound",
    "adadelta",
    "adafactor",
    "adagrad",
    "adam",
    "adamax",
    "adamaxw",
    "adamw",
    "adan",
    "amsbound",
    "amsgrad",
    "demo_momentum",
    "eve",
    "fromage",
    "grad_variance_scaled",
    "lamb",
    "lars",
    "lbfgs",
    "lion",
    "nadam",
    "nadamw",
    "neural_optimizer1",
    "noisy_sgd",
    "normalized_sgd",
    "novograd",
    "optimistic_adam",
    "optimistic_adam_v2",
    "optimistic_gradient_descent",
    "polyak_sgd",
    "radam",
    "rmsprop",
    "rmsprop_graves",
    "rprop",
    "sgd",
    "sgdw",
    "sign_sgd",
    "signum",
    "sm3",
    "yogi",
]
