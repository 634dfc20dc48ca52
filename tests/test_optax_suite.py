"""The CI subset of `make optax-suite`: Optax's own alias-free transform, schedule, wrapper, tree
and projection tests, run with gradtx substituted for every public Optax name it shares
(tests/optax_suite). Every test that reaches gradtx must pass, apart from those skipped by name
because gradtx differs by design (tests/optax_suite/differences.py, docs/migration.md).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# A bound for four lanes sharing two slow cores (the subset takes ~400 s there), not a wait.
SUITE_TIMEOUT_S = 900


@pytest.mark.subprocess
@pytest.mark.slow
def test_optax_suite_ci_subset_passes_with_gradtx(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.pop("JAX_DISABLE_MOST_OPTIMIZATIONS", None)  # the programs users run
    env.pop("XLA_FLAGS", None)
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "tests.optax_suite", "--subset", "ci", "--mode", "gradtx"]
    cmd += ["--jobs", "1", "--json", str(report), "--timeout", str(SUITE_TIMEOUT_S)]
    proc = subprocess.run(  # the runner's own limit fires first and reports what it ran
        cmd,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SUITE_TIMEOUT_S + 50,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    totals = json.loads(report.read_text())["totals"]
    assert totals["touched"] >= 300, totals  # the substitution reached gradtx
    assert totals["passed"] == totals["touched"], totals
