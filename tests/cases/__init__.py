"""Optimizer-table cases, one module per family."""
