"""Gradient transformation primitives, one module per family (re-exported from `gradtx`)."""
