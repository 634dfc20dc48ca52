"""Run Optax's own tests against gradtx: `python -m tests.optax_suite` (`make optax-suite`).

Copies the `*_test.py` files shipped in the installed optax wheel into a temporary folder and runs
them twice with pytest: plain Optax, then with gradtx substituted for every public Optax name it
shares (tests/optax_suite/plugin.py). Prints per file and in total: the tests that touched gradtx,
how many of them passed, the regressions against plain Optax (a test that passes with Optax and
fails, or is skipped, with gradtx) with each one's signature, the tests skipped because gradtx
differs by design (tests/optax_suite/differences.py, docs/migration.md), and the public Optax
names without a gradtx counterpart. Exits 1 when there is a regression or a missing name.

    python -m tests.optax_suite                      # the whole suite (about 2,600 tests, twice)
    python -m tests.optax_suite --subset ci          # the CI subset (tests/test_optax_suite.py)
    python -m tests.optax_suite --files 'transforms/*' --mode gradtx
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.optax_suite.differences import optax_outcome  # noqa: E402

# The CI subset: Optax's alias, transform, schedule, wrapper, tree and projection tests, as
# node-id prefixes relative to optax/ (whole files, or a test and its parameterizations), chosen
# to run in under two minutes on two cores.
CI_SUBSET: tuple[str, ...] = (
    "_src/alias_test.py::AliasTest::test_optimizers_accept_extra_args",
    "_src/alias_test.py::AliasTest::test_optimizers_can_be_wrapped_in_inject_hyperparams",
    "schedules/_schedule_test.py",
    "schedules/_join_test.py",
    "schedules/_inject_test.py",
    "transforms/_accumulation_test.py",
    "transforms/_adding_test.py",
    "transforms/_clipping_test.py",
    "transforms/_combining_test.py",
    "transforms/_conditionality_test.py",
    "transforms/_constraining_test.py",
    "transforms/_freezing_test.py",
    "transforms/_masking_test.py",
    "transforms/_monitoring_test.py",
    "_src/lookahead_test.py",
    "_src/update_test.py",
    "tree_utils/_tree_math_test.py",
    "tree_utils/_state_utils_test.py",
    "projections/_projections_test.py",
)


def optax_dir() -> Path:
    import optax

    return Path(optax.__file__).resolve().parent


def select(patterns: list[str]) -> list[str]:
    base = optax_dir()
    files = sorted(str(p.relative_to(base)) for p in base.rglob("*_test.py"))
    if not patterns:
        return files
    return [f for f in files if any(fnmatch.fnmatch(f, p) for p in patterns)]


def copy_tests(files: list[str], into: Path) -> None:
    base = optax_dir()
    for f in files:
        target = into / "optax_tests" / f
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(base / f, target)
    (into / "pytest.ini").write_text(
        "[pytest]\npython_files = *_test.py\naddopts = -p no:cacheprovider\n"
    )


def run(
    mode: str, files: list[str], tmp: Path, jobs: int, keyword: str, timeout: float, select=()
) -> dict:
    out = tmp / f"results-{mode}"
    out.mkdir()
    env = dict(os.environ)
    env["GRADTX_OPTAX_SUITE_SELECT"] = ",".join(select)
    env["GRADTX_OPTAX_SUITE_MODE"] = mode
    env["GRADTX_OPTAX_SUITE_OUT"] = str(out)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [sys.executable, "-m", "pytest", "-q", "-c", str(tmp / "pytest.ini")]
    cmd += ["--rootdir", str(tmp), "--import-mode=importlib", "-p", "tests.optax_suite.plugin"]
    if jobs > 1:
        cmd += ["-n", str(jobs)]
    if keyword:
        cmd += ["-k", keyword]
    cmd += [str(tmp / "optax_tests" / f) for f in files]
    print(f"[{mode}] pytest on {len(files)} files ...", flush=True)
    proc = subprocess.run(
        cmd, cwd=tmp, env=env, timeout=timeout, capture_output=True, text=True, check=False
    )
    tail = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    print(f"[{mode}] {' '.join(tail)}", flush=True)
    if proc.returncode not in (0, 1):  # 1: some tests failed; anything else: pytest itself failed
        sys.stdout.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"pytest exited {proc.returncode} in the {mode} run")
    results = {}
    for path in out.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            results[entry["nodeid"]] = entry
    return results


def report(files: list[str], plain: dict | None, ours: dict) -> tuple[int, dict]:
    """Print the per-file and total table; returns (number of regressions, totals)."""
    rows = collections.OrderedDict((f, collections.Counter()) for f in files)
    regressions = []
    for nodeid, entry in sorted(ours.items()):
        f = nodeid.split("::")[0].removeprefix("optax_tests/")
        row = rows.setdefault(f, collections.Counter())
        by_design = entry["outcome"] == "skipped" and "differs by design" in entry.get(
            "signature", ""
        )
        if plain is None:  # no plain-Optax pass: Optax's recorded outcomes on the pinned JAX
            base = optax_outcome(nodeid)
        else:
            base = plain.get(nodeid, {}).get("outcome")
        # A test that Optax passes and gradtx does not is a regression even when it never reached
        # gradtx (say, it skipped itself on an annotation): it counts as touched.
        regressed = base == "passed" and entry["outcome"] != "passed" and not by_design
        if by_design:
            row["by_design"] += 1
        if not (entry["touched"] or regressed):
            continue
        if by_design:
            continue
        if base == "failed" or (base == "skipped" and entry["outcome"] == "skipped"):
            row["optax_fails"] += 1  # Optax fails (or skips) it too: not a measure of gradtx
            continue
        row["touched"] += 1
        row["passed"] += entry["outcome"] == "passed"
        if regressed:
            row["regressions"] += 1
            regressions.append((nodeid, entry["outcome"], entry.get("signature", "")))
    total = collections.Counter()
    head = f"{'touched':>8} {'passed':>7} {'regr.':>6} {'by design':>9} {'not Optax':>11}"
    print(f"\n{'file':44} {head}")

    def line(name: str, row: collections.Counter) -> str:
        return (
            f"{name:44} {row['touched']:8d} {row['passed']:7d} {row['regressions']:6d}"
            f" {row['by_design']:9d} {row['optax_fails']:11d}"
        )

    for f, row in rows.items():
        total.update(row)
        if row["touched"] or row["by_design"] or row["optax_fails"]:
            print(line(f, row))
    share = 100.0 * total["passed"] / total["touched"] if total["touched"] else 100.0
    print(line("total", total) + f"   ({share:.1f}% of the touched tests pass)")
    print(
        "\ntouched: reached gradtx (called a substituted name), or passes with Optax and not with"
        " gradtx;\nby design: skipped by name (tests/optax_suite/differences.py, the table in"
        " docs/migration.md);\nnot Optax: fails with plain Optax too on this machine, or skips"
        " itself with both (not counted)."
    )
    if regressions:
        print("\nregressions against plain Optax:")
        for nodeid, outcome, signature in regressions:
            print(f"  {outcome.upper():8} {nodeid}\n           {signature}")
    return len(regressions), dict(total, share=share)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.optax_suite", description=__doc__)
    parser.add_argument("--files", nargs="*", default=[], help="globs relative to optax/")
    parser.add_argument("--subset", choices=["ci"], help="the CI subset instead of --files")
    parser.add_argument("--mode", choices=["both", "gradtx"], default="both")
    parser.add_argument("--jobs", type=int, default=2, help="pytest-xdist workers")
    parser.add_argument("-k", dest="keyword", default="", help="pytest -k expression")
    parser.add_argument("--json", help="write the results (both runs) to this file")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument(
        "--baseline", help="reuse the plain-Optax results of an earlier --json file (same files)"
    )
    args = parser.parse_args(argv)

    chosen = list(CI_SUBSET) if args.subset == "ci" else []
    files = select(sorted({c.split("::")[0] for c in chosen}) if chosen else args.files)
    if not files:
        raise SystemExit("no optax test file matches --files")
    with tempfile.TemporaryDirectory(prefix="gradtx-optax-suite-") as name:
        tmp = Path(name)
        copy_tests(files, tmp)
        plain = None
        if args.baseline:
            plain = json.loads(Path(args.baseline).read_text())["optax"]
        elif args.mode == "both":
            plain = run("optax", files, tmp, args.jobs, args.keyword, args.timeout, chosen)
        ours = run("gradtx", files, tmp, args.jobs, args.keyword, args.timeout, chosen)
    n_regressions, totals = report(files, plain, ours)

    from tests.optax_suite.plugin import missing_names

    missing = missing_names()
    print(f"\npublic Optax names without a gradtx counterpart: {len(missing)}")
    for name in missing:
        print(f"  {name}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"optax": plain, "gradtx": ours, "totals": totals, "missing": missing})
        )
    return 1 if n_regressions or missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
