"""One error vocabulary: `HyperparameterError`, one way to prefix `who:`, errors that name what the
user called (at construction and in `update`), and mistakes refused where they are made."""

from __future__ import annotations

import copy
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx._base import _checks
from gradtx._base._checks import HyperparameterError, alias_errors, error_context, in_context

PARAMS = {"w": jnp.ones(3), "bias": jnp.ones(3)}


# --------------------------------------------------------------------------------------------
# HyperparameterError: a ValueError with the parts of its message as fields
# --------------------------------------------------------------------------------------------


def test_the_error_is_public_a_value_error_and_carries_its_parts():
    assert gradtx.HyperparameterError is HyperparameterError
    with pytest.raises(ValueError) as info:
        gradtx.bound_lr(0.1, final_lr=-0.1)
    e = info.value
    assert isinstance(e, gradtx.HyperparameterError)
    assert (e.who, e.name, e.value, e.requirement) == ("bound_lr", "final_lr", -0.1, "> 0")
    assert str(e) == "bound_lr: final_lr must be > 0, got -0.1"
    with pytest.raises(HyperparameterError) as info:  # through an alias: the alias is in front
        gradtx.adabound(0.1, final_lr=-0.1)
    assert info.value.within == ("adabound",)
    assert (info.value.who, info.value.name) == ("bound_lr", "final_lr")
    assert str(info.value) == "adabound: bound_lr: final_lr must be > 0, got -0.1"


def test_its_message_is_the_house_format():
    e = HyperparameterError("bound_lr", "final_lr", -0.1, "> 0")
    assert str(e) == "bound_lr: final_lr must be > 0, got -0.1"
    assert e.args == ("bound_lr: final_lr must be > 0, got -0.1",)
    assert (
        str(e.replace(within=("adabound",))) == "adabound: bound_lr: final_lr must be > 0, got -0.1"
    )


def test_it_survives_copy_and_pickle():
    e = HyperparameterError("bound_lr", "final_lr", -0.1, "> 0", within=("adabound",))
    e.extra = "kept"
    for twin in (copy.copy(e), pickle.loads(pickle.dumps(e))):
        assert type(twin) is HyperparameterError
        assert str(twin) == str(e)
        assert (twin.who, twin.name, twin.value, twin.within) == (e.who, e.name, e.value, e.within)
        assert twin.extra == "kept"


CHECKS = [
    (_checks.check_scalar, ("t", "x", np.ones(3))),
    (_checks.check_positive, ("t", "x", 0.0)),
    (_checks.check_non_negative, ("t", "x", -1.0)),
    (_checks.check_in_range, ("t", "x", 2.0, 0.0, 1.0)),
    (_checks.check_int, ("t", "x", 2.5)),
    (_checks.check_int, ("t", "x", True)),
    (_checks.check_int, ("t", "x", 0), {"minimum": 1}),
    (_checks.check_bool, ("t", "x", 1)),
    (_checks.check_one_of, ("t", "x", "adamm", ["adam", "sgd"])),
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c[0].__name__)
def test_every_check_raises_a_hyperparameter_error_naming_who_and_what(check):
    fn, args, *kwargs = check
    with pytest.raises(HyperparameterError) as info:
        fn(*args, **(kwargs[0] if kwargs else {}))
    e = info.value
    assert (e.who, e.name) == ("t", "x")
    assert e.value is args[2]
    assert str(e).startswith(f"t: x must be {e.requirement}, got ")


def test_check_messages_are_unchanged():
    def message(fn, *args, **kwargs):
        with pytest.raises(ValueError) as info:
            fn(*args, **kwargs)
        return str(info.value)

    assert message(_checks.check_int, "t", "k", 2.5) == "t: k must be an integer, got 2.5"
    assert message(_checks.check_bool, "t", "f", "yes") == "t: f must be True or False, got 'yes'"
    assert message(_checks.check_one_of, "t", "m", "adamm", ["adam", "sgd"]) == (
        "t: m must be one of ['adam', 'sgd'], got 'adamm' (did you mean 'adam'?)"
    )
    assert message(_checks.check_scalar, "t", "lr", np.ones(3)).startswith(
        "t: lr must be a scalar (or a schedule returning one), got an array of shape (3,); "
    )


def test_check_bool_and_expect_state_are_used_by_the_wrappers():
    with pytest.raises(HyperparameterError, match=r"^accumulate_k_steps: average must be True"):
        gradtx.accumulate_k_steps(gradtx.sgd(0.1), 2, average=1)
    with pytest.raises(HyperparameterError, match=r"^scale_by_lbfgs: scale_init_precond must be"):
        gradtx.scale_by_lbfgs(scale_init_precond="yes")
    tx = gradtx.apply_every(2)
    with pytest.raises(ValueError, match=r"^apply_every: expected an? ApplyEvery\b"):
        tx.update({"w": jnp.ones(3)}, gradtx.EmptyState())


# --------------------------------------------------------------------------------------------
# One way to put `who:` in front of a message
# --------------------------------------------------------------------------------------------


def test_in_context_prefixes_once_and_keeps_type_and_fields():
    plain = in_context("outer", RuntimeError("x", 2))
    assert type(plain) is RuntimeError and plain.args == ("outer: ('x', 2)", 2)
    e = HyperparameterError("inner", "x", 1, "> 2")
    wrapped = in_context("outer", e)
    assert isinstance(wrapped, HyperparameterError) and wrapped.within == ("outer",)
    assert str(wrapped) == "outer: inner: x must be > 2, got 1"
    assert in_context("outer", wrapped) is wrapped  # already named: left as it is
    named = ValueError("outer: something")
    assert in_context("outer", named) is named


def test_error_context_nests_and_keeps_the_cause():
    match = r"^a: b: inner: x must be > 2, got 1$"
    with pytest.raises(ValueError, match=match) as info, error_context("a"), error_context("b"):
        raise HyperparameterError("inner", "x", 1, "> 2")
    assert isinstance(info.value.__cause__, HyperparameterError)
    # other types pass through untouched
    with pytest.raises(TypeError, match=r"^boom$"), error_context("a"):
        raise TypeError("boom")


# --------------------------------------------------------------------------------------------
# alias_errors renames by the error's fields
# --------------------------------------------------------------------------------------------


def test_renaming_uses_the_structured_fields():
    with pytest.raises(HyperparameterError) as info:
        gradtx.adamw(1e-3, weight_decay=-1)
    e = info.value
    assert (e.who, e.name, e.value) == ("adamw", "weight_decay", -1)
    assert (e.origin.who, e.origin.name) == ("weight_decay", "rate")
    assert str(e) == (
        "adamw: weight_decay must be >= 0, got -1 (from weight_decay: rate must be >= 0, got -1)"
    )


def test_a_plain_message_that_looks_like_a_renamed_one_is_only_prefixed():
    @alias_errors(renamed={"inner: rate": "decay"})
    def my_alias():
        raise ValueError("inner: rate is wrong")

    with pytest.raises(ValueError, match=r"^my_alias: inner: rate is wrong$"):
        my_alias()


def test_renamed_keys_must_name_a_primitive_and_an_argument():
    with pytest.raises(ValueError, match=r"renamed keys must be '<primitive>: <argument>'"):
        alias_errors(renamed={"rate": "decay"})


# --------------------------------------------------------------------------------------------
# Errors raised by init / update name the alias the user called
# --------------------------------------------------------------------------------------------


def test_update_without_params_names_the_alias():
    tx = gradtx.lars(0.1)
    state = tx.init(PARAMS)
    with pytest.raises(ValueError, match=r"^lars: ") as info:
        tx.update(PARAMS, state)
    assert "needs the current parameters" in str(info.value)
    assert not str(info.value.__cause__).startswith("lars")  # the primitive's own message
    with pytest.raises(ValueError, match=r"^lars: "):
        jax.jit(tx.update)(PARAMS, state)


def test_update_with_a_foreign_state_names_the_alias():
    tx = gradtx.lars(0.1)
    with pytest.raises(ValueError, match=r"^lars: "):
        tx.update(PARAMS, gradtx.sgd(0.1).init(PARAMS), PARAMS)


def test_init_errors_name_the_alias():
    tx = gradtx.adamw(1e-3, mask="dense/kernal")
    with pytest.raises(ValueError, match=r"^adamw: weight_decay: pattern 'dense/kernal'"):
        tx.init(PARAMS)


def test_the_wrapped_update_costs_nothing_under_jit():
    tx = gradtx.lars(0.1, momentum=0.9)
    bare = gradtx.lars.__wrapped__(0.1, momentum=0.9)
    state = tx.init(PARAMS)
    assert str(jax.make_jaxpr(tx.update)(PARAMS, state, PARAMS)) == str(
        jax.make_jaxpr(bare.update)(PARAMS, state, PARAMS)
    )
    got, _ = tx.update(PARAMS, state, PARAMS)
    want, _ = bare.update(PARAMS, state, PARAMS)
    jax.tree.map(np.testing.assert_array_equal, got, want)
    assert type(tx) is type(bare)


# --------------------------------------------------------------------------------------------
# A schedule that returns an array
# --------------------------------------------------------------------------------------------


def test_a_schedule_returning_an_array_names_the_transformation_and_hyperparameter():
    tx = gradtx.scale_by_learning_rate(lambda count: jnp.full((3,), 0.1))
    state = tx.init(PARAMS)
    message = (
        r"^scale_by_learning_rate: learning_rate schedule must return a scalar, got shape \(3,\)$"
    )
    with pytest.raises(HyperparameterError, match=message) as info:
        tx.update(PARAMS, state)
    assert (info.value.who, info.value.name) == ("scale_by_learning_rate", "learning_rate")
    with pytest.raises(HyperparameterError, match=message.rstrip("$")):  # jax appends a note
        jax.jit(tx.update)(PARAMS, state)
    alias = gradtx.sgd(lambda count: jnp.full((3,), 0.1))
    with pytest.raises(HyperparameterError, match=r"^sgd: scale_by_learning_rate: learning_rate "):
        alias.update(PARAMS, alias.init(PARAMS))


def test_a_weight_decay_schedule_returning_an_array_is_named():
    tx = gradtx.weight_decay(lambda count: jnp.ones(3))
    with pytest.raises(HyperparameterError, match=r"^weight_decay: rate schedule must return"):
        tx.update(PARAMS, tx.init(PARAMS), PARAMS)


# --------------------------------------------------------------------------------------------
# inject_hyperparams suggests the factory's argument
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "suggested"),
    [("beta1", "b1"), ("beta2", "b2"), ("lr", "learning_rate"), ("learnig_rate", "learning_rate")],
)
def test_inject_hyperparams_suggests_the_factorys_argument(given, suggested):
    with pytest.raises(TypeError, match=rf"has no argument '{given}' \(did you mean '{suggested}'"):
        gradtx.inject_hyperparams(gradtx.adam)(**{"learning_rate": 1e-3, given: 0.9})


def test_did_you_mean_knows_other_libraries_names():
    assert _checks.did_you_mean("beta1", ["learning_rate", "b1", "b2"]) == " (did you mean 'b1'?)"
    assert _checks.did_you_mean("beta1", ["learning_rate"]) == ""


# --------------------------------------------------------------------------------------------
# Mistakes refused where they are made
# --------------------------------------------------------------------------------------------


def test_a_negated_pattern_that_matches_nothing_raises_at_init():
    tx = gradtx.adamw(1e-3, mask="!**/biass")  # the typo would decay the biases too
    with pytest.raises(ValueError, match=r"pattern '!\*\*/biass' matches no parameter") as info:
        tx.init(PARAMS)
    assert str(info.value).startswith("adamw: ")
    assert "did you mean '!bias'" in str(info.value)
    gradtx.adamw(1e-3, mask="!**/bias").init(PARAMS)  # the intended pattern is fine
    with pytest.raises(ValueError, match=r"^match: pattern '!nope' matches no parameter"):
        gradtx.tree.match(["**", "!nope"], PARAMS, strict=True)
    assert gradtx.tree.match("!nope", PARAMS) == {"w": True, "bias": True}  # not strict


def test_a_negated_rule_that_matches_nothing_raises():
    with pytest.raises(ValueError, match=r"pattern '!biass' in .* matches no parameter"):
        gradtx.lr_multipliers({"!biass": 0.5}).init(PARAMS)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"eta_minus": 1.5}, r"eta_minus must be in \(0.0, 1.0\), got 1.5"),
        ({"eta_minus": 1.0}, r"eta_minus must be in \(0.0, 1.0\), got 1.0"),
        ({"eta_minus": 0.0}, r"eta_minus must be in \(0.0, 1.0\), got 0.0"),
        ({"eta_plus": 1.0}, r"eta_plus must be > 1, got 1.0"),
        ({"eta_plus": 0.5}, r"eta_plus must be > 1, got 0.5"),
    ],
)
def test_rprop_requires_eta_minus_below_one_below_eta_plus(kwargs, message):
    with pytest.raises(HyperparameterError, match=rf"^scale_by_rprop: {message}$"):
        gradtx.scale_by_rprop(1e-3, **kwargs)
    with pytest.raises(HyperparameterError, match=rf"^rprop: scale_by_rprop: {message}$"):
        gradtx.rprop(1e-3, **kwargs)


def test_rprop_accepts_torchs_defaults():
    tx = gradtx.rprop(1e-3, eta_minus=0.5, eta_plus=1.2)
    tx.update(PARAMS, tx.init(PARAMS))


class _CodeError(ValueError):
    """A user's error whose __init__ takes other arguments than its message."""

    def __init__(self, code, detail):
        super().__init__(f"code {code}: {detail}")
        self.code = code


def test_an_error_that_cannot_be_copied_is_raised_as_it_is():
    from gradtx._base._checks import in_context

    error = _CodeError(7, "bad")
    assert in_context("lars", error) is error
