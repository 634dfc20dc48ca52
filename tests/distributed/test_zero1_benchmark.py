"""benchmarks/zero1.py runs on a tiny model and reports what ZeRO-1 should show (no timing is
asserted; benchmarks/README.md has the measured table)."""

from __future__ import annotations

import pytest

from benchmarks.zero1 import collectives_with_bytes, markdown, measure


@pytest.mark.subprocess
def test_quick_zero1_benchmark_reports_memory_and_collectives():
    res = measure(quick=True, rounds=1)
    rep, zero = res["layouts"]["replicated state"], res["layouts"]["ZeRO-1"]
    counters = 3 * 4  # three int32 step counters stay replicated
    assert (
        zero["state_bytes_per_device"] - counters == (rep["state_bytes_per_device"] - counters) // 8
    )
    assert zero["params_bytes_per_device"] == rep["params_bytes_per_device"]
    assert "all-gather" not in rep["collectives"] and zero["collectives"]["all-gather"]["count"] > 0
    assert res["max_abs_param_difference"] < 1e-6
    assert "| ZeRO-1 |" in markdown(res)


def test_collectives_are_read_with_their_bytes():
    hlo = (
        "  %ag = f32[8,4]{1,0} all-gather(f32[1,4]{1,0} %x), dimensions={0}\n"
        "  %ar = (f32[16]{0}, bf16[2,2]{1,0}) all-reduce-start(%a, %b), to_apply=%sum\n"
    )
    assert collectives_with_bytes(hlo) == {
        "all-gather": {"count": 1, "bytes": 128},
        "all-reduce": {"count": 1, "bytes": 72},
    }
