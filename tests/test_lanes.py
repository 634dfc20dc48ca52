"""`make pytest`'s lanes (tests/lanes.py): main and processes together select every test exactly
once, the main lane groups each table case on one worker, the version lanes run their subset
with their own interpreters, and the run's test-time budget is reported; `make check`'s mapping
from changed files to tests (tests/check.py)."""

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

    from .lanes import ROOT, VERSION_DESELECT, VERSION_MARKER, main, version_subset

    cmd = lane_command("oldest", 1, ["-x"], python="/opt/py310/bin/python")
    assert cmd[:3] == ["/opt/py310/bin/python", "-m", "pytest"] and cmd[-1] == "-x"
    assert "no:xdist" in cmd and cmd[cmd.index("-m", 2) + 1] == f"({VERSION_MARKER})"
    two = lane_command("oldest", 2, ["-x"], python="/opt/py310/bin/python")
    assert two[two.index("-n") + 1] == "2" and two[two.index("--dist") + 1] == "loadfile"
    assert "no:xdist" not in two
    assert [a for a in cmd if a.startswith("tests/")] == list(version_subset())  # only its files
    for target in version_subset():  # every file of the subset exists
        assert (ROOT / target).is_file(), target
    for deselected in (t for lane in VERSION_DESELECT.values() for t in lane):
        assert Path(ROOT / deselected.split("::")[0]).exists(), deselected
    # a version lane named without its interpreter is refused before anything runs
    with pytest.raises(SystemExit):
        main(["--lane", "oldest"])
    with pytest.raises(SystemExit):
        main(["--python", "old=/x"])


def test_a_version_lane_keeps_its_marker_when_given_an_m_expression():
    from .lanes import VERSION_MARKER

    for extra in (["-m", "slow", "-x"], ["-mslow", "-x"], ["-m=slow", "-x"]):
        cmd = lane_command("newest", 2, extra)
        assert cmd.count("-m") == 2 and cmd[-1] == "-x"  # `python -m pytest`, then one -m
        assert cmd[cmd.index("-m", 2) + 1] == f"({VERSION_MARKER}) and (slow)"
    assert lane_command("newest", 2, ["-k", "adam"])[-2:] == ["-k", "adam"]  # -k as given


def test_the_version_subset_is_read_from_the_markers_and_takes_no_eager_case(tmp_path):
    from .lanes import in_version_subset, version_subset

    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "sub" / "test_a.py").write_text(
        "import pytest\n\n\n@pytest.mark.across_versions\n@pytest.mark.parametrize('x', [1])\n"
        "def test_ref(x):\n    pass\n\n\ndef test_other():\n    pass\n\n\n"
        "@pytest.mark.parametrize('x', [1])\n@pytest.mark.across_versions\ndef test_ref2(x):\n"
        "    pass\n"
    )
    (tmp_path / "tests" / "test_b.py").write_text(
        "import pytest\n\npytestmark = [pytest.mark.slow, pytest.mark.across_versions]\n\n\n"
        "def test_any():\n    pass\n"
    )
    (tmp_path / "tests" / "test_c.py").write_text("# across_versions, only in a comment\n")
    assert version_subset(tmp_path) == {
        "tests/sub/test_a.py": ("test_ref", "test_ref2"),
        "tests/test_b.py": (),
    }
    (tmp_path / "tests" / "test_d.py").write_text(
        "import pytest\n\n\n@pytest.mark.across_versions\nclass TestX:\n"
        "    def test_m(self):\n        pass\n"
    )
    with pytest.raises(ValueError, match=r"test_d\.py"):  # a mark the lanes would not read
        version_subset(tmp_path)

    class Item:  # what in_version_subset reads of a collected pytest.Item
        def __init__(self, nodeid: str, marked: bool):
            self.nodeid, self.marked = nodeid, marked

        def get_closest_marker(self, name):
            return object() if self.marked and name == "across_versions" else None

    ref = "tests/contrib/test_acprop.py::test_plain_against_optax"
    assert in_version_subset(Item(f"{ref}[jit-acprop]", True))
    assert not in_version_subset(Item(f"{ref}[eager-acprop]", True))
    assert in_version_subset(Item(f"{ref}[adam-jit]", True))
    assert not in_version_subset(Item(f"{ref}[adam-eager]", True))
    assert in_version_subset(Item(f"{ref}[eagerly_named]", True))  # only contains the word
    assert in_version_subset(Item("tests/test_checkpoint.py::test_anything", True))
    assert not in_version_subset(Item(f"{ref}[jit-acprop]", False))


def _test_names(path) -> set[str]:
    import ast

    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test_")
    }


def test_every_optimizer_and_schedule_module_keeps_a_test_in_the_version_subset():
    """A new module of gradtx/optimizers, gradtx/contrib or gradtx/schedules with no test marked
    `across_versions` shows up here (its tests found as `make check` finds them)."""
    from .check import source_tests
    from .lanes import ROOT, version_subset

    subset = version_subset()

    missing = {}
    for package in ("optimizers", "contrib", "schedules"):
        for module in sorted((ROOT / "gradtx" / package).glob("_*.py")):
            if module.name == "__init__.py":
                continue
            path = str(module.relative_to(ROOT))
            tests = source_tests(path).tests
            if not tests & set(subset):
                missing[path] = sorted(tests)
    assert not missing, f"modules with no test marked `across_versions`: {missing}"
    for path, names in subset.items():  # the reading of the markers finds test functions
        assert set(names) <= _test_names(ROOT / path), (path, set(names) - _test_names(ROOT / path))


@pytest.mark.subprocess
def test_every_entry_of_the_version_subset_selects_tests():
    """The lane's own selection (the `version_lane` marker of tests/conftest.py), collected: every
    file and every test marked `across_versions` keeps at least one test (not only eager cases)."""
    import subprocess

    from .lanes import ROOT, version_subset

    out = subprocess.run(
        lane_command("newest", 1, ["--collect-only", "-q", "-p", "no:cacheprovider"]),
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    ids = [line for line in out.splitlines() if "::" in line]
    assert not any("eager" in i.partition("[")[2].split("-") for i in ids)
    selected = {(i.partition("::")[0], i.partition("::")[2].partition("[")[0]) for i in ids}
    for path, names in version_subset().items():
        assert any(p == path for p, _ in selected), f"{path} selects nothing"
        for name in names:
            assert (path, name) in selected, f"{path}::{name} selects nothing"


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


def test_the_last_version_lane_takes_the_free_slots_as_workers():
    from .lanes import has_xdist, lane_workers

    assert lane_workers("main", 2, free=3, last=False, xdist=True) == 2
    assert lane_workers("processes", 2, free=1, last=True, xdist=True) == 1
    # newest starts beside the main lane (one slot free), oldest waits behind it: one worker
    assert lane_workers("newest", 2, free=1, last=False, xdist=True) == 1
    # oldest starts last, as the main lane's two slots come free: both, at most `workers`
    assert lane_workers("oldest", 2, free=2, last=True, xdist=True) == 2
    assert lane_workers("oldest", 2, free=3, last=True, xdist=True) == 2
    assert lane_workers("oldest", 2, free=1, last=True, xdist=True) == 1
    assert lane_workers("oldest", 2, free=2, last=False, xdist=True) == 1  # a lane waits behind
    assert lane_workers("oldest", 2, free=2, last=True, xdist=False) == 1  # no xdist there
    assert has_xdist(sys.executable)  # the main venv has it
    assert not has_xdist("/bin/false")


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


# -- the test-time budget ----------------------------------------------------------------------

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.contrib.test_soap" name="test_a[defaults]" time="2.5" />
<testcase classname="tests.contrib.test_soap" name="test_b" time="1.0" />
<testcase classname="tests.test_core.TestChain" name="test_c" time="0.25" />
<testcase classname="tests.test_generic" name="test_d[adam]" time="10.0"><skipped /></testcase>
</testsuite></testsuites>"""


def test_junit_reports_sum_to_seconds_per_test_file():
    from .lanes import file_seconds, report_file

    assert report_file("tests.contrib.test_soap") == "tests/contrib/test_soap.py"
    assert report_file("tests.test_core.TestChain") == "tests/test_core.py"  # a class in it
    assert report_file("") == "(collection)"
    once = file_seconds(JUNIT)
    assert once == {
        "tests/contrib/test_soap.py": 3.5,
        "tests/test_core.py": 0.25,
        "tests/test_generic.py": 10.0,
    }
    twice = file_seconds(JUNIT, JUNIT)  # two lanes' reports add up per file
    assert twice == {k: 2 * v for k, v in once.items()}


def test_grown_files_are_the_largest_growth_first_new_files_from_zero():
    from .lanes import grown_files

    before = {"a.py": 10.0, "b.py": 5.0, "c.py": 50.0}
    now = {"a.py": 40.0, "b.py": 5.5, "c.py": 45.0, "d.py": 12.0}
    assert grown_files(now, before) == [("a.py", 10.0, 40.0), ("d.py", 0.0, 12.0)]
    assert grown_files(now, before, least=0.5)[-1] == ("b.py", 5.0, 5.5)


def test_the_budget_report_warns_over_the_budget_and_names_the_files_that_grew():
    from .lanes import budget_report

    lanes = {"main": (600.0, 1100.0), "processes": (300.0, 400.0)}
    files = {f"tests/test_{i}.py": float(i) for i in range(12)}
    under = budget_report(lanes, files, None, budget=2000)
    text = "\n".join(under)
    assert "main" in text and "1,100 CPU-s" in text and "1,500 CPU-s of a 2,000" in text
    assert "75%" in text and "WARNING" not in text
    slowest = [line for line in under if line.endswith(".py")]
    assert len(slowest) == 10 and slowest[0].endswith("tests/test_11.py")  # the slowest first

    over = "\n".join(budget_report(lanes, files, None, budget=1000))
    assert "WARNING: 500 CPU-s over the test-time budget of 1,000" in over
    assert "no earlier full run" in over

    record = {
        "lanes": {"main": {"wall": 1, "cpu": 900}, "processes": {"wall": 1, "cpu": 300}},
        "files": {**files, "tests/test_3.py": 1.0, "tests/test_7.py": 7.0},
    }
    compared = "\n".join(budget_report(lanes, files, record, budget=1000))
    assert "the last full run took 1,200 CPU-s" in compared
    assert "tests/test_3.py: 1 s -> 3 s (+2 s)" in compared
    assert "tests/test_7.py:" not in compared  # the same as before
    same = "\n".join(budget_report(lanes, files, {**record, "files": files}, budget=1000))
    assert "none by a second or more" in same
    # a record of other lanes (a run of one lane) is not compared with
    other = {"lanes": {"main": {"wall": 1, "cpu": 900}}, "files": {}}
    assert "no earlier full run" in "\n".join(budget_report(lanes, files, other, budget=1000))


def test_the_record_round_trips_and_a_damaged_one_is_ignored_with_a_message(tmp_path, capsys):
    from .lanes import RECORDS, load_record, record_path, save_record

    # one record per set of lanes: a run of one lane keeps the full run's record
    assert record_path({"processes": 0, "main": 0}) == RECORDS / "main+processes.json"
    assert record_path(["oldest"]) != record_path(["main", "processes", "oldest", "newest"])
    path = tmp_path / "cache" / "last-run.json"
    assert load_record(path) is None
    save_record({"main": (1.5, 2.5)}, {"tests/test_a.py": 3.0}, path)
    assert load_record(path) == {
        "lanes": {"main": {"wall": 1.5, "cpu": 2.5}},
        "files": {"tests/test_a.py": 3.0},
    }
    path.write_text("{not json")
    assert load_record(path) is None
    assert "ignoring the record" in capsys.readouterr().out


def test_a_lane_is_reaped_with_its_exit_status_and_the_cpu_of_its_children():
    """The CPU of a lane includes the processes it waited for (xdist workers)."""
    import queue
    import subprocess
    import threading

    from .lanes import _pump

    burn = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'sum(range(3 * 10**7))'])"
    proc = subprocess.Popen(
        [sys.executable, "-c", f"{burn}; print('out'); raise SystemExit(3)"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    done: queue.Queue = queue.Queue()
    cpu: dict[str, float] = {}
    _pump("lane", proc, lines, threading.Lock(), done, cpu)
    assert proc.returncode == 3 and lines == ["out\n"] and done.get_nowait()[0] == "lane"
    # the grandchild's loop (~0.5 s of CPU) is counted, not only the interpreters' start
    assert cpu["lane"] > 0.3, cpu


# -- make check: from the changed files to their tests --------------------------------------------


def _table():
    from .check import Table

    return Table(
        modules={
            "soap": "gradtx.contrib._soap",
            "adam": "gradtx.optimizers._adam",
            "sophia_g": "tests.cases.contrib_methods",
            "sgd_momentum": "gradtx.optimizers._sgd",
        },
        families={"tests/cases/sgd.py": ("sgd", "sgd_momentum")},
    )


def test_check_maps_a_contrib_module_to_its_tests_table_cases_and_doctests():
    from .check import SMOKE_CASES, select, source_tests
    from .optimizer_table import CASES

    sel = source_tests("gradtx/contrib/_soap.py", _table())
    assert sel.tests == {
        "tests/contrib/test_soap.py",
        "tests/test_docs.py::test_docstring_examples[gradtx.contrib._soap]",
    }
    assert sel.cases == {"soap"} and sel.python and sel.package and not sel.unmapped
    # a case built by a helper of tests/cases is found by its name
    assert source_tests("gradtx/contrib/_sophia.py", _table()).cases == {"sophia_g"}
    # the whole change adds the table smoke and tests/test_generic.py for the cases
    whole = select(["gradtx/contrib/_soap.py"], _table())
    assert whole.cases == {"soap", *SMOKE_CASES}
    assert "tests/test_generic.py" in whole.targets()
    assert set(SMOKE_CASES) <= {c.name for c in CASES}  # the smoke names real table cases


def test_check_finds_tests_by_the_longest_name_prefix_and_across_aliases_and_primitives():
    from .check import source_tests

    assert source_tests("gradtx/wrappers/_accumulate.py").tests >= {
        "tests/wrappers/test_accumulate.py"
    }
    assert source_tests("gradtx/wrappers/_inject_kinds.py").tests >= {
        "tests/wrappers/test_inject.py",
        "tests/wrappers/test_inject_stateful.py",
    }
    # an alias module and its concept's primitives: both test folders
    assert source_tests("gradtx/optimizers/_adam_variants.py").tests >= {
        "tests/optimizers/test_adam_aliases.py",
        "tests/transforms/test_adam.py",
    }
    assert source_tests("gradtx/transforms/_sign.py").tests >= {
        "tests/transforms/test_sign.py",
        "tests/optimizers/test_sign_aliases.py",
    }
    # a package without a test folder: tests/test_<name>*.py, else tests/test_<package>*.py
    assert source_tests("gradtx/checkpoint/_migrate.py").tests == {"tests/test_migrate.py"}
    assert "tests/test_health.py" in source_tests("gradtx/health/_logging.py").tests
    # modules whose tests are named otherwise
    assert (
        "tests/transforms/test_rprop.py" in source_tests("gradtx/optimizers/_sgd_variants.py").tests
    )


def test_check_falls_back_to_the_package_tests_and_lists_what_it_cannot_map(tmp_path):
    from .check import select, source_tests

    for path in ("gradtx/wrappers/_new.py", "tests/wrappers/test_a.py", "tests/wrappers/test_b.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    assert source_tests("gradtx/wrappers/_new.py", root=tmp_path).tests == {
        "tests/wrappers/test_a.py",
        "tests/wrappers/test_b.py",
    }
    sel = select(["pyproject.toml", "CHANGELOG.md"], None, root=tmp_path)
    assert sel.unmapped == ["pyproject.toml", "CHANGELOG.md"] and not sel.targets()
    assert not sel.cases  # no Python changed: no table smoke


def test_check_runs_the_core_set_for_a_core_change_not_the_whole_folder():
    from .check import CORE_TESTS, source_tests

    for path in ("gradtx/core/_transformation.py", "gradtx/transforms/_building_blocks.py"):
        tests = source_tests(path).tests
        assert set(CORE_TESTS) <= tests, path
        assert "tests/transforms/test_zero.py" not in tests  # not tests/transforms whole


def test_check_maps_test_files_helpers_docs_and_the_rest():
    from .check import CORE_TESTS, source_tests

    table = _table()
    assert source_tests("tests/contrib/test_soap.py").tests == {"tests/contrib/test_soap.py"}
    assert source_tests("tests/cases/sgd.py", table).cases == {"sgd", "sgd_momentum"}
    assert source_tests("tests/lanes.py").tests == {"tests/test_lanes.py"}
    assert source_tests("tests/check.py").tests == {"tests/test_lanes.py"}
    assert source_tests("tests/helpers.py").tests == set(CORE_TESTS)
    assert source_tests("tests/optax_suite/plugin.py").tests == {"tests/test_optax_suite.py"}
    assert "tests/contrib/test_soap.py" in source_tests("tests/contrib/common.py").tests
    assert source_tests("docs/schedules.md").tests == {
        "tests/test_docs.py::test_page_python_blocks_run[schedules.md]"
    }
    assert source_tests("README.md").tests == {"tests/test_readme.py"}
    assert source_tests(".ci/run").tests == {"tests/test_lanes.py"}
    assert source_tests("gradtx/__init__.py").tests == {"tests/test_public_api.py"}


def test_check_targets_and_command(tmp_path, monkeypatch):
    from .check import Selection, pytest_command, relative

    monkeypatch.chdir(tmp_path)
    assert relative(str(tmp_path / "gradtx" / "_x.py"), tmp_path) == "gradtx/_x.py"
    assert relative("./gradtx/_x.py", tmp_path) == "gradtx/_x.py"
    with pytest.raises(SystemExit, match="outside the repository"):
        relative("/elsewhere/x.py", tmp_path)

    sel = Selection(
        tests={"tests/test_docs.py", "tests/test_docs.py::test_page_python_blocks_run[x.md]"},
        cases={"soap", "adam"},
    )
    assert sel.targets() == ["tests/test_docs.py", "tests/test_generic.py"]
    cmd = pytest_command(sel, 2, ["-x"], python="py")
    assert cmd[:3] == ["py", "-m", "pytest"] and cmd[-1] == "-x"
    assert "--table-cases=adam,soap" in cmd and cmd[cmd.index("--dist") + 1] == "loadgroup"
    assert "no:xdist" in pytest_command(sel, 1, [])


def test_check_reads_the_changed_files_from_git(tmp_path):
    import shutil
    import subprocess

    from .check import changed_files

    if shutil.which("git") is None:
        pytest.skip("git is not installed")

    def git(*args):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path), *args],
            check=True, capture_output=True,
        )  # fmt: skip

    git("init", "-q")
    (tmp_path / ".gitignore").write_text("ignored.py\n")
    (tmp_path / "a.py").write_text("a = 1\n")
    (tmp_path / "b.py").write_text("b = 1\n")
    git("add", ".")
    git("commit", "-q", "-m", "one")
    git("tag", "first")
    (tmp_path / "b.py").write_text("b = 2\n")
    git("commit", "-q", "-am", "two")
    (tmp_path / "a.py").write_text("a = 2\n")  # changed, not committed
    (tmp_path / "new.py").write_text("")  # untracked
    (tmp_path / "ignored.py").write_text("")
    assert changed_files(None, tmp_path) == ["a.py", "new.py"]
    assert changed_files("first", tmp_path) == ["a.py", "b.py", "new.py"]  # since the branch point
    with pytest.raises(SystemExit, match="name the changed files instead"):
        changed_files("no-such-ref", tmp_path)


def test_table_cases_narrow_only_the_table_parametrized_tests():
    """`--table-cases` (tests/conftest.py): other table cases are deselected and reported so, the
    other tests stay, and an unknown name is refused with the close one."""
    from types import SimpleNamespace

    from .conftest import _select_table_cases
    from .optimizer_table import CASES

    by_name = {c.name: c for c in CASES}

    def item(case=None):
        callspec = SimpleNamespace(params={"case": by_name[case]}) if case else None
        return SimpleNamespace(callspec=callspec, name=case)

    deselected = []
    hook = SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items))

    def config(value):
        return SimpleNamespace(getoption=lambda name: value, hook=hook)

    items = [item("adam"), item("soap"), item(), item("sgd_momentum")]
    _select_table_cases(config("soap, adam"), items)
    assert [i.name for i in items] == ["adam", "soap", None]
    assert [i.name for i in deselected] == ["sgd_momentum"]
    untouched = [item("adam")]
    _select_table_cases(config(None), untouched)
    assert len(untouched) == 1
    with pytest.raises(pytest.UsageError, match="'sop' \\(did you mean 'soap'\\?\\)"):
        _select_table_cases(config("sop"), [item("soap")])
