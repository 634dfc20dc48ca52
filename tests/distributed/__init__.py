"""Tests of gradtx.distributed: state shardings, ZeRO-1, multi-process training."""
