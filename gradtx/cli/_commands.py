"""The config subcommands of the command line: `describe` and `plot-schedule`.

    python -m gradtx describe CONFIG [CONFIG ...] [--dialect auto|gradtx|nnabla|returnn]
                              [--steps N | --at 0,100,1000]
    python -m gradtx plot-schedule CONFIG -o lr.png [--steps N] [--dialect ...] [--log]

`CONFIG` is a YAML or JSON file (for the dialects: nnabla's optimizer fields or RETURNN's
options; `--dialect auto`, the default, tells them apart by their top-level keys). `--steps N`
means the first N steps, 0 .. N-1, in both commands; `describe --at` lists single steps. Errors
in a config are printed as one line naming the config path; the exit status is then 2. A config
with a `sweep` section is described with its members (and a learning rate per member where the
sweep changes it); `plot-schedule` draws a curve per member.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

DIALECTS = ("auto", "gradtx", "nnabla", "returnn")
INT32_MAX = 2**31 - 1
MAX_LISTED_STEPS = 1_000  # describe --at
MAX_STEPS = 2**31  # --steps N: the step counters stop at 2**31 - 1
MAX_PLOT_POINTS = 100_000  # steps evaluated over a range; longer ranges are sampled evenly
MAX_MEMBER_ROWS = 64  # describe: members listed (a sweep's first and last ones beyond)
DEFAULT_AT = [0, 1, 10, 100, 1000, 10000]
STEPS_HELP = "the first N steps, 0 .. N-1 (at most 2**31)"


def _build(path: str, dialect: str, comm_size: int) -> Any:
    """The optimizer of the config file `path` (always a file: never read as YAML text)."""
    source = Path(path)
    if dialect == "nnabla":
        from ..nnabla import from_nnabla

        return from_nnabla(source, comm_size=comm_size)
    if dialect == "returnn":
        from ..returnn import from_returnn

        return from_returnn(source)
    from ..config import ConfigError, from_config

    try:
        return from_config(source)
    except ConfigError as e:
        if "unknown section" not in str(e):
            raise
        raise ConfigError(
            f"{e}; if {source.name} is an nnabla or RETURNN config, pass --dialect nnabla or "
            f"--dialect returnn"
        ) from None


def _returnn_options() -> frozenset[str]:
    """RETURNN's top-level optimizer options (those gradtx translates, and those it names as
    unsupported), without `optimizer`, which every dialect has."""
    from ..returnn._config import _SUPPORTED, _WHY

    return frozenset(_SUPPORTED | set(_WHY)) - {"optimizer"}


def detect_dialect(path: str) -> tuple[str, str]:
    """`(dialect, why)` of the config file `path`, from its suffix and top-level keys.

    nnabla: a `.nntxt` / `.prototxt` file, a `solver` section, or `optimizer` messages holding a
    `solver` (a whole NNablaProtoBuf). RETURNN: an `optimizer` dict with a `class`, or an
    `optimizer` string, or RETURNN's own options (`learning_rate`, `optimizer_epsilon`,
    `gradient_clip*`, `accum_grad_multiple_step`, the legacy `adam` flags, ...). gradtx
    otherwise (its errors then suggest `--dialect`). A file that cannot be read is left to the
    loader, which names the problem.
    """
    from ..config import ConfigError
    from ..config._load import read
    from ..nnabla._nntxt import SUFFIXES

    if Path(path).suffix.lower() in SUFFIXES:
        return "nnabla", f"a {Path(path).suffix} file"
    try:
        doc, _ = read(Path(path))
    except ConfigError:
        return "gradtx", ""
    opt = doc.get("optimizer")
    if "solver" in doc:
        return "nnabla", "its 'solver' section"
    messages = opt if isinstance(opt, list) else [opt]
    if any(isinstance(m, Mapping) and "solver" in m for m in messages):
        return "nnabla", "its 'optimizer' message with a 'solver'"
    if isinstance(opt, Mapping) and "name" in opt:
        return "gradtx", "its optimizer 'name'"
    if isinstance(opt, Mapping) and "class" in opt:
        return "returnn", "its optimizer 'class'"
    if isinstance(opt, str):
        return "returnn", "its optimizer class name"
    options = sorted(set(doc) & _returnn_options())
    if options:
        return "returnn", f"its {options[0]!r} option"
    if "type" in doc and "optimizer" not in doc:
        return "nnabla", "its solver 'type'"
    return "gradtx", ""


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


def _parser(prog: str, many: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m gradtx {prog}")
    if many:
        parser.add_argument("config", nargs="+", help="YAML or JSON config files")
    else:
        parser.add_argument("config", help="a YAML or JSON config file")
    parser.add_argument(
        "--dialect",
        choices=DIALECTS,
        default="auto",
        help="the config's format; auto (the default) tells gradtx's schema, nnabla's optimizer "
        "fields (a 'solver' section) and RETURNN's options (an optimizer 'class', "
        "'learning_rate', ...) apart by their top-level keys",
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


def _range_steps(n: int) -> np.ndarray:
    """Steps 0 .. n-1: every one up to MAX_PLOT_POINTS of them, else that many evenly spaced,
    the last included."""
    count = min(n, MAX_PLOT_POINTS)
    return np.unique(np.linspace(0, n - 1, count).round().astype(np.int64))


def _check_steps(parser: argparse.ArgumentParser, steps: int) -> None:
    if not 1 <= steps <= MAX_STEPS:
        parser.error(f"--steps must be in 1 .. 2**31, got {steps}")


def _describe_steps(text: str) -> int | list[int]:
    """`describe --steps`: a count N, or (deprecated) a comma-separated list of steps."""
    if "," in text:
        return _steps(text)
    return _int_arg(text)


def _landmark_rows(
    lr_at: Any, landmarks: list[tuple[int, str]], n: int | None
) -> list[tuple[str, ...]]:
    """(step, learning rate, what) at each landmark (below n) and the step before it; with n,
    also at steps 0 and n - 1."""
    marks: dict[int, str] = {0: "first step"} if n is not None else {}
    for step, what in landmarks:
        if n is not None and step >= n:
            continue
        if step > 0:
            marks.setdefault(step - 1, "")
        marks[step] = f"{marks[step]}; {what}" if marks.get(step) else what
    if n is not None:
        marks[n - 1] = f"{marks[n - 1]}; last step" if marks.get(n - 1) else "last step"
    steps = sorted(marks)
    if not steps:
        return []
    values = lr_at(np.asarray(steps))
    return [(str(s), f"{float(v):.6g}", marks[s]) for s, v in zip(steps, values, strict=True)]


def _members_shown(rows: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The rows of a members table, the middle ones elided beyond `MAX_MEMBER_ROWS`."""
    if len(rows) <= MAX_MEMBER_ROWS:
        return rows
    half = MAX_MEMBER_ROWS // 2
    gap = (f"... {len(rows) - 2 * half} more", *("" for _ in rows[0][1:]))
    return [*rows[:half], gap, *rows[-half:]]


def _first_member(tx: Any) -> Callable[[Any], np.ndarray]:
    """A sweep's learning rate when every member has the same: member 0's."""
    return lambda steps: tx.learning_rate_at(steps)[0]


def _sweep_lines(tx: Any) -> list[str]:
    """A sweep config's members: how many, grid or zip, and each one's swept values."""
    from ..config._describe import sweep_table

    title, header, rows = sweep_table(tx.config)
    out = ["", f"sweep: {title}"]
    return out + [f"  {line}" for line in _table(header, _members_shown(rows))]


def _member_rate_lines(tx: Any, args: argparse.Namespace) -> list[str]:
    """The learning rate of each member, when the sweep changes it."""
    out = ["", "learning rate: per member (the sweep changes it)"]
    if isinstance(args.steps, int):
        n = args.steps
        members = len(tx.member_configs)
        steps = _range_steps(n)
        if len(steps) > max(1_000, MAX_PLOT_POINTS // members):  # bounded memory for many
            keep = max(1_000, MAX_PLOT_POINTS // members)
            steps = np.unique(np.linspace(0, n - 1, keep).round().astype(np.int64))
        values = np.asarray(tx.learning_rate_at(steps))
        sampled = f" (sampled at {len(steps)} steps)" if len(steps) < n else ""
        header: tuple[str, ...] = (
            "member",
            f"min over steps 0 .. {n - 1}{sampled}",
            "max",
            "step 0",
            f"step {n - 1}",
        )
        rows = [
            (str(k), *(f"{float(x):.6g}" for x in (np.nanmin(v), np.nanmax(v), v[0], v[-1])))
            if np.any(np.isfinite(v))
            else (str(k), "none finite", "", f"{float(v[0]):.6g}", f"{float(v[-1]):.6g}")
            for k, v in enumerate(values)
        ]
    else:
        at = args.at if args.at is not None else args.steps or DEFAULT_AT
        values = np.asarray(tx.learning_rate_at(np.asarray(at)))
        header = ("member", *(f"step {s}" for s in at))
        rows = [(str(k), *(f"{float(x):.6g}" for x in v)) for k, v in enumerate(values)]
        if max(at) > INT32_MAX:
            out += ["  (steps beyond 2**31 - 1 show the value there: the step counters stop at it)"]
    return out + [f"  {line}" for line in _table(header, _members_shown(rows))]


def _describe_one(path: str, args: argparse.Namespace) -> list[str]:
    """The description of one config file (a ConfigError for a bad one)."""
    from ..config._describe import (
        chain_lines,
        hyperparameter_rows,
        learning_rate_label,
        learning_rate_landmarks,
    )

    dialect, why = args.dialect, ""
    if dialect == "auto":
        dialect, why = detect_dialect(path)
        why = f"detected from {why}" if why else ""
    tx = _build(path, dialect, args.comm_size)
    out = [f"config: {path} ({dialect}{', ' + why if why else ''})", ""]
    out += ["chain (gradients enter at the top):"]
    out += [f"  {line}" for line in chain_lines(tx.config)]
    out += ["", "hyperparameters:"]
    out += [
        f"  {line}" for line in _table(("path", "value", "note"), hyperparameter_rows(tx.config))
    ]
    members = getattr(tx, "member_configs", None)
    lr_config, lr_at = tx.config, tx.learning_rate_at
    if members is not None:  # a sweep: its members, then one learning rate or one per member
        out += _sweep_lines(tx)
        if len({learning_rate_label(m) for m in members}) > 1:
            return out + _member_rate_lines(tx, args)
        lr_config, lr_at = members[0], _first_member(tx)
    out += ["", f"learning rate: {learning_rate_label(lr_config)}"]
    landmarks = learning_rate_landmarks(lr_config)
    if isinstance(args.steps, int):
        n = args.steps
        steps = _range_steps(n)
        values = np.asarray(lr_at(steps))
        finite = values[np.isfinite(values)]
        shown = f"{finite.min():.6g} .. {finite.max():.6g}" if finite.size else "none finite"
        sampled = f", sampled at {len(steps)} steps" if len(steps) < n else ""
        out += [f"  over steps 0 .. {n - 1}: {shown}{sampled}"]
        rows = _landmark_rows(lr_at, landmarks, n)
        out += [f"  {line}" for line in _table(("step", "learning_rate", "what"), rows)]
        return out  # n <= 2**31: the last step is at most 2**31 - 1, where the counters stop
    at = args.at if args.at is not None else args.steps if args.steps is not None else DEFAULT_AT
    values = lr_at(np.asarray(at))
    rows_at = [(str(s), f"{float(v):.6g}") for s, v in zip(at, values, strict=True)]
    out += [f"  {line}" for line in _table(("step", "learning_rate"), rows_at)]
    if max(at) > INT32_MAX:
        out += ["  (steps beyond 2**31 - 1 show the value there: the step counters stop at it)"]
    rows = _landmark_rows(lr_at, landmarks, None)
    if rows:
        out += ["", "where the learning rate changes course (absolute steps, warm-up included):"]
        out += [f"  {line}" for line in _table(("step", "learning_rate", "what"), rows)]
    return out


def describe(argv: list[str]) -> int:
    """`describe CONFIG...`: the chain, every hyperparameter and the learning rate of each."""
    parser = _parser("describe", many=True)
    when = parser.add_mutually_exclusive_group()
    when.add_argument(
        "--steps",
        type=_describe_steps,
        default=None,
        metavar="N",
        help=f"summarize the learning rate over {STEPS_HELP}: its range, and its value at the "
        f"first and last step, at every warm-up end and boundary in the range and the step before "
        f"each (a comma-separated list, the old meaning, still works, deprecated: use --at)",
    )
    when.add_argument(
        "--at",
        type=_steps,
        default=None,
        metavar="S,S,...",
        help=f"comma-separated steps at which to show the learning rate (at most "
        f"{MAX_LISTED_STEPS}; default {','.join(map(str, DEFAULT_AT))})",
    )
    args = parser.parse_args(argv)
    _check_comm_size(parser, args.comm_size)
    if isinstance(args.steps, int):
        _check_steps(parser, args.steps)
    elif args.steps is not None:
        listed = ",".join(map(str, args.steps))
        shown = listed if len(listed) <= 40 else f"{listed[:37]}..."
        print(
            f"note: --steps with a list is deprecated: use --at {shown} (--steps N now means the "
            f"first N steps, as in plot-schedule)",
            file=sys.stderr,
        )
    from ..config import ConfigError

    status = 0
    for i, path in enumerate(args.config):
        if len(args.config) > 1:  # a header per file, as `head` and `tail` write them
            print(f"{chr(10) if i else ''}==> {path} <==", flush=True)
        try:
            lines = _describe_one(path, args)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            status = 2
            continue
        print("\n".join(lines), flush=True)
    return status


def plot_schedule(argv: list[str]) -> int:
    """`plot-schedule CONFIG -o lr.png --steps N`: the learning-rate curve as an image."""
    parser = _parser("plot-schedule")
    parser.add_argument("-o", "--output", required=True, help="the image file to write")
    parser.add_argument(
        "--steps", type=_int_arg, default=1000, metavar="N", help=f"plot {STEPS_HELP}; default 1000"
    )
    parser.add_argument("--log", action="store_true", help="logarithmic y axis")
    args = parser.parse_args(argv)
    _check_steps(parser, args.steps)
    _check_comm_size(parser, args.comm_size)
    from ..config import ConfigError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "error: plot-schedule needs matplotlib: pip install 'gradtx[plot]' "
            "(from a checkout: pip install -e '.[plot]')",
            file=sys.stderr,
        )
        return 2
    output = Path(args.output)
    problem = _output_problem(output, plt.figure().canvas.get_supported_filetypes())
    plt.close("all")
    if problem:
        print(f"error: -o {_arg(args.output)}: {problem}", file=sys.stderr)
        return 2
    dialect = detect_dialect(args.config)[0] if args.dialect == "auto" else args.dialect
    try:
        tx = _build(args.config, dialect, args.comm_size)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    steps = _range_steps(args.steps)
    values = tx.learning_rate_at(steps)
    fig, ax = plt.subplots(figsize=(7, 4))
    if values.ndim == 2:  # a sweep: a curve per member
        for k, row in enumerate(values):
            ax.plot(steps, row, label=f"member {k}")
        if len(values) <= 10:
            ax.legend()
    else:
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

__all__ = ["COMMANDS", "describe", "detect_dialect", "plot_schedule"]
