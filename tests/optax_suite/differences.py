"""Where gradtx differs from Optax by design: the Optax tests the runner skips, by name, each with
the reason given in the table of docs/migration.md ("Where gradtx differs from Optax, and why").

`SKIPS` maps a reason's key (the table's first column) to the reason and the test-id fragments it
covers; a test is skipped when its pytest node id contains one of the fragments.
"""

from __future__ import annotations

SKIPS: dict[str, tuple[str, tuple[str, ...]]] = {}


def skip_reason(nodeid: str) -> str | None:
    for key, (reason, fragments) in SKIPS.items():
        if any(fragment in nodeid for fragment in fragments):
            return f"[{key}] {reason}"
    return None
