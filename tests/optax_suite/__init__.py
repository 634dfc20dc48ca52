"""Optax's own test suite run against gradtx: `make optax-suite` (`python -m tests.optax_suite`).

`plugin` substitutes gradtx for the public Optax names it shares and records outcomes,
`differences` lists the tests skipped because gradtx differs by design, `__main__` copies the
tests from the installed optax wheel, runs them twice (plain Optax, then with gradtx) and reports.
"""
