"""Euclidean projections of pytrees onto sets, under `optax.projections`' names.

Pure functions `tree -> projected tree` (no state): use them inside a loss, after an update, or
through `gradtx.project(fn)` to keep the parameters in a set during training. The public API is
re-exported explicitly; no logic here.
"""

from ._projections import projection_box as projection_box
from ._projections import projection_halfspace as projection_halfspace
from ._projections import projection_hypercube as projection_hypercube
from ._projections import projection_hyperplane as projection_hyperplane
from ._projections import projection_l1_ball as projection_l1_ball
from ._projections import projection_l1_sphere as projection_l1_sphere
from ._projections import projection_l2_ball as projection_l2_ball
from ._projections import projection_l2_sphere as projection_l2_sphere
from ._projections import projection_linf_ball as projection_linf_ball
from ._projections import projection_non_negative as projection_non_negative
from ._projections import projection_simplex as projection_simplex
from ._projections import projection_vector as projection_vector

__all__ = [
    "projection_box",
    "projection_halfspace",
    "projection_hypercube",
    "projection_hyperplane",
    "projection_l1_ball",
    "projection_l1_sphere",
    "projection_l2_ball",
    "projection_l2_sphere",
    "projection_linf_ball",
    "projection_non_negative",
    "projection_simplex",
    "projection_vector",
]
