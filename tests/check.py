"""`make check`: the inner loop. Lint, types and the tests of what a change touches, in minutes;
`make test` (every test, every lane) stays the full check, and CI's.

The changed files: `git diff --name-only` against HEAD (or against the merge base with `--base
REF`) and the untracked files git does not ignore; or the files named on the command line. Each
maps to tests by `source_tests`:

- `gradtx/<pkg>/_<name>.py`: the test files named after it, `test_<prefix>*.py` for the longest
  `_`-prefix of `<name>` that has one (`_adam_variants.py` -> `test_adam*.py`), in
  tests/<pkg>/ (or tests/ for a package without a test folder); alias modules and the primitives
  of their concept share a name, so gradtx/optimizers/ and gradtx/transforms/ look in both
  test folders. `SOURCE_TESTS` names the tests of modules not named after them. None found: the
  package's test folder (or tests/test_<pkg>*.py). Also the table cases the module defines (their
  factory's module, or a case name that starts with `<name>`), and its doctests.
- a core module (`CORE`: the layers every transformation is built on): `CORE_TESTS` too.
- `gradtx/<pkg>/__init__.py`, `gradtx/__init__.py`: tests/test_public_api.py.
- `tests/**/test_*.py`: that file; `tests/cases/<family>.py`: the family's table cases; another
  helper: the test files named after it (`tests/lanes.py` -> tests/test_lanes.py), else the
  tests of its folder (a top-level one: `CORE_TESTS`).
- docs/<page>.md: that page's code blocks; README.md, notebooks, benchmarks, examples, the
  Makefile and .ci: their tests (`OTHER_TESTS`). Anything else is listed as not mapped.

With any Python change it runs the table smoke too: every check of tests/test_generic.py for
`SMOKE_CASES`, plus the table cases of the changed modules (`--table-cases`, tests/conftest.py;
every table-parametrized test of the run is narrowed to those cases).

Usage: `python -m tests.check [--base REF] [--workers N] [--dry-run] [FILE ...] [-- PYTEST ARGS]`.
Lint (ruff on the changed Python files, import-linter), types (mypy, incremental) and the tests
run one after the other; the exit status is non-zero if any failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .lanes import ROOT, emitter_env

# The layers every transformation is built on (docs/contributing.md, "Layout"): the moment tier
# and the rule language are shared by every Adam-like rule.
CORE = (
    "gradtx/_base/",
    "gradtx/core/",
    "gradtx/state/",
    "gradtx/tree/",
    "gradtx/transforms/_rule.py",
    "gradtx/transforms/_building_blocks.py",
)
# What a core change runs besides its own tests and the smoke: the tests of the core layers and
# of the rules written on the moment tier.
CORE_TESTS = (
    "tests/test_core.py",
    "tests/test_step.py",
    "tests/test_interop.py",
    "tests/test_tree.py",
    "tests/test_patterns.py",
    "tests/test_nonfinite.py",
    "tests/test_none_subtrees.py",
    "tests/test_state_layout.py",
    "tests/test_quantize.py",
    "tests/test_quantize_packed.py",
    "tests/test_quantized_moments.py",
    "tests/test_numerics.py",
    "tests/test_linalg.py",
    "tests/test_errors_vocabulary.py",
    "tests/transforms/test_adam.py",
    "tests/transforms/test_momentum.py",
)
# The table smoke: every generic check (tests/test_generic.py) of a dozen cases, one or two of
# each family: plain state (SGD with momentum), the moment tier (Adam, its bf16 moments, the
# nnabla dialect), factored and trust-ratio states (Adafactor, LAMB), a sign method (Lion), a
# parameter-free one with eval params (schedule-free AdamW), extra arguments (Sophia's loss and
# key), a line search (L-BFGS) and matrix methods (Muon; blocked Shampoo with a bf16
# preconditioner). About 35 CPU-seconds, 20 to 35 s on two cores.
SMOKE_CASES = (
    "sgd_momentum",
    "adam",
    "adam_bf16_moments",
    "nnabla.adam",
    "adafactor",
    "lamb",
    "lion",
    "schedule_free_adamw",
    "sophia_g",
    "lbfgs",
    "muon",
    "shampoo_blocked_rmsprop_bf16_preconditioner",
)
GENERIC = "tests/test_generic.py"
# Source modules (or folders, ending in /) whose tests are not named after them.
SOURCE_TESTS: dict[str, tuple[str, ...]] = {
    "gradtx/optimizers/_adan_sm3.py": (
        "tests/transforms/test_adan.py",
        "tests/transforms/test_sm3.py",
    ),
    "gradtx/optimizers/_bound.py": (
        "tests/optimizers/test_nnabla_aliases.py",
        "tests/transforms/test_bounded.py",
    ),
    "gradtx/optimizers/_sgd_variants.py": (
        "tests/optimizers/test_sgd.py",
        "tests/transforms/test_fromage.py",
        "tests/transforms/test_gradient_ops.py",
        "tests/transforms/test_polyak.py",
        "tests/transforms/test_rprop.py",
        "tests/transforms/test_sign.py",
    ),
    "gradtx/transforms/_newbob.py": ("tests/transforms/test_plateau.py",),
    "gradtx/transforms/_optax_state_names.py": ("tests/test_optax_state.py",),
    "gradtx/schedules/_cyclic.py": ("tests/schedules/test_compose.py",),
    "gradtx/nnabla/": ("tests/config/test_nnabla_dialect.py", "tests/config/test_nnabla_nntxt.py"),
    "gradtx/returnn/": ("tests/config/test_returnn_dialect.py",),
    "gradtx/cli/demo.yaml": ("tests/test_demo.py",),
    "gradtx/__main__.py": ("tests/test_cli_truths.py",),
}
# Files outside gradtx/ and tests/ (a path or a folder ending in /) and their tests.
OTHER_TESTS: dict[str, tuple[str, ...]] = {
    "README.md": ("tests/test_readme.py",),
    "notebooks/": ("tests/test_notebooks.py",),
    "benchmarks/": ("tests/test_benchmarks.py",),
    "examples/configs/": ("tests/config/test_roundtrip.py",),
    "examples/multihost_data_parallel.py": ("tests/distributed/test_multiprocess.py",),
    "mkdocs.yml": ("tests/test_docs.py",),
    "Makefile": ("tests/test_lanes.py",),
    ".ci/": ("tests/test_lanes.py",),
}
PAIRED = {"optimizers": "transforms", "transforms": "optimizers"}


@dataclass
class Selection:
    """What a change runs: test files and node ids, table cases, and what was not mapped."""

    tests: set[str] = field(default_factory=set)
    cases: set[str] = field(default_factory=set)
    unmapped: list[str] = field(default_factory=list)
    python: bool = False  # a Python file changed: lint it, and run the table smoke
    package: bool = False  # a gradtx Python file changed: import contracts and types

    def targets(self) -> list[str]:
        """The pytest arguments: the files and node ids, a node id inside a listed file left out
        (it runs with its file), and tests/test_generic.py when a table case runs."""
        tests = self.tests | ({GENERIC} if self.cases else set())
        whole = {t for t in tests if "::" not in t}
        return sorted(t for t in tests if t.partition("::")[0] not in whole or "::" not in t)


@dataclass(frozen=True)
class Table:
    """The optimizer table as the mapping needs it: each case's factory module
    (`gradtx.contrib._soap`) and each family module's cases (`tests/cases/sgd.py`)."""

    modules: dict[str, str]
    families: dict[str, tuple[str, ...]]

    @staticmethod
    def load() -> Table:
        import importlib

        from .optimizer_table import CASES

        families = {}
        for path in sorted((ROOT / "tests" / "cases").glob("[!_]*.py")):
            family = importlib.import_module(f"tests.cases.{path.stem}")
            families[f"tests/cases/{path.name}"] = tuple(c.name for c in family.CASES)
        modules = {c.name: getattr(c.factory, "__module__", "") for c in CASES}
        return Table(modules, families)


def _exists(root: Path, paths: tuple[str, ...] | list[str]) -> set[str]:
    return {p for p in paths if (root / p.partition("::")[0]).exists()}


def _named_tests(root: Path, folders: list[str], name: str) -> set[str]:
    """`test_<prefix>*.py` in `folders` for the longest `_`-prefix of `name` that has one."""
    parts = name.split("_")
    for n in range(len(parts), 0, -1):
        prefix = "_".join(parts[:n])
        found = {
            str(p.relative_to(root))
            for folder in folders
            for p in (root / folder).glob(f"test_{prefix}*.py")
        }
        if found:
            return found
    return set()


def _folder_tests(root: Path, folder: str) -> set[str]:
    return {str(p.relative_to(root)) for p in (root / folder).glob("test_*.py")}


def _override(table: dict[str, tuple[str, ...]], path: str) -> tuple[str, ...] | None:
    for key, tests in table.items():
        if path == key or (key.endswith("/") and path.startswith(key)):
            return tests
    return None


def source_tests(path: str, table: Table | None = None, root: Path = ROOT) -> Selection:
    """The tests of the changed file `path` (relative to the repository root); `table` gives the
    optimizer table's cases (needed for gradtx/ modules and tests/cases/)."""
    sel = Selection(python=path.endswith(".py"))
    parts = path.split("/")
    if parts[0] == "gradtx":
        sel.package = sel.python
        _gradtx_tests(sel, path, parts, table, root)
    elif parts[0] == "tests":
        _test_tests(sel, path, parts, table, root)
    elif len(parts) == 2 and parts[0] == "docs" and path.endswith(".md"):
        if (root / path).exists():  # tests/test_docs.py runs every page's blocks
            sel.tests.add(f"tests/test_docs.py::test_page_python_blocks_run[{parts[1]}]")
    elif parts[0] == "docs" and sel.python:
        sel.tests.add("tests/test_docs.py")
    else:
        sel.tests |= _exists(root, _override(OTHER_TESTS, path) or ())
    if not sel.tests and not sel.cases:
        sel.unmapped.append(path)
    return sel


def _gradtx_tests(
    sel: Selection, path: str, parts: list[str], table: Table | None, root: Path
) -> None:
    name = Path(path).stem
    override = _override(SOURCE_TESTS, path)
    if name == "__init__":
        sel.tests.add("tests/test_public_api.py")
        return
    core = any(path == c or (c.endswith("/") and path.startswith(c)) for c in CORE)
    if override is not None:
        sel.tests |= _exists(root, override)
    elif len(parts) == 3 and name.startswith("_") and sel.python:
        pkg = parts[1]
        folder = f"tests/{pkg}" if (root / "tests" / pkg).is_dir() else "tests"
        folders = [folder] + ([f"tests/{PAIRED[pkg]}"] if pkg in PAIRED else [])
        sel.tests |= _named_tests(root, folders, name[1:])
        if not sel.tests and not core:  # no tests of its name: its package's
            sel.tests |= (
                _folder_tests(root, folder)
                if folder != "tests"
                else _named_tests(root, [folder], pkg)
            )
    if core:
        sel.tests |= _exists(root, CORE_TESTS)
    if sel.python and (root / path).exists() and ">>> " in (root / path).read_text():
        module = path.removesuffix(".py").replace("/", ".")
        sel.tests.add(f"tests/test_docs.py::test_docstring_examples[{module}]")
    if sel.python and table is not None:
        module = path.removesuffix(".py").replace("/", ".")
        sel.cases |= {
            case
            for case, defined_in in table.modules.items()
            if defined_in == module or case.startswith(name.lstrip("_"))
        }


def _test_tests(
    sel: Selection, path: str, parts: list[str], table: Table | None, root: Path
) -> None:
    name = Path(path).stem
    folder = "/".join(parts[:-1])
    if name.startswith("test_"):
        sel.tests |= _exists(root, [path])
    elif folder == "tests/cases":
        if table is None or path not in table.families:
            sel.tests |= _exists(root, [GENERIC])  # a family the table does not list yet
        else:
            sel.cases |= set(table.families[path])
    elif folder == "tests":  # a shared helper: its own test file, else the core set
        own = {t for t in _folder_tests(root, "tests") if Path(t).stem.startswith(f"test_{name}")}
        if name == "check":  # make check's mapping is tested with the lanes
            own = {"tests/test_lanes.py"}
        sel.tests |= own or _exists(root, CORE_TESTS)
    else:  # a folder's helper: its own test file, else the folder's tests, else the folder's file
        sel.tests |= (
            _named_tests(root, [folder], name)
            or _folder_tests(root, folder)
            or _named_tests(root, ["tests"], parts[-2])
        )


def select(changed: list[str], table: Table | None, root: Path = ROOT) -> Selection:
    """The union of `source_tests` over the `changed` files, with the table smoke when any of
    them is Python."""
    out = Selection()
    for path in changed:
        sel = source_tests(path, table, root)
        out.tests |= sel.tests
        out.cases |= sel.cases
        out.unmapped += sel.unmapped
        out.python |= sel.python
        out.package |= sel.package
    if out.python:
        out.cases |= set(SMOKE_CASES)
    return out


def changed_files(base: str | None, root: Path = ROOT) -> list[str]:
    """The files that differ from HEAD (from the merge base with `base`), and the untracked ones
    git does not ignore, relative to the repository root."""

    def git(*args: str) -> list[str]:
        try:
            out = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
            ).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            detail = getattr(e, "stderr", "") or e
            raise SystemExit(
                f"make check: `git {' '.join(args)}` failed ({str(detail).strip()}); name the "
                "changed files instead: python -m tests.check FILE..."
            ) from e
        return [line for line in out.splitlines() if line]

    against = git("merge-base", base, "HEAD")[0] if base else "HEAD"
    return sorted(
        set(git("diff", "--name-only", against))
        | set(git("ls-files", "--others", "--exclude-standard"))
    )


def relative(path: str, root: Path = ROOT) -> str:
    """`path` (absolute, or relative to the current folder) relative to the repository root."""
    full = Path(path).resolve()
    try:
        return str(full.relative_to(root.resolve()))
    except ValueError:
        raise SystemExit(f"make check: {path} is outside the repository ({root})") from None


def pytest_command(
    sel: Selection, workers: int, extra: list[str], python: str = sys.executable
) -> list[str]:
    cases = [f"--table-cases={','.join(sorted(sel.cases))}"] if sel.cases else []
    parallel = ["-n", str(workers), "--dist", "loadgroup"] if workers > 1 else ["-p", "no:xdist"]
    return [python, "-m", "pytest", *sel.targets(), *cases, *parallel, *extra]


def steps(
    sel: Selection, changed: list[str], workers: int, extra: list[str], root: Path = ROOT
) -> list[tuple[str, list[str]]]:
    """`(name, command)` of what `make check` runs for `sel`, in order."""
    bin_dir = Path(sys.executable).parent
    python_files = [p for p in changed if p.endswith(".py") and (root / p).exists()]
    out: list[tuple[str, list[str]]] = []
    if python_files:
        out.append(("ruff check", [str(bin_dir / "ruff"), "check", *python_files]))
        out.append(("ruff format", [str(bin_dir / "ruff"), "format", "--check", *python_files]))
    if sel.package:
        out.append(("import contracts", [str(bin_dir / "lint-imports")]))
        out.append(("mypy", [str(bin_dir / "mypy")]))
    if sel.targets():
        out.append(("tests", pytest_command(sel, workers, extra)))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="the changed files (default: from git)")
    parser.add_argument("--base", help="compare with the merge base of this ref (default: HEAD)")
    parser.add_argument("--workers", type=int, default=2, help="xdist workers (default 2)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    args = parser.parse_args(argv)
    changed = [relative(f) for f in args.files] or changed_files(args.base)
    if not changed:
        print("make check: nothing changed (against HEAD; --base REF compares with a branch)")
        return 0
    needs_table = any(p.startswith(("gradtx/", "tests/cases/")) for p in changed)
    sel = select(changed, Table.load() if needs_table else None)
    print(f"changed: {' '.join(changed)}")
    if sel.unmapped:
        print(f"not mapped to tests (make test runs everything): {' '.join(sel.unmapped)}")
    if sel.cases:
        print(f"table cases: {', '.join(sorted(sel.cases))}")
    plan = steps(sel, changed, args.workers, extra)
    env = emitter_env({**os.environ})
    results: list[tuple[str, int, float]] = []
    for name, cmd in plan:
        print(f"\n== {name}: {' '.join(cmd)}", flush=True)
        if args.dry_run:
            continue
        start = time.perf_counter()
        code = subprocess.run(cmd, cwd=ROOT, env=env if name == "tests" else None).returncode
        results.append((name, code, time.perf_counter() - start))
    if args.dry_run:
        return 0
    print(
        "\nmake check: "
        + ", ".join(f"{n} {'ok' if c == 0 else 'FAILED'} ({s:.0f} s)" for n, c, s in results)
    )
    return 1 if any(c != 0 for _, c, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
