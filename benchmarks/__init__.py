"""Side-by-side benchmarks of gradtx against Optax (and torch.optim when installed).

Run `make bench` or `python -m benchmarks` (`--help` for options); see benchmarks/README.md.
"""
