"""The checkpoint subcommands of the command line: `inspect` and `migrate`.

    python -m gradtx inspect FILE [--all]
    python -m gradtx migrate OLD NEW_CONFIG -o NEW [--params PARAMS] [--strict]
                             [--dialect auto|gradtx|nnabla|returnn]

`inspect` lists what a checkpoint written by `gradtx.save` holds: every tensor's path, role
(`ScaleByAdamState.mu[dense/kernel]`, when the file records its structure), shape, dtype,
size and one-element values, and the step count. `migrate` builds the state of the optimizer
NEW_CONFIG describes from the state in OLD, by role (`gradtx.migrate`), writes it to NEW and
prints the report. Without `--params` the parameters' shapes are read off the old state (each
parameter path's most common shape); values that start fresh *from the parameters* (an
`ema_params` average, `lookahead`'s slow weights) then start from zeros, so pass the
parameters (a file of `gradtx.save(path, params)` or an `.npz` keyed by '/'-joined paths) when
the new chain adds such a wrapper.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from typing import Any

import numpy as np

from ._commands import DIALECTS, _build, detect_dialect


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    """'/'-joined paths -> nested dicts (a file's skeleton with no recorded containers)."""
    from ..checkpoint._roles import skeleton

    return skeleton(flat, "{}", "params")


def _inferred_params(values: list[Any]) -> dict[str, Any]:
    """Zeros of each parameter path's most common shape among the old state's values (and
    their most common floating dtype, float32 if none)."""
    shapes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    dtypes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for role in values:
        if role.param:
            shapes[role.param][role.shape] += 1
            dtype = np.dtype(getattr(role.value, "dtype", np.float32))
            if np.issubdtype(dtype, np.floating) and dtype.itemsize >= 4:
                dtypes[role.param][dtype.name] += 1
    flat = {}
    for param, counter in shapes.items():
        name = dtypes[param].most_common(1)[0][0] if dtypes[param] else "float32"
        flat[param] = np.zeros(counter.most_common(1)[0][0], name)
    return _nested(flat)


def _read_params(path: str) -> dict[str, Any]:
    if path.endswith(".npz"):
        with np.load(path) as data:
            return _nested({k: data[k] for k in data.files})
    from ..checkpoint import _read_all

    flat, _ = _read_all(path)
    return _nested(flat)


def _file_values(path: str) -> tuple[list[Any], bool]:
    """The file's values with their roles (empty roles without a recorded structure)."""
    from ..checkpoint import _read_all
    from ..checkpoint._roles import Role, roles, skeleton

    flat, structure = _read_all(path)
    if structure is not None:
        return roles(skeleton(flat, structure, f"checkpoint {path!r}")), True
    return [Role(k, "", "", (), "", "", v) for k, v in flat.items()], False


def inspect(argv: list[str]) -> int:
    """`inspect FILE`: what a checkpoint holds, tensor by tensor."""
    parser = argparse.ArgumentParser(prog="python -m gradtx inspect")
    parser.add_argument("file", help="a checkpoint written by gradtx.save")
    parser.add_argument("--all", action="store_true", help="list every tensor (default: 60)")
    args = parser.parse_args(argv)
    from ..checkpoint import CheckpointError

    try:
        values, recorded = _file_values(args.file)
    except (CheckpointError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from ..state._quantize import QuantizedArray

    rows, total, step = [], 0, None
    for role in values:
        value = role.value
        if isinstance(value, QuantizedArray):
            nbytes, dtype = value.codes.nbytes + value.scale.nbytes, value.storage
        else:
            nbytes, dtype = value.nbytes, np.dtype(value.dtype).name
        total += nbytes
        shown = ""
        if not isinstance(value, QuantizedArray) and value.size == 1:
            shown = f"{value.reshape(()).item():.6g}"
        depth = role.key.count("/")
        outermost = step is None or depth < step[2]  # as inspect_state's `step`
        if role.field in ("count", "gradient_step") and value.shape == () and outermost:
            step = (role.key, int(value), depth)
        rows.append(
            (
                role.key,
                role.name if recorded else "",
                str(list(role.shape)),
                dtype,
                f"{nbytes:,}",
                shown,
            )
        )
    limit = None if args.all else 60
    head = ("path", "role", "shape", "dtype", "bytes", "value")
    shown_rows = rows[:limit]
    widths = [max([len(h), *(len(r[i]) for r in shown_rows)]) for i, h in enumerate(head)]
    for cells in [head, tuple("-" * w for w in widths), *shown_rows]:
        print(
            "  ".join(
                c.rjust(w) if i == 4 else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()
        )
    if len(shown_rows) < len(rows):
        print(f"... {len(rows) - len(shown_rows)} more (--all lists them)")
    print(f"total: {len(rows)} values, {total:,} bytes")
    if step is not None:
        print(f"step: {step[1]} (from {step[0]!r})")
    if not recorded:
        print(
            "roles: not recorded (a file from before gradtx recorded them; migrate it with "
            "gradtx.migrate(path, tx_new, params, old_tx=...))"
        )
    return 0


def migrate(argv: list[str]) -> int:
    """`migrate OLD NEW_CONFIG -o NEW`: the old state, rebuilt for another optimizer."""
    parser = argparse.ArgumentParser(prog="python -m gradtx migrate")
    parser.add_argument("old", help="a checkpoint written by gradtx.save")
    parser.add_argument("config", help="the new optimizer's YAML or JSON config")
    parser.add_argument("-o", "--output", required=True, help="where to write the new state")
    parser.add_argument(
        "--params",
        help="the parameters (a gradtx.save file or an .npz keyed by '/'-joined paths); "
        "default: zeros of the shapes the old state shows",
    )
    parser.add_argument("--dialect", choices=DIALECTS, default="auto", help="the config's format")
    parser.add_argument("--strict", action="store_true", help="fail unless every value carries")
    args = parser.parse_args(argv)
    from ..checkpoint import CheckpointError, save
    from ..checkpoint import migrate as migrate_state
    from ..config import ConfigError

    if os.path.abspath(args.output) == os.path.abspath(args.old):
        parser.error("-o must differ from OLD (the old checkpoint is kept)")
    try:
        dialect = args.dialect if args.dialect != "auto" else detect_dialect(args.config)[0]
        tx = _build(args.config, dialect, 1)
        values, recorded = _file_values(args.old)
        if not recorded:
            raise CheckpointError(
                f"{args.old!r} does not record what each tensor is (written before gradtx "
                "recorded it); migrate it in Python with gradtx.migrate(path, tx_new, params, "
                "old_tx=...)"
            )
        params = _read_params(args.params) if args.params else _inferred_params(values)
        state, report = migrate_state(args.old, tx, params, strict=args.strict)
        save(args.output, state)
    except (CheckpointError, ConfigError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report)
    if not args.params:
        print(
            "parameters: shapes read from the old state (pass --params if a fresh value "
            "copies the parameters)"
        )
    print(f"wrote {args.output}")
    return 0


COMMANDS = {
    "inspect": (inspect, "list what a checkpoint file holds: paths, roles, shapes, step"),
    "migrate": (migrate, "rebuild a checkpoint's state for another optimizer config"),
}

__all__ = ["COMMANDS", "inspect", "migrate"]
