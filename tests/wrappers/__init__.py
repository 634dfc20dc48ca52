"""Tests of gradtx.wrappers (one module per wrapper family)."""
