"""The config subcommands of the command line: `describe` and `plot-schedule`.

    python -m gradtx describe CONFIG [--dialect gradtx|nnabla|returnn] [--steps 0,100,1000]
    python -m gradtx plot-schedule CONFIG -o lr.png --steps N [--dialect ...] [--log]

`CONFIG` is a YAML or JSON file (for the dialects: nnabla's optimizer fields or RETURNN's
options). Errors in the config are printed as one line naming the config path; the exit status
is then 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

DIALECTS = ("gradtx", "nnabla", "returnn")


def _build(path: str, dialect: str, comm_size: int) -> Any:
    if dialect == "nnabla":
        from ..nnabla import from_nnabla

        return from_nnabla(path, comm_size=comm_size)
    if dialect == "returnn":
        from ..returnn import from_returnn

        return from_returnn(path)
    from ..config import from_config

    return from_config(path)


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m gradtx {prog}")
    parser.add_argument("config", help="a YAML or JSON config file")
    parser.add_argument(
        "--dialect",
        choices=DIALECTS,
        default="gradtx",
        help="the config's format (default: gradtx's own schema)",
    )
    parser.add_argument(
        "--comm-size", type=int, default=1, help="nnabla: the number of data-parallel workers"
    )
    return parser


def _steps(text: str) -> list[int]:
    try:
        steps = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not steps or min(steps) < 0:
        raise argparse.ArgumentTypeError(f"expected integers >= 0, got {text!r}")
    return steps


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
    return [fmt(header), fmt(tuple("-" * w for w in widths)), *(fmt(r) for r in rows)]


def describe(argv: list[str]) -> int:
    """`describe CONFIG`: the chain, every hyperparameter and the learning rate at some steps."""
    parser = _parser("describe")
    parser.add_argument(
        "--steps",
        type=_steps,
        default=[0, 1, 10, 100, 1000, 10000],
        help="comma-separated steps at which to show the learning rate",
    )
    args = parser.parse_args(argv)
    from ..config import ConfigError
    from ..config._describe import chain_lines, hyperparameter_rows, learning_rate_label

    try:
        tx = _build(args.config, args.dialect, args.comm_size)
        values = tx.learning_rate_at(np.asarray(args.steps))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = [f"config: {args.config} ({args.dialect})", "", "chain (gradients enter at the top):"]
    out += [f"  {line}" for line in chain_lines(tx.config)]
    out += ["", "hyperparameters:"]
    out += [
        f"  {line}" for line in _table(("path", "value", "note"), hyperparameter_rows(tx.config))
    ]
    out += ["", f"learning rate: {learning_rate_label(tx.config)}"]
    rows = [(str(s), f"{float(v):.6g}") for s, v in zip(args.steps, values, strict=True)]
    out += [f"  {line}" for line in _table(("step", "learning_rate"), rows)]
    print("\n".join(out))
    return 0


def plot_schedule(argv: list[str]) -> int:
    """`plot-schedule CONFIG -o lr.png --steps N`: the learning-rate curve as an image."""
    parser = _parser("plot-schedule")
    parser.add_argument("-o", "--output", required=True, help="the image file to write")
    parser.add_argument("--steps", type=int, default=1000, help="plot steps 0 .. N-1")
    parser.add_argument("--log", action="store_true", help="logarithmic y axis")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    from ..config import ConfigError

    try:
        tx = _build(args.config, args.dialect, args.comm_size)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("error: plot-schedule needs matplotlib: pip install 'gradtx[plot]'", file=sys.stderr)
        return 2
    steps = np.arange(args.steps)
    values = tx.learning_rate_at(steps)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, values)
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    ax.set_title(f"{tx.config['optimizer']['name']}: {args.config}")
    if args.log:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.output)
    plt.close(fig)
    print(
        f"wrote {args.output} ({args.steps} steps, learning rate {np.nanmin(values):.6g} .. "
        f"{np.nanmax(values):.6g})"
    )
    return 0


COMMANDS = {
    "describe": (describe, "print the optimizer a config builds: chain, hyperparameters, lr"),
    "plot-schedule": (plot_schedule, "plot a config's learning-rate schedule to an image"),
}

__all__ = ["COMMANDS", "describe", "plot_schedule"]
