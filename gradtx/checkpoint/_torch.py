r"""`from_torch_state_dict` / `to_torch_state_dict`: a `torch.optim` run continued in gradtx.

A torch optimizer's `state_dict()` is `{"state": {index: {key: tensor}}, "param_groups": [...]}`:
state by parameter index (the order of the parameters given to the optimizer), hyperparameters
in the groups. Each torch key has a role in gradtx's state (`_roles.py`), and the conversion is
a `migrate` by role:

============================  =====================================  ==========================
torch (key)                   gradtx (state class.field)             optimizer
============================  =====================================  ==========================
`step`                        `count` (every step counter)           all but SGD
`exp_avg`, `exp_avg_sq`       `ScaleByAdamState.mu`, `.nu`           `adam`, `adamw`
`momentum_buffer` (SGD)       `TraceState.trace`                     `sgd(momentum=...)`
`square_avg`                  `ScaleByRmsState.nu`                   `rmsprop`
`square_avg`, `grad_avg`      `ScaleByStddevState.nu`, `.mu`         `rmsprop(centered=True)`
`momentum_buffer` (RMSprop)   `TraceState.trace` = -lr * buffer      `rmsprop(momentum=...)`
`sum`                         `ScaleByRssState.sum_of_squares`       `adagrad`
`row_var`, `col_var`          `FactoredState.v_row` / `.v_col`       `adafactor`
`variance`                    `FactoredState.v`                      `adafactor`
============================  =====================================  ==========================

How the update rules compare (what to pass to gradtx so the continuation is torch's):

- `Adam` / `AdamW`: torch divides by :math:`\sqrt{v_t}/\sqrt{1-\beta_2^t} + \epsilon` and
  scales by :math:`\eta/(1-\beta_1^t)`; gradtx (as Optax) divides :math:`\hat m_t` by
  :math:`\sqrt{\hat v_t} + \epsilon`: the same number. `gradtx.adam(lr, b1, b2, eps)`,
  `gradtx.adamw(lr, b1, b2, eps, weight_decay=wd)` (decoupled decay
  :math:`p \leftarrow p(1 - \eta\lambda)` in both). torch `Adam(weight_decay=wd)` adds
  :math:`\lambda p` to the gradient: `chain(add_decayed_weights(wd), adam(...))`. torch's
  `amsgrad=True` is refused: torch keeps the maximum of the raw :math:`v_t` and bias-corrects
  it with the current step, Optax's and gradtx's `amsgrad` the maximum of :math:`\hat v_t`.
- `SGD(momentum=mu, nesterov=...)`: torch's first step sets the buffer to the gradient, gradtx's
  `trace` starts at zero and adds the gradient: the same buffer from step 1 on.
  `gradtx.sgd(lr, momentum=mu, nesterov=...)`; torch's `dampening=d` is
  `chain(scale(1 - d), trace(mu), scale_by_learning_rate(lr))` after the first step. torch's
  SGD state has no step count: pass `step=` for the schedules of the gradtx chain.
- `RMSprop(alpha, eps, centered, momentum)`: torch adds `eps` outside the square root
  (:math:`g / (\sqrt{v - \bar g^2} + \epsilon)`): `gradtx.rmsprop(lr, decay=alpha, eps=eps,
  eps_in_sqrt=False, centered=..., momentum=...)`. With momentum torch keeps
  :math:`b \leftarrow \mu b + g/\sqrt{\cdot}` and steps by :math:`-\eta b`; gradtx's trace
  follows the learning rate, :math:`m = -\eta b`; converted with the group's `lr` (the same
  trajectory for a constant learning rate). This one conversion is a float32 multiply or divide
  by :math:`\eta`, so unless :math:`\eta` is a power of two a round trip may move an entry of
  the buffer by one ulp; every other entry converts bit for bit.
- `Adagrad(lr, eps, initial_accumulator_value)`: torch adds `eps` outside the square root:
  `gradtx.adagrad(lr, initial_accumulator_value=..., eps=eps, eps_in_sqrt=False)`
  (`initial_accumulator_value` matters only for a fresh start; the sum is carried). torch's
  `lr_decay` is the schedule `lr / (1 + count * lr_decay)`.
- `Adafactor(lr, beta2_decay=-c, eps=(eps1, eps2), d, weight_decay)` (torch >= 2.5): torch's
  :math:`1-\beta_{2,t} = t^{-c}` is gradtx's :math:`\beta_t = 1 - (k+1)^{-c}` at the 0-based
  step :math:`k = t - 1`, its relative step :math:`\min(\eta, 1/\sqrt t)` a schedule, its
  update clipping `d` gradtx's `clipping_threshold`, its :math:`\max(\epsilon_2, RMS(p))` the
  parameter scale. So `gradtx.adafactor(learning_rate=lambda k: jnp.minimum(lr, 1 /
  jnp.sqrt(k + 1.0)), min_dim_size_to_factor=1, decay_rate=c, clipping_threshold=d)`
  continues a torch run with `eps2 = 1e-3` (gradtx's fixed parameter-scale floor) and
  `weight_decay=0`. Differences: torch factors every parameter of rank >= 2 over its last two
  axes (gradtx over the two largest, only from `min_dim_size_to_factor`: other choices are
  refused); torch clamps the estimate at :math:`\epsilon_1^2` where gradtx adds `eps` (1e-30)
  to :math:`g^2` (the same update unless a row of squared gradients is below ~1e-14).

`names` says which gradtx parameter each torch parameter is; `torch_names` builds it from
`module.named_parameters()` for the common flax naming (`"layer.weight"` -> `"layer/kernel"`),
and `transpose=` turns torch's `(out, in)` linear weights into flax's `(in, out)` kernels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from .._base._checks import did_you_mean
from .._base._typing import OptState, Params
from ..transforms._factored import _factored_dims
from ..tree._paths import named_leaves
from ._format import CheckpointError
from ._migrate import Migration, _is_int_scalar, migrate_into
from ._roles import Role, roles
from ._torch_names import Names, Transpose, _resolve, _transposed, torch_names

__all__ = ["from_torch_state_dict", "to_torch_state_dict", "torch_names"]


# torch key -> (gradtx state class, field); RMSprop's keys depend on `centered`, see `_slots`.
_ADAM = {"exp_avg": ("ScaleByAdamState", "mu"), "exp_avg_sq": ("ScaleByAdamState", "nu")}
_REFUSED = {
    "max_exp_avg_sq": (
        "torch's AMSGrad (amsgrad=True) keeps the maximum of the raw second moment and "
        "bias-corrects it at every step; gradtx.amsgrad (like Optax's) keeps the maximum of "
        "the bias-corrected moment, so no gradtx state continues that run; resume torch's "
        "moments without AMSGrad (drop 'max_exp_avg_sq' and use gradtx.adam) or restart"
    ),
}
_STEP_OWNER = ("ScaleByAdamState", "ScaleByRmsState", "ScaleByStddevState", "FactoredState")


# Unsigned / signed integers of a float's width, to move its bits between NumPy and torch.
_NUMPY_BITS = {1: np.uint8, 2: np.int16}
_TORCH_BITS = {1: "uint8", 2: "int16"}


def _low_float(name: str) -> np.dtype | None:
    """The NumPy (ml_dtypes) dtype of a float format NumPy lacks natively (bfloat16, float8_*),
    by its name, which torch and ml_dtypes share; None for any other name."""
    try:
        dtype = np.dtype(getattr(jax.numpy, name))
    except (AttributeError, TypeError):
        return None
    jax_float = jax.dtypes.issubdtype(dtype, np.floating)
    if not jax_float or np.issubdtype(dtype, np.floating) or dtype.itemsize not in _NUMPY_BITS:
        return None
    return dtype


def _to_numpy(who: str, key: str, value: Any) -> np.ndarray:
    """`value` as a NumPy array that owns its memory (torch steps its tensors in place)."""
    if hasattr(value, "detach"):  # a torch tensor, without importing torch
        value = value.detach().cpu()
        name = str(value.dtype).removeprefix("torch.")
        low = _low_float(name) if value.is_floating_point() else None
        if low is not None:  # bfloat16, float8_*: bit for bit through an integer view
            bits = value.view(getattr(_torch(), _TORCH_BITS[low.itemsize]))
            return np.array(bits.numpy().view(low), copy=True)
        try:
            return np.array(value.numpy(), copy=True)
        except TypeError as e:  # a dtype NumPy has no counterpart for
            raise CheckpointError(
                f"{who}: {key} is a torch.{name} tensor, a dtype gradtx cannot read ({e}); "
                "convert the torch state to float32 first"
            ) from None
    try:
        return np.array(value, copy=True)
    except Exception as e:  # re-raised with the key
        raise CheckpointError(f"{who}: {key} is not an array ({e})") from None


def _to_tensor(who: str, key: str, value: np.ndarray) -> Any:
    """A torch tensor of `value`'s dtype and values (bit for bit), with its own memory."""
    torch = _torch()
    value = np.array(value, copy=True, order="C")
    low = _low_float(value.dtype.name)
    target = getattr(torch, value.dtype.name, None) if low is not None else None
    if low is not None and isinstance(target, torch.dtype):  # bit for bit
        return torch.from_numpy(value.view(_NUMPY_BITS[low.itemsize])).view(target)
    try:
        return torch.from_numpy(value)
    except TypeError:  # a dtype torch has no counterpart for
        raise CheckpointError(
            f"{who}: {key} is {value.dtype.name}, a dtype torch {torch.__version__} does not "
            "have; gradtx.migrate the state to an optimizer with float32 or bfloat16 moments "
            "(mu_dtype=, nu_dtype=) first"
        ) from None


def _factor_axes(who: str, path: str, shape: tuple[int, ...], transposed: bool) -> dict[str, str]:
    """gradtx factored field -> torch key, for a leaf of gradtx shape `shape`."""
    d1, d0 = _factored_dims(shape, True, 0)  # type: ignore[misc]
    n = len(shape)
    row, col = (0, 1) if transposed else (n - 1, n - 2)  # torch's last / second-last axis here
    out = {}
    for field, axis in (("v_row", d0), ("v_col", d1)):
        if axis not in (row, col):
            raise CheckpointError(
                f"{who}: {path!r} (shape {list(shape)}) is factored over other axes by gradtx "
                "(its two largest) than by torch's Adafactor (its last two); no conversion"
            )
        out[field] = "row_var" if axis == row else "col_var"
    return out


def _groups(who: str, sd: Mapping[str, Any]) -> tuple[dict[int, Mapping[str, Any]], list]:
    if not isinstance(sd, Mapping) or "state" not in sd:
        raise CheckpointError(
            f"{who}: sd must be a torch optimizer's state_dict() ({{'state': ..., "
            f"'param_groups': ...}}), got {type(sd).__name__}"
            + (f" with keys {sorted(map(str, sd))[:6]}" if isinstance(sd, Mapping) else "")
        )
    state = {int(k): v for k, v in sd["state"].items()}
    return state, list(sd.get("param_groups", ()))


def _group_lr(groups: Sequence[Mapping[str, Any]], index: int) -> float | None:
    for group in groups:
        if index in list(group.get("params", ())) and "lr" in group:
            return float(_to_numpy("lr", "lr", group["lr"]))
    return None


def from_torch_state_dict(
    sd: Mapping[str, Any],
    tx: Any,
    params: Params,
    *,
    names: Names,
    transpose: Transpose = False,
    step: int | None = None,
    strict: bool = True,
) -> Migration:
    """`tx`'s state continuing a `torch.optim` run, from the torch optimizer's `state_dict()`.

    Each torch value goes to the gradtx value of the same role (the table in this module's
    docstring: `exp_avg` -> `ScaleByAdamState.mu`, ...) for the parameter `names` gives; torch's
    per-parameter `step` (equal for all) becomes every step counter of `tx`'s state, the
    learning-rate schedule's included. Build `tx` with torch's hyperparameters and conventions
    (module docstring: `eps_in_sqrt=False` for RMSprop and Adagrad, the Adafactor schedule);
    then the gradtx run continues torch's trajectory (tests: to 1e-5 over 100 steps).

    Args:
      sd: `optimizer.state_dict()` (torch tensors or NumPy arrays).
      tx: the gradtx optimizer to continue with.
      params: the gradtx parameters (the current values; shapes checked).
      names: the gradtx path (`"dense/kernel"`) of each torch parameter: a list in torch
        parameter order (`torch_names(model)`), a dict `{index or torch name: path}` (names
        need an optimizer built from `model.named_parameters()`), or a callable taking the
        torch name (or, without names, the index).
      transpose: transpose rank-2 torch weights (`(out, in)` -> `(in, out)`): True for every
        rank-2 parameter, or a collection of (or predicate on) gradtx paths.
      step: the step count, where torch's state has none (SGD); else checked against it.
      strict: refuse unless every value of `tx`'s state (but counters) comes from torch.

    Returns:
      `Migration(state, report)`; the state holds copies of torch's values (a later in-place
      `opt.step()` does not change it), each in the dtype of `tx`'s state (torch's bfloat16
      and float8 tensors are read bit for bit).

    Raises:
      CheckpointError: an unknown or unmappable torch key (named, with the fix), a parameter
        `names` does not give or `params` lacks, a shape mismatch, unequal steps, or (strict)
        a value of `tx`'s state torch has no counterpart for.

    Example:
      >>> import torch, gradtx
      >>> model = torch.nn.Linear(3, 2)
      >>> opt = torch.optim.Adam(model.parameters(), lr=1e-3)
      >>> model(torch.ones(1, 3)).sum().backward(); opt.step()
      >>> params = {"kernel": model.weight.detach().numpy().T, "bias": model.bias.detach().numpy()}
      >>> state, report = gradtx.from_torch_state_dict(
      ...     opt.state_dict(), gradtx.adam(1e-3), params, names=gradtx.torch_names(model),
      ...     transpose=True)
      >>> int(gradtx.tree.get(state, "ScaleByAdamState").count)
      1
    """
    who = "from_torch_state_dict"
    state_by_index, groups = _groups(who, sd)
    template = tx.init(params)
    kinds = {r.kind for r in roles(template)}
    by_slot = {(r.kind, r.field, r.param): r for r in roles(template)}
    paths = dict(named_leaves(who, params)[0])
    values: list[Role] = []
    steps: dict[int, int] = {}
    for index, entries in sorted(state_by_index.items()):
        if not entries:
            continue
        path = _resolve(who, names, index, groups)
        if path not in paths:
            raise CheckpointError(
                f"{who}: torch parameter {index} is {path!r} by names, which params does not "
                f"have{did_you_mean(path, paths)}"
            )
        gshape = tuple(np.shape(paths[path]))
        transposed = _transposed(transpose, path, len(gshape))
        keys = {k for k, v in entries.items() if v is not None}
        factored = _factor_axes(who, path, gshape, transposed) if "row_var" in keys else {}
        full = by_slot.get(("FactoredState", "v", path))
        if factored and full is not None and full.shape == gshape:
            raise CheckpointError(
                f"{who}: torch's Adafactor factors {path!r} (shape {list(gshape)}), tx's "
                "adafactor does not: build it with min_dim_size_to_factor=1 (torch factors "
                "every parameter of rank >= 2)"
            )
        for key in sorted(keys):
            where = f"state[{index}][{key!r}] ({path!r})"
            value = _to_numpy(who, where, entries[key])
            if key == "step":
                steps[index] = round(float(value))
                continue
            kind, field, scale = _slot(who, key, keys, where)
            if kind not in kinds:
                raise CheckpointError(
                    f"{who}: {where} is torch's {key!r}, kept by gradtx's {kind}.{field}; tx's "
                    f"state has no {kind} (it holds {sorted(k for k in kinds if k)}): build tx "
                    "as the torch optimizer (module docstring of gradtx.checkpoint._torch)"
                )
            if scale:
                lr = _group_lr(groups, index)
                if lr is None:
                    raise CheckpointError(f"{who}: {where} needs its param group's 'lr'")
                value = value * np.asarray(-lr, value.dtype)
            if key == "row_var":  # (..., rows, 1): the mean over torch's last axis
                value, field = value.reshape(value.shape[:-1]), _field_of(factored, key)
            elif key == "col_var":  # (..., 1, cols)
                value = value.reshape(value.shape[:-2] + value.shape[-1:])
                field = _field_of(factored, key)
            else:
                if transposed and value.ndim == 2:
                    value = value.T
                if value.shape != gshape:
                    flip = value.ndim == 2 and value.shape[::-1] == gshape
                    raise CheckpointError(
                        f"{who}: {where} has shape {list(value.shape)}"
                        f"{' (transposed)' if transposed else ''} but params[{path!r}] has "
                        f"{list(gshape)}"
                        + (
                            f"; {'do not ' if transposed else ''}pass transpose=True for "
                            "torch's (out, in) weights"
                            if flip
                            else ""
                        )
                    )
            values.append(Role(f"{index}/{key}", "torch", kind, (), field, path, value))
    counts = sorted(set(steps.values()))
    if len(counts) > 1:
        raise CheckpointError(
            f"{who}: torch's parameters have different step counts {counts[:6]} (parameters "
            "without gradients for a while?); gradtx keeps one count per optimizer"
        )
    count = counts[0] if counts else None
    if step is not None and count is not None and int(step) != count:
        raise CheckpointError(f"{who}: step={step} but torch's state says step {count}")
    count = count if count is not None else step
    if count is not None:
        owner = next((r.kind for r in values if r.kind in _STEP_OWNER), None)
        if owner is not None:
            values.append(
                Role("step", "torch", owner, (), "count", "", np.asarray(count, np.int32))
            )
    values = _one_instance_per_kind(values)
    result = migrate_into(values, template, source="torch state dict", count=count)
    if strict:
        unused = _placeholders(template, paths)
        stale = [
            name
            for key, name in result.report.fresh
            if not name.endswith(".count") and key not in unused
        ]
        if stale or result.report.dropped:
            raise CheckpointError(
                f"{who}: tx's state and the torch state do not correspond (strict=True; "
                f"strict=False keeps tx.init's values for the rest)\n{result.report}"
            )
    return result


def _placeholders(template: OptState, paths: Mapping[str, Any]) -> set[str]:
    """Keys of Adafactor's 1-element placeholders (the fields a parameter does not use)."""
    out: set[str] = set()
    by_param: dict[str, dict[str, Role]] = {}
    for r in roles(template):
        if r.kind == "FactoredState" and r.param:
            by_param.setdefault(r.param, {})[r.field] = r
    for path, fields in by_param.items():
        full = "v" in fields and path in paths and fields["v"].shape == np.shape(paths[path])
        out.update(r.key for f, r in fields.items() if (f == "v") != full)
    return out


def _field_of(factored: Mapping[str, str], key: str) -> str:
    if not factored:
        raise CheckpointError(f"from_torch_state_dict: {key!r} without 'row_var' and 'col_var'")
    return next(field for field, k in factored.items() if k == key)


def _one_instance_per_kind(values: list[Role]) -> list[Role]:
    """One torch state object per gradtx class (torch's state is per parameter)."""
    return [dataclasses.replace(r, instance=f"torch/{r.kind}") for r in values]


def _slot(who: str, key: str, keys: set[str], where: str) -> tuple[str, str, bool]:
    """(gradtx class, field, scaled by -lr) of torch's `key`."""
    if key in _REFUSED:
        raise CheckpointError(f"{who}: {where}: {_REFUSED[key]}")
    if key in _ADAM:
        return (*_ADAM[key], False)
    rms = "ScaleByStddevState" if "grad_avg" in keys else "ScaleByRmsState"
    table = {
        "square_avg": (rms, "nu", False),
        "grad_avg": ("ScaleByStddevState", "mu", False),
        "momentum_buffer": ("TraceState", "trace", "square_avg" in keys),
        "sum": ("ScaleByRssState", "sum_of_squares", False),
        "row_var": ("FactoredState", "v_row", False),
        "col_var": ("FactoredState", "v_col", False),
        "variance": ("FactoredState", "v", False),
    }
    if key not in table:
        known = [*_ADAM, *table, "step"]
        raise CheckpointError(
            f"{who}: {where} is a torch state key gradtx has no counterpart for"
            f"{did_you_mean(key, known)}; supported: torch's Adam, AdamW, SGD, RMSprop, "
            f"Adagrad and Adafactor (keys {known})"
        )
    return table[key]


def _torch():
    try:
        import torch  # optional: only this feature needs it
    except ImportError:
        raise ImportError(
            "to_torch_state_dict needs PyTorch: pip install torch (gradtx itself does not)"
        ) from None
    return torch


_BACK = {
    ("ScaleByAdamState", "mu"): "exp_avg",
    ("ScaleByAdamState", "nu"): "exp_avg_sq",
    ("ScaleByRmsState", "nu"): "square_avg",
    ("ScaleByStddevState", "nu"): "square_avg",
    ("ScaleByStddevState", "mu"): "grad_avg",
    ("TraceState", "trace"): "momentum_buffer",
    ("ScaleByRssState", "sum_of_squares"): "sum",
}


def to_torch_state_dict(
    state: OptState,
    tx: Any,
    params: Params,
    *,
    names: Names,
    transpose: Transpose = False,
    param_groups: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A `torch.optim` `state_dict()` continuing the gradtx run of `state` (the reverse of
    `from_torch_state_dict`, with the same `names` and `transpose`).

    Args:
      state: `tx`'s state.
      tx: the gradtx optimizer (its `init(params)` checks `state`'s structure).
      params: the gradtx parameters (shapes; which torch parameter is which).
      names: as for `from_torch_state_dict` (a list in torch parameter order, a dict from
        index to path, or a callable index -> path).
      transpose: as for `from_torch_state_dict`.
      param_groups: the torch optimizer's own `state_dict()["param_groups"]` (hyperparameters
        and parameter indices; `load_state_dict` takes them from here). Default: one group
        with every parameter, carrying only `params` (give them for `load_state_dict`), and
        RMSprop with momentum needs their `lr`.

    Returns:
      `{"state": {index: {key: torch.Tensor}}, "param_groups": [...]}` for
      `optimizer.load_state_dict`, each tensor a copy in its value's dtype (bfloat16 and
      float8 bit for bit).

    Raises:
      CheckpointError: `state` is not `tx`'s state for `params`, `names` misses a parameter,
        RMSprop's momentum without the group's `lr`, or a value of a dtype torch lacks.
    """
    who = "to_torch_state_dict"
    torch = _torch()
    template = {(r.kind, r.field, r.param): r for r in roles(jax.eval_shape(tx.init, params))}
    values = roles(state)
    mine = {(r.kind, r.field, r.param) for r in values}
    if mine != set(template):
        odd = sorted(mine ^ set(template), key=str)[0]
        raise CheckpointError(
            f"{who}: state is not tx's state for params: {'.'.join(odd[:2])}[{odd[2]}] is in "
            f"{'state' if odd in mine else 'tx.init(params)'} only"
        )
    paths = dict(named_leaves(who, params)[0])
    index_of: dict[str, int] = {}
    groups = [dict(g) for g in param_groups] if param_groups is not None else None
    indices = [i for g in groups for i in g["params"]] if groups else list(range(len(paths)))
    for index in indices:
        index_of[_resolve(who, names, index, groups or [])] = index
    unknown = sorted(set(index_of) - set(paths))
    if unknown:
        raise CheckpointError(
            f"{who}: names gives {unknown[0]!r}, which params does not have"
            f"{did_you_mean(unknown[0], paths)}"
        )
    kinds = {r.kind for r in values}
    step = next(
        (int(np.asarray(r.value)) for r in values if r.kind in _STEP_OWNER and r.field == "count"),
        None,
    )
    if step is None:
        counts = [
            int(np.asarray(r.value))
            for r in values
            if r.field == "count" and _is_int_scalar(r.value)
        ]
        step = max(counts) if counts else None
    out: dict[int, dict[str, Any]] = {index_of[p]: {} for p in paths if p in index_of}
    rms = bool(kinds & {"ScaleByRmsState", "ScaleByStddevState"})
    for role in values:
        if not role.param:
            continue
        if role.param not in index_of:
            raise CheckpointError(f"{who}: names gives no torch parameter for {role.param!r}")
        index, path = index_of[role.param], role.param
        gshape = tuple(np.shape(paths[path]))
        transposed = _transposed(transpose, path, len(gshape))
        value = np.asarray(role.value)
        if role.kind == "FactoredState":
            ndim = len(gshape)
            full = np.shape(template[("FactoredState", "v", path)].value) == gshape
            if ndim >= 2 and full:
                raise CheckpointError(
                    f"{who}: torch's Adafactor factors every parameter of rank >= 2; tx does "
                    f"not factor {path!r}: build gradtx.adafactor(min_dim_size_to_factor=1)"
                )
            if role.field == "v":
                if ndim >= 2:
                    continue  # a placeholder
                key = "variance"
            else:
                if ndim < 2:
                    continue
                key = _factor_axes(who, path, gshape, transposed)[role.field]
                value = value[..., None] if key == "row_var" else value[..., None, :]
        elif (role.kind, role.field) in _BACK:
            key = _BACK[(role.kind, role.field)]
            if transposed and value.ndim == 2:
                value = value.T
            if key == "momentum_buffer" and rms:
                lr = _group_lr(groups or [], index)
                if lr is None:
                    raise CheckpointError(
                        f"{who}: RMSprop's momentum_buffer is gradtx's trace / -lr: pass the "
                        "torch optimizer's param_groups (with 'lr')"
                    )
                value = value / np.asarray(-lr, value.dtype)
        else:
            raise CheckpointError(
                f"{who}: {role.key!r} ({role.name}) has no torch counterpart; supported: "
                "the states of gradtx's adam, adamw, sgd, rmsprop, adagrad and adafactor"
            )
        out[index][key] = _to_tensor(who, f"{role.key!r} ({role.name})", value)
    if step is not None and not kinds <= {"TraceState", "ScaleByScheduleState"}:
        for entries in out.values():
            entries["step"] = torch.tensor(float(step), dtype=torch.float32)
    if groups is None:
        groups = [{"params": sorted(out)}]
    return {"state": dict(sorted(out.items())), "param_groups": groups}
