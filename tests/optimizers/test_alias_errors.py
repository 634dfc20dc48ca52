"""`@alias_errors`: an alias's construction errors start with the alias's name.

The messages of each alias are checked in its own module's tests; here every alias of each
module is checked to name itself, so that one left undecorated shows.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re

import pytest

import gradtx
import gradtx.optimizers
from gradtx._base._checks import alias_errors
from gradtx.optimizers import _adam

# Every alias module, found by walking the package, so a new family is covered automatically
# (the seed systems' solver variants, `_nnabla` / `_returnn`, by their namespaces below).
SEED_MODULES = ("_nnabla", "_returnn")
MODULES = [
    importlib.import_module(f"gradtx.optimizers.{info.name}")
    for info in pkgutil.iter_modules(gradtx.optimizers.__path__)
    if info.name not in SEED_MODULES
]
# and the seed systems' namespaces, whose aliases are named with their namespace
ALIASES = [name for module in MODULES for name in module.__all__] + [
    f"{ns}.{name}"
    for ns in ("nnabla", "returnn")
    for name in getattr(gradtx, ns).__all__
    if not name.startswith("from_")  # the config dialects
]


def _factory(name):
    obj = gradtx
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("name", ALIASES)
def test_a_negative_learning_rate_names_the_alias(name):
    with pytest.raises(ValueError) as info:
        _factory(name)(-1.0)
    message = str(info.value)
    assert message.startswith(f"{name}: "), message
    assert re.search(r"learning_rate must be >?=? ?0, got -1.0", message), message
    cause = info.value.__cause__
    if cause is not None:  # raised by a primitive: the original is kept
        assert type(cause) is gradtx.HyperparameterError
        assert type(info.value) is gradtx.HyperparameterError
        assert message == f"{name}: {cause}"
        assert info.value.within[0] == name  # the alias, in the structured fields too


def test_the_error_keeps_its_type_and_the_original_as_cause():
    class Custom(TypeError):
        pass

    @alias_errors
    def my_alias(x):
        raise Custom(f"inner_primitive: x must be a dtype, got {x!r}")

    with pytest.raises(Custom, match=r"^my_alias: inner_primitive: x must be a dtype, got 3$") as e:
        my_alias(3)
    assert type(e.value.__cause__) is Custom
    assert str(e.value.__cause__) == "inner_primitive: x must be a dtype, got 3"


def test_messages_that_already_name_the_alias_are_left_alone():
    with pytest.raises(ValueError, match=r"^rmsprop: decay must be in") as e:
        gradtx.rmsprop(0.1, decay=2.0)
    assert e.value.__cause__ is None
    with pytest.raises(TypeError, match=r"^adam\(\) got an unexpected keyword argument 'bogus'$"):
        gradtx.adam(0.1, bogus=1)


def test_renamed_arguments_are_named_as_the_alias_calls_them():
    with pytest.raises(
        ValueError,
        match=r"^adamw: weight_decay must be >= 0, got -1 "
        r"\(from weight_decay: rate must be >= 0, got -1\)$",
    ):
        gradtx.adamw(1e-3, weight_decay=-1)


def test_signature_docstring_and_doctests_are_kept():
    assert gradtx.adam.__name__ == "adam"
    assert gradtx.adam.__doc__ == gradtx.adam.__wrapped__.__doc__
    assert inspect.signature(gradtx.adam) == inspect.signature(gradtx.adam.__wrapped__)
    assert "learning_rate" in inspect.signature(gradtx.adamw).parameters
    found = {t.name for t in doctest.DocTestFinder().find(_adam) if t.examples}
    assert "gradtx.optimizers._adam.adam" in found
