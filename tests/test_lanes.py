"""`make pytest`'s lanes (tests/lanes.py): main and processes together select every test exactly
once, the main lane groups each table case on one worker, the version lanes run their subset
with their own interpreters."""

from __future__ import annotations

import sys

import pytest

from .lanes import CACHE_LANES, LANES, VERSION_LANES, cache_env, lane_command


def _marker(cmd: list[str]) -> str:
    return cmd[cmd.index("-m", cmd.index("tests")) + 1]


def test_the_lanes_split_the_suite_by_the_subprocess_marker():
    main, processes = lane_command("main", 2, []), lane_command("processes", 2, [])
    assert main[0] == processes[0] == sys.executable
    assert _marker(main) == "not (subprocess or default_emitters)"
    assert _marker(processes) == "(subprocess or default_emitters)"
    assert main[main.index("-n") + 1] == "2" and main[main.index("--dist") + 1] == "loadgroup"
    assert "no:xdist" in processes


def test_pytest_arguments_reach_both_lanes_and_one_worker_runs_without_xdist():
    extra = ["-k", "adam", "-x"]
    for lane in ("main", "processes"):
        assert lane_command(lane, 2, extra)[-3:] == extra
    assert "-n" not in lane_command("main", 1, []) and "no:xdist" in lane_command("main", 1, [])


def test_version_lanes_run_the_subset_with_their_own_interpreter():
    from pathlib import Path

    from .lanes import ROOT, VERSION_DESELECT, VERSION_SUBSET, main

    cmd = lane_command("oldest", 2, ["-x"], python="/opt/py310/bin/python")
    assert cmd[:3] == ["/opt/py310/bin/python", "-m", "pytest"] and cmd[-1] == "-x"
    assert "no:xdist" in cmd and "-m" not in cmd[2:]  # no marker: the subset runs whole
    for target in VERSION_SUBSET:  # every target of the subset exists
        assert (ROOT / target.split("::")[0]).exists(), target
    for deselected in (t for lane in VERSION_DESELECT.values() for t in lane):
        assert Path(ROOT / deselected.split("::")[0]).exists(), deselected
    # a version lane named without its interpreter is refused before anything runs
    with pytest.raises(SystemExit):
        main(["--lane", "oldest"])
    with pytest.raises(SystemExit):
        main(["--python", "old=/x"])


def test_a_version_lane_keeps_its_keywords_when_given_a_k_expression():
    from .lanes import VERSION_KEYWORDS

    for extra in (["-k", "adam", "-x"], ["-kadam", "-x"], ["-k=adam", "-x"]):
        cmd = lane_command("newest", 2, extra)
        assert cmd.count("-k") == 1 and cmd[-1] == "-x"
        assert cmd[cmd.index("-k") + 1] == f"({VERSION_KEYWORDS}) and (adam)"


@pytest.mark.subprocess
def test_the_version_keywords_keep_a_reference_check_of_every_optimizer_module():
    """A new optimizer module whose reference test the keywords miss shows up here."""
    import subprocess

    from .lanes import ROOT

    out = subprocess.run(
        lane_command("newest", 1, ["--collect-only", "-q"]),  # the lane's own selection
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    kept = {line.split("::")[0] for line in out.splitlines() if "::" in line}
    modules = {
        str(p.relative_to(ROOT))
        for d in ("optimizers", "contrib", "schedules")
        for p in (ROOT / "tests" / d).glob("test_*.py")
    }
    # no reference to compare with: construction errors, and losses next to Adam's
    exempt = {"tests/optimizers/test_alias_errors.py", "tests/optimizers/test_convergence_real.py"}
    assert modules - exempt <= kept, sorted(modules - exempt - kept)


def test_the_main_interpreter_lanes_share_the_runs_compilation_cache_and_version_lanes_do_not():
    """Main and processes (and the processes they start) load what the other compiled; the
    version lanes, on other jax versions, keep the environment as it is."""
    env = {"PATH": "/bin", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "2"}
    assert set(CACHE_LANES) == set(LANES) and not set(CACHE_LANES) & set(VERSION_LANES)
    shared = cache_env(env, "/tmp/run-cache")
    assert shared["JAX_COMPILATION_CACHE_DIR"] == "/tmp/run-cache" and shared["PATH"] == "/bin"
    assert shared["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "2"  # the caller's own wins
    assert shared["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] == "0"
    # no size bound: a bound turns on eviction, which scans the folder on every write (a run of
    # the main lane took 3,308 s with one, against about 1,600 s without the cache)
    assert "JAX_COMPILATION_CACHE_MAX_SIZE" not in shared
    assert cache_env(env, None) == env


def test_lanes_start_as_their_slots_come_free():
    from .lanes import lane_slots, startable

    order = ["main", "processes", "oldest", "newest"]
    assert lane_slots("main", 2) == 2 and lane_slots("main", 1) == 1
    assert lane_slots("processes", 2) == lane_slots("oldest", 2) == 1
    # workers + 1 slots: main and processes at once, a version lane as each of them ends
    assert startable(order, busy=0, slots=3, workers=2) == ["main", "processes"]
    assert startable(["oldest", "newest"], busy=2, slots=3, workers=2) == ["oldest"]
    assert startable(["newest"], busy=3, slots=3, workers=2) == []
    assert startable(["oldest", "newest"], busy=1, slots=3, workers=2) == ["oldest", "newest"]
    # in order: a lane that does not fit holds back the ones behind it
    assert startable(["main", "oldest"], busy=2, slots=3, workers=2) == []
    # a lane wider than all the slots still runs, alone
    assert startable(order, busy=0, slots=1, workers=2) == ["main"]
    assert startable(order, busy=0, slots=9, workers=2) == order


def test_the_main_lane_compiles_with_the_classic_emitter_unless_told():
    from .lanes import EMITTER_FLAG, EMITTER_LANES, emitter_env

    assert EMITTER_LANES == ("main",)  # processes and the version lanes: jax's default emitters

    env = {"PATH": "/bin", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    flags = emitter_env(env)["XLA_FLAGS"].split()
    assert flags == ["--xla_force_host_platform_device_count=8", EMITTER_FLAG]
    assert emitter_env({})["XLA_FLAGS"] == EMITTER_FLAG
    chosen = {"XLA_FLAGS": "--xla_cpu_use_fusion_emitters=true"}
    assert emitter_env(chosen) == chosen  # the caller's choice stays
    assert env["XLA_FLAGS"] == "--xla_force_host_platform_device_count=8"  # not mutated
