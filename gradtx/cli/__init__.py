"""The gradtx command line: `python -m gradtx <command> [options]` (`gradtx` once installed)."""

from __future__ import annotations

import sys

COMMANDS = {
    "demo": "train a small model with gradtx and plot it",
    "describe": "print the optimizer a config builds: chain, hyperparameters, lr",
    "plot-schedule": "plot a config's learning-rate schedule to an image",
    "inspect": "list what a checkpoint file holds: paths, roles, shapes, step",
    "migrate": "rebuild a checkpoint's state for another optimizer config",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m gradtx [--version] <command> [options]\n\ncommands:")
        for name, help_ in COMMANDS.items():
            print(f"  {name:14s} {help_}")
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from .._base._version import __version__

        print(f"gradtx {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    if command == "demo":
        from ._demo import main as demo

        return demo(rest)
    if command in ("describe", "plot-schedule"):
        from ._commands import COMMANDS as CONFIG_COMMANDS

        return CONFIG_COMMANDS[command][0](rest)
    if command in ("inspect", "migrate"):
        from ._state import COMMANDS as STATE_COMMANDS

        return STATE_COMMANDS[command][0](rest)
    from .._base._checks import did_you_mean

    shown = repr(command if len(command) <= 40 else f"{command[:37]}...")
    print(f"error: unknown command {shown}{did_you_mean(command, COMMANDS)}", file=sys.stderr)
    return 2
