"""gradtx as a drop-in for Optax: every public Optax name has a counterpart, `learning_rate`
annotations are Optax's `ScalarOrSchedule`, Optax's state names and deprecation warnings.

Optax's own tests run against gradtx in tests/test_optax_suite.py (the CI subset) and in
`make optax-suite` (all of them).
"""

import inspect
import typing
import warnings

import jax.numpy as jnp
import optax
import pytest

import gradtx
from tests.optax_suite.plugin import counterpart, missing_names, public_names


def test_every_public_optax_name_has_a_gradtx_counterpart():
    assert missing_names() == []


def _aliases_with_a_learning_rate():
    out = []
    for module in (gradtx, gradtx.contrib):
        for name in sorted(dir(module)):
            f = getattr(module, name)
            if inspect.isfunction(f) and "learning_rate" in inspect.signature(f).parameters:
                out.append((module.__name__, name))
    return out


LR_ALIASES = _aliases_with_a_learning_rate()


def test_learning_rate_annotations_resolve_to_scalar_or_schedule():
    """Both `typing.get_type_hints` and a plain `inspect.signature` give Optax's type objects
    (not strings), so `annotation in (optax.ScalarOrSchedule, optax.Schedule)` works for every
    alias Optax annotates so, as in Optax's own tests."""
    assert gradtx.ScalarOrSchedule == optax.ScalarOrSchedule
    assert len(LR_ALIASES) > 50
    accepted = (optax.ScalarOrSchedule, optax.Schedule)
    for module_name, name in LR_ALIASES:
        f = getattr(gradtx if module_name == "gradtx" else gradtx.contrib, name)
        annotation = inspect.signature(f).parameters["learning_rate"].annotation
        assert not isinstance(annotation, str), (name, annotation)
        hints = typing.get_type_hints(f)
        assert hints["learning_rate"] == annotation, name
        theirs = getattr(optax if module_name == "gradtx" else optax.contrib, name, None)
        if theirs is None or not callable(theirs):
            continue
        their_param = inspect.signature(theirs).parameters.get("learning_rate")
        if their_param is not None and their_param.annotation in accepted:
            assert annotation in accepted, f"{name}: {annotation}"


def test_optimistic_adam_is_deprecated_as_in_optax():
    with pytest.warns(DeprecationWarning, match="optimistic_adam_v2"):
        gradtx.optimistic_adam(0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gradtx.optimistic_adam_v2(0.1)


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("ClipState", lambda: gradtx.clip(1.0)),
        ("ClipByGlobalNormState", lambda: gradtx.clip_by_global_norm(1.0)),
        ("AdaptiveGradClipState", lambda: gradtx.adaptive_grad_clip(0.1)),
        ("ScaleState", lambda: gradtx.scale(0.5)),
        ("ScaleByTrustRatioState", lambda: gradtx.scale_by_trust_ratio()),
        ("ScaleByAdaDeltaState", lambda: gradtx.scale_by_adadelta()),
        ("ScaleByRStdDevState", lambda: gradtx.scale_by_stddev()),
        ("AddDecayedWeightsState", lambda: gradtx.add_decayed_weights(0.1)),
        ("ZeroNansState", lambda: gradtx.zero_nans()),
        ("ReduceLROnPlateauState", lambda: gradtx.contrib.reduce_on_plateau()),
    ],
)
def test_optax_state_names_are_the_states_gradtx_returns(name, make):
    state = make().init({"w": jnp.ones(3)})
    assert isinstance(state, getattr(gradtx, name))
    if state != ():  # tree.get finds a state node by its class name, as optax.tree.get does
        assert gradtx.tree.get(state, type(state).__name__) == state


def test_counterparts_are_found_in_optax_namespaces():
    found = {(o, n): counterpart(o, n) for o, n, _ in public_names()}
    assert found[("optax", "adam")] is gradtx.adam
    assert found[("optax.tree_utils", "tree_add")] is gradtx.tree.add
    assert found[("optax.transforms", "chain")] is gradtx.chain
    assert found[("optax.projections", "projection_simplex")] is (
        gradtx.projections.projection_simplex
    )


def test_every_skipped_optax_test_has_its_reason_in_the_migration_table():
    from tests.optax_suite.differences import SKIPS, reasons, skip_reason

    table = reasons()
    assert {"rprop", "one-transformation-class"} <= set(table)
    for key in SKIPS:
        assert table.get(key), key
    reason = skip_reason("optax_tests/_src/base_test.py::ExtraArgsTest::test_isinstance")
    assert reason == f"[one-transformation-class] {table['one-transformation-class']}"
    assert skip_reason("optax_tests/_src/alias_test.py::AliasTest::test_adam") is None
