"""The base layer (internal): type aliases, eager checks (one error vocabulary) and numerics.

Imports nothing of gradtx; every other subpackage may import it.
"""
