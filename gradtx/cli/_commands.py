"""The config subcommands of the command line: `describe` and `plot-schedule`.

    python -m gradtx describe CONFIG [--dialect gradtx|nnabla|returnn] [--steps 0,100,1000]
    python -m gradtx plot-schedule CONFIG -o lr.png --steps N [--dialect ...] [--log]

`CONFIG` is a YAML or JSON file (for the dialects: nnabla's optimizer fields or RETURNN's
options). Errors in the config are printed as one line naming the config path; the exit status
is then 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

DIALECTS = ("gradtx", "nnabla", "returnn")
INT32_MAX = 2**31 - 1
MAX_LISTED_STEPS = 1_000  # describe --steps
MAX_PLOT_STEPS = 2**31  # plot-schedule --steps: the step counters stop at 2**31 - 1
MAX_PLOT_POINTS = 100_000  # steps evaluated for a plot; longer ranges are sampled evenly


def _build(path: str, dialect: str, comm_size: int) -> Any:
    """The optimizer of the config file `path` (always a file: never read as YAML text)."""
    source = Path(path)
    if dialect == "nnabla":
        from ..nnabla import from_nnabla

        return from_nnabla(source, comm_size=comm_size)
    if dialect == "returnn":
        from ..returnn import from_returnn

        return from_returnn(source)
    from ..config import from_config

    return from_config(source)


def _arg(text: str) -> str:
    """A command-line value for a message, shortened."""
    return repr(text if len(text) <= 40 else f"{text[:37]}...")


def _int_arg(text: str) -> int:
    try:
        value = int(text) if len(text) <= 30 else None
    except ValueError:
        value = None
    if value is None:
        raise argparse.ArgumentTypeError(f"expected an integer, got {_arg(text)}")
    return value


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
        "--comm-size",
        type=_int_arg,
        default=1,
        help="nnabla: the number of data-parallel workers",
    )
    return parser


def _steps(text: str) -> list[int]:
    parts = [s for s in text.split(",") if s.strip()]
    if len(parts) > MAX_LISTED_STEPS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_LISTED_STEPS} steps")
    try:
        steps = [int(s) if len(s) <= 100 else int("x") for s in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {_arg(text)}"
        ) from None
    if not steps or min(steps) < 0:
        raise argparse.ArgumentTypeError(f"expected integers >= 0, got {_arg(text)}")
    return steps


def _check_comm_size(parser: argparse.ArgumentParser, comm_size: int) -> None:
    if not 1 <= comm_size <= INT32_MAX:
        parser.error(f"--comm-size must be in 1 .. 2**31 - 1, got {comm_size}")


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
    _check_comm_size(parser, args.comm_size)
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
    if max(args.steps) > INT32_MAX:
        out += ["  (steps beyond 2**31 - 1 show the value there: the step counters stop at it)"]
    print("\n".join(out))
    return 0


def plot_schedule(argv: list[str]) -> int:
    """`plot-schedule CONFIG -o lr.png --steps N`: the learning-rate curve as an image."""
    parser = _parser("plot-schedule")
    parser.add_argument("-o", "--output", required=True, help="the image file to write")
    parser.add_argument("--steps", type=_int_arg, default=1000, help="plot steps 0 .. N-1")
    parser.add_argument("--log", action="store_true", help="logarithmic y axis")
    args = parser.parse_args(argv)
    if not 1 <= args.steps <= MAX_PLOT_STEPS:
        parser.error(f"--steps must be in 1 .. 2**31, got {args.steps}")
    _check_comm_size(parser, args.comm_size)
    from ..config import ConfigError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("error: plot-schedule needs matplotlib: pip install 'gradtx[plot]'", file=sys.stderr)
        return 2
    output = Path(args.output)
    problem = _output_problem(output, plt.figure().canvas.get_supported_filetypes())
    plt.close("all")
    if problem:
        print(f"error: -o {_arg(args.output)}: {problem}", file=sys.stderr)
        return 2
    try:
        tx = _build(args.config, args.dialect, args.comm_size)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # every step up to MAX_PLOT_POINTS of them, else that many evenly spaced, the last included
    n = min(args.steps, MAX_PLOT_POINTS)
    steps = np.unique(np.linspace(0, args.steps - 1, n).round().astype(np.int64))
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
    try:
        fig.savefig(output)
    except OSError as e:
        print(f"error: -o {_arg(args.output)}: cannot write it: {e}", file=sys.stderr)
        return 2
    finally:
        plt.close(fig)
    lo, hi = (np.nanmin(values), np.nanmax(values)) if np.any(np.isfinite(values)) else (0, 0)
    shown = "none" if not np.any(np.isfinite(values)) else f"{lo:.6g} .. {hi:.6g}"
    print(f"wrote {output} ({args.steps} steps, learning rate {shown})")
    return 0


def _output_problem(output: Path, formats: dict[str, str]) -> str:
    """What is wrong with the image path `output` ('' if nothing), checked before any work."""
    if output.is_dir():
        return "is a folder; give an image file name such as lr.png"
    suffix = output.suffix.lower().lstrip(".")
    if suffix not in formats:
        return (
            f"the file name must end in an image format matplotlib writes "
            f"({', '.join('.' + f for f in sorted(formats))})"
        )
    folder = output.parent
    if not folder.is_dir():
        return f"the folder {str(folder)!r} does not exist"
    if not os.access(folder, os.W_OK):
        return f"the folder {str(folder)!r} is not writable"
    if output.exists() and not output.is_file():
        return "exists and is not a regular file"
    return ""


COMMANDS = {
    "describe": (describe, "print the optimizer a config builds: chain, hyperparameters, lr"),
    "plot-schedule": (plot_schedule, "plot a config's learning-rate schedule to an image"),
}

__all__ = ["COMMANDS", "describe", "plot_schedule"]
