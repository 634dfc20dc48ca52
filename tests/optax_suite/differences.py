"""Where gradtx differs from Optax by design: the Optax tests the runner skips, by name.

The reasons live in one place, the table "Where gradtx differs from Optax, and why" of
docs/migration.md (`| **key** | gradtx | Optax | why |`); `SKIPS` maps a row's key to the
test-id fragments it covers. A test is skipped when its pytest node id contains a fragment, with
the row's key and "why" as the reason. tests/test_optax_drop_in.py checks that every key here is
a row of the table.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

MIGRATION = Path(__file__).resolve().parents[2] / "docs" / "migration.md"

SKIPS: dict[str, tuple[str, ...]] = {
    "one-transformation-class": (
        "_src/base_test.py::ExtraArgsTest::test_isinstance",
        "_src/combine_test.py::ExtraArgsTest::",
        "transforms/_combining_test.py::ExtraArgsTest::",
    ),
    "errors-at-construction": ("_src/transform_test.py::TransformTest::test_lion_invalid_mode",),
    "tree-get-missing": ("tree_utils/_state_utils_test.py::StateUtilsTest::test_tree_get",),
    "tree-paths-are-strings": (
        "tree_utils/_state_utils_test.py::StateUtilsTest::test_tree_get_all_with_path",
    ),
    "tree-set-keeps-dtype": ("tree_utils/_state_utils_test.py::StateUtilsTest::test_tree_set",),
    "layout-independent-of-values": (
        "tree_utils/_state_utils_test.py::StateUtilsTest::test_adam",
        "tree_utils/_state_utils_test.py::StateUtilsTest::test_map_params_to_none",
        "transforms/_adding_test.py::AddingTest::test_none_argument",
    ),
    "partition-state-unwrapped": ("contrib/_muon_test.py::MuonTest::test_dim_nums_combinations",),
    # Optax's case 12 is muon on a tree with an unnamed (2, 5, 2) leaf
    "ambiguous-matrix-leaf": (
        "contrib/_common_test.py::ContribTest::test_optimizers_can_be_wrapped_in_inject_hyperparams12",
    ),
    # cases 14 and 15: schedule_free_sgd / _adamw with warmup_steps, given a schedule because
    # gradtx annotates learning_rate as ScalarOrSchedule
    "schedule-free-warmup-schedule": (
        "contrib/_common_test.py::ContribTest::"
        "test_optimizers_accept_learning_rate_schedule_if_type_annotated_as_such14",
        "contrib/_common_test.py::ContribTest::"
        "test_optimizers_accept_learning_rate_schedule_if_type_annotated_as_such15",
    ),
    "inject-stores-passed-arguments": (
        "schedules/_inject_test.py::InjectHyperparamsTest::test_constant_hyperparams",
    ),
    "inject-float32-hyperparams": (
        "schedules/_inject_test.py::InjectHyperparamsTest::test_hyperparam_default_dtype_bf16",
    ),
    "warmup-cosine-zero-peak": (
        "schedules/_schedule_test.py::WarmupCosineDecayTest::test_zero_peak_value",
    ),
}

# Optax tests that fail, or skip themselves, with plain Optax 0.2.8 on the pinned JAX
# (constraints.txt), by exact id, as `make optax-suite` measured them. A run without the
# plain-Optax pass (`--mode gradtx`, the CI subset) takes them as Optax's outcome.
OPTAX_FAILURES: tuple[str, ...] = (
    "transforms/_freezing_test.py::FreezeTest::test_bad_structure_raises",
    "transforms/_freezing_test.py::SelectiveTransformTest::test_selective_bad_structure",
    "transforms/_clipping_test.py::ClippingTest::test_clip_by_block_rms",
    "_src/linear_algebra_test.py::LinearAlgebraTest::test_nnls4",
    "_src/linear_algebra_test.py::LinearAlgebraTest::test_nnls5",
)
# "Optimizer doesn't accept a learning schedule": adadelta, lbfgs, rprop, ... are not annotated
# ScalarOrSchedule in Optax either (gradtx runs 20 and 31: optimistic_adam and sm3 take one).
OPTAX_SKIPS: tuple[str, ...] = tuple(
    f"schedules/_schedule_test.py::ScheduleAsLearningRateTest::test_optimization{i}"
    for i in (1, 2, 3, 4, 20, 23, 27, 31)
)


def optax_outcome(nodeid: str) -> str:
    """Plain Optax's outcome of a test, as recorded above ("passed" for every other test)."""
    test = nodeid.removeprefix("optax_tests/")
    if test in OPTAX_FAILURES:
        return "failed"
    return "skipped" if test in OPTAX_SKIPS else "passed"


_ROW = re.compile(r"^\| \*\*([\w-]+)\*\* \|(.*)\|(.*)\|(.*)\|\s*$")


@functools.cache
def reasons() -> dict[str, str]:
    """The table's rows: key -> why."""
    out = {}
    for line in MIGRATION.read_text().splitlines():
        match = _ROW.match(line)
        if match:
            out[match.group(1)] = match.group(4).strip()
    return out


def skip_reason(nodeid: str) -> str | None:
    for key, fragments in SKIPS.items():
        if any(fragment in nodeid for fragment in fragments):
            return f"[{key}] {reasons().get(key, '(no row in docs/migration.md)')}"
    return None
