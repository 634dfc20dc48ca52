"""Parameter names between torch and gradtx: `torch_names` (a torch model's parameters as
gradtx paths, flax's or torch's naming) and how `names=` / `transpose=` of
`from_torch_state_dict` / `to_torch_state_dict` are read."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from ._format import CheckpointError

Names = Sequence[str] | Mapping[Any, str] | Callable[[Any], str]
Transpose = bool | Collection[str] | Callable[[str], bool]


def _torch_name(groups: Sequence[Mapping[str, Any]], index: int) -> str | None:
    for group in groups:
        ids, names = list(group.get("params", ())), group.get("param_names")
        if names is not None and index in ids:
            return str(names[ids.index(index)])
    return None


def _resolve(who: str, names: Names, index: int, groups: Sequence[Mapping[str, Any]]) -> str:
    """The gradtx path of torch parameter `index`."""
    torch_name = _torch_name(groups, index)
    if callable(names) and not isinstance(names, Mapping):
        return str(names(torch_name if torch_name is not None else index))
    if isinstance(names, Mapping):
        if index in names:
            return str(names[index])
        if torch_name is not None and torch_name in names:
            return str(names[torch_name])
        shown = f"index {index}" + (f" ({torch_name!r})" if torch_name else "")
        hint = (
            ""
            if torch_name or all(isinstance(k, int) for k in names)
            else (
                "; the state dict's param_groups carry no 'param_names' (the optimizer was built "
                "from model.parameters()): key names by index, or pass a list in parameter order"
            )
        )
        raise CheckpointError(f"{who}: names has no entry for torch parameter {shown}{hint}")
    if isinstance(names, Sequence) and not isinstance(names, str):
        if not 0 <= index < len(names):
            raise CheckpointError(
                f"{who}: names lists {len(names)} parameters but the torch state has "
                f"parameter index {index}; give one gradtx path per torch parameter, in the "
                "order the optimizer received them (torch_names(model) does)"
            )
        return str(names[index])
    raise TypeError(
        f"{who}: names must be a list of gradtx paths (in torch parameter order), a dict "
        f"{{index or torch name: path}} or a callable, got {type(names).__name__}"
    )


def _transposed(transpose: Transpose, path: str, ndim: int) -> bool:
    if transpose is True or transpose is False:
        return bool(transpose) and ndim == 2
    chosen = transpose(path) if callable(transpose) else path in transpose
    if chosen and ndim != 2:
        raise CheckpointError(
            f"transpose: {path!r} has rank {ndim}; only rank-2 (linear) weights are transposed"
        )
    return bool(chosen)


def torch_names(module_or_named_parameters: Any, *, convention: str = "flax") -> list[str]:
    """gradtx paths of a torch model's parameters, in the order of `model.parameters()` (the
    order of a torch optimizer's parameter indices), for `names=`.

    `"layer.0.weight"` becomes `"layer/0/kernel"` (`convention="flax"`: a weight of rank >= 2
    is a `kernel`, of rank 1 a `scale`, as flax's `Dense`/`Conv` and `LayerNorm`/`BatchNorm`
    name them; an `Embedding`'s weight, flax's `embedding`, needs renaming by hand) or
    `"layer/0/weight"` (`convention="torch"`: dots become slashes).

    Args:
      module_or_named_parameters: a `torch.nn.Module` or its `named_parameters()`.
      convention: `"flax"` or `"torch"`.

    Returns:
      One gradtx path per torch parameter.
    """
    if convention not in ("flax", "torch"):
        raise ValueError(f"torch_names: convention must be 'flax' or 'torch', got {convention!r}")
    named = getattr(module_or_named_parameters, "named_parameters", None)
    items: Iterable[tuple[str, Any]] = named() if callable(named) else module_or_named_parameters
    out = []
    for name, tensor in items:
        parts = str(name).split(".")
        if convention == "flax" and parts[-1] == "weight":
            parts[-1] = "kernel" if len(tensor.shape) >= 2 else "scale"
        out.append("/".join(parts))
    return out
