"""Optimizer aliases: each is a short `chain(...)` of public primitives and nothing else.

One module per family; everything is re-exported from `gradtx`.
"""
