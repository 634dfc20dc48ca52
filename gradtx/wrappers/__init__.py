"""Transformations of transformations: accumulation, injection, partitioning, finiteness guards,
averaging and projections (one module per family; everything is re-exported from `gradtx`)."""
