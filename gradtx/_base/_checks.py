"""Eager validation of hyperparameters at construction time (internal).

Every check names the transformation, the argument, the received value and what is allowed, so
the error tells the user the fix. Values that cannot be inspected in Python (traced values inside
`jax.jit`, schedules, which are checked when called) are accepted without a check.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import difflib
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NoReturn, TypeVar, overload

import jax
import jax.numpy as jnp
import numpy as np

from ._introspect import copy_description
from ._recipe import RECORDS, Recipe, remember


def concrete(value: Any) -> np.ndarray | None:
    """`value` as a NumPy array, or None when it is a schedule, a tracer or not numeric."""
    if value is None or callable(value) or isinstance(value, jax.core.Tracer):
        return None
    try:
        return np.asarray(value)
    except Exception:  # e.g. abstract values: nothing to check eagerly
        return None


def _fmt(value: Any) -> str:
    arr = concrete(value)
    if arr is not None and arr.ndim == 0:
        return repr(arr.item())
    return repr(value)


class HyperparameterError(ValueError):
    """An argument of a transformation (or an alias, a wrapper, a schedule) is not allowed.

    A `ValueError`, so code that catches `ValueError` keeps working, with the parts of the
    message as attributes:

    - `who`: the function whose argument it is (`"bound_lr"`),
    - `name`: the argument (`"final_lr"`),
    - `value`: the value received (`-0.1`),
    - `requirement`: what is allowed (`"> 0"`; the message says "must <verb> <requirement>",
      the verb being "be" unless given; "<name> <aspect> must ..." where the fault is in an
      aspect of the argument, e.g. its schedule),
    - `within`: the callers that ran `who`, outermost first (`("adam",)` when the alias `adam`
      passed the value on to `scale_by_adam`),
    - `origin`: the error as the primitive raised it, when an alias renamed the argument.

    Its message is ``"<within>: <who>: <name> must be <requirement>, got <value>"``, e.g.
    ``bound_lr: final_lr must be > 0, got -0.1``.
    """

    def __init__(
        self,
        who: str,
        name: str,
        value: Any,
        requirement: str,
        *,
        got: str | None = None,
        verb: str = "be",
        aspect: str = "",
        note: str = "",
        within: tuple[str, ...] = (),
        origin: HyperparameterError | None = None,
    ) -> None:
        self.who = who
        self.name = name
        self.value = value
        self.requirement = requirement
        self.got = _fmt(value) if got is None else got  # how the value is shown
        self.verb = verb
        self.aspect = aspect  # what of the argument is wrong ("schedule"), or ""
        self.note = note  # appended after the value (a hint, the fix)
        self.within = tuple(within)
        self.origin = origin
        super().__init__(self._render())

    def _render(self) -> str:
        head = ": ".join((*self.within, self.who))
        subject = f"{self.name} {self.aspect}" if self.aspect else self.name
        text = f"{head}: {subject} must {self.verb} {self.requirement}, got {self.got}"
        text += self.note
        return text if self.origin is None else f"{text} (from {self.origin})"

    def _fields(self) -> dict[str, Any]:
        return {
            "who": self.who,
            "name": self.name,
            "value": self.value,
            "requirement": self.requirement,
            "got": self.got,
            "verb": self.verb,
            "aspect": self.aspect,
            "note": self.note,
            "within": self.within,
            "origin": self.origin,
        }

    def replace(self, **changes: Any) -> HyperparameterError:
        """A copy (same type) with some fields changed, e.g. `replace(who="lars")`."""
        new = type(self)(**{**self._fields(), **changes})
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k not in new.__dict__})
        return new

    def __reduce__(self) -> Any:  # picklable / copyable despite the keyword-only fields
        return (_rebuild_hyperparameter_error, (type(self), self._fields()), self.__dict__)


def _rebuild_hyperparameter_error(cls: type, fields: dict[str, Any]) -> HyperparameterError:
    return cls(**fields)


def _fail(who: str, name: str, requirement: str, value: Any, **kw: Any) -> NoReturn:
    raise HyperparameterError(who, name, value, requirement, **kw)


def already_names(error: BaseException, who: str) -> bool:
    """Whether `error`'s message already starts with `who` (`"who: ..."` or `"who(...)..."`)."""
    if isinstance(error, HyperparameterError):
        first = error.within[0] if error.within else error.who
        return first == who or first.startswith(f"{who}(")
    return str(error).startswith((f"{who}:", f"{who}("))


def in_context(who: str, error: BaseException) -> BaseException:
    """`error` as raised from within `who`: a copy (same type and attributes) whose message
    starts with ``"who: "`` (the one way gradtx prefixes a message); `error` itself when its
    message already starts with `who`. A `HyperparameterError` keeps its fields and gets `who`
    in front of its `within`."""
    if already_names(error, who):
        return error
    if isinstance(error, HyperparameterError):
        return error.replace(within=(who, *error.within))
    try:  # an exception whose __init__ takes other arguments may not rebuild from its args
        new = copy.copy(error)
        new.args = (f"{who}: {error}", *error.args[1:])
    except Exception:
        return error  # raised as it is, never replaced by an error of the copy
    return new


@contextlib.contextmanager
def error_context(
    who: str, types: tuple[type[BaseException], ...] = (ValueError,)
) -> Iterator[None]:
    """Raise an error of `types` raised inside again `in_context(who, ...)`, with the original as
    its `__cause__`, so nested wrappers report the whole path:
    ``apply_if_finite: accumulate_k_steps: scale_by_adam: ...``."""
    try:
        yield
    except types as e:
        new = in_context(who, e)
        if new is e:
            raise
        raise new from e


def check_scalar(who: str, name: str, value: Any) -> None:
    """`value` is a scalar (or a schedule): hyperparameters never broadcast into the params.

    Traced values are checked too (their shape is known); a schedule's result is checked when it
    is called (`_numerics.value_at`).
    """
    if value is None or callable(value):
        return
    try:
        shape = np.shape(value)
    except Exception:  # not array-like: the range checks report it
        return
    if shape != ():
        _fail(
            who,
            name,
            "a scalar (or a schedule returning one)",
            value,
            got=f"an array of shape {shape}",
            note="; hyperparameters are not broadcast into the parameters (for per-parameter "
            "values use multi_transform / masked / lr_multipliers)",
        )


# Set by `gradtx.with_hyperparameters(..., checked=True)` while it builds a transformation from
# traced numbers: the range checks then add `checkify.check`s to the traced program instead of
# skipping the values they cannot see (the step must run under `checkify.checkify`).
_CHECK_TRACED: contextvars.ContextVar[bool] = contextvars.ContextVar("check_traced", default=False)


@contextlib.contextmanager
def traced_checks() -> Iterator[None]:
    """Within this context, a check given a traced value adds a `checkify.check` (see above)."""
    token = _CHECK_TRACED.set(True)
    try:
        yield
    finally:
        _CHECK_TRACED.reset(token)


def _check_traced(who: str, name: str, requirement: str, value: Any, ok: Any) -> None:
    """`checkify.check(ok, ...)` when `value` is traced and traced checks are on."""
    if isinstance(value, jax.core.Tracer) and _CHECK_TRACED.get():
        from jax.experimental import checkify

        checkify.check(jnp.all(ok), f"{who}: {name} must be {requirement}, got {{}}", value)


def _finite(arr: np.ndarray) -> bool:
    return not np.issubdtype(arr.dtype, np.inexact) or bool(np.all(np.isfinite(arr)))


def check_positive(who: str, name: str, value: Any, *, finite: bool = False) -> None:
    """`value` is a scalar > 0 (and not infinite, with `finite=True`)."""
    check_scalar(who, name, value)
    arr = concrete(value)
    if arr is None:
        if isinstance(value, jax.core.Tracer):
            ok = (value > 0) & (jnp.isfinite(value) if finite else True)
            _check_traced(who, name, "finite and > 0" if finite else "> 0", value, ok)
        return
    if finite and not _finite(arr):
        _fail(who, name, "finite", value)
    if not np.all(arr > 0):
        _fail(who, name, "> 0", value)


def check_non_negative(who: str, name: str, value: Any, *, finite: bool = False) -> None:
    """`value` is a scalar >= 0 (and not infinite, with `finite=True`: a learning rate or a
    weight decay of inf trains on inf / NaN without any error)."""
    check_scalar(who, name, value)
    arr = concrete(value)
    if arr is None:
        if isinstance(value, jax.core.Tracer):
            ok = (value >= 0) & (jnp.isfinite(value) if finite else True)
            _check_traced(who, name, "finite and >= 0" if finite else ">= 0", value, ok)
        return
    if finite and not _finite(arr):
        _fail(who, name, "finite", value)
    if not np.all(arr >= 0):
        _fail(who, name, ">= 0", value)


def check_in_range(
    who: str,
    name: str,
    value: Any,
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """`value` is a scalar with `low <= value <= high`, either end optionally excluded."""
    check_scalar(who, name, value)
    arr = concrete(value)
    interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    x = value if arr is None else arr
    if arr is None and not isinstance(value, jax.core.Tracer):
        return
    ok_low = x > low if low_open else x >= low
    ok_high = x < high if high_open else x <= high
    if arr is None:
        _check_traced(who, name, f"in {interval}", value, ok_low & ok_high)
    elif not np.all(ok_low & ok_high):
        _fail(who, name, f"in {interval}", value)


def check_int(who: str, name: str, value: Any, *, minimum: int | None = None) -> None:
    """`value` is a Python/NumPy integer (not a bool), optionally >= `minimum`.

    A scalar JAX array of an integer dtype is one too (`gradtx.with_hyperparameters` gives
    a schedule's steps that way); a traced one is compared with `minimum` only under traced
    checks (`traced_checks`).
    """
    if (
        isinstance(value, jax.Array)
        and value.ndim == 0
        and jnp.issubdtype(value.dtype, jnp.integer)
    ):
        if isinstance(value, jax.core.Tracer):
            low = jnp.iinfo(value.dtype).min
            if minimum is not None and minimum > low and _CHECK_TRACED.get():
                _check_traced(who, name, f">= {minimum}", value, value >= minimum)
            return
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        _fail(who, name, "an integer", value, got=repr(value))
    if minimum is not None and value < minimum:
        _fail(who, name, f">= {minimum}", value)


def check_bool(who: str, name: str, value: Any) -> None:
    """`value` is `True` or `False` (a flag; not 0 / 1, not a string, not an array)."""
    if not isinstance(value, bool | np.bool_):
        _fail(who, name, "True or False", value, got=repr(value))


def check_axis_name(who: str, axis_name: Any, *, optional: bool = False) -> None:
    """`axis_name` names a mapped axis over the replicas: a non-empty str or a tuple of them
    (None too when `optional`)."""
    if optional and axis_name is None:
        return
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    if not names or not all(isinstance(n, str) and n for n in names):
        what = "the name of the mapped axis over the replicas (a str, or a tuple of str)"
        raise HyperparameterError(
            who,
            "axis_name",
            axis_name,
            f"None or {what}" if optional else what,
            got=repr(axis_name),
            note=(
                ", e.g. axis_name='replica' with jax.shard_map over a mesh axis 'replica', or "
                "jax.vmap / jax.pmap(..., axis_name='replica')"
            ),
        )


def check_one_of(who: str, name: str, value: Any, allowed: Iterable[Any]) -> None:
    """`value` is one of `allowed`; the error lists them and the closest match."""
    allowed = list(allowed)
    if value in allowed:
        return
    hint = ""
    if isinstance(value, str):
        close = difflib.get_close_matches(value, [str(a) for a in allowed], n=1)
        if close:
            hint = f" (did you mean {close[0]!r}?)"
    _fail(who, name, f"one of {allowed}", value, got=repr(value), note=hint)


def expect_state(who: str, state: Any, cls: type) -> None:
    """`state` is a `cls` (from this transformation's own `init`); the error names both kinds."""
    if not isinstance(state, cls):
        raise ValueError(
            f"{who}: expected a {cls.__name__} (from this transformation's init), got "
            f"{type(state).__name__}; was the state made by a differently configured "
            "transformation (e.g. amsgrad=True vs False)?"
        )


# Other libraries' names for gradtx's arguments (torch / Keras / papers), suggested when spelled
# that way: difflib alone finds no `b1` for `beta1`.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "beta1": ("b1",),
    "beta_1": ("b1",),
    "beta2": ("b2",),
    "beta_2": ("b2",),
    "beta3": ("b3",),
    "lr": ("learning_rate",),
    "step_size": ("learning_rate",),
    "epsilon": ("eps",),
    "betas": ("b1", "b2"),
}


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest candidates (a known synonym first), or ''."""
    candidates = list(candidates)
    close = [c for c in SYNONYMS.get(name, ()) if c in candidates]
    close += [c for c in difflib.get_close_matches(name, candidates, n=3) if c not in close]
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


_F = TypeVar("_F", bound=Callable[..., Any])


@overload
def alias_errors(fn: _F, /) -> _F: ...
@overload
def alias_errors(
    *, renamed: Mapping[str, str] | None = None, name: str | None = None
) -> Callable[[_F], _F]: ...
def alias_errors(
    fn: Any = None, /, *, renamed: Mapping[str, str] | None = None, name: str | None = None
) -> Any:
    """Decorate an optimizer alias so that its errors name the alias.

    The user called `adam`, not `scale_by_adam`: a `ValueError` or `TypeError` raised inside the
    alias, while building it or later by the `init` / `update` of the transformation it returns,
    is raised again `in_context` of the alias (of the same type, with the original as its
    `__cause__`)::

        adam: scale_by_adam: b1 must be in [0.0, 1.0), got 1.0
        lars: scale_by_trust_ratio: update needs params; pass them: update(updates, state, params)

    Where a primitive calls the argument differently, `renamed` maps `"<primitive>: <its
    argument>"` to the alias's argument; a `HyperparameterError` whose `who` and `name` are that
    primitive and argument is raised as the alias's own, naming the alias's argument first::

        adamw: weight_decay must be >= 0, got -1 (from weight_decay: rate must be >= 0, got -1)

    An error that already names the alias (its own checks) is left as it is. The signature and
    docstring are kept (`functools.wraps`). `name` replaces the function's name in the messages,
    for aliases in a namespace (`name="nnabla.adam"`). The returned transformation's `init` and
    `update` are wrapped in a plain `try`: nothing is added to what `jax.jit` traces or runs.

    Usage::

        @alias_errors
        def adam(learning_rate, b1=0.9, ...): ...

        @alias_errors(renamed={"weight_decay: rate": "weight_decay"})
        def adamw(learning_rate, ..., weight_decay=1e-4, mask=None): ...
    """
    renames: dict[tuple[str, str], str] = {}
    for inner, argument in (renamed or {}).items():
        primitive, sep, inner_name = inner.rpartition(": ")
        if not sep or not primitive or not inner_name:
            raise ValueError(
                f"alias_errors: renamed keys must be '<primitive>: <argument>', got {inner!r}"
            )
        renames[(primitive, inner_name)] = argument

    def decorate(alias: _F) -> _F:
        who = name or alias.__name__

        def rename(error: BaseException) -> BaseException:
            if isinstance(error, HyperparameterError):
                argument = renames.get((error.who, error.name))
                if argument is not None:
                    return error.replace(who=who, name=argument, within=(), origin=error)
            return in_context(who, error)

        def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(fn)
            def call(*args: Any, **kwargs: Any) -> Any:
                try:
                    return fn(*args, **kwargs)
                except (ValueError, TypeError) as e:
                    new = rename(e)
                    if new is e:
                        raise
                    raise new from e

            return call

        @functools.wraps(alias)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tx = guarded(alias)(*args, **kwargs)
            if hasattr(tx, "_errors_renamed"):  # a gradtx transformation renames its own
                tx = tx._errors_renamed(rename, functools.partial(check_params, who))
            elif _is_transformation(tx):
                inner_init = guarded(tx.init)

                @functools.wraps(tx.init)
                def init(params: Any) -> Any:
                    check_params(who, params)
                    return inner_init(params)

                tx = copy_description(tx._replace(init=init, update=guarded(tx.update)), tx)
            return remember(tx, Recipe(wrapper, args, kwargs))

        setattr(wrapper, RECORDS, True)
        return wrapper  # type: ignore[return-value]

    return decorate if fn is None else decorate(fn)


def check_params(who: str, params: Any) -> None:
    """Every leaf of `params` is a floating-point (or complex) array or `jax.ShapeDtypeStruct`.

    An optimizer casts each update to its parameter's dtype: an integer or bool leaf would be
    silently never trained (its updates round to 0), and a Python number has no dtype at all.
    The error names the first such leaf's path and its type, and the fix.
    """
    leaves, _ = jax.tree_util.tree_flatten_with_path(params)
    for path, leaf in leaves:
        where = "/".join(_key_str(k) for k in path) or "<root>"
        dtype = getattr(leaf, "dtype", None)
        if dtype is None:
            raise TypeError(
                f"{who}: the params leaf {where!r} is a {type(leaf).__name__} ({leaf!r}), not an "
                "array: pass arrays (e.g. jax.tree.map(jnp.asarray, params))"
            )
        if not jnp.issubdtype(dtype, jnp.inexact):
            raise TypeError(
                f"{who}: the params leaf {where!r} has dtype {np.dtype(dtype).name}; an optimizer "
                "trains floating-point parameters (an integer leaf's updates would round to 0): "
                "keep it out of the params, or leave it untouched with gradtx.freeze / "
                "gradtx.multi_transform(..., set_to_zero())"
            )


def _key_str(key: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _is_transformation(tx: Any) -> bool:
    """A `GradientTransformation` (a NamedTuple with callable init and update)."""
    return (
        isinstance(tx, tuple)
        and hasattr(tx, "_replace")
        and callable(getattr(tx, "init", None))
        and callable(getattr(tx, "update", None))
    )


def check_divides(who: str, key: str, shape: tuple[int, ...], sharding: Any) -> None:
    """Raise a `ValueError` naming `key` when `sharding` (None: no check) does not divide
    `shape`, e.g. a target made by hand for a mesh whose axis sizes do not divide a dimension."""
    if sharding is None:
        return
    try:
        sharding.shard_shape(shape)
    except ValueError as e:
        spec = getattr(sharding, "spec", sharding)
        mesh = getattr(sharding, "mesh", None)
        on = f" on a mesh of shape {dict(mesh.shape)}" if mesh is not None else ""
        raise ValueError(
            f"{who}: the target sharding of {key!r} does not divide its shape {shape}: "
            f"{spec}{on}. Build the target with gradtx.abstract_state(tx, params, ...) on the "
            "new mesh (it leaves out the mesh axes that do not divide a dimension), or pick a "
            "mesh whose axis sizes divide it"
        ) from e
